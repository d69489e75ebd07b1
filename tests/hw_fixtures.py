"""Shared helpers of the hardware tests: the golden step, test data generators, and the
Amaranth-simulator step driver (re-exported from ``sim.pysim_driver``)."""

import numpy as np

from golden.difflinear import encode_step
from golden.quant import exact_matmul
from sim.pysim_driver import run_layer_pysim

__all__ = ["golden_step", "run_layer_pysim", "random_weights", "drifting_targets"]


def golden_step(cfg, w_q, target, xs, y, key):
    """Golden one step: returns (enc, xs_new, y_new) (``xs``/``y`` ignored on key steps)."""
    if key:
        xs = np.zeros_like(target)
        y = np.zeros((target.shape[0], w_q.shape[1]), dtype=np.int64)
    enc, xs_new = encode_step(target, xs, cfg)
    return enc, xs_new, y + exact_matmul(enc.decode(), w_q)


def random_weights(rng, k, m):
    return rng.integers(-127, 128, size=(k, m), dtype=np.int64)


def drifting_targets(rng, cfg, n, k, steps, scale=60.0, drift=0.03):
    """Integer targets of a slowly drifting activation: a key row then small random changes,
    clipped to ``target_max`` (a stand-in with DiT-like element mixes at tau = 0)."""
    x = rng.standard_normal((n, k)) * scale
    out = []
    for _ in range(steps):
        out.append(np.clip(np.rint(x), -cfg.target_max, cfg.target_max).astype(np.int64))
        x = x + rng.standard_normal((n, k)) * scale * drift
    return out
