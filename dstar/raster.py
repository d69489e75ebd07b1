"""Drawing into a grayscale NumPy image for ``dstar.png``: a 3x5 bitmap font, lines and
markers, clipped at the image's edges. What the plots of ``dstar.plot`` and
``dstar.plot_steps`` are drawn with; no plotting library."""

import numpy as np

__all__ = ["BLACK", "DARK", "MID", "LIGHT", "WHITE", "MARKER_RADIUS", "FONT_SCALE", "text_width",
           "draw_text", "put", "hline", "vline", "segment", "marker"]

BLACK, DARK, MID, LIGHT, WHITE = 0, 64, 128, 224, 255
MARKER_RADIUS = 5
FONT_SCALE = 2

_GLYPHS = {
    "0": "###|#.#|#.#|#.#|###", "1": ".#.|##.|.#.|.#.|###", "2": "###|..#|###|#..|###",
    "3": "###|..#|.##|..#|###", "4": "#.#|#.#|###|..#|..#", "5": "###|#..|###|..#|###",
    "6": "###|#..|###|#.#|###", "7": "###|..#|.#.|.#.|.#.", "8": "###|#.#|###|#.#|###",
    "9": "###|#.#|###|..#|###", ".": "...|...|...|...|.#.", "-": "...|...|###|...|...",
    " ": "...|...|...|...|...", "%": "#.#|..#|.#.|#..|#.#", "(": ".#.|#..|#..|#..|.#.",
    ")": ".#.|..#|..#|..#|.#.", ":": "...|.#.|...|.#.|...", ",": "...|...|...|.#.|#..",
    "A": ".#.|#.#|###|#.#|#.#", "B": "##.|#.#|##.|#.#|##.", "C": ".##|#..|#..|#..|.##",
    "D": "##.|#.#|#.#|#.#|##.", "E": "###|#..|##.|#..|###", "F": "###|#..|##.|#..|#..",
    "G": ".##|#..|#.#|#.#|.##", "H": "#.#|#.#|###|#.#|#.#", "I": "###|.#.|.#.|.#.|###",
    "K": "#.#|#.#|##.|#.#|#.#", "L": "#..|#..|#..|#..|###", "M": "#.#|###|###|#.#|#.#",
    "N": "##.|#.#|#.#|#.#|#.#", "O": ".#.|#.#|#.#|#.#|.#.", "P": "##.|#.#|##.|#..|#..",
    "R": "##.|#.#|##.|#.#|#.#", "S": ".##|#..|.#.|..#|##.", "T": "###|.#.|.#.|.#.|.#.",
    "U": "#.#|#.#|#.#|#.#|###", "V": "#.#|#.#|#.#|#.#|.#.", "W": "#.#|#.#|###|###|#.#",
    "X": "#.#|#.#|.#.|#.#|#.#", "Y": "#.#|#.#|.#.|.#.|.#.", "J": "..#|..#|..#|#.#|.#.",
    "Q": ".#.|#.#|#.#|##.|.##", "Z": "###|..#|.#.|#..|###", "/": "..#|..#|.#.|#..|#..",
}
_FONT = {c: np.array([[ch == "#" for ch in row] for row in g.split("|")])
         for c, g in _GLYPHS.items()}


def text_width(text: str, scale: int = FONT_SCALE) -> int:
    return max(len(text) * 4 * scale - scale, 0)


def draw_text(img, x: int, y: int, text: str, value: int = BLACK,
              scale: int = FONT_SCALE) -> None:
    """Draw ``text`` (digits, capitals and a few signs) with its top-left corner at column
    ``x``, row ``y``; what falls outside the image is clipped."""
    for i, ch in enumerate(text.upper()):
        if ch not in _FONT:
            raise ValueError(f"no glyph for {ch!r}")
        g = np.kron(_FONT[ch], np.ones((scale, scale), dtype=bool))
        rows, cols = np.nonzero(g)
        put(img, rows + y, cols + x + i * 4 * scale, value)


def put(img, rows, cols, value) -> None:
    rows, cols = np.asarray(rows), np.asarray(cols)
    ok = (rows >= 0) & (rows < img.shape[0]) & (cols >= 0) & (cols < img.shape[1])
    img[rows[ok], cols[ok]] = value


def hline(img, row, c0, c1, value, dash=0) -> None:
    cols = np.arange(min(c0, c1), max(c0, c1) + 1)
    if dash:
        cols = cols[(cols - cols[0]) % (2 * dash) < dash]
    put(img, np.full_like(cols, row), cols, value)


def vline(img, col, r0, r1, value, dash=0) -> None:
    rows = np.arange(min(r0, r1), max(r0, r1) + 1)
    if dash:
        rows = rows[(rows - rows[0]) % (2 * dash) < dash]
    put(img, rows, np.full_like(rows, col), value)


def marker(img, col, row, filled: bool, r: int = MARKER_RADIUS) -> None:
    """A disc (``filled``) or a ring of radius ``r`` centred on the pixel (``col``, ``row``)."""
    dr, dc = np.mgrid[-r:r + 1, -r:r + 1]
    d2 = dr * dr + dc * dc
    keep = d2 <= r * r + r if filled else (d2 <= r * r + r) & (d2 > (r - 2) * (r - 2) + r - 2)
    if not filled:      # a hollow marker hides what it covers: it is a ring on white
        put(img, dr[d2 <= r * r + r] + row, dc[d2 <= r * r + r] + col, WHITE)
    put(img, dr[keep] + row, dc[keep] + col, BLACK)


def segment(img, c0: int, r0: int, c1: int, r1: int, value: int, width: int = 1,
            dash: int = 0) -> None:
    """A straight line from pixel (``c0``, ``r0``) to (``c1``, ``r1``), ``width`` pixels
    thick (rows below the first), dashed with ``dash`` pixels on and off if ``dash`` > 0."""
    n = max(abs(c1 - c0), abs(r1 - r0)) + 1
    cols = np.rint(np.linspace(c0, c1, n)).astype(int)
    rows = np.rint(np.linspace(r0, r1, n)).astype(int)
    if dash:
        on = (np.arange(n) // dash) % 2 == 0
        cols, rows = cols[on], rows[on]
    for w in range(width):
        put(img, rows + w, cols, value)
