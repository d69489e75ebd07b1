"""Exact cycle model of ``dstar.hw.attention.AttentionEngine``: the cycles of one head step (key or
reuse) from ``N``, the mask and the configuration, plus the QK^T / PV tile counts.

The engine runs the phases of each query block ``I`` one after the other (``rows`` = the
block's query rows, ``n_sel`` = the keys of its selected blocks, ``blen_J`` = key block ``J``'s
length, ``nkb = ceil(N / Bk)``, ``G`` = lanes, ``BC = m_tile * n_arrays``):

* LIST: one cycle per key block (``nkb``), then one hop cycle;
* a tile of QK^T (per selected block ``J``, per chunk of ``BC`` keys): the K^T tile loads at
  one row per cycle (``Dh``) and runs ``rows * 2 * Dh/G`` lane-op cycles (two nibble ops per
  Q element); a tile of PV (per column pass of ``BC`` outputs, per selected block): the V
  rows of the block's lane groups (``ceil(blen_J / G) * G``) and ``rows * 2 *
  ceil(blen_J / G)`` op cycles. The two weight banks overlap the load of a tile with the ops
  of the previous one (``tile_phase``); after the last tile, ``WAIT_CYCLES`` until the PE
  array's last reduction is written;
* SMAX: the softmax unit's schedule of ``rows`` rows of ``n_sel`` keys
  (``dstar.sim.softmax_cycles.schedule(...).cycles``, the feeder keeps it always fed) plus one;
* SEL (key steps): ``picks * (nkb + 1)`` with ``picks`` = the selected blocks of the row of
  the mask (one scan over the blocks and a commit per pick), 1 for ``theta = 1``;
* NORM: ``rows * Dh`` accumulators through the normalizer, plus ``NORM_DRAIN``.

Key step: LIST, QK^T (all), SMAX (all), SEL; then, for a query block whose rows all have
their largest logit in a selected block (``fixup`` false), LIST (selected), PV (selected),
a wait until ``SelReciprocal`` has the rows' reciprocals (``SEL_RECIP_CYCLES`` per row from
the SEL cycle, if the list and PV take less), NORM (``-O_sel``), LIST (unselected), PV
(unselected, if any), NORM (``O_full``, ``R``); otherwise (the second pass) PV (all), NORM
(``O_full``), then LIST, SMAX (selected, on the kept logits), PV (selected), NORM (``R``).
Reuse step: LIST, QK^T, SMAX, PV, NORM, all on the selected tiles.
"""

from dataclasses import dataclass

import numpy as np

from dstar.golden.attention import THETA_BITS
from dstar.hw.geometry import AttentionGeometry
from dstar.sim.softmax_cycles import schedule

__all__ = ["AttentionCycles", "predict", "dense_cycles", "tile_phase"]

WAIT_CYCLES, NORM_DRAIN = AttentionGeometry.WAIT_CYCLES, AttentionGeometry.NORM_DRAIN
SEL_RECIP_CYCLES = AttentionGeometry.SEL_RECIP_CYCLES
#: Cycles from the mask's ``SEL`` cycle to the first cycle ``SelReciprocal`` is done, beyond
#: its rows' cycles, against the list and PV phases that run meanwhile.
RECIP_LAG = 1


@dataclass
class AttentionCycles:
    """Predicted counters of one step: ``cycles``, ``count_qk``, ``count_pv`` (the engine's
    ports), the cycles by phase (``phases``) and ``busy``, the cycles in which the PE lanes run
    QK^T or PV ops (``utilization`` = ``busy / cycles``)."""
    cycles: int
    count_qk: int
    count_pv: int
    phases: dict
    busy: int = 0

    @property
    def utilization(self) -> float:
        return self.busy / self.cycles if self.cycles else 0.0

    def counters(self) -> dict:
        return {"cycles": self.cycles, "count_qk": self.count_qk, "count_pv": self.count_pv}


def _blocks(n, b):
    return [min(b, n - s) for s in range(0, n, b)]


def tile_phase(loads, ops) -> int:
    """Cycles of a tile phase: tile ``t`` loads in ``loads[t]`` cycles and runs in ``ops[t]``.
    The loader decides to start tile ``t`` once it is idle and the lanes are done with tile
    ``t - 2`` (the bank it refills), issues its rows in the following cycles, and counts it the
    cycle after its last row; the lanes start a tile the cycle after it is counted (and they
    are idle); the phase ends ``WAIT_CYCLES`` after the last tile's lanes are counted."""
    l_seen, x_seen = [], []
    ld_free = x_free = 0
    for t, (lc, oc) in enumerate(zip(loads, ops, strict=True)):
        dec = max(ld_free, x_seen[t - 2] if t >= 2 else 0)
        ld_free = dec + lc + 1
        l_seen.append(ld_free)
        x_free = max(x_free, l_seen[t]) + oc + 1
        x_seen.append(x_free)
    return x_seen[-1] + WAIT_CYCLES


def predict(cfg, n: int, mask, key: bool, theta_q: int, fixup=None) -> AttentionCycles:
    """Counters of one step of ``N = n`` tokens with the block ``mask`` ``(nqb, nkb)`` (on key
    steps: the mask the step selects; ``theta_q``: ``golden.attention.theta_fixed(theta)``;
    ``fixup``: the query blocks that take the second, masked pass,
    ``golden.attention.second_pass_blocks``, default none)."""
    ag = AttentionGeometry(cfg)
    g, dh, bc, rows_q, n_cp = cfg.group, cfg.head_dim, ag.block_cols, ag.rows_q, ag.n_cp
    q_lens, k_lens = _blocks(n, cfg.block_q), _blocks(n, cfg.block_k)
    nkb = len(k_lens)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (len(q_lens), nkb):
        raise ValueError(f"mask must have shape {(len(q_lens), nkb)}, got {mask.shape}")
    if not mask.any(axis=1).all():
        raise ValueError("every query block needs at least one selected key block")
    ph = dict.fromkeys(("list", "qk", "smax", "sel", "pv", "recip", "norm"), 0)
    fixup = np.zeros(len(q_lens), bool) if fixup is None else np.asarray(fixup, dtype=bool)
    if key and fixup.shape != (len(q_lens),):
        raise ValueError(f"fixup must have shape {(len(q_lens),)}, got {fixup.shape}")
    count_qk = count_pv = busy = 0

    def qk(rows, sel):
        nonlocal busy
        n_chunks = sum(-(-k_lens[j] // bc) for j in sel)
        busy += n_chunks * rows * 2 * rows_q
        return tile_phase([dh] * n_chunks, [rows * 2 * rows_q] * n_chunks)

    def pv(rows, sel):
        nonlocal busy
        ngs = [-(-k_lens[j] // g) for j in sel] * n_cp
        busy += sum(rows * 2 * ng for ng in ngs)
        return tile_phase([ng * g for ng in ngs], [rows * 2 * ng for ng in ngs])

    def smax(rows, sel):
        return schedule([sum(k_lens[j] for j in sel)] * rows, lanes=cfg.softmax_lanes).cycles + 1

    for i, rows in enumerate(q_lens):
        sel = [j for j in range(nkb) if mask[i, j]]
        every = list(range(nkb))
        norm = rows * dh + NORM_DRAIN
        if key:
            ph["list"] += 2 * (nkb + 1)
            ph["qk"] += qk(rows, every)
            ph["smax"] += smax(rows, every)
            ph["sel"] += 1 if theta_q >= 1 << THETA_BITS else len(sel) * (nkb + 1)
            ph["norm"] += 2 * norm
            count_qk += nkb
            if fixup[i]:
                ph["smax"] += smax(rows, sel)
                ph["pv"] += pv(rows, every) + pv(rows, sel)
                count_pv += nkb + len(sel)
                continue
            rest = [j for j in every if j not in sel]
            pv_sel = pv(rows, sel)
            ph["pv"] += pv_sel + (pv(rows, rest) if rest else 0)
            ph["list"] += nkb + 1
            ph["recip"] += max(0, SEL_RECIP_CYCLES * rows + RECIP_LAG - (nkb + 1 + pv_sel))
            count_pv += nkb
        else:
            ph["list"] += nkb + 1
            ph["qk"] += qk(rows, sel)
            ph["smax"] += smax(rows, sel)
            ph["pv"] += pv(rows, sel)
            ph["norm"] += norm
            count_qk += len(sel)
            count_pv += len(sel)
    return AttentionCycles(sum(ph.values()), count_qk, count_pv, ph, busy)


def dense_cycles(cfg, n: int) -> int:
    """Cycles of dense attention on the same engine: one pass over every tile (a reuse step
    with every block selected: QK^T, softmax, PV and normalization once)."""
    nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
    return predict(cfg, n, np.ones((nqb, nkb), dtype=bool), False, 1 << THETA_BITS).cycles
