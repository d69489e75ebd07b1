"""cocotb on Icarus: the generated ``dstar_attention`` Verilog runs a real head of the bundled DiT
over a key step and two reuse steps, a ragged random case, a case of widely spread logits (the
probabilities' groups at different and clamped exponents, a last group of one key) and the edge
cases (theta = 1 with a zero-mass block, a one-block sequence, all-equal logits, extreme
logits), bit-exact against the golden model (outputs, residual cache, masks), with cycles equal
to ``dstar.sim.attention_cycles``.

The cases are computed here and handed to ``sim/tb_attention.py`` in an ``.npz``; the testbench
reads the memory geometry from ``params.json``'s ``attention`` section.
"""

import math

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.attention import theta_fixed
from dstar.golden.softmax import logit_multiplier
from dstar.hw.generate import ATTN_TOP_NAME, generate
from dstar.paths import build_dir
from dstar.sim.attention_cycles import predict
from dstar.sim.bench_attention import attention_inputs
from dstar.sim.case_files import save_cases
from tests.hw.fixtures import need_iverilog, run_icarus
from tests.hw.test_attention import _random_step, group_shifts, head_calls, int_calls

BUILD = build_dir("cocotb")


def _case(cfg, calls, exp):
    n = calls[0]["q"].shape[0]
    tq = calls[0]["theta_q"]
    return {
        "n": np.array(n), "slot": np.array(calls[0]["slot"]), "theta_q": np.array(tq),
        "refresh": np.array(calls[0]["refresh"]),
        **{k: np.stack([np.asarray(c[k], dtype=np.int64) for c in calls])
           for k in ("q", "k", "v", "m", "sh")},
        "keys": np.array([e["key"] for e in exp], dtype=np.int64),
        "o": np.stack([e["o"] for e in exp]), "r": np.stack([e["r"] for e in exp]),
        "mask": np.stack([e["mask"] for e in exp]),
        "counters": np.array([list(predict(cfg, n, e["mask"], e["key"], tq).counters().values())
                              for e in exp], dtype=np.int64),
    }


def run_cocotb(cfg, name, cases):
    need_iverilog()
    out = BUILD / name
    generate(cfg, out)
    save_cases(out / "attn_cases.npz", cases)
    run_icarus(out, ATTN_TOP_NAME, "dstar.sim.tb_attention",
               {"DSTAR_ATTN_PARAMS": out / "params.json",
                "DSTAR_ATTN_CASES": out / "attn_cases.npz"}, build="icarus_attn")


def test_real_head_and_ragged_edge_case():
    cfg = preset("tiny")
    q, k, v = attention_inputs(0, 20, 3)
    n = cfg.max_tokens
    steps = [(q[s, 1, :n], k[s, 1, :n], v[s, 1, :n]) for s in range(3)]
    calls, exp = head_calls(cfg, steps, 0.5, 3, slot=1)
    assert [e["key"] for e in exp] == [True, False, False]
    cases = {"real_l0h1": _case(cfg, calls, exp)}
    rng = np.random.default_rng(11)
    rsteps = [_random_step(rng, 27, cfg.head_dim, 2.0) for _ in range(2)]
    calls, exp = int_calls(cfg, rsteps, 0.5, 0, slot=0)
    assert calls[0]["theta_q"] == theta_fixed(0.5)
    cases["ragged27"] = _case(cfg, calls, exp)
    # Group format: logits over many octaves (groups of different and clamped exponents) and
    # N = 17 (a last group of one key).
    rng = np.random.default_rng(21)
    gsteps = [_random_step(rng, 17, cfg.head_dim, 4.0) for _ in range(2)]
    assert len(np.unique(group_shifts(cfg, *gsteps[0][:2], *gsteps[0][3:]))) >= 4
    calls, exp = int_calls(cfg, gsteps, 0.9, 2, slot=3)
    cases["groups17"] = _case(cfg, calls, exp)
    cases.update(edge_cases(cfg))
    run_cocotb(cfg, "tiny-attention", cases)


def test_e_max_0_and_groups_of_8():
    """The generated engine with one exponent per row (``e_max = 0``) and with groups of 8 keys
    at ``e_max = 3``: a ragged head (N = 29), key and reuse step, logits spread wide."""
    for group, e_max in ((16, 0), (8, 3)):
        cfg = preset("tiny").replace(group=group, e_max=e_max)
        rng = np.random.default_rng(23 + e_max)
        steps = [_random_step(rng, 29, cfg.head_dim, 4.0) for _ in range(2)]
        calls, exp = int_calls(cfg, steps, 0.7, 2, slot=1)
        run_cocotb(cfg, f"tiny-attention-g{group}-e{e_max}", {"ragged29": _case(cfg, calls, exp)})


def edge_cases(cfg):
    """The edge cases of ``tests/hw/test_attention.py::test_edge_cases`` at the preset's Dh."""
    dh, rng, cases = cfg.head_dim, np.random.default_rng(19), {}
    # theta = 1: key 0 dominates every row, the other key block has zero mass, yet is computed.
    q = np.full((20, dh), 127)
    k = rng.integers(-3, 4, size=(20, dh))
    k[0] = 127
    v = rng.integers(-127, 128, size=(20, dh))
    m, sh = logit_multiplier(np.full(20, 1e-3))
    calls, exp = int_calls(cfg, [(q, k, v, m, sh)] * 2, 1.0, 0, slot=2)
    assert exp[0]["mask"].all()
    cases["theta1"] = _case(cfg, calls, exp)
    # One-block sequence (N <= Bq, Bk): key and reuse step.
    calls, exp = int_calls(cfg, [_random_step(rng, 9, dh) for _ in range(2)], 0.9, 0, slot=3)
    cases["one_block9"] = _case(cfg, calls, exp)
    # All-equal logits (K = 0): two equal-mass key blocks, theta 0.5 takes block 0 only.
    z = np.zeros((32, dh), dtype=np.int64)
    mz, shz = logit_multiplier(np.full(32, 0.01))
    calls, exp = int_calls(cfg, [(rng.integers(-127, 128, size=(32, dh)), z,
                                  rng.integers(-127, 128, size=(32, dh)), mz, shz)], 0.5, 0)
    assert exp[0]["mask"].tolist() == [[True, False], [True, False]]
    cases["all_equal"] = _case(cfg, calls, exp)
    # Extreme logits: +-127 everywhere (|S| = Dh * 127**2), V = +-127.
    sgn = rng.choice([-127, 127], size=(3, 20, dh))
    me, she = logit_multiplier(np.full(20, 127.0 ** -2 / math.sqrt(dh) * 30))
    calls, exp = int_calls(cfg, [(sgn[0], sgn[1], sgn[2], me, she)], 0.8, 0, slot=1)
    cases["extreme"] = _case(cfg, calls, exp)
    return cases


@pytest.mark.slow
def test_full_real_head_default_preset():
    """The default preset and a whole real head (256 tokens, 16 x 16 tiles), the preset's
    theta and refresh_attn: a key step and a reuse step (layer 3, head 2, steps 0 and 1)."""
    cfg = preset("default")
    q, k, v = attention_inputs(3, 20, 3)
    steps = [(q[s, 2], k[s, 2], v[s, 2]) for s in range(2)]
    calls, exp = head_calls(cfg, steps, cfg.theta, cfg.refresh_attn, slot=3)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    run_cocotb(cfg, "default-attention", {"real_l3h2": _case(cfg, calls, exp)})
