"""Differential linear layers (spec section 3): ``Y_t = Y_{t-1} + W_q^T . decode(enc(D))``.

One ``DiffLinear`` holds one layer's integer state across sampling steps: the per-token lattice
``d`` (fixed at key steps), the reconstruction ``Xs_int`` and the output accumulator ``Y_int``.
After every step the invariant ``Y_int == W_q^T . Xs_int`` is checked, as are the state bound
and the closed-loop tolerance ``|X_int - Xs_int| <= tau`` on every group that was not clipped; a
violation raises ``InvariantError``. The invariant is checked in exact integers by Freivalds'
test: ``Y_int . r == Xs_int . (W_q . r)`` for ``CHECK_VECTORS`` fixed random sign vectors ``r``
(a wrong row escapes each vector with probability at most 1/2; a single wrong element never
escapes), which costs ``O(N (K + M))`` a step instead of a second ``O(N K M)`` product.

With ``Config.encoding = "fmdq"`` the difference is coded by ``golden.fmdq`` (spec 7.2) instead
of v1's encoder: rows run in chunks of whole token tiles, the same invariants hold (sub-channels
whose error may exceed ``tau`` are left out of the tolerance check, as clipped groups are), and
the step's counts are ``golden.fmdq_stats``'. ``ENCODINGS`` holds each encoding's parts.

Lattice refinement (``Config.refine_max`` > 0): before a delta step, a token whose values have
shrunk since its key step gets a finer lattice, by powers of two, exactly: ``d[n] /= 2**k``,
``Xs_int[n] <<= k``, ``Y_int[n] <<= k`` (``lattice_refinements`` gives ``k``), so the invariant
holds and the float output is unchanged, while the new targets land on the finer lattice. The
lattice never coarsens between key steps (that would not be exact).
"""

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dstar.config import Encoding

from .encoder import Encoded, encode, encode_narrow
from .fmdq import FmdqEncoded, fmdq_encode
from .fmdq_stats import FmdqStats, count_fmdq
from .host_side import LATTICES, LinearSide, key_lattice, linear_output
from .quant import (
    amax_rows,
    exact_dtype,
)
from .stats import OpStats, count_encoded

__all__ = ["DiffLinear", "InvariantError", "StepResult", "encode_step", "lattice_refinements",
           "CHECK_VECTORS", "ENCODINGS", "Coding", "LATTICES", "key_lattice",
           "linear_output"]

#: Random sign vectors of the invariant check.
CHECK_VECTORS = 4
#: Elements of the widest row block of a step (the rows run in chunks that stay in cache).
CHUNK_ELEMENTS = 1 << 16


class InvariantError(AssertionError):
    """The golden model broke one of its own invariants (a bug, never a user error)."""


def lattice_refinements(peak, refined, xs_peak, cfg) -> np.ndarray:
    """Halvings ``k`` (int64 ``(N,)``) of each token's lattice before a delta step: while the
    token's ``peak`` (``max|X[n]| / d[n]``, float, on its current lattice) times ``2**k`` is at
    most ``cfg.refine_at * 127 * 2**cfg.lattice_bits``, its halvings since the key step
    (``refined + k``) stay within ``cfg.refine_max`` and the doubled state peak
    (``xs_peak << (k + 1)``) within ``cfg.state_max``, ``k`` grows by one. All-zero rows
    (``peak == 0``) keep their lattice."""
    limit = cfg.refine_at * (127 << cfg.lattice_bits)
    peak = np.asarray(peak, np.float64)
    k = np.zeros(peak.shape, np.int64)
    for _ in range(cfg.refine_max):
        more = ((peak * 2.0 ** k <= limit) & (peak > 0) & (refined + k < cfg.refine_max)
                & ((xs_peak << (k + 1)) <= cfg.state_max))
        if not more.any():
            break
        k += more
    return k


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


class StepResult:
    """One step's output ``y`` (float64 ``(N, M)``), clipped target ``X_int`` ``(N, K)``, whether
    it was a key step, the counts of its encoded difference (``Coding.count``: v1's
    ``stats.count_encoded``, FMDQ's ``fmdq_stats.count_fmdq``) and that difference ``enc`` (an
    ``Encoded`` or ``FmdqEncoded``, joined from the layer's row chunks when first read);
    ``refine``: each token's lattice halvings before this step (int64 ``(N,)``, zeros on key
    steps and without refinement)."""

    def __init__(self, y, parts: list, target, key: bool, counts, refine=None):
        self.y, self.target, self.key, self.counts = y, target, key, counts
        self.refine = np.zeros(len(y), np.int64) if refine is None else refine
        self._parts = parts

    @functools.cached_property
    def enc(self) -> Encoded | FmdqEncoded:
        enc = type(self._parts[0]).concat(self._parts)
        enc.q = enc.q.astype(np.int64, copy=False)
        return enc


def encode_step(target, xs, cfg):
    """One encoder step on integer rows: returns ``(enc, xs_new)`` (the RTL's contract)."""
    enc = encode(target - xs, cfg.group, cfg.e_max, cfg.tau)
    return enc, xs + enc.decode()


class DiffLinear:
    """One differential linear layer ``y = x @ w.T + b`` with DSTAR's integer state.

    ``w`` is ``(M, K)`` float (PyTorch layout); ``cfg`` a ``dstar.config.Config``."""

    def __init__(self, w, b, cfg, name: str = "linear"):
        self.name, self.cfg = name, cfg
        self.coding = ENCODINGS[cfg.encoding]
        self.side = LinearSide(w, b, cfg)          # w_q, s_w, bias, the lattice d
        self.w_q, self.s_w = self.side.w_q, self.side.s_w
        # Every operand of the float BLAS products in both float types (exact integers).
        self._w = {dt: self.w_q.astype(dt) for dt in (np.float32, np.float64)}
        k = self.w_q.shape[0]
        if k % cfg.group and cfg.encoding is Encoding.NIBBLE:
            raise ValueError(f"{name}: K={k} is not a multiple of group={cfg.group}")
        self.xs = self._y = None
        self.refined = None                   # halvings of each token's lattice since its key
        self.steps_done = 0
        # The check's vectors are fixed per layer name, so a run is reproducible.
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        self._r = rng.choice(np.array([-1, 1], np.int64), size=(self.w_q.shape[1], CHECK_VECTORS))
        self._wr = self.w_q @ self._r
        self._rf = {dt: self._r.astype(dt) for dt in (np.float32, np.float64)}
        # |target - Xs_int| <= target_max + state_max: int32 where that fits (half the traffic).
        self._diff_dtype = np.int32 if cfg.target_max + cfg.state_max < 2 ** 31 else np.int64
        self._wrf = {dt: self._wr.astype(dt) for dt in (np.float32, np.float64)}
        self._w_absmax = max(int(self.w_q.max(initial=0)), -int(self.w_q.min(initial=0)))

    @property
    def bias(self):
        """The bias (float64 ``(M,)``) or None."""
        return self.side.bias

    @property
    def d(self):
        """The rows' lattice (float64 ``(N,)``; ``None`` before the first step)."""
        return self.side.d

    @d.setter
    def d(self, value):
        self.side.d = value

    @property
    def y_int(self):
        """The accumulator ``Y_int`` ``(N, M)`` as int64 (a copy: the layer holds it as float64
        of exact integers, ``|Y_int| < 2**53`` as ``Config.acc_bits <= 48``); assign to replace
        it."""
        return None if self._y is None else self._y.astype(np.int64)

    @y_int.setter
    def y_int(self, value):
        self._y = np.asarray(value, dtype=np.int64).astype(np.float64)

    def is_key(self, step: int) -> bool:
        return self.side.is_key(step)

    def __call__(self, x, step: int, dtype=np.float64) -> StepResult:
        """One step on the rows ``x`` ``(N, K)``; the result's ``y`` is ``dtype`` (computed in
        float64)."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.w_q.shape[0]:
            raise ValueError(f"{self.name}: input must be (N, {self.w_q.shape[0]}), "
                             f"got {x.shape}")
        key = self.is_key(step)
        if not key and x.shape[0] != self.xs.shape[0]:
            raise ValueError(f"{self.name}: {x.shape[0]} rows, but the state holds "
                             f"{self.xs.shape[0]}")
        cfg = self.cfg
        refine = None
        if key:
            self.side.fix_lattice(x)
            self.xs = np.zeros(x.shape, dtype=np.int64)
            self._y = np.zeros((x.shape[0], self.w_q.shape[1]), dtype=np.float64)
            self.refined = np.zeros(x.shape[0], np.int64)
        elif cfg.refine_max:
            refine = self._refine(x)
        n, m = x.shape[0], self.w_q.shape[1]
        target = np.empty(x.shape, np.int64)
        xs = np.empty(x.shape, np.int64)       # a new state array: callers may keep the old
        y = np.empty((n, m), dtype)
        parts, counts = [], 0
        rows = max(1, CHUNK_ELEMENTS // max(x.shape[1], m))
        if self.coding.rows is not None:      # chunks of whole tiles (FMDQ: token_tile)
            t = getattr(cfg, self.coding.rows)
            rows = max(t, rows // t * t)
        for i in range(0, n, rows):
            c = slice(i, min(i + rows, n))
            enc = self._rows(x[c], c, target[c], xs[c], y[c])
            parts.append(enc)
            counts = counts + self.coding.count(enc, cfg)
        self.xs = xs
        self.steps_done += 1
        return StepResult(y=y, parts=parts, target=target, key=key, counts=counts, refine=refine)

    def _refine(self, x) -> np.ndarray:
        """Refine the lattice of the tokens ``lattice_refinements`` picks (module docstring);
        returns the halvings."""
        xs_peak = np.maximum(self.xs.max(axis=1), -self.xs.min(axis=1))
        k = lattice_refinements(amax_rows(x) / self.d, self.refined, xs_peak, self.cfg)
        if k.any():
            scale = np.ldexp(1.0, k)              # exact powers of two
            self.d = self.d / scale
            self.xs = self.xs << k[:, None]
            self._y *= scale[:, None]             # exact: |Y_int| stays within acc_bound
            self.refined = self.refined + k
        return k

    def _rows(self, x, c, target, xs, y):
        """One step on the rows ``c``: fills ``target``, the new state ``xs`` and ``y`` (views
        of the step's arrays), updates ``Y_int[c]``, checks the invariants; returns the code."""
        cfg = self.cfg
        np.copyto(target, self.side.targets(x, c), casting="unsafe")
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
        self.side.output(y_int, y, c)
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
