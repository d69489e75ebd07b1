"""cocotb on Icarus: the generated ``dstar_attention`` Verilog runs a real head of the bundled DiT
over a key step and two reuse steps, and a ragged random edge case, bit-exact against the golden
model (outputs, residual cache, masks), with cycles equal to ``sim.attention_cycles``.

The cases are computed here and handed to ``sim/tb_attention.py`` in an ``.npz``; the testbench
reads the memory geometry from ``params.json``'s ``attention`` section.
"""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from dstar.config import preset
from golden.attention import theta_fixed
from hw.generate import ATTN_TOP_NAME, generate
from sim.attention_cycles import predict
from sim.bench_attention import attention_inputs
from tests.test_hw_attention import _random_step, head_calls, int_calls

pytestmark = pytest.mark.cocotb

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "cocotb"


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
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog is not installed")
    from cocotb_tools.runner import get_runner

    out = BUILD / name
    generate(cfg, out)
    np.savez(out / "attn_cases.npz", **{f"{c}/{k}": v for c, d in cases.items()
                                        for k, v in d.items()})
    runner = get_runner("icarus")
    runner.build(sources=[out / f"{ATTN_TOP_NAME}.v"], hdl_toplevel=ATTN_TOP_NAME,
                 build_dir=out / "icarus_attn", timescale=("1ns", "1ps"), always=True)
    for var in ("DSTAR_ATTN_PARAMS", "DSTAR_ATTN_CASES"):
        assert var not in os.environ, f"{var} would override the testbench's setting"
    runner.test(hdl_toplevel=ATTN_TOP_NAME, test_module="sim.tb_attention",
                build_dir=out / "icarus_attn", test_dir=out,
                extra_env={"DSTAR_ATTN_PARAMS": str(out / "params.json"),
                           "DSTAR_ATTN_CASES": str(out / "attn_cases.npz")})


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
    run_cocotb(cfg, "tiny-attention", cases)


@pytest.mark.slow
def test_full_real_head_default_preset():
    """The default preset and a whole real head (256 tokens, 16 x 16 tiles), theta 0.9,
    refresh 2: a key step and a reuse step (layer 3, head 2, steps 0 and 1)."""
    cfg = preset("default")
    q, k, v = attention_inputs(3, 20, 3)
    steps = [(q[s, 2], k[s, 2], v[s, 2]) for s in range(2)]
    calls, exp = head_calls(cfg, steps, cfg.theta, cfg.refresh_attn, slot=3)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    run_cocotb(cfg, "default-attention", {"real_l3h2": _case(cfg, calls, exp)})
