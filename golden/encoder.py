"""The DSTAR delta encoder: a power-of-two shift per group, a precision class per element.

This is the integer contract of spec section 3 that the RTL (``hw.encoder``) reproduces bit for
bit. For a difference ``D`` (integer lattice units) cut into groups of ``G`` consecutive channels:

* ``round_shift(D, e) = (D + 2**(e-1)) >> e`` (arithmetic shift, round half up; ``D`` for e = 0).
* A group *fits* at shift ``e`` when every ``round_shift(D, e)`` lies in INT8 ``[-128, 127]``.
* The group's shift is the smallest ``e <= e_tol`` that fits (``e_tol``: the largest shift whose
  rounding error ``2**(e-1)`` is ``<= tau``); failing that the smallest ``e <= e_max`` that fits
  (the group is *clipped*: its error exceeds ``tau``); failing that ``e_max`` with every code
  saturated to INT8 (the group is clipped and *saturated*).
* Elements with ``|D| <= tau`` are coded 0 (dead zone). Each code ``q`` takes the cheapest class
  that holds it: ZERO (q = 0, no pass), LOW (INT4 [-8, 7], one nibble pass) or HIGH (INT8, two
  passes: low nibble unsigned ``q & 15``, high nibble signed ``q >> 4`` weighted by 16).
* ``decode = q << e``.
"""

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["ZERO", "LOW", "HIGH", "PASSES", "D_LIMIT", "E_LIMIT", "round_shift", "Encoded",
           "encode", "encode_narrow", "split_nibbles"]

ZERO, LOW, HIGH = 0, 1, 2
PASSES = np.array([0, 1, 2], dtype=np.int64)      # nibble passes per class


#: Largest ``|D|`` that ``encode`` and ``round_shift`` accept: the rounding half and the int64
#: arithmetic then never overflow (the configuration allows ``|D| < 2**32``).
D_LIMIT = (1 << 62) - 1
#: Largest shift ``round_shift`` accepts.
E_LIMIT = 62


def _check_range(d: np.ndarray) -> None:
    lo, hi = int(d.min(initial=0)), int(d.max(initial=0))
    if lo < -D_LIMIT or hi > D_LIMIT:
        raise ValueError(f"difference {hi if hi > D_LIMIT else lo} is beyond +-(2**62 - 1), the "
                         "range the encoder represents")


def round_shift(d, e):
    """``(d + 2**(e-1)) >> e`` elementwise, with ``d`` for ``e == 0`` (int64, broadcasting).
    ``|d| <= D_LIMIT`` and ``0 <= e <= E_LIMIT``, else ``ValueError``."""
    d = np.asarray(d)
    if not np.issubdtype(d.dtype, np.integer):
        raise TypeError(f"round_shift needs integers, got dtype {d.dtype}")
    _check_range(d)
    d = d.astype(np.int64)
    e = np.asarray(e, dtype=np.int64)
    if e.size and (e.min() < 0 or e.max() > E_LIMIT):
        raise ValueError(f"shift must be in [0, {E_LIMIT}], got {int(e.min())}..{int(e.max())}")
    half = np.where(e > 0, np.left_shift(1, np.maximum(e - 1, 0)), 0)
    return np.right_shift(d + half, e)


@dataclass
class Encoded:
    """Encoded groups of a ``(..., K)`` difference, ``n_groups = K // G``.

    ``q``: int64 ``(..., K)`` codes in [-128, 127]; ``cls``: int8 ``(..., K)`` ZERO/LOW/HIGH;
    ``shift``: int64 ``(..., n_groups)``; ``clipped`` / ``saturated``: bool ``(..., n_groups)``.
    """
    q: np.ndarray
    cls: np.ndarray
    shift: np.ndarray
    clipped: np.ndarray
    saturated: np.ndarray
    group: int

    @classmethod
    def concat(cls, parts: list["Encoded"]) -> "Encoded":
        """Encoded blocks of rows joined along the first axis."""
        if len(parts) == 1:
            return parts[0]
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("q", "cls", "shift", "clipped", "saturated")),
                   group=parts[0].group)

    def decode(self) -> np.ndarray:
        """``q << e`` per element (int64, shape ``(..., K)``)."""
        q = self.q
        return np.left_shift(q.reshape(q.shape[:-1] + (-1, self.group)),
                             self.shift[..., None]).reshape(q.shape)

    @functools.cached_property
    def group_cost(self) -> np.ndarray:
        """Nibble passes of the most expensive element of each group (``(..., n_groups)``)."""
        # The maximum over a group as one strided pass per lane: long inner loops.
        top = self.cls[..., ::self.group].copy()
        for j in range(1, self.group):
            np.maximum(top, self.cls[..., j::self.group], out=top)
        return PASSES[top]

    @functools.cached_property
    def _class_counts(self) -> tuple[int, int, int]:
        # ZERO, LOW, HIGH are 0, 1, 2: the sum of the classes is n_low + 2 * n_high.
        nonzero = int(np.count_nonzero(self.cls))
        n_high = int(self.cls.sum(dtype=np.int64)) - nonzero
        return self.cls.size - nonzero, nonzero - n_high, n_high

    def class_counts(self) -> tuple[int, int, int]:
        """Elements coded ZERO, LOW and HIGH."""
        return self._class_counts

    def passes(self) -> int:
        """Element-level nibble passes, ``sum PASSES[cls]``."""
        _, n_low, n_high = self.class_counts()
        return int(PASSES[LOW]) * n_low + int(PASSES[HIGH]) * n_high


def encode(d, group: int, e_max: int, tau: int) -> Encoded:
    """Encode a difference ``d`` (integers, shape ``(..., K)``, ``K`` a multiple of ``group``)."""
    enc = encode_narrow(d, group, e_max, tau)
    enc.q = enc.q.astype(np.int64)
    return enc


def encode_narrow(d, group: int, e_max: int, tau: int) -> Encoded:
    """``encode`` with the codes ``q`` left int32 where the differences fit (|d| < 2**30), for
    callers that decode them next (``q << e`` fits int32 for ``e_max <= 23``)."""
    d = np.asarray(d)
    if not np.issubdtype(d.dtype, np.integer) or d.dtype == np.bool_:
        raise TypeError(f"encode needs an integer difference, got dtype {d.dtype}")
    if d.ndim < 1:
        raise ValueError("encode needs a difference of shape (..., K), got a scalar")
    if group < 1 or not 0 <= e_max <= E_LIMIT or tau < 0:
        raise ValueError(f"encode needs group >= 1, 0 <= e_max <= {E_LIMIT} and tau >= 0, got "
                         f"group={group}, e_max={e_max}, tau={tau}")
    k = d.shape[-1]
    if k % group:
        raise ValueError(f"K={k} is not a multiple of the group size {group}")
    dg = d.reshape(*d.shape[:-1], k // group, group)
    narrow = d.dtype.kind == "i" and d.dtype.itemsize <= 4      # within +-D_LIMIT already
    if narrow:
        # round_shift is monotone in d, so a group fits iff its extreme elements do.
        dmax, dmin = _group_extremes(dg)
        lo, hi = int(dmin.min(initial=0)), int(dmax.max(initial=0))
    else:
        lo, hi = int(d.min(initial=0)), int(d.max(initial=0))
        if lo < -D_LIMIT or hi > D_LIMIT:
            _check_range(d)
    # int32 halves the memory traffic of this hot path; it holds any difference the config
    # allows (|D| <= 2**32 - 2 * 2**(e_max-1)) plus the rounding half.
    dt = np.int32 if -(1 << 30) < lo and hi < (1 << 30) else np.int64
    dg = dg.astype(dt, copy=False)
    if not narrow:
        dmax, dmin = _group_extremes(dg)
    e_tol = 0
    while e_tol < e_max and (1 << e_tol) <= tau:
        e_tol += 1
    # A group fits at shift e iff dmax <= hi[e] and -dmin <= lo[e] (round_shift's bounds in
    # closed form), both monotone in e: its first fit is a sorted search.
    hi_e, lo_e = _fit_bounds(e_max)
    neg_min = -dmin
    first_fit = np.zeros(dmax.shape, np.int64)
    for e in range(e_max + 1):                # counts the shifts that do not fit
        first_fit += (dmax > hi_e[e]) | (neg_min > lo_e[e])
    saturated = first_fit > e_max
    clipped = first_fit > e_tol
    shift = np.minimum(first_fit, e_max).astype(np.int64)
    half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0).astype(dt)
    q = np.right_shift(dg + half[..., None], shift.astype(dt)[..., None])
    if saturated.any():
        np.clip(q, -128, 127, out=q)
    if tau > 0:
        q[np.abs(dg) <= tau] = 0
    q = q.reshape(d.shape)
    # LOW holds [-8, 7]: q + 8 read unsigned is above 15 exactly for HIGH codes.
    high = np.add(q, 8, dtype=q.dtype).view(np.uint32 if dt == np.int32 else np.uint64) > 15
    cls = (q != 0).view(np.int8) + high.view(np.int8)
    enc = Encoded(q=q, cls=cls, shift=shift, clipped=clipped, saturated=saturated, group=group)
    if tau == 0:
        # Without a dead zone a group's codes span round_shift of its extremes (monotone), so
        # its cost follows from two codes per group (stored as the cached property's value).
        half = half.astype(np.int64)
        qmax, qmin = (dmax + half) >> shift, (dmin + half) >> shift
        if saturated.any():
            qmax, qmin = np.clip(qmax, -128, 127), np.clip(qmin, -128, 127)
        top = np.where((qmax > 7) | (qmin < -8), HIGH, np.where((qmax != 0) | (qmin != 0), LOW,
                                                                 ZERO))
        enc.__dict__["group_cost"] = PASSES[top]
    return enc


@functools.cache
def _fit_bounds(e_max: int):
    """Per shift ``e <= e_max``, the largest ``dmax`` and ``-dmin`` with ``round_shift`` in INT8:
    ``(d + 2**(e-1)) >> e <= 127`` iff ``d <= 255 * 2**(e-1) - 1`` (``127`` at e = 0) and
    ``>= -128`` iff ``-d <= 257 * 2**(e-1)`` (``128``); capped at int64's range."""
    cap = np.iinfo(np.int64).max
    hi = [127] + [min(255 * (1 << (e - 1)) - 1, cap) for e in range(1, e_max + 1)]
    lo = [128] + [min(257 * (1 << (e - 1)), cap) for e in range(1, e_max + 1)]
    return np.array(hi, np.int64), np.array(lo, np.int64)


def _group_extremes(dg):
    """Maxima and minima (int64) over the last axis of ``dg``, one strided pass per position
    in the group (long inner loops, unlike a reduction over a short axis)."""
    hi, lo = dg[..., 0].copy(), dg[..., 0].copy()
    for j in range(1, dg.shape[-1]):
        np.maximum(hi, dg[..., j], out=hi)
        np.minimum(lo, dg[..., j], out=lo)
    return hi.astype(np.int64), lo.astype(np.int64)


def split_nibbles(q):
    """HIGH codes as ``(lo, hi)`` with ``lo = q & 15`` (unsigned) and ``hi = q >> 4`` (signed),
    so that ``q == lo + 16 * hi``."""
    q = np.asarray(q, dtype=np.int64)
    return q & 15, q >> 4
