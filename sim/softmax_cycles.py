"""Exact cycle model of ``dstar.hw.softmax.SoftmaxUnit`` with inputs always valid and outputs always
ready.

The unit runs three processes on consecutive rows (loader, exponent pass, divider; see the
component's docstring) with ``P = lanes`` keys per beat. With no stall anywhere, row ``k`` of
``n_k`` keys, ``W_k = ceil(n_k / P)`` beats, goes:

* loader: header beat at ``h_k``, logit beats at ``h_k + 1 .. h_k + W_k``, each written
  (stage L) the cycle after it is taken, waiting from ``h_k + W_k + 2``; handed to the
  exponent pass at ``w_k = max(h_k + W_k + 2, b_free_k)``;
  the next header at ``h_{k+1} = w_k + 1``;
* exponent pass: reads word ``j`` at ``w_k + 1 + j``, beat ``j`` of ``p`` is on ``o_p`` at
  ``w_k + 8 + j``; the last beat enters the output register at ``w_k + W_k + 6``, ``l`` is
  complete in its row set's register at the end of ``e_k = w_k + W_k + 7`` and goes to the
  divider at ``t_k = max(e_k + 1, c_free_k)``. ``b_free_k``: with ``P = 1`` (one row set,
  drained between rows) ``t_{k-1} + 1``; with ``P > 1`` (two row sets, one per memory half)
  the later of ``w_{k-1} + W_{k-1} + 1`` (the previous row is read out) and ``t_{k-2} + 1``
  (the set of row ``k - 2`` is free);
* divider: ``D = ceil(17 / min(P, 3))`` steps at ``t_k + 1 .. t_k + D``, ``(l, r, L)`` on
  ``o_sum`` at ``t_k + D + 1``; free for the next row at ``t_k + D + 2`` (``P = 1``) or, as
  it takes the next ``l`` while ``o_sum`` is taken, at ``t_k + D + 1`` (``P > 1``).

Cycle 0 is the first cycle the first header is offered (the unit is idle after reset).
"""

from dataclasses import dataclass

import numpy as np

from dstar.hw.geometry import SoftmaxGeometry

__all__ = ["SoftmaxSchedule", "schedule", "row_latency", "row_period", "div_steps"]

EXP_STAGES, DIV_CYCLES = SoftmaxGeometry.EXP_STAGES, SoftmaxGeometry.DIV_CYCLES


@dataclass
class SoftmaxSchedule:
    """Cycles of every handshake: ``head[k]`` (``i_row``), ``logits[k]`` (``i_logit``, per beat),
    ``p[k]`` (``o_p``, per beat), ``sums[k]`` (``o_sum``); ``cycles`` is the last one + 1."""
    head: list
    logits: list
    p: list
    sums: list

    @property
    def cycles(self) -> int:
        return self.sums[-1] + 1 if self.sums else 0


def div_steps(lanes: int) -> int:
    """Divider cycles per row with ``lanes`` keys per beat (``SoftmaxGeometry.div_steps``)."""
    return -(-DIV_CYCLES // min(lanes, SoftmaxGeometry.DIV_BITS_MAX))


def _check_lanes(lanes):
    if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two >= 1, got {lanes!r}")


def schedule(lengths, lanes: int = 1) -> SoftmaxSchedule:
    """Handshake cycles of a sequence of rows of ``lengths`` keys (each ``>= 1``) with ``lanes``
    keys per beat."""
    _check_lanes(lanes)
    d_steps, overlap = div_steps(lanes), lanes > 1
    head, logits, p, sums = [], [], [], []
    h, c_free = 0, 0
    read_free = 0                           # the previous row is read out
    set_free = [0, 0]                       # per row set (P > 1: memory half) free again
    for k, n in enumerate(int(v) for v in lengths):
        if n < 1:
            raise ValueError(f"row lengths must be >= 1, got {n}")
        words = -(-n // lanes)
        head.append(h)
        logits.append(list(range(h + 1, h + words + 1)))
        s = k % 2 if overlap else 0
        w = max(h + words + 2, read_free, set_free[s])
        p.append(list(range(w + 1 + EXP_STAGES, w + 1 + EXP_STAGES + words)))
        t = max(w + words + EXP_STAGES + 1, c_free)
        sums.append(t + d_steps + 1)
        read_free, set_free[s] = w + words + 1, t + 1
        c_free = t + d_steps + (1 if overlap else 2)
        h = w + 1
    return SoftmaxSchedule(head, logits, p, sums)


def row_latency(n: int, lanes: int = 1) -> int:
    """Cycles from a lone row's header beat to its ``o_sum`` beat, both included
    (``2 W + 12 + D``; ``2n + 29`` for one lane)."""
    return schedule([n], lanes).cycles


def row_period(n: int, rows: int = 8, lanes: int = 1) -> float:
    """Steady-state cycles per row of back-to-back rows of ``n`` keys, over the last two rows
    (the row sets alternate): ``max(n + 9, DIV_CYCLES + 2)`` for one lane; ``max(W + 3, D + 1,
    (W + 9) / 2)`` with more."""
    s = schedule([n] * rows, lanes)
    return float(np.diff(s.sums)[-2:].mean())
