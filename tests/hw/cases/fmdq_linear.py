"""Cases of the FMDQ linear datapath (``dstar.hw.fmdq.linear.FmdqLinear``): weights, target
steps and, per step, the golden state and ``Y`` (``golden.fmdq_pe.linear_step``) and the cycle
model's counters (``sim.fmdq_cycles.linear_cycles``); the ``.npz`` arrays of
``sim/tb_fmdq_linear.py`` and the cases of ``tests/hw/test_fmdq_linear.py``."""

import numpy as np

from dstar.config import preset
from dstar.golden.fmdq_pe import linear_step
from dstar.sim.fmdq_cycles import linear_cycles
from dstar.sim.fmdq_linear_io import COUNTERS

#: A small configuration: T = 4, W = 8, 3 columns x 2 arrays, 3 tiles of 11 tokens.
SMALL = dict(encoding="fmdq", token_tile=4, sort_window=8, m_tile=3, n_arrays=2, max_k=48,
             max_m=12, max_tokens=11)


def small_config():
    return preset("tiny").replace(**SMALL)


def expected(cfg, w_q, targets, keys, state0=None) -> dict:
    """One case's arrays: inputs, per step golden ``y`` and ``xs`` and the model's counters."""
    n, k = targets[0].shape
    m = w_q.shape[1]
    n_mt = -(-m // (cfg.m_tile * cfg.n_arrays))
    xs = np.zeros((n, k), np.int64) if state0 is None else state0
    y = None
    ys, xss, counters = [], [], []
    for tg, key in zip(targets, keys, strict=True):
        st = linear_step(tg, xs, y, w_q, key=bool(key), token_tile=cfg.token_tile,
                         window=cfg.sort_window, e_max=cfg.e_max, tau=cfg.tau)
        xs, y = st.xs, st.y
        c = linear_cycles(st.enc, cfg.sort_window, n_mt)
        ys.append(y)
        xss.append(xs)
        counters.append([c[name] for name in COUNTERS])
    case = {"shape": np.array([n, k, m]), "w_q": np.asarray(w_q, np.int64),
            "targets": np.stack(targets), "keys": np.array(keys, np.int64),
            "y": np.stack(ys), "xs": np.stack(xss), "counters": np.array(counters, np.int64)}
    if state0 is not None:
        case["state0"] = state0
    return case


def random_case(cfg, seed=1):
    """Two steps (key, delta) of sparse random targets: K = 20 (not a multiple of the window),
    11 tokens (a short last tile), 9 columns (a partial second column block)."""
    rng = np.random.default_rng(seed)
    n, k, m = 11, 20, 9
    w = rng.integers(-127, 128, size=(k, m))
    t0 = rng.integers(-3000, 3000, size=(n, k)) * (rng.random((n, k)) < 0.6)
    t1 = np.clip(t0 + rng.integers(-50, 50, size=(n, k)), -cfg.target_max, cfg.target_max)
    return expected(cfg, w, [t0, t1], [1, 0])


def adversarial_case(cfg, seed=2):
    """A key step with an all-zero tile, every width 0/2/4/6/8 at shift 0, the largest shift
    (``e_max``) and saturated sub-channels (beyond INT8 at ``e_max``), extreme weights; then a
    delta step flipping the signs (differences up to twice the target range), and a delta step
    that repeats it (the small residuals only, whole windows empty)."""
    rng = np.random.default_rng(seed)
    n, k, m = 11, 20, 12
    tmax, e = cfg.target_max, cfg.e_max
    t = np.zeros((n, k), np.int64)                            # rows 0..3: an all-zero tile
    for c, lim in enumerate((0, 1, 7, 31, 127)):              # widths 0, 2, 4, 6, 8 at p = 0
        t[4:8, c] = rng.integers(-lim - 1, lim + 1, size=4)
        t[4, c] = -lim - 1 if lim else 0
    t[4:8, 5] = [127 << e, -(128 << e), 5 << e, 0]            # shift e_max, width 8
    t[4:8, 6] = [tmax, -tmax, 3, -7]                          # saturated at e_max
    t[4:8, 8:12] = rng.integers(-(1 << 13), 1 << 13, size=(4, 4))
    t[8:11] = rng.integers(-2, 2, size=(3, k))                # a short tile of 2-bit codes
    t[8:11, 17] = [tmax, 1, -tmax]
    w = np.where(rng.random((k, m)) < 0.5, 127, -127)
    w[0] = -128
    w[:, 0] = -128
    flip = -t
    return expected(cfg, w, [t, flip, flip], [1, 0, 0])


def zero_case(cfg, seed=3):
    """A lossless key step, then the same targets again: every difference is 0, so each tile
    issues only its first window's empty group (which adds nothing)."""
    rng = np.random.default_rng(seed)
    n, k, m = 6, 17, 6
    t = rng.integers(-127, 128, size=(n, k))
    w = rng.integers(-128, 128, size=(k, m))
    return expected(cfg, w, [t, t], [1, 0])


def real_case(cfg, *, n=None, m=None, steps=20, layer="blocks.0.mlp.fc1"):
    """A real layer of the bundled DiT: the key step and a delta step of a ``steps``-step run,
    targets from ``golden.difflinear.DiffLinear`` with ``cfg`` (FMDQ encoding), ``n`` tokens
    (default ``max_tokens``) and ``m`` columns (default two column blocks); the golden twin's
    ``Y`` is checked against ``DiffLinear``'s ``Y_int``."""
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.quant import quantize_weights
    from dstar.sim.traces import linear_inputs

    xs, w, b = linear_inputs(layer, steps=steps, take=2)
    n = n or cfg.max_tokens
    m = m or 2 * cfg.m_tile * cfg.n_arrays
    lin = DiffLinear(w[:m], b[:m], cfg)
    targets = [lin(x[:n], s).target for s, x in enumerate(xs[:2])]
    w_q, _ = quantize_weights(w[:m])
    case = expected(cfg, w_q, targets, [1, 0])
    assert np.array_equal(case["y"][-1], lin.y_int)
    assert np.array_equal(case["xs"][-1], lin.xs)
    return case
