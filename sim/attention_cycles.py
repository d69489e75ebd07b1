"""Exact cycle model of ``dstar.hw.attention.AttentionEngine``: the cycles of one head step (key or
reuse) from ``N``, the mask and the configuration, plus the QK^T / PV tile counts.

The engine overlaps the phases of neighbouring query blocks (``rows`` = a block's query rows,
``nkb = ceil(N / Bk)``, ``L = nkb + 1`` the cycles of a block-list scan, ``G`` = lanes,
``BC = m_tile * n_arrays``):

* a tile phase (``tile_phase``): QK^T, per selected block ``J`` and chunk of ``BC`` keys, a
  K^T tile loaded at one row per cycle (``Dh``) and ``rows * 2 * Dh/G`` lane-op cycles; PV,
  per column pass of ``BC`` outputs and selected block, the V rows of the block's lane groups
  (``ceil(blen_J / G) * G``) and ``rows * 2 * ceil(blen_J / G)`` op cycles; the two weight
  banks overlap a tile's load with the previous tile's ops; ``WAIT_CYCLES`` after the last;
* SMAX: ``dstar.sim.softmax_cycles.schedule(...).cycles + 1``; SEL (key steps): ``picks *
  (ceil(nkb / SEL_SCAN) + 1)`` (1 for ``theta = 1``); ``SelReciprocal``: ``SEL_RECIP_CYCLES``
  per row from the SEL cycle, plus ``RECIP_LAG``; a normalization pass: ``rows * Dh +
  NORM_DRAIN``, plus ``rows * n_cp`` when it adds ``S`` and ``U``.

A step is a prologue (QK^T of block 0), then per block ``I`` a phase X, in which QK^T of
block ``I + 1`` (list, tiles) runs beside the softmax of block ``I`` (list, SMAX; on key steps
SEL), and a phase Y, in which PV of block ``I`` runs (reuse: the selected tiles; key step:
list, selected tiles into ``S``, list, unselected tiles into ``U``); the normalization of
block ``I - 1`` (reuse: one pass; key steps: two, the second over ``S + U`` if block ``I - 1``
had unselected tiles) starts with X, and Y also waits for it and for block ``I``'s
reciprocals; a phase
ends the cycle after its last part is seen done, the next begins one cycle later; at the end,
the last block's normalization.

SAR (``attention = "sar"``): a cache step (``key``) is a v1 reuse step on the host's mask
(QK^T, SMAX and PV of the kept tiles, one normalization pass); a reuse step has no QK^T and
no SMAX: X(0) starts ``SAR_PRO`` cycles in, each X is the list of block ``I`` (``L`` cycles)
and ``SAR_LIST``, and Y and the normalization are as on a cache step.
"""

from dataclasses import dataclass

import numpy as np

from dstar.golden.attention import THETA_BITS
from dstar.hw.geometry import AttentionGeometry
from dstar.sim.softmax_cycles import schedule

__all__ = ["AttentionCycles", "predict", "dense_cycles", "tile_phase", "fmdq_tile_cycles"]

WAIT_CYCLES, NORM_DRAIN = AttentionGeometry.WAIT_CYCLES, AttentionGeometry.NORM_DRAIN
SEL_RECIP_CYCLES, SEL_SCAN = AttentionGeometry.SEL_RECIP_CYCLES, AttentionGeometry.SEL_SCAN
#: Cycles from the mask's ``SEL`` cycle to the first cycle ``SelReciprocal`` is done, beyond
#: its rows' cycles, against the list and PV phases that run meanwhile.
RECIP_LAG = 1
#: SAR's reuse steps: the cycle X(0) starts (no QK^T of block 0 ahead of it), and the cycles
#: from a block list's end to phase X's part seen done (no softmax).
SAR_PRO, SAR_LIST = 3, 1


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


def tile_phase(loads, ops, wait: int = WAIT_CYCLES) -> int:
    """Cycles of a tile phase: tile ``t`` loads in ``loads[t]`` cycles and runs in ``ops[t]``.
    The loader decides to start tile ``t`` once it is idle and the lanes are done with tile
    ``t - 2`` (the bank it refills), issues its rows in the following cycles, and counts it the
    cycle after its last row; the lanes start a tile the cycle after it is counted (and they
    are idle); the phase ends ``wait`` cycles after the last tile's lanes are counted."""
    l_seen, x_seen = [], []
    ld_free = x_free = 0
    for t, (lc, oc) in enumerate(zip(loads, ops, strict=True)):
        dec = max(ld_free, x_seen[t - 2] if t >= 2 else 0)
        ld_free = dec + lc + 1
        l_seen.append(ld_free)
        x_free = max(x_free, l_seen[t]) + oc + 1
        x_seen.append(x_free)
    return x_seen[-1] + wait


#: FMDQ arrays: cycles from the last group's issue to its unit's rows seen written, beyond the
#: unit's rows: the op register, the array's weight read and its register, products and Horner
#: step, the drain, the write.
FMDQ_WAIT = 6


def fmdq_tile_cycles(cfg, rows: int, lens, pv: bool) -> int:
    """Cycles of a tile phase of ``FmdqTileRunner`` over ``rows`` query rows: its tiles' loaded
    rows ``lens`` (QK^T: ``head_dim`` per key chunk; PV: the block's keys per column pass and
    selected block); per token tile of ``T`` rows one unit per tile (QK^T: ``head_dim``
    groups) or per softmax group of the block (PV: ``G`` groups each)."""
    t_n = cfg.token_tile
    n_tt = -(-rows // t_n)
    ops = [n_tt * (-(-ln // cfg.group) * cfg.group if pv else cfg.head_dim) for ln in lens]
    last_tok = rows - (n_tt - 1) * t_n
    return tile_phase(list(lens), ops, FMDQ_WAIT + last_tok)


def predict(cfg, n: int, mask, key: bool, theta_q: int, picks=None) -> AttentionCycles:
    """Counters of one step of ``N = n`` tokens with the block ``mask`` ``(nqb, nkb)`` (on key
    steps: the mask the step selects; ``theta_q``: ``golden.attention.theta_fixed(theta)``;
    ``picks``: per query block, the blocks the mass rule picked before the row maxima's were
    added, ``golden.attention.select_blocks(mass, theta).sum(-1)``; default: the mask's).
    With ``cfg.attention = "sar"``: ``key`` is a cache step, ``mask`` the host's, ``theta_q``
    and ``picks`` are not read."""
    ag = AttentionGeometry(cfg)
    g, dh, bc, rows_q, n_cp = cfg.group, cfg.head_dim, ag.block_cols, ag.rows_q, ag.n_cp
    # SAR: a cache step (``key``) runs as a v1 reuse step on the host's mask (no selection);
    # a reuse step runs only the lists, PV and the normalization.
    full, qk_on = key and not ag.sar, key or not ag.sar
    q_lens, k_lens = _blocks(n, cfg.block_q), _blocks(n, cfg.block_k)
    nkb, nqb = len(k_lens), len(q_lens)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (nqb, nkb):
        raise ValueError(f"mask must have shape {(nqb, nkb)}, got {mask.shape}")
    if not mask.any(axis=1).all():
        raise ValueError("every query block needs at least one selected key block")
    picks = mask.sum(axis=1) if picks is None else np.asarray(picks)
    if full and picks.shape != (nqb,):
        raise ValueError(f"picks must have shape {(nqb,)}, got {picks.shape}")
    lst = nkb + 1
    count_qk = count_pv = busy = 0
    every = list(range(nkb))

    def qk(rows, sel):
        nonlocal busy, count_qk
        count_qk += len(sel)
        n_chunks = sum(-(-k_lens[j] // bc) for j in sel)
        if ag.fmdq:
            busy += n_chunks * -(-rows // cfg.token_tile) * dh
            return fmdq_tile_cycles(cfg, rows, [dh] * n_chunks, pv=False)
        busy += n_chunks * rows * 2 * rows_q
        return tile_phase([dh] * n_chunks, [rows * 2 * rows_q] * n_chunks)

    def pv(rows, sel):
        nonlocal busy, count_pv
        count_pv += len(sel)
        ngs = [-(-k_lens[j] // g) for j in sel] * n_cp
        if ag.fmdq:
            busy += sum(-(-rows // cfg.token_tile) * ng * g for ng in ngs)
            return fmdq_tile_cycles(cfg, rows, [k_lens[j] for j in sel] * n_cp, pv=True)
        busy += sum(rows * 2 * ng for ng in ngs)
        return tile_phase([ng * g for ng in ngs], [rows * 2 * ng for ng in ngs])

    def smax(rows, sel):
        keys = sum(k_lens[j] for j in sel)
        return schedule([keys] * rows, lanes=cfg.softmax_keys_per_cycle).cycles + 1

    def norm_pass(rows, both=False):
        return rows * dh + NORM_DRAIN + (rows * n_cp if both else 0)

    sels = [[j for j in every if mask[i, j]] for i in range(nqb)]
    ph = dict.fromkeys(("prologue", "x", "y", "final"), 0)
    # The prologue: QK^T of block 0 (its list, its tiles), seen done; X(0) a cycle later.
    x0 = 1 + lst + qk(q_lens[0], every if full else sels[0]) + 1 + 1 if qk_on else SAR_PRO
    ph["prologue"] = x0 - 1
    norm_prev = None                        # the previous block's normalization, in cycles
    for i, rows in enumerate(q_lens):
        sel = sels[i]
        rest = [j for j in every if j not in sel]
        # X: QK^T of block I + 1 beside the softmax (and selection) of block I.
        a_vis = x0 + 1
        if i + 1 < nqb and qk_on:
            a_vis = x0 + lst + qk(q_lens[i + 1], every if full else sels[i + 1]) + 1
        recip = 0
        if not qk_on:
            m_vis = x0 + lst + SAR_LIST
        elif not full:
            m_vis = x0 + lst + smax(rows, sel) + 1
        else:
            t_sel = x0 + lst + smax(rows, every) + (
                1 if theta_q >= 1 << THETA_BITS else int(picks[i]) * (-(-nkb // SEL_SCAN) + 1))
            m_vis = t_sel + 1
            recip = t_sel + SEL_RECIP_CYCLES * rows + RECIP_LAG
        y0 = max(a_vis, m_vis) + 1
        ph["x"] += y0 - x0
        # Y: PV of block I beside the normalization of block I - 1.
        if not full:
            v_vis = y0 + pv(rows, sel) + 1
            norm = norm_pass(rows)
        else:
            t = y0 + lst + pv(rows, sel) + lst
            v_vis = t + (pv(rows, rest) if rest else 0) + 1
            norm = norm_pass(rows) + norm_pass(rows, both=bool(rest))
        n_vis = x0 + norm_prev + 1 if norm_prev is not None else y0 + 1
        y_end = max(v_vis, n_vis, recip, y0 + 1)
        ph["y"] += y_end + 1 - y0
        x0 = y_end + 1
        norm_prev = norm
    # The last block's normalization: seen done, then idle.
    end = x0 + norm_prev + 1
    ph["final"] = end + 1 - x0
    return AttentionCycles(end, count_qk, count_pv, ph, busy)


def dense_cycles(cfg, n: int) -> int:
    """Cycles of dense attention on the same engine: one pass over every tile (a reuse step
    with every block selected: QK^T, softmax, PV and normalization once)."""
    nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
    return predict(cfg, n, np.ones((nqb, nkb), dtype=bool), False, 1 << THETA_BITS).cycles
