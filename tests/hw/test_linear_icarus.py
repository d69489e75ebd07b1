"""cocotb on Icarus: the generated ``dstar_linear`` Verilog runs real and adversarial layer steps
bit-exact against the golden model, with cycles equal to the cycle model's.

The cases (weights, targets, expected Y/state/counters) are computed here and handed to
``sim/tb_linear.py`` in an ``.npz``; the testbench reads every width from ``params.json``.
"""


import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.difflinear import DiffLinear
from dstar.golden.quant import quantize_weights
from dstar.hw.generate import TOP_NAME, generate
from dstar.paths import build_dir
from dstar.sim.case_files import save_cases
from dstar.sim.cycle_model import predict
from tests.hw.fixtures import (
    drifting_targets,
    golden_step,
    need_iverilog,
    random_weights,
    run_icarus,
)

BUILD = build_dir("cocotb")


def _case(cfg, w_q, targets, keys, state0=None):
    n, k = targets[0].shape
    m = w_q.shape[1]
    xs = state0 if state0 is not None else np.zeros((n, k), dtype=np.int64)
    y = np.zeros((n, m), dtype=np.int64)
    ys, xss, counters = [], [], []
    for target, key in zip(targets, keys, strict=True):
        enc, xs, y = golden_step(cfg, w_q, target, xs, y, key)
        ys.append(y)
        xss.append(xs)
        counters.append(list(predict(cfg, enc, k, m).counters().values()))
    case = {"shape": np.array([n, k, m]), "w_q": w_q, "targets": np.stack(targets),
            "keys": np.array(keys, dtype=np.int64), "y": np.stack(ys), "xs": np.stack(xss),
            "counters": np.array(counters, dtype=np.int64)}
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
    case = _case(cfg, w_q, targets, [True, False, False])
    assert np.array_equal(case["y"][-1], layer.y_int)            # same as DiffLinear's Y_int
    assert np.array_equal(case["xs"][-1], layer.xs)
    return case


def synthetic_cases(cfg):
    rng = np.random.default_rng(21)
    cases = {}
    tg = drifting_targets(rng, cfg, 12, 64, 3)
    cases["drift"] = _case(cfg, random_weights(rng, 64, 16), tg, [True, False, False])
    tmax = cfg.target_max
    key = rng.choice([-tmax, tmax, 127, -128], size=(6, 64))
    key[1] = np.where(np.arange(64) % 2, 127, -128)
    key[2] = 0
    cases["extreme"] = _case(cfg, random_weights(rng, 64, 8), [key, key, -key],
                             [True, False, False])
    tg = drifting_targets(rng, cfg, 1, 128, 2, scale=3000.0, drift=0.2)
    cases["one_token"] = _case(cfg, random_weights(rng, 128, 8), tg, [True, False])
    base = rng.integers(-50, 50, size=(16, 32))
    nxt = base.copy()
    nxt[:8] += rng.choice([-120, 120], size=(8, 32))
    nxt[8:, ::cfg.group] += 100
    cases["uneven_one_tile"] = _case(cfg, random_weights(rng, 32, 8), [base, nxt],
                                     [True, False])
    return cases


def run_cocotb(cfg, name, cases):
    need_iverilog()
    out = BUILD / name
    generate(cfg, out)
    save_cases(out / "cases.npz", cases)
    run_icarus(out, TOP_NAME, "dstar.sim.tb_linear", {"DSTAR_PARAMS": out / "params.json",
                                                "DSTAR_CASES": out / "cases.npz"})


def test_compact_real_and_adversarial():
    cfg = preset("tiny")
    cases = synthetic_cases(cfg)
    cases["real_fc1"] = real_case(cfg)
    run_cocotb(cfg, "tiny-compact", cases)


def test_lockstep_adversarial():
    cfg = preset("tiny").replace(packing="lockstep")
    cases = synthetic_cases(cfg)
    run_cocotb(cfg, "tiny-lockstep", {k: cases[k] for k in ("extreme", "uneven_one_tile")})


def test_lane_ram_adversarial():
    """The FPGA weight store (per-lane LUT-RAM copies of the weight rows) in Verilog."""
    cfg = preset("tiny").replace(weight_store="lane_ram")
    cases = synthetic_cases(cfg)
    run_cocotb(cfg, "tiny-lane-ram", {k: cases[k] for k in ("drift", "extreme")})


@pytest.mark.slow
def test_default_whole_fc1():
    """The whole fc1 of block 0 (256 tokens x 128 -> 512) on the default preset's Verilog, over
    the key step and two delta steps of the default 50-step run (about 162k cycles, 40 CPU
    minutes on Icarus)."""
    cfg = preset("default")
    run_cocotb(cfg, "default-compact", {"real_fc1_whole": real_case(cfg, steps=cfg.steps,
                                                                      whole=True)})
