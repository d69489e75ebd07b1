"""cocotb on Icarus: the generated ``dstar_linear`` Verilog runs real and adversarial layer steps
bit-exact against the golden model, with cycles equal to the cycle model's; the dense INT8 tops
(``dense``, the lean ``int8``) the same on W8A8 runs.

The cases (weights, targets, expected Y/state/counters) are computed in
``tests/hw/cases/linear.py`` and handed to ``sim/tb_linear.py`` in an ``.npz``; the testbench
reads every width from ``params.json``.
"""

import pytest

from dstar.config import preset
from dstar.hw.generate import TOP_NAME
from dstar.paths import build_dir
from tests.hw.cases.linear import dense_cases, real_case, synthetic_cases
from tests.hw.fixtures import run_generated

BUILD = build_dir("cocotb")


def run_cocotb(cfg, name, cases):
    run_generated(cfg, BUILD / name, TOP_NAME, "dstar.sim.tb_linear", cases, "DSTAR")


def test_compact_real_and_adversarial():
    cfg = preset("tiny", encoding="nibble")
    cases = synthetic_cases(cfg)
    cases["real_fc1"] = real_case(cfg)
    run_cocotb(cfg, "tiny-compact", cases)


def test_lockstep_adversarial():
    cfg = preset("tiny", encoding="nibble").replace(packing="lockstep")
    cases = synthetic_cases(cfg)
    run_cocotb(cfg, "tiny-lockstep", {k: cases[k] for k in ("extreme", "uneven_one_tile")})


def test_lane_ram_adversarial():
    """The FPGA weight store (per-lane LUT-RAM copies of the weight rows) in Verilog."""
    cfg = preset("tiny", encoding="nibble").replace(weight_store="lane_ram")
    cases = synthetic_cases(cfg)
    run_cocotb(cfg, "tiny-lane-ram", {k: cases[k] for k in ("drift", "extreme")})


@pytest.mark.parametrize("datapath", ["dense", "int8"])
def test_dense_int8_w8a8(datapath):
    """A dense INT8 top: extremes, one token over four K tiles and a real fc1 on the INT8
    lattice, ``Y_int == exact_matmul(X_int, W_q)``, counters equal to its cycle model."""
    cfg = preset("tiny", encoding="nibble").replace(datapath=datapath)
    run_cocotb(cfg, f"tiny-{datapath}", dense_cases(cfg))


@pytest.mark.slow
def test_default_whole_fc1():
    """The whole fc1 of block 0 (256 tokens x 128 -> 512) on the default preset's Verilog, over
    the key step and two delta steps of the default 50-step run (about 162k cycles, 40 CPU
    minutes on Icarus)."""
    cfg = preset("default", encoding="nibble")
    run_cocotb(cfg, "default-compact", {"real_fc1_whole": real_case(cfg, steps=cfg.steps,
                                                                      whole=True)})
