"""The Pareto plot of ``dstar sweep`` as a grayscale PNG (``dstar.png``, ``dstar.raster``): panels
side by side, each a figure of the sweep's points against their PE-array area: latency per
image, energy per image and, when the sweep measured it, PSNR vs FP32. A point on the Pareto
front (``sweep.pareto``: area, latency, energy and accuracy together) is a disc, any other a
ring, each labelled with its row number in ``sweep.format_text``'s table (points on one pixel
share a marker, filled if one of them is on the front, and a label "1,3"). Drawn from the summary
dict alone (``sweep.json``), so a stored sweep renders again to the same bytes."""

import math

import numpy as np

from .plot import _nice_step
from .png import png_bytes
from .raster import BLACK, LIGHT, MARKER_RADIUS, WHITE, draw_text, hline, marker, text_width, vline

__all__ = ["pareto_image", "pareto_png", "PANEL_W", "HEIGHT", "panels"]

PANEL_W, HEIGHT = 400, 340
LEFT, TOP, RIGHT_PAD, BOTTOM_PAD = 70, 40, 20, 50


def panels(summary: dict) -> list[tuple[str, str, float]]:
    """``(row key, title, scale)`` of each panel: the y of a point is ``row[key] * scale``."""
    out = [("latency_s", "LATENCY PER IMAGE (S)", 1.0), ("energy_j", "ENERGY PER IMAGE (J)", 1.0)]
    if summary.get("accuracy"):
        out.append(("psnr_vs_fp32_db", "PSNR VS FP32 (DB)", 1.0))
    return out


def _range(vals: list[float]) -> tuple[float, float, float]:
    """``(lo, hi, step)``: whole ticks about the values, padded by 5 %."""
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        lo, hi = lo - max(abs(lo) * 0.1, 1e-9), hi + max(abs(hi) * 0.1, 1e-9)
    pad = 0.05 * (hi - lo)
    step = _nice_step(hi - lo + 2 * pad)
    return math.floor((lo - pad) / step) * step, math.ceil((hi + pad) / step) * step, step


def _label(v: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{digits}f}"


def _ticks(lo: float, hi: float, step: float) -> list[float]:
    return [lo + i * step for i in range(round((hi - lo) / step) + 1)]


def _panel(img, x0: int, rows: list, key: str, title: str, scale: float, front: set) -> None:
    """One panel at column ``x0``: ``rows[i][key] * scale`` against ``rows[i]["area_mm2"]``."""
    left, right, top, bottom = x0 + LEFT, x0 + PANEL_W - RIGHT_PAD, TOP, HEIGHT - BOTTOM_PAD
    pts = [(i, r["area_mm2"], r[key] * scale) for i, r in enumerate(rows)
           if r["status"] == "ok" and r.get(key) is not None]
    xlo, xhi, xstep = _range([p[1] for p in pts])
    ylo, yhi, ystep = _range([p[2] for p in pts])

    def px(x, y):
        return (left + round((x - xlo) / (xhi - xlo) * (right - left)),
                bottom - round((y - ylo) / (yhi - ylo) * (bottom - top)))

    for v in _ticks(ylo, yhi, ystep):
        _, r = px(xlo, v)
        hline(img, r, left + 1, right, LIGHT)
        s = _label(v, ystep)
        draw_text(img, left - 8 - text_width(s), r - 5, s)
    for v in _ticks(xlo, xhi, xstep):
        c, _ = px(v, ylo)
        vline(img, c, top, bottom - 1, LIGHT)
        s = _label(v, xstep)
        draw_text(img, c - text_width(s) // 2, bottom + 9, s)
    hline(img, bottom, left, right, BLACK)
    vline(img, left, top, bottom, BLACK)
    draw_text(img, left, 10, title)
    draw_text(img, (left + right - text_width("AREA (MM2)")) // 2, HEIGHT - 20, "AREA (MM2)")
    at: dict[tuple, list] = {}                 # points on one pixel share a marker
    for i, x, y in pts:
        at.setdefault(px(x, y), []).append(i)
    for (c, r), idx in at.items():
        marker(img, c, r, any(i in front for i in idx))
        label = ",".join(str(i + 1) for i in idx)
        right = c + MARKER_RADIUS + 2 + text_width(label) < x0 + PANEL_W
        draw_text(img, c + MARKER_RADIUS + 2 if right else c - MARKER_RADIUS - 2
                  - text_width(label), r - MARKER_RADIUS - 10, label)


def pareto_image(summary: dict) -> np.ndarray:
    """The plot (module docstring) as a ``(HEIGHT, PANEL_W * panels)`` uint8 image."""
    ps = panels(summary)
    img = np.full((HEIGHT, PANEL_W * len(ps)), WHITE, dtype=np.uint8)
    front = set(summary["pareto"])
    for n, (key, title, scale) in enumerate(ps):
        _panel(img, n * PANEL_W, summary["points"], key, title, scale, front)
    return img


def pareto_png(summary: dict) -> bytes:
    """``pareto_image`` as the bytes of a PNG file."""
    return png_bytes(pareto_image(summary))
