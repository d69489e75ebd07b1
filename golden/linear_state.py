"""The integer state of one differential linear layer on the golden model (spec section 3):
``Y_t = Y_{t-1} + W_q^T . decode(enc(target - Xs_int))``, the accelerator's linear contract,
with the golden model's own checks.

``LinearState`` holds one layer's INT8 weights, the reconstruction ``Xs_int`` and the
accumulator ``Y_int`` across steps; ``golden.host.GoldenEngine`` keeps one per layer, and the
host (``golden.host.BlockHost``) turns floats into its targets and its ``Y_int`` back into
floats. After every step the invariant ``Y_int == W_q^T . Xs_int`` is checked, as are the state
bound and the closed-loop tolerance ``|target - Xs_int| <= tau`` on every group that was not
clipped; a violation raises ``InvariantError``. The invariant is checked in exact integers by
Freivalds' test: ``Y_int . r == Xs_int . (W_q . r)`` for ``CHECK_VECTORS`` fixed random sign
vectors ``r`` (a wrong row escapes each vector with probability at most 1/2; a single wrong
element never escapes), which costs ``O(N (K + M))`` a step instead of a second ``O(N K M)``
product.

With ``Config.encoding = "fmdq"`` the difference is coded by ``golden.fmdq`` (spec 7.2) instead
of v1's encoder: rows run in chunks of whole token tiles, the same invariants hold (sub-channels
whose error may exceed ``tau`` are left out of the tolerance check, as clipped groups are), and
the step's counts are ``golden.fmdq_stats``'. ``ENCODINGS`` holds each encoding's parts.
"""

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dstar.config import Encoding

from .encoder import Encoded, encode, encode_narrow
from .fmdq import FmdqEncoded, fmdq_encode
from .fmdq_stats import FmdqStats, count_fmdq
from .quant import exact_dtype
from .stats import OpStats, count_encoded

__all__ = ["LinearState", "LinearStep", "InvariantError", "encode_step", "CHECK_VECTORS",
           "CHUNK_ELEMENTS", "ENCODINGS", "Coding"]

#: Random sign vectors of the invariant check.
CHECK_VECTORS = 4
#: Elements of the widest row block of a step (the rows run in chunks that stay in cache).
CHUNK_ELEMENTS = 1 << 16


class InvariantError(AssertionError):
    """The golden model broke one of its own invariants (a bug, never a user error)."""


def _encode_nibble(diff, cfg):
    """v1: ``(enc, decode(enc))``, the codes left int32 where they fit (the hot path)."""
    enc = encode_narrow(diff, cfg.group, cfg.e_max, tau=cfg.tau)
    q = enc.q                                 # int32 here (|diff| < 2**30, e_max <= 15)
    dec = np.left_shift(q.reshape(q.shape[:-1] + (-1, cfg.group)),
                        enc.shift.astype(q.dtype)[..., None]).reshape(q.shape)
    return enc, dec


def _lossy_nibble(enc: Encoded, cfg):
    """Elements whose error may exceed ``tau`` (those of clipped groups), or ``None``."""
    if not enc.clipped.any():
        return None
    return np.repeat(enc.clipped, cfg.group, axis=-1)


def _encode_fmdq(diff, cfg):
    """FMDQ: ``(enc, decode(enc))``, int64."""
    enc = fmdq_encode(diff, cfg.token_tile, cfg.e_max, cfg.tau, cfg.fmdq_rule, cfg.fmdq_thr0)
    return enc, enc.decode()


def _lossy_fmdq(enc: FmdqEncoded, cfg):
    """Elements whose error may exceed ``tau`` (those of clipped sub-channels), or ``None``."""
    return enc._per_row(enc.clipped) if enc.clipped.any() else None


@dataclass(frozen=True)
class Coding:
    """One ``Encoding``'s parts in a differential linear layer: ``encode(diff, cfg) -> (enc,
    dec)``, ``lossy(enc, cfg)``: a bool ``(N, K)`` of the elements excluded from the ``tau``
    check (or ``None``), ``count(enc, cfg)``: the step's counts, ``stats``: the class that
    accumulates them, ``parts``: the encoded form's type (``concat`` joins row chunks),
    ``rows``: the row chunks' granule (config field name, or ``None``: any)."""
    encode: Callable
    lossy: Callable
    count: Callable
    stats: type
    parts: type
    rows: str | None


#: Each ``Encoding``'s parts (``Coding``).
ENCODINGS = {
    Encoding.NIBBLE: Coding(_encode_nibble, _lossy_nibble, lambda enc, cfg: count_encoded(enc),
                            OpStats, Encoded, None),
    Encoding.FMDQ: Coding(_encode_fmdq, _lossy_fmdq,
                          lambda enc, cfg: count_fmdq(enc, cfg.sort_window), FmdqStats,
                          FmdqEncoded, "token_tile"),
}


def encode_step(target, xs, cfg):
    """One encoder step on integer rows: returns ``(enc, xs_new)`` (the RTL's contract)."""
    enc = encode(target - xs, cfg.group, cfg.e_max, cfg.tau)
    return enc, xs + enc.decode()


@dataclass
class LinearStep:
    """What a ``LinearState.step`` coded: the encoded difference of each row chunk (``parts``,
    ``Coding.parts``) and their counts (``Coding.count`` summed)."""
    parts: list
    counts: object


class LinearState:
    """One layer's integer state: INT8 weights ``w_q`` ``(K, M)``, the reconstruction ``xs``
    (``Xs_int``, int64 ``(N, K)``, ``None`` before the first step) and the accumulator
    ``y_int`` (``Y_int``, int64 ``(N, M)``; held as float64 of exact integers, ``|Y_int| <
    2**53`` as ``Config.acc_bits <= 48``). ``name`` prefixes its errors. With ``encoding =
    "nibble"`` ``K`` must be a multiple of ``group`` (a ``ValueError`` otherwise)."""

    def __init__(self, w_q, cfg, name: str = "linear"):
        self.name, self.cfg = name, cfg
        self.coding = ENCODINGS[cfg.encoding]
        self.w_q = w_q
        k = w_q.shape[0]
        if k % cfg.group and cfg.encoding is Encoding.NIBBLE:
            raise ValueError(f"{name}: K={k} is not a multiple of group={cfg.group}")
        # Every operand of the float BLAS products in both float types (exact integers).
        self._w = {dt: w_q.astype(dt) for dt in (np.float32, np.float64)}
        self.xs = self._y = None
        self.last: LinearStep | None = None     # the last step's code and counts
        # The check's vectors are fixed per layer name, so a run is reproducible.
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        self._r = rng.choice(np.array([-1, 1], np.int64), size=(w_q.shape[1], CHECK_VECTORS))
        self._wr = w_q @ self._r
        self._rf = {dt: self._r.astype(dt) for dt in (np.float32, np.float64)}
        self._wrf = {dt: self._wr.astype(dt) for dt in (np.float32, np.float64)}
        # |target - Xs_int| <= target_max + state_max: int32 where that fits (half the traffic).
        self._diff_dtype = np.int32 if cfg.target_max + cfg.state_max < 2 ** 31 else np.int64
        self._w_absmax = _amax(w_q)

    @property
    def y_int(self):
        """``Y_int`` as int64 (a copy); assign to replace it."""
        return None if self._y is None else self._y.astype(np.int64)

    @y_int.setter
    def y_int(self, value):
        self._y = np.asarray(value, dtype=np.int64).astype(np.float64)

    @property
    def accumulator(self):
        """``Y_int`` as the float64 array the layer holds (exact integers; not a copy)."""
        return self._y

    def state_peak(self):
        """``max|Xs_int[n, :]|`` per row (int64 ``(N,)``)."""
        return np.maximum(self.xs.max(axis=1), -self.xs.min(axis=1))

    def refine(self, k) -> None:
        """Halve each row's lattice ``k[n]`` times (int64 ``(N,)``), exactly: ``Xs_int[n] <<=
        k``, ``Y_int[n] <<= k`` (the host divides its ``d`` by ``2**k``)."""
        self.xs = self.xs << k[:, None]
        self._y *= np.ldexp(1.0, k)[:, None]     # exact: |Y_int| stays within acc_bound

    def step(self, target, key: bool) -> LinearStep:
        """One step to the integer targets ``target`` (int64 ``(N, K)``, within
        ``+-target_max``); a key step starts from zero state. Updates ``xs`` (a new array:
        callers may keep the old) and ``y_int``, checks the invariants; returns the step's
        code (also ``last``)."""
        cfg = self.cfg
        if key:
            self.xs = np.zeros(target.shape, dtype=np.int64)
            self._y = np.zeros((target.shape[0], self.w_q.shape[1]), dtype=np.float64)
        n, m = target.shape[0], self.w_q.shape[1]
        xs = np.empty(target.shape, np.int64)
        parts, counts = [], 0
        rows = max(1, CHUNK_ELEMENTS // max(target.shape[1], m))
        if self.coding.rows is not None:      # chunks of whole tiles (FMDQ: token_tile)
            t = getattr(cfg, self.coding.rows)
            rows = max(t, rows // t * t)
        for i in range(0, n, rows):
            c = slice(i, min(i + rows, n))
            enc = self._rows(target[c], c, xs[c])
            parts.append(enc)
            counts = counts + self.coding.count(enc, cfg)
        self.xs = xs
        self.last = LinearStep(parts, counts)
        return self.last

    def _rows(self, target, c, xs):
        """One step on the rows ``c``: fills the new state ``xs`` (a view of the step's),
        updates ``Y_int[c]``, checks the invariants; returns the code."""
        cfg = self.cfg
        diff = np.subtract(target, self.xs[c], dtype=self._diff_dtype, casting="unsafe")
        enc, dec = self.coding.encode(diff, cfg)
        y_int = self._y[c]
        # Every partial sum of a row is at most its L1 norm times max|W|: float32 BLAS (twice
        # the speed) is exact for most steps' small differences, float64 for the rest.
        l1 = int(np.abs(dec).sum(axis=-1, dtype=np.int64).max(initial=0))
        dt = np.float32 if l1 * self._w_absmax < 2 ** 24 else exact_dtype(
            dec, self.w_q, _amax(dec), 127)
        y_int += dec.astype(dt) @ self._w[dt]                          # exact integers
        np.add(self.xs[c], dec, out=xs)
        self._check(y_int, xs, diff - dec, enc)
        return enc

    def _check(self, y_int, xs, err, enc):
        """The invariants on a block of rows; ``err = target - Xs_int`` (the step's difference
        minus its decoded code)."""
        cfg = self.cfg
        if _amax(xs) > cfg.state_max:
            raise InvariantError(f"{self.name}: state exceeds state_max={cfg.state_max}")
        try:                                  # Freivalds' products, exact in float BLAS
            dl = exact_dtype(y_int, self._r, cfg.acc_bound, 1)
            dr = exact_dtype(xs, self._wr, cfg.state_max, 127 * self._r.shape[0])
            lhs = np.asarray(y_int, dl) @ self._rf[dl]
            rhs = xs.astype(dr) @ self._wrf[dr]
        except OverflowError:                 # bounds beyond float64: integer products
            lhs, rhs = y_int.astype(np.int64) @ self._r, xs @ self._wr
        if not np.array_equal(lhs, rhs):
            raise InvariantError(f"{self.name}: Y_int != W_q^T . Xs_int")
        lossy = self.coding.lossy(enc, cfg)   # clipped groups may miss the target by more
        if lossy is not None:
            err = np.where(lossy, 0, err)
        if _amax(err) > cfg.tau:
            raise InvariantError(f"{self.name}: closed-loop error exceeds tau={cfg.tau}")


def _amax(a) -> int:
    """``max|a|`` of an integer array (0 if empty), without a temporary."""
    return max(int(a.max(initial=0)), -int(a.min(initial=0)))
