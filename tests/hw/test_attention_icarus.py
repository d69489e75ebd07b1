"""cocotb on Icarus: the generated ``dstar_attention`` Verilog runs a real head of the bundled DiT
over a key step and two reuse steps, a ragged random case, a case of widely spread logits (the
probabilities' groups at different and clamped exponents, a last group of one key) and the edge
cases (theta = 1 with a zero-mass block, a one-block sequence, all-equal logits, extreme
logits), and a ragged head on the FMDQ arrays, bit-exact against the golden model (outputs,
residual cache, masks), with cycles equal to ``dstar.sim.attention_cycles``.

The cases are computed in ``tests/hw/cases/attention.py`` and handed to ``sim/tb_attention.py``
in an ``.npz``; the testbench reads the memory geometry from ``params.json``'s ``attention``
section.
"""

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.attention import theta_fixed
from dstar.hw.generate import ATTN_TOP_NAME
from dstar.paths import build_dir
from dstar.sim.bench_attention import attention_inputs
from tests.hw.cases.attention import (
    edge_cases,
    group_shifts,
    head_calls,
    icarus_case,
    int_calls,
    random_step,
)
from tests.hw.fixtures import run_generated

BUILD = build_dir("cocotb")


def run_cocotb(cfg, name, cases):
    run_generated(cfg, BUILD / name, ATTN_TOP_NAME, "dstar.sim.tb_attention", cases, "DSTAR_ATTN",
                  "attn_cases.npz", build="icarus_attn")


def test_real_head_and_ragged_edge_case():
    cfg = preset("tiny")
    q, k, v = attention_inputs(0, 20, 3)
    n = cfg.max_tokens
    steps = [(q[s, 3, :n], k[s, 3, :n], v[s, 3, :n]) for s in range(3)]
    calls, exp = head_calls(cfg, steps, 0.5, 3, slot=1)
    assert [e["key"] for e in exp] == [True, False, False]
    assert not exp[0]["mask"].all()
    cases = {"real_l0h3": icarus_case(cfg, calls, exp)}
    rng = np.random.default_rng(11)
    rsteps = [random_step(rng, 27, cfg.head_dim, 2.0, sink=4) for _ in range(2)]
    calls, exp = int_calls(cfg, rsteps, 0.5, 0, slot=0)
    assert calls[0]["theta_q"] == theta_fixed(0.5)
    cases["ragged27"] = icarus_case(cfg, calls, exp)
    # Group format: logits over many octaves (groups of different and clamped exponents) and
    # N = 17 (a last group of one key).
    rng = np.random.default_rng(21)
    gsteps = [random_step(rng, 17, cfg.head_dim, 4.0) for _ in range(2)]
    assert len(np.unique(group_shifts(cfg, *gsteps[0][:2], *gsteps[0][3:]))) >= 4
    calls, exp = int_calls(cfg, gsteps, 0.9, 2, slot=3)
    cases["groups17"] = icarus_case(cfg, calls, exp)
    cases.update(edge_cases(cfg))
    run_cocotb(cfg, "tiny-attention", cases)


def test_e_max_0_and_groups_of_8():
    """The generated engine with one exponent per row (``e_max = 0``) and with groups of 8 keys
    at ``e_max = 3``: a ragged head (N = 29), key and reuse step, logits spread wide."""
    for group, e_max in ((16, 0), (8, 3)):
        cfg = preset("tiny").replace(group=group, e_max=e_max)
        rng = np.random.default_rng(23 + e_max)
        steps = [random_step(rng, 29, cfg.head_dim, 4.0) for _ in range(2)]
        calls, exp = int_calls(cfg, steps, 0.7, 2, slot=1)
        run_cocotb(cfg, f"tiny-attention-g{group}-e{e_max}",
                   {"ragged29": icarus_case(cfg, calls, exp)})


def test_fmdq_arrays_ragged_head():
    """The generated engine on the SIMD-4 arrays (``encoding = "fmdq"``: QK^T and PV as
    2-bit-sliced 8-bit units): a ragged random head (N = 27, a partial token tile), key and
    reuse step."""
    cfg = preset("tiny").replace(encoding="fmdq")
    rng = np.random.default_rng(29)
    steps = [random_step(rng, 27, cfg.head_dim, 2.0, sink=4) for _ in range(2)]
    calls, exp = int_calls(cfg, steps, 0.5, 2, slot=1)
    assert not exp[0]["mask"].all()
    run_cocotb(cfg, "tiny-attention-fmdq", {"ragged27": icarus_case(cfg, calls, exp)})


@pytest.mark.slow
def test_full_real_head_default_preset():
    """The default preset and a whole real head (256 tokens, 16 x 16 tiles), the preset's
    theta and refresh_attn: a key step and a reuse step (layer 3, head 2, steps 0 and 1)."""
    cfg = preset("default")
    q, k, v = attention_inputs(3, 20, 3)
    steps = [(q[s, 2], k[s, 2], v[s, 2]) for s in range(2)]
    calls, exp = head_calls(cfg, steps, cfg.theta, cfg.refresh_attn, slot=3)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    run_cocotb(cfg, "default-attention", {"real_l3h2": icarus_case(cfg, calls, exp)})
