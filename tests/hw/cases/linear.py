"""Cases of the differential linear layer: weights and target steps (drifting, adversarial,
uneven, a real fc1 of the bundled DiT) and, per step, the golden state, ``Y_int`` and the cycle
model's report; the ``.npz`` arrays of ``sim/tb_linear.py``."""

import numpy as np

from dstar.golden.difflinear import DiffLinear
from dstar.golden.quant import quantize_weights
from dstar.sim.cycle_model import predict
from tests.hw.fixtures import drifting_targets, golden_step, random_weights


def expected_steps(cfg, w_q, steps, state=None):
    """The golden layer over ``steps`` = [(target, key)] from ``state`` (zero if None): per step
    ``(state, y, report)``, the report being ``sim.cycle_model.predict``'s."""
    k, m = w_q.shape
    n = steps[0][0].shape[0]
    xs = state if state is not None else np.zeros((n, k), dtype=np.int64)
    y = np.zeros((n, m), dtype=np.int64)
    out = []
    for target, key in steps:
        enc, xs, y = golden_step(cfg, w_q, target, xs, y, key)
        out.append((xs, y, predict(cfg, enc, k, m)))
    return out


def extreme_key(rng, cfg, n, k):
    """Saturated key rows, row 1 all HIGH at shift 0, row 2 all ZERO even on a key step."""
    tmax = cfg.target_max
    key = rng.choice([-tmax, tmax, 127, -128], size=(n, k))
    key[1] = np.where(np.arange(k) % 2, 127, -128)            # all HIGH at shift 0
    key[2] = 0                                                 # all ZERO even on a key step
    return key


def uneven_targets(rng, cfg, n, k):
    """A key step and a delta step with half the tokens idle, half all-HIGH, and within tokens
    one channel per group busy."""
    base = rng.integers(-50, 50, size=(n, k))
    nxt = base.copy()
    nxt[: n // 2] += rng.choice([-120, 120], size=(n // 2, k))       # all HIGH
    nxt[n // 2:, ::cfg.group] += 100                                 # one busy lane
    return base, nxt


def icarus_case(cfg, w_q, targets, keys, state0=None):
    """The arrays of one case of ``sim/tb_linear.py``: inputs, golden Y and state, counters."""
    n, k = targets[0].shape
    m = w_q.shape[1]
    exp = expected_steps(cfg, w_q, list(zip(targets, keys, strict=True)), state0)
    case = {"shape": np.array([n, k, m]), "w_q": w_q, "targets": np.stack(targets),
            "keys": np.array(keys, dtype=np.int64), "y": np.stack([y for _, y, _ in exp]),
            "xs": np.stack([xs for xs, _, _ in exp]),
            "counters": np.array([list(rep.counters().values()) for _, _, rep in exp],
                                 dtype=np.int64)}
    if state0 is not None:
        case["state0"] = state0
    return case


def real_case(cfg, *, steps=20, whole=False):
    """The MLP's first linear of DiT block 0 over the key step and two delta steps of a
    ``steps``-step DDIM run: the whole layer (256 tokens, K = 128, 512 outputs) with ``whole``,
    else ``max_tokens`` tokens and the first four column blocks."""
    from dstar.sim.traces import linear_inputs

    xs, w, b = linear_inputs("blocks.0.mlp.fc1", steps=steps, take=3)
    if whole:
        n, m = xs.shape[1], w.shape[0]
        if n > cfg.max_tokens or m > cfg.max_m or w.shape[1] > cfg.max_k:
            raise ValueError(f"fc1 ({n} tokens, K={w.shape[1]}, M={m}) does not fit "
                             f"max_tokens={cfg.max_tokens}, max_k={cfg.max_k}, max_m={cfg.max_m}")
    else:
        n, m = cfg.max_tokens, 4 * cfg.m_tile * cfg.n_arrays
    layer = DiffLinear(w[:m], b[:m], cfg)
    w_q, _ = quantize_weights(w[:m])
    targets = [layer(x[:n], s).target for s, x in enumerate(xs[:3])]
    case = icarus_case(cfg, w_q, targets, [True, False, False])
    assert np.array_equal(case["y"][-1], layer.y_int)            # same as DiffLinear's Y_int
    assert np.array_equal(case["xs"][-1], layer.xs)
    return case


def synthetic_cases(cfg):
    """The Icarus tier's synthetic cases: drifting, extreme, one token, uneven in one tile."""
    rng = np.random.default_rng(21)
    cases = {}
    tg = drifting_targets(rng, cfg, 12, 64, 3)
    cases["drift"] = icarus_case(cfg, random_weights(rng, 64, 16), tg, [True, False, False])
    key = extreme_key(rng, cfg, 6, 64)
    cases["extreme"] = icarus_case(cfg, random_weights(rng, 64, 8), [key, key, -key],
                                   [True, False, False])
    tg = drifting_targets(rng, cfg, 1, 128, 2, scale=3000.0, drift=0.2)
    cases["one_token"] = icarus_case(cfg, random_weights(rng, 128, 8), tg, [True, False])
    base, nxt = uneven_targets(rng, cfg, 16, 32)
    cases["uneven_one_tile"] = icarus_case(cfg, random_weights(rng, 32, 8), [base, nxt],
                                           [True, False])
    return cases


def dense_case(cfg, w_q, xs):
    """One case of a dense INT8 top (``datapath`` ``dense`` or ``int8``): runs of the INT8
    activation matrices ``xs`` (as targets; no state), golden ``Y_int`` and the shape-only
    cycle model's counters (``dstar.sim.layer_cycles``)."""
    from dstar.golden.quant import exact_matmul
    from dstar.sim.layer_cycles import SHAPE_MODELS

    k, m = w_q.shape
    reps = [SHAPE_MODELS[cfg.datapath](cfg, x.shape[0], k, m) for x in xs]
    return {"shape": np.array([xs[0].shape[0], k, m]), "w_q": w_q, "targets": np.stack(xs),
            "keys": np.ones(len(xs), dtype=np.int64),
            "y": np.stack([exact_matmul(x, w_q) for x in xs]),
            "counters": np.array([list(r.counters().values()) for r in reps], dtype=np.int64)}


def dense_cases(cfg):
    """The Icarus tier's dense INT8 cases: INT8 extremes over partial tiles (two runs back to
    back), one token over four K tiles, and the bundled DiT's block-0 fc1 on the INT8 lattice."""
    from dstar.golden.quant import quantize_weights, to_lattice, token_lattice
    from dstar.sim.traces import linear_inputs

    rng = np.random.default_rng(25)
    w = rng.choice([-128, 127, -1, 0, 1], size=(48, 12))
    x = rng.choice([-128, 127, 0], size=(5, 48))
    x[0] = -128
    cases = {"extreme": dense_case(cfg, w, [x, rng.integers(-128, 128, size=(5, 48))]),
             "one_token": dense_case(cfg, rng.integers(-128, 128, size=(128, 8)),
                                     [rng.integers(-128, 128, size=(1, 128))])}
    xs, w, _ = linear_inputs("blocks.0.mlp.fc1", steps=20, take=1)
    w_q, _ = quantize_weights(w[:cfg.max_m])
    x = xs[0][:cfg.max_tokens]
    cases["real_fc1"] = dense_case(cfg, w_q, [np.clip(to_lattice(x, token_lattice(x)),
                                                      -127, 127)])
    return cases
