"""The plots of ``dstar report`` as grayscale PNGs (``dstar.png``, ``dstar.raster``): grouped bars
of DSTAR's speedup or energy saving per model against each baseline (log scale, a line at 1),
and stacked bars of where each model's time or energy goes. Drawn from the report dict alone."""

import math

import numpy as np

from .png import png_bytes
from .raster import BLACK, WHITE, draw_text, hline, put, text_width, vline

__all__ = ["bars_png", "breakdown_png"]

SHADES = (0, 55, 100, 140, 175, 205, 230, 250)
LEFT, TOP, BOTTOM_PAD = 70, 40, 150


def _label(text: str) -> str:
    return "".join(c if c.isalnum() or c in ".-%()/, " else " " for c in text.upper())


def _rect(img, c0, r0, c1, r1, shade):
    rows, cols = np.mgrid[min(r0, r1):max(r0, r1) + 1, c0:c1 + 1]
    put(img, rows.ravel(), cols.ravel(), shade)
    for c in (c0, c1):
        vline(img, c, r0, r1, BLACK)
    for r in (r0, r1):
        hline(img, r, c0, c1, BLACK)


def _legend(img, x, y, names):
    for i, n in enumerate(names):
        yy = y + 16 * i
        _rect(img, x, yy, x + 10, yy + 10, SHADES[i % len(SHADES)])
        draw_text(img, x + 16, yy, _label(n), BLACK, 2)


def _canvas(n_models, series):
    width = max(640, LEFT + 40 + n_models * (series * 12 + 16) + 220)
    return np.full((420, width), WHITE, np.uint8), width


def bars_png(rep: dict, what: str, title: str) -> bytes:
    """``what``: ``speedup_vs`` or ``energy_saving_vs``; bars per model, a series per baseline."""
    models = list(rep["models"])
    base = list(rep["models"][models[0]][what])
    img, width = _canvas(len(models), len(base))
    h = img.shape[0]
    top, bottom = TOP, h - BOTTOM_PAD
    vals = [v for m in models for v in rep["models"][m][what].values() if v and v > 0]
    lo = 10 ** math.floor(math.log10(min(min(vals), 1.0)))
    hi = 10 ** math.ceil(math.log10(max(vals)))

    def y(v):
        return int(round(bottom - (math.log10(v) - math.log10(lo))
                         / (math.log10(hi) - math.log10(lo)) * (bottom - top)))

    draw_text(img, LEFT, 10, _label(title), BLACK, 2)
    vline(img, LEFT - 4, top, bottom, BLACK)
    e = math.log10(lo)
    while e <= math.log10(hi) + 1e-9:
        for mant in (1, 2, 5):
            v = mant * 10 ** e
            if lo <= v <= hi:
                hline(img, y(v), LEFT - 8, LEFT - 4, BLACK)
                t = f"{v:g}"
                draw_text(img, LEFT - 12 - text_width(t), y(v) - 5, t, BLACK, 2)
        e += 1
    x = LEFT + 8
    for m in models:
        for i, b in enumerate(base):
            v = rep["models"][m][what].get(b)
            if v and v > 0:
                shade = SHADES[i % len(SHADES)]
                _rect(img, x + 12 * i, y(max(v, lo)), x + 12 * i + 10, bottom, shade)
        for j, ch in enumerate(_label(m)[:11]):                # vertical label
            draw_text(img, x + 4, bottom + 8 + 12 * j, ch, BLACK, 2)
        x += len(base) * 12 + 16
    hline(img, y(1.0), LEFT - 4, x, BLACK, dash=4)
    _legend(img, x + 10, top, base)
    return png_bytes(img)


def breakdown_png(rep: dict, design: str, part: str, title: str) -> bytes:
    """Stacked bars (fractions) of ``part`` (``time_s`` or ``energy_parts_j``) of ``design``
    per model."""
    models = list(rep["models"])
    parts = list(rep["models"][models[0]]["breakdown"][design][part])
    img, width = _canvas(len(models), 2)
    h = img.shape[0]
    top, bottom = TOP, h - BOTTOM_PAD
    draw_text(img, LEFT, 10, _label(title), BLACK, 2)
    vline(img, LEFT - 4, top, bottom, BLACK)
    for f in (0.0, 0.5, 1.0):
        yy = int(bottom - f * (bottom - top))
        hline(img, yy, LEFT - 8, LEFT - 4, BLACK)
        draw_text(img, LEFT - 12 - text_width(f"{f:g}"), yy - 5, f"{f:g}", BLACK, 2)
    x = LEFT + 8
    for m in models:
        d = rep["models"][m]["breakdown"][design][part]
        total = sum(d.values()) or 1.0
        acc = 0.0
        for i, p in enumerate(parts):
            f = d[p] / total
            if f > 0:
                r0 = int(bottom - (acc + f) * (bottom - top))
                r1 = int(bottom - acc * (bottom - top))
                _rect(img, x, r0, x + 24, r1, SHADES[i % len(SHADES)])
            acc += f
        for j, ch in enumerate(_label(m)[:11]):
            draw_text(img, x + 8, bottom + 8 + 12 * j, ch, BLACK, 2)
        x += 40
    _legend(img, x + 10, top, parts)
    return png_bytes(img)
