"""Exact cycle model of ``dstar.hw.softmax.SoftmaxUnit`` with inputs always valid and outputs always
ready.

The unit runs three processes on consecutive rows (loader, exponent pass, divider; see the
component's docstring). With no stall anywhere, row ``k`` of ``n_k`` keys goes:

* loader: header beat at ``h_k``, logits at ``h_k + 1 .. h_k + n_k``, waiting from
  ``h_k + n_k + 1``; handed to the exponent pass at ``w_k = max(h_k + n_k + 1, b_free_k)``;
  the next header at ``h_{k+1} = w_k + 1``;
* exponent pass: reads key ``j`` at ``w_k + 1 + j``, ``p_j`` is on ``o_p`` at
  ``w_k + 8 + j``; the last ``p`` enters the output register at ``w_k + n_k + 6``, ``l`` is
  complete at ``e_k = w_k + n_k + 7`` and goes to the divider at ``t_k = max(e_k, c_free_k)``;
  free again at ``t_k + 1``;
* divider: ``DIV_CYCLES`` (17) steps at ``t_k + 1 .. t_k + 17``, ``(l, r, L)`` on ``o_sum``
  at ``t_k + 18``, free at ``t_k + 19``.

Cycle 0 is the first cycle the first header is offered (the unit is idle after reset).
"""

from dataclasses import dataclass

import numpy as np

from dstar.hw.geometry import SoftmaxGeometry

__all__ = ["SoftmaxSchedule", "schedule", "row_latency", "row_period"]

EXP_STAGES, DIV_CYCLES = SoftmaxGeometry.EXP_STAGES, SoftmaxGeometry.DIV_CYCLES


@dataclass
class SoftmaxSchedule:
    """Cycles of every handshake: ``head[k]`` (``i_row``), ``logits[k]`` (``i_logit``, per key),
    ``p[k]`` (``o_p``, per key), ``sums[k]`` (``o_sum``); ``cycles`` is the last one + 1."""
    head: list
    logits: list
    p: list
    sums: list

    @property
    def cycles(self) -> int:
        return self.sums[-1] + 1 if self.sums else 0


def schedule(lengths) -> SoftmaxSchedule:
    """Handshake cycles of a sequence of rows of ``lengths`` keys (each ``>= 1``)."""
    head, logits, p, sums = [], [], [], []
    h, b_free, c_free = 0, 0, 0
    for n in (int(v) for v in lengths):
        if n < 1:
            raise ValueError(f"row lengths must be >= 1, got {n}")
        head.append(h)
        logits.append(list(range(h + 1, h + n + 1)))
        w = max(h + n + 1, b_free)
        p.append(list(range(w + 1 + EXP_STAGES, w + 1 + EXP_STAGES + n)))
        t = max(w + n + EXP_STAGES, c_free)
        sums.append(t + DIV_CYCLES + 1)
        b_free, c_free = t + 1, t + DIV_CYCLES + 2
        h = w + 1
    return SoftmaxSchedule(head, logits, p, sums)


def row_latency(n: int) -> int:
    """Cycles from a lone row's header beat to its ``o_sum`` beat, both included
    (``2n + 27``)."""
    return schedule([n]).cycles


def row_period(n: int, rows: int = 8) -> int:
    """Steady-state cycles per row of back-to-back rows of ``n`` keys
    (``max(n + 8, DIV_CYCLES + 2)``)."""
    s = schedule([n] * rows)
    return int(np.diff(s.sums)[-1])
