"""The SIMD-4 PE array of FMDQ, cycle by cycle (spec section 7.4): the golden twin of
``dstar.hw.fmdq.pe_array``.

The array holds ``T`` tokens x ``M`` columns of PEs. It runs *units*: the groups of one token
tile over one sort window (``golden.fmdq.schedule_tile`` with ``window`` channels), in
descending total shift. A PE keeps one accumulator in Horner form::

    P   = sum_i act_i[t] * W[k_i, m]                     (the group's SIMD-4 product)
    acc = P                                              first group of the unit
    acc = (acc << d) + P,   d = s_prev - s               every later group

so ``acc == sum_g P_g << (s_g - s_last)`` at the unit's end, and the unit's sum is
``acc << s_last``, added to ``Y`` when the unit is written out. The step ``d`` of one cycle is at
most ``MAX_STEP`` = 2; a larger gap ``D`` between two consecutive total shifts costs
``bubbles(D) = (D - 1) // 2`` extra cycles before the group, each shifting the accumulator by 2
with no product (``horner_steps``).

The accumulator holds any unit's value exactly: ``acc_bits(window, e_max)`` bits, from
``|partial code| <= 128``, ``|W| <= 128`` and ``2**(p - s) <= 2**e_max`` per channel.
"""

from dataclasses import dataclass

import numpy as np

from dstar.config import bits_signed

from .fmdq import MAX_SLICES, SLICE_BITS, FmdqEncoded, fmdq_encode, schedule_tile

__all__ = ["MAX_STEP", "acc_bits", "bubbles", "horner_steps", "Unit", "units_of",
           "unit_bubbles", "run_unit", "pe_array_y", "LinearStep", "linear_step"]

#: Largest accumulator shift of one cycle.
MAX_STEP = 2


def acc_bits(window: int, e_max: int) -> int:
    """Bits of a PE accumulator: any unit of ``window`` channels (module docstring)."""
    return bits_signed(window * 128 * 128 << e_max)


def bubbles(gap) -> np.ndarray:
    """Extra cycles before a group whose total shift is ``gap`` below the previous group's."""
    gap = np.asarray(gap, np.int64)
    return np.maximum(0, (gap - 1) // MAX_STEP)


def horner_steps(shifts) -> tuple[np.ndarray, np.ndarray]:
    """Per group of one unit (total shifts ``shifts``, non-increasing): the accumulator step
    ``d`` of its own cycle (0 for the first group, which replaces the accumulator) and the
    bubbles before it."""
    s = np.asarray(shifts, np.int64)
    gap = np.concatenate([[0], s[:-1] - s[1:]]) if s.size else s
    if np.any(gap < 0):
        raise ValueError("a unit's total shifts must not increase")
    b = bubbles(gap)
    return gap - MAX_STEP * b, b


@dataclass
class Unit:
    """One unit: ``rows`` of the token tile (``slice``), the window's first channel ``base``
    and its schedule (``golden.fmdq.Schedule``, channels absolute)."""
    rows: slice
    base: int
    sched: object

    @property
    def groups(self) -> int:
        return self.sched.groups


def units_of(enc: FmdqEncoded, window: int):
    """The units of ``enc`` in the array's order: windows outer, token tiles inner (the
    weights of a window stay in the array while every tile runs it). Units without a group
    are skipped (they add nothing)."""
    k = enc.shift.shape[1]
    for c in range(0, k, window):
        for t in range(enc.n_tiles):
            sched = schedule_tile(enc.shift[t, c:c + window], enc.width[t, c:c + window], window)
            if sched.groups:
                sched.channel = sched.channel + c
                yield Unit(enc.tile_rows(t), c, sched)


def unit_bubbles(shift, width) -> np.ndarray:
    """Bubbles of every unit of sub-channels ``shift``, ``width`` (``(n, window)``, one unit a
    row), int64 ``(n,)``: only the distinct total shifts of a unit matter."""
    shift, width = np.asarray(shift, np.int64), np.asarray(width, np.int64)
    top = int(shift.max(initial=0)) + SLICE_BITS * MAX_SLICES
    present = np.zeros((shift.shape[0], top), bool)
    rows = np.broadcast_to(np.arange(shift.shape[0])[:, None], shift.shape)
    for j in range(MAX_SLICES):
        live = width > SLICE_BITS * j
        present[rows[live], shift[live] + SLICE_BITS * j] = True
    out = np.zeros(shift.shape[0], np.int64)
    prev = np.full(shift.shape[0], -1, np.int64)      # the last present shift seen, descending
    for s in range(top - 1, -1, -1):
        hit = present[:, s]
        out += np.where(hit & (prev >= 0), bubbles(prev - s), 0)
        prev = np.where(hit, s, prev)
    return out


def run_unit(acts, w_rows, shifts, bits: int) -> tuple[np.ndarray, int]:
    """One unit on the array: ``acts`` int ``(groups, tokens, LANES)`` slice values (already
    read as signed or unsigned), ``w_rows`` int ``(groups, LANES, M)`` the lanes' weight rows
    (zero for empty lanes), ``shifts`` ``(groups,)``. Returns the accumulators ``(tokens, M)``
    and the last shift; raises if an accumulator leaves ``bits`` signed bits."""
    steps, bubs = horner_steps(shifts)
    lim = 1 << (bits - 1)
    acc = None
    for g, (d, b) in enumerate(zip(steps, bubs, strict=True)):
        p = np.asarray(acts[g], np.int64) @ np.asarray(w_rows[g], np.int64)
        if g:
            for _ in range(b):                # the bubbles: a shift by MAX_STEP each
                acc = acc << MAX_STEP
        acc = p if g == 0 else (acc << int(d)) + p
        if np.any(acc >= lim) or np.any(acc < -lim):
            raise OverflowError(f"accumulator beyond {bits} bits at group {g}")
    return acc, int(shifts[-1])


def pe_array_y(enc: FmdqEncoded, w_q, window: int, e_max: int) -> np.ndarray:
    """``W_q^T . decode(enc)`` unit by unit as the array computes it (int64 ``(N, M)``; equal to
    ``golden.fmdq.apply_schedule`` and to ``enc.decode() @ w_q``)."""
    w_q = np.asarray(w_q, np.int64)
    sl = enc.slices()
    y = np.zeros((enc.q.shape[0], w_q.shape[1]), np.int64)
    bits = acc_bits(window, e_max)
    for u in units_of(enc, window):
        s = u.sched
        acts = np.stack([sl[u.rows][:, s.channel[g], s.slice[g]] * s.valid[g]
                         for g in range(s.groups)])
        w_rows = w_q[s.channel] * s.valid[:, :, None]
        acc, last = run_unit(acts, w_rows, s.shift, bits)
        y[u.rows] += acc << last
    return y



@dataclass
class LinearStep:
    """One step of the FMDQ linear datapath: the encoded difference ``enc``, the new state
    ``xs`` ``(N, K)`` and accumulators ``y`` ``(N, M)`` (int64)."""
    enc: FmdqEncoded
    xs: np.ndarray
    y: np.ndarray


def linear_step(target, xs, y, w_q, *, key: bool, token_tile: int, window: int, e_max: int,
                tau: int) -> LinearStep:
    """The golden twin of ``dstar.hw.fmdq.linear.FmdqLinear``: ``D = target - Xs`` (``Xs`` and
    ``Y`` read as zero on a ``key`` step), coded by ``golden.fmdq.fmdq_encode`` (lossless rule),
    the state advanced by the decoded values and ``Y`` by ``W_q^T . decode`` unit by unit as
    the PE array computes it (``pe_array_y``); ``xs`` and ``y`` may be ``None`` on a key
    step."""
    target = np.asarray(target, np.int64)
    w_q = np.asarray(w_q, np.int64)
    base = np.zeros_like(target) if key else np.asarray(xs, np.int64)
    enc = fmdq_encode(target - base, token_tile, e_max, tau)
    prod = pe_array_y(enc, w_q, window, e_max)
    y0 = np.zeros_like(prod) if key else np.asarray(y, np.int64)
    return LinearStep(enc, base + enc.decode(), y0 + prod)
