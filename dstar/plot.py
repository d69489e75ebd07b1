"""The plot of an ``analyze --sweep`` report: PSNR vs FP32 against the work on reuse steps (the
fraction of attention blocks computed there), as a grayscale image for ``dstar.png``. No
plotting library: lines, markers and a 3x5 bitmap font drawn into a NumPy array.

Drawn from the report dict alone (as printed by ``--json``), so that a stored report renders
again to the same bytes."""

import math

import numpy as np

from .png import png_bytes
from .raster import (
    BLACK,
    DARK,
    LIGHT,
    MARKER_RADIUS,
    WHITE,
    draw_text,
    hline,
    marker,
    text_width,
    vline,
)

__all__ = ["Axes", "sweep_axes", "to_pixel", "sweep_image", "sweep_png", "draw_text",
           "WIDTH", "HEIGHT"]

WIDTH, HEIGHT = 560, 360
#: The plot area's edges in pixels (left, top, right, bottom).
LEFT, TOP, RIGHT, BOTTOM = 64, 36, WIDTH - 24, HEIGHT - 52
class Axes:
    """The data ranges of the plot area: ``x0..x1`` (work fraction) and ``y0..y1`` (dB), with
    the ``y`` ticks every ``ystep`` dB."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float, ystep: float):
        self.x0, self.x1, self.y0, self.y1, self.ystep = x0, x1, y0, y1, ystep

    def yticks(self) -> list[float]:
        n = round((self.y1 - self.y0) / self.ystep)
        return [self.y0 + i * self.ystep for i in range(n + 1)]


def _finite(v) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _nice_step(span: float) -> float:
    """A tick step of 1, 2 or 5 times a power of ten giving about five intervals over ``span``."""
    raw = span / 5
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _sar(rep: dict) -> bool:
    """A sweep of SAR points (``attention = "sar"``): x is the run's attention work vs dense."""
    return any(p.get("attention_kind") == "sar" for p in rep.get("points", ()))


def _work(point: dict) -> float:
    """A point's x: SAR's attention work over the run vs dense, else the blocks computed on
    reuse steps; none reported (attention off) is all."""
    v = _finite(point.get("attention_work_vs_dense",
                          point.get("blocks_computed_fraction_reuse_steps")))
    return 1.0 if v is None else v


def _levels(rep: dict) -> tuple[float | None, float | None]:
    """The W8A8 PSNR and the target's floor (W8A8 minus the allowed gap), when known."""
    w8 = _finite((rep.get("w8a8") or {}).get("psnr_vs_fp32_db"))
    gap = _finite((rep.get("target") or {}).get("psnr_gap_vs_w8a8_db"))
    return w8, (w8 - gap if w8 is not None and gap is not None else None)


def sweep_axes(rep: dict) -> Axes:
    """The axes of ``rep``'s plot: x over 0..1, y over the points' finite PSNRs and the W8A8
    and target levels, widened to whole ticks."""
    ys = [v for v in (_finite(p.get("psnr_vs_fp32_db")) for p in rep["points"]) if v is not None]
    ys += [v for v in _levels(rep) if v is not None]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi - lo < 1.0:
        mid = (hi + lo) / 2
        lo, hi = mid - 0.5, mid + 0.5
    step = _nice_step(hi - lo)
    pad = 0.05 * (hi - lo)
    y0, y1 = math.floor((lo - pad) / step) * step, math.ceil((hi + pad) / step) * step
    return Axes(0.0, 1.0, y0, y1, step)


def to_pixel(ax: Axes, x: float, y: float | None) -> tuple[int, int]:
    """(column, row) of the data point (``x``, ``y`` dB); ``y`` of None or infinite (a point
    identical to FP32) and values off the axes sit on the plot area's edge."""
    fx = (x - ax.x0) / (ax.x1 - ax.x0)
    yv = _finite(y)
    fy = 1.0 if yv is None else (yv - ax.y0) / (ax.y1 - ax.y0)
    fx, fy = min(max(fx, 0.0), 1.0), min(max(fy, 0.0), 1.0)
    return LEFT + round(fx * (RIGHT - LEFT)), BOTTOM - round(fy * (BOTTOM - TOP))


def _tick_label(v: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{v:.{digits}f}"


def _frame(img, ax: Axes, sar: bool = False) -> None:
    """Axes, ticks, tick labels and axis titles."""
    for v in ax.yticks():
        _, r = to_pixel(ax, ax.x0, v)
        hline(img, r, LEFT + 1, RIGHT, LIGHT)
        hline(img, r, LEFT - 5, LEFT, BLACK)
        s = _tick_label(v, ax.ystep)
        draw_text(img, LEFT - 8 - text_width(s), r - 5, s)
    for i in range(5):
        c, _ = to_pixel(ax, i / 4, ax.y0)
        vline(img, c, TOP, BOTTOM - 1, LIGHT)
        vline(img, c, BOTTOM, BOTTOM + 5, BLACK)
        s = f"{25 * i}%"
        draw_text(img, c - text_width(s) // 2, BOTTOM + 9, s)
    hline(img, BOTTOM, LEFT, RIGHT, BLACK)
    vline(img, LEFT, TOP, BOTTOM, BLACK)
    title = ("ATTENTION WORK OVER THE RUN VS DENSE" if sar else
             "ATTENTION BLOCKS COMPUTED ON REUSE STEPS")
    draw_text(img, (LEFT + RIGHT - text_width(title)) // 2, HEIGHT - 18, title)
    draw_text(img, 8, 10, "PSNR VS FP32 (DB)")
    legend = "FILLED: MEETS TARGET"
    draw_text(img, RIGHT - text_width(legend), 10, legend)


def _references(img, ax: Axes, rep: dict) -> None:
    """The W8A8 level (solid), the target's floor under it (dashed) and the target's block
    fraction (dashed), each named at its end."""
    w8, floor = _levels(rep)
    for level, name, dash in ((w8, "W8A8", 0), (floor, "TARGET", 4)):
        if level is not None:
            _, r = to_pixel(ax, ax.x0, level)
            hline(img, r, LEFT + 1, RIGHT, DARK, dash)
            draw_text(img, RIGHT - text_width(name) - 2, r - 13 if dash == 0 else r + 4, name,
                      DARK)
    target = rep.get("target") or {}
    work = _finite(target.get("attention_work_vs_dense") if _sar(rep) else
                   target.get("blocks_computed_fraction_reuse_steps"))
    if work is not None:
        c, _ = to_pixel(ax, work, ax.y0)
        vline(img, c, TOP, BOTTOM - 1, DARK, 4)


def sweep_image(rep: dict) -> np.ndarray:
    """The plot of a ``run_sweep`` report (``dstar analyze --sweep --json``) as a
    ``(HEIGHT, WIDTH)`` uint8 image: each point at (its work, its PSNR), a disc if it meets
    the target, a ring if not, labelled with its row number in ``format_sweep``'s table."""
    ax = sweep_axes(rep)
    img = np.full((HEIGHT, WIDTH), WHITE, dtype=np.uint8)
    _frame(img, ax, _sar(rep))
    _references(img, ax, rep)
    for i, p in enumerate(rep["points"], start=1):
        c, r = to_pixel(ax, _work(p), p.get("psnr_vs_fp32_db"))
        marker(img, c, r, bool(p.get("meets_target")))
        label, dx = str(i), MARKER_RADIUS + 2
        left = c + dx + text_width(label) >= WIDTH        # no room on the right: the left
        draw_text(img, c - dx - text_width(label) if left else c + dx, r - MARKER_RADIUS - 10,
                  label)
    return img


def sweep_png(rep: dict) -> bytes:
    """``sweep_image`` as the bytes of a PNG file."""
    return png_bytes(sweep_image(rep))
