"""Attention's two matmuls on the FMDQ PE array (spec section 7.4: ``Q K^T`` and ``P V`` as
2-bit-sliced 8-bit operands, probabilities as unsigned slices): the units the attention engine
issues, golden twin of ``dstar.hw.attention.fmdq_tile_runner``.

A unit is one token tile (up to ``T`` query rows) over the channels held in the array's weight
window (``golden.fmdq_pe``), its groups in descending total shift:

* ``Q K^T`` (weights: ``K^T``, a channel per head dimension ``d``): one unit per tile and key
  chunk; for slice ``j = 3, 2, 1, 0`` (total shift ``2 j``), for each group of 4 dimensions, the
  group of slice ``j`` of ``Q[t, d]`` (INT8, two's complement: slice 3 signed in [-2, 1], the
  others unsigned). ``head_dim`` groups; every row's sum is exact.
* ``P V`` (weights: ``V``, a channel per key of the block): one unit per tile and softmax group
  of ``G`` keys (the keys of one ``p`` word, whose shift ``s`` is per row); for slice ``j = 3 ..
  0`` of the unsigned 8-bit ``p``, for each group of 4 keys, the group of slice ``j``. ``G``
  groups; row ``t``'s unit sum ``sum_k p[t, k] V[k]`` is shifted by its own ``s[t]`` when it is
  written out (the array's ``tok_shift``), which gives ``sum_k (p << s) V`` exactly: the
  weights ``w = p << s`` of ``golden.softmax``'s group format. Keys past the block's length are
  empty lanes.

No slice is skipped: every unit has the same groups, so the cycle count depends only on the
shapes (``dstar.sim.attention_cycles``).
"""

from dataclasses import dataclass

import numpy as np

from .fmdq import LANES, MAX_SLICES, SLICE_BITS
from .fmdq_pe import run_unit

__all__ = ["AttnUnit", "int8_slices", "qk_unit", "pv_unit", "run_attn_unit"]


@dataclass
class AttnUnit:
    """One unit: per group ``act`` (``(groups, T, LANES)`` slice values, already read as signed
    or unsigned), ``raw`` (the same as 2-bit fields), ``channel``, ``signed``, ``valid``
    (``(groups, LANES)``), ``shift`` (``(groups,)``), and per row ``tok_shift`` (``(T,)``)."""
    act: np.ndarray
    raw: np.ndarray
    channel: np.ndarray
    signed: np.ndarray
    valid: np.ndarray
    shift: np.ndarray
    tok_shift: np.ndarray

    @property
    def groups(self) -> int:
        return self.shift.shape[0]


def int8_slices(x, signed_top: bool = True) -> np.ndarray:
    """The four 2-bit slices of 8-bit ``x`` (``(..., 4)``, slice ``j`` at ``[..., j]``):
    ``x == sum_j slice_j << 2 j``, slice 3 signed (``signed_top``: INT8) or unsigned (uint8)."""
    x = np.asarray(x, np.int64)
    out = np.stack([(x >> (SLICE_BITS * j)) & 3 for j in range(MAX_SLICES)], axis=-1)
    if signed_top:
        out[..., -1] = x >> (SLICE_BITS * (MAX_SLICES - 1))
    return out


def _unit(vals, tokens: int, signed_top: bool, live, tok_shift) -> AttnUnit:
    """The groups of ``vals`` (``(n_tok, C)`` 8-bit operands, ``C`` a multiple of 4, channel
    ``c`` of the window), slices outer (descending), groups of 4 channels inner; ``live``
    ``(C,)``: the channels that carry data."""
    vals = np.asarray(vals, np.int64)
    n_tok, n_ch = vals.shape
    sl = np.zeros((tokens, n_ch, MAX_SLICES), np.int64)
    sl[:n_tok] = int8_slices(vals, signed_top)
    n_cg = n_ch // LANES
    order = [(j, cg) for j in reversed(range(MAX_SLICES)) for cg in range(n_cg)]
    ch = np.array([[cg * LANES + i for i in range(LANES)] for _, cg in order], np.int64)
    valid = np.asarray(live, bool)[ch]
    act = np.stack([sl[:, ch[g], j] for g, (j, _) in enumerate(order)]) * valid[:, None, :]
    sgn = np.array([[signed_top and j == MAX_SLICES - 1] * LANES for j, _ in order], bool)
    ts = np.zeros(tokens, np.int64)
    ts[:n_tok] = tok_shift
    return AttnUnit(act=act, raw=act & 3, channel=ch, signed=sgn, valid=valid,
                    shift=np.array([SLICE_BITS * j for j, _ in order], np.int64), tok_shift=ts)


def qk_unit(q_tile, tokens: int) -> AttnUnit:
    """The ``Q K^T`` unit of query rows ``q_tile`` (``(n_tok, Dh)`` INT8, ``n_tok <= tokens``,
    ``Dh`` a multiple of 4): channel ``d`` is ``K^T``'s row ``d``."""
    q = np.asarray(q_tile, np.int64)
    return _unit(q, tokens, True, np.ones(q.shape[1], bool), 0)


def pv_unit(p_tile, shifts, tokens: int, live: int) -> AttnUnit:
    """The ``P V`` unit of one softmax group: ``p_tile`` (``(n_tok, G)`` uint8 mantissas,
    ``G`` a multiple of 4), the rows' shifts ``s`` of the group (``(n_tok,)``) and the keys of
    the group that exist (``live`` of the ``G``, the rest empty lanes); channel ``k`` is the
    ``k``-th key of the group."""
    p = np.asarray(p_tile, np.int64)
    return _unit(p, tokens, False, np.arange(p.shape[1]) < live,
                 np.asarray(shifts, np.int64))


def run_attn_unit(unit: AttnUnit, w_rows, bits: int) -> np.ndarray:
    """The unit's rows as the array writes them out: ``w_rows`` (``(C, M)`` the window's
    weight rows of the unit's channels); int64 ``(T, M)``, row ``t`` shifted by its
    ``tok_shift``."""
    w = np.asarray(w_rows, np.int64)
    w_g = w[unit.channel] * unit.valid[:, :, None]
    acc, last = run_unit(unit.act, w_g, unit.shift, bits)
    return acc << (last + unit.tok_shift[:, None])
