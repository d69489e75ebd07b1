"""A short run of every integer path of the golden model, pinned to the last bit.

The digests were recorded with the straightforward implementation (before the vectorized and
float32 fast paths) on deterministic float64 inputs, so any change of an integer result (a
lattice value, a code, a shift, an accumulator, an attention output) fails here. Regenerate them
only for an intended change of the integer contract: run this file with ``DSTAR_PRINT_PINS=1``
and ``-s`` and paste the printed digests."""

import hashlib
import os

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.attention import AttentionReuse
from dstar.golden.hooks import DStarLinears, W8A8Linears

STEPS = 6
#: The operation counters pinned (the counters that existed when the digests were taken).
PINNED_COUNTS = ("elements", "zero", "low", "high", "passes", "lockstep_passes", "dense_passes",
                 "groups", "zero_groups", "clipped_groups", "saturated_groups")


def _inputs(seed):
    """A drifting sequence of activations for two linear layers and one attention layer."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 128)) * 2.0
    w1, b1 = rng.standard_normal((512, 128)) * 0.1, rng.standard_normal(512) * 0.1
    w2 = rng.standard_normal((128, 512)) * 0.05
    qkv = rng.standard_normal((3, 2, 4, 64, 32))
    out = []
    for _ in range(STEPS):
        out.append((x.copy(), qkv.copy()))
        x = x + rng.standard_normal(x.shape) * 0.05
        x[rng.integers(0, 64), rng.integers(0, 128)] += 30.0          # an outlier jump
        qkv = qkv + rng.standard_normal(qkv.shape) * 0.03
    return (w1, b1, w2), out


def _digest(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _run(cfg):
    (w1, b1, w2), seq = _inputs(7)
    lin, w8 = DStarLinears(cfg), W8A8Linears()
    attn = AttentionReuse(cfg, measure=True)
    ints, floats = [], []
    for step, (x, (q, k, v)) in enumerate(seq):
        h = lin("blocks.0.mlp.fc1", x, w1, b1, step)
        floats.append(h)
        floats.append(lin("blocks.0.mlp.fc2", np.maximum(h, 0), w2, None, step))
        floats.append(w8("blocks.0.mlp.fc1", x, w1, b1, step))
        floats.append(attn("blocks.0.attn", q, k, v, step))
    for layer in lin.layers.values():
        ints += [layer.y_int, layer.xs, layer.d]
    for st in attn.state.values():
        ints += [st["mask"], st["r"], st["s_v"]]
    total = lin.stats.total()
    counts = [np.array([total[f] for f in PINNED_COUNTS], dtype=np.int64)]
    errs = np.array([[r["err_vs_float"], r["err_dense_int"]] for r in attn.records])
    return {"ints": _digest(ints + counts), "floats": _digest(floats), "errs": errs}


PINS = {
    # preset: (integer state digest, float outputs digest); "default" re-pinned for the mask
    # rule's row-max blocks (golden/ATTENTION.md step 3)
    "default": ("a3e777d3d57503ed", "f0823a03063bb853"),
    "spec_lattice": ("519e019cb7259943", "5959bbb1b99fc923"),
}


@pytest.mark.parametrize("name", sorted(PINS))
def test_a_short_run_is_pinned(name):
    cfg = preset("default", encoding="nibble")
    if name == "spec_lattice":
        cfg = cfg.replace(lattice_bits=0, theta=0.9, tau=1, refresh_attn=3)
    got = _run(cfg)
    if os.environ.get("DSTAR_PRINT_PINS"):
        print(f'\n    "{name}": ("{got["ints"]}", "{got["floats"]}"),')
    assert (got["ints"], got["floats"]) == PINS[name]
    assert np.isfinite(got["errs"]).all() and (got["errs"] < 0.5).all()
