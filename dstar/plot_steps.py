"""The plot of the temporal statistics of ``dstar analyze`` reports: the ZERO fraction of each
linear layer type at each sampling step (the report's ``per_step``), one panel per workload side
by side, as a grayscale image for ``dstar.png``.

Drawn from the report dicts alone (as printed by ``--json``), so that stored reports render
again to the same bytes."""

import numpy as np

from .png import png_bytes
from .raster import BLACK, DARK, LIGHT, MID, WHITE, draw_text, hline, segment, text_width, vline

__all__ = ["PANEL_WIDTH", "HEIGHT", "STYLES", "series", "steps_image", "steps_png", "to_pixel"]

PANEL_WIDTH, HEIGHT = 440, 340
#: A panel's plot area in pixels, relative to the panel (left, top, right, bottom).
LEFT, TOP, RIGHT, BOTTOM = 60, 56, PANEL_WIDTH - 20, HEIGHT - 48
#: Each layer type's line: (gray value, dash length or 0 for solid, width in pixels).
STYLES = {"qkv": (BLACK, 0, 2), "proj": (MID, 0, 2), "fc1": (BLACK, 4, 2), "fc2": (DARK, 2, 1)}


def series(rep: dict, field: str = "zero_fraction") -> dict[str, list[tuple[int, float]]]:
    """``{layer type: [(step, value), ...]}`` of ``field`` from a report's ``per_step``
    (entries without a per-type breakdown are left out)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for entry in rep.get("per_step", []):
        for t, v in (entry.get("per_layer_type") or {}).items():
            if v.get(field) is not None:
                out.setdefault(t, []).append((int(entry["step"]), float(v[field])))
    return out


def to_pixel(n_steps: int, step: int, value: float) -> tuple[int, int]:
    """(column, row) within a panel of ``value`` (0..1) at ``step`` of a run of ``n_steps``."""
    fx = step / max(n_steps - 1, 1)
    fy = min(max(value, 0.0), 1.0)
    return LEFT + round(fx * (RIGHT - LEFT)), BOTTOM - round(fy * (BOTTOM - TOP))


def _panel(img, x0: int, name: str, rep: dict) -> None:
    lines = series(rep)
    n = int(rep.get("steps") or 1 + max((s for pts in lines.values() for s, _ in pts),
                                        default=0))
    for i in range(5):
        _, r = to_pixel(n, 0, i / 4)
        hline(img, r, x0 + LEFT + 1, x0 + RIGHT, LIGHT)
        hline(img, r, x0 + LEFT - 5, x0 + LEFT, BLACK)
        s = f"{25 * i}%"
        draw_text(img, x0 + LEFT - 8 - text_width(s), r - 5, s)
    for s in range(0, n, 10):
        c, _ = to_pixel(n, s, 0.0)
        vline(img, x0 + c, TOP, BOTTOM - 1, LIGHT)
        vline(img, x0 + c, BOTTOM, BOTTOM + 5, BLACK)
        draw_text(img, x0 + c - text_width(str(s)) // 2, BOTTOM + 9, str(s))
    hline(img, BOTTOM, x0 + LEFT, x0 + RIGHT, BLACK)
    vline(img, x0 + LEFT, TOP, BOTTOM, BLACK)
    draw_text(img, x0 + LEFT, 8, name.upper())
    lx = x0 + LEFT
    for t, (value, dash, width) in STYLES.items():
        if t not in lines:
            continue
        segment(img, lx, 34, lx + 24, 34, value, width, dash)
        draw_text(img, lx + 30, 29, t)
        lx += 36 + text_width(t)
        pts = [to_pixel(n, s, v) for s, v in sorted(lines[t])]
        for (c0, r0), (c1, r1) in zip(pts, pts[1:], strict=False):
            segment(img, x0 + c0, r0, x0 + c1, r1, value, width, dash)
    title = "SAMPLING STEP"
    draw_text(img, x0 + (LEFT + RIGHT - text_width(title)) // 2, HEIGHT - 18, title)


def steps_image(reps: dict[str, dict]) -> np.ndarray:
    """``{workload: analyze report}`` as a ``(HEIGHT, PANEL_WIDTH * len(reps))`` uint8 image: per
    workload a panel of the ZERO fraction (0-100 %) of each layer type (``STYLES``) over the
    sampling steps."""
    img = np.full((HEIGHT, PANEL_WIDTH * max(len(reps), 1)), WHITE, dtype=np.uint8)
    for i, (name, rep) in enumerate(reps.items()):
        _panel(img, i * PANEL_WIDTH, f"{name}: ZERO fraction per step", rep)
    return img


def steps_png(reps: dict[str, dict]) -> bytes:
    """``steps_image`` as the bytes of a PNG file."""
    return png_bytes(steps_image(reps))
