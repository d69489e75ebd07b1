"""Differential linear layers (spec section 3): ``Y_t = Y_{t-1} + W_q^T . decode(enc(D))``.

One ``DiffLinear`` holds one layer's integer state across sampling steps: the per-token lattice
``d`` (fixed at key steps), the reconstruction ``Xs_int`` and the output accumulator ``Y_int``.
After every step the invariant ``Y_int == W_q^T . Xs_int`` is checked, as are the state bound
and the closed-loop tolerance ``|X_int - Xs_int| <= tau`` on every group that was not clipped; a
violation raises ``InvariantError``. The invariant is checked in exact integers by Freivalds'
test: ``Y_int . r == Xs_int . (W_q . r)`` for ``CHECK_VECTORS`` fixed random sign vectors ``r``
(a wrong row escapes each vector with probability at most 1/2; a single wrong element never
escapes), which costs ``O(N (K + M))`` a step instead of a second ``O(N K M)`` product.
"""

import zlib
from dataclasses import dataclass

import numpy as np

from .encoder import Encoded, encode
from .quant import exact_matmul_float, quantize_weights, to_lattice, token_lattice

__all__ = ["DiffLinear", "InvariantError", "StepResult", "encode_step", "CHECK_VECTORS"]

#: Random sign vectors of the invariant check.
CHECK_VECTORS = 4


class InvariantError(AssertionError):
    """The golden model broke one of its own invariants (a bug, never a user error)."""


@dataclass
class StepResult:
    y: np.ndarray          # float output, (N, M)
    enc: Encoded           # the encoded difference of this step
    target: np.ndarray     # clipped X_int, (N, K)
    key: bool


def encode_step(target, xs, cfg):
    """One encoder step on integer rows: returns ``(enc, xs_new)`` (the RTL's contract)."""
    enc = encode(target - xs, cfg.group, cfg.e_max, cfg.tau)
    return enc, xs + enc.decode()


class DiffLinear:
    """One differential linear layer ``y = x @ w.T + b`` with DSTAR's integer state.

    ``w`` is ``(M, K)`` float (PyTorch layout); ``cfg`` a ``dstar.config.Config``."""

    def __init__(self, w, b, cfg, name: str = "linear"):
        self.name, self.cfg = name, cfg
        self.w_q, self.s_w = quantize_weights(w)
        self._w_f64 = self.w_q.astype(np.float64)       # exact: |w_q| <= 127
        self.bias = None if b is None else np.asarray(b, dtype=np.float64)
        k = self.w_q.shape[0]
        if k % cfg.group:
            raise ValueError(f"{name}: K={k} is not a multiple of group={cfg.group}")
        self.d = self.xs = self.y_int = None
        self.steps_done = 0
        # The check's vectors are fixed per layer name, so a run is reproducible.
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        self._r = rng.choice(np.array([-1, 1], np.int64), size=(self.w_q.shape[1], CHECK_VECTORS))
        self._wr = self.w_q @ self._r

    def is_key(self, step: int) -> bool:
        r = self.cfg.refresh_linear
        return self.xs is None or step == 0 or (r > 0 and step % r == 0)

    def __call__(self, x, step: int) -> StepResult:
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.w_q.shape[0]:
            raise ValueError(f"{self.name}: input must be (N, {self.w_q.shape[0]}), "
                             f"got {x.shape}")
        key = self.is_key(step)
        if not key and x.shape[0] != self.xs.shape[0]:
            raise ValueError(f"{self.name}: {x.shape[0]} rows, but the state holds "
                             f"{self.xs.shape[0]}")
        cfg = self.cfg
        if key:
            self.d = token_lattice(x, cfg.lattice_bits)
            self.xs = np.zeros(x.shape, dtype=np.int64)
            self.y_int = np.zeros((x.shape[0], self.w_q.shape[1]), dtype=np.int64)
        target = to_lattice(x, self.d, cfg.target_max)
        diff = target - self.xs
        enc = encode(diff, cfg.group, cfg.e_max, tau=cfg.tau)
        dec = enc.decode()
        prod = exact_matmul_float(dec, self._w_f64, _amax(dec), 127)
        np.add(self.y_int, prod, out=self.y_int, casting="unsafe")     # exact integers
        self.xs = self.xs + dec
        self._check(diff - dec, enc)
        self.steps_done += 1
        y = np.multiply(self.y_int, self.d[:, None], dtype=np.float64)
        y *= self.s_w[None, :]
        if self.bias is not None:
            y += self.bias
        return StepResult(y=y, enc=enc, target=target, key=key)

    def _check(self, err, enc):
        """The invariants after a step; ``err = target - Xs_int`` (the step's difference minus
        its decoded code)."""
        cfg = self.cfg
        if _amax(self.xs) > cfg.state_max:
            raise InvariantError(f"{self.name}: state exceeds state_max={cfg.state_max}")
        try:                                  # Freivalds' products, exact in float BLAS
            lhs = exact_matmul_float(self.y_int, self._r, cfg.acc_bound, 1)
            rhs = exact_matmul_float(self.xs, self._wr, cfg.state_max, 127 * self._r.shape[0])
        except OverflowError:                 # bounds beyond float64: integer products
            lhs, rhs = self.y_int @ self._r, self.xs @ self._wr
        if not np.array_equal(lhs, rhs):
            raise InvariantError(f"{self.name}: Y_int != W_q^T . Xs_int")
        if enc.clipped.any():                 # clipped groups may miss the target by more
            err = err.copy()
            err.reshape(enc.clipped.shape + (cfg.group,))[enc.clipped] = 0
        if _amax(err) > cfg.tau:
            raise InvariantError(f"{self.name}: closed-loop error exceeds tau={cfg.tau}")


def _amax(a) -> int:
    """``max|a|`` of an integer array (0 if empty), without a temporary."""
    return max(int(a.max(initial=0)), -int(a.min(initial=0)))
