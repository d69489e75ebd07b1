"""cocotb on Icarus and on Verilator: the generated accelerator top (``dstar.v``) runs two
linear layers and an attention head on its shared PE arrays, through its command and data
streams, from the manifest alone: two layers' key steps, an attention key step and reuse step,
then each layer's delta step from its saved state and Y, bit-exact against the golden model,
every counter equal to the cycle models'. The case is computed in
``tests/hw/cases/accelerator.py`` and handed to ``sim/tb_accelerator.py`` in an ``.npz``; both
simulators run the same case against the same expectations, so where both pass they agree bit
for bit and cycle for cycle."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.hw.generate import ACCEL_TOP_NAME
from dstar.paths import build_dir
from dstar.sim.case_files import save_cases
from tests.hw.cases.accelerator import interleaved
from tests.hw.fixtures import need_verilator, run_generated, run_verilator

OUT = build_dir("cocotb") / "tiny-accelerator"


def _case(cfg):
    return {"interleaved": interleaved(cfg, np.random.default_rng(31))}


def test_layers_and_attention_on_the_generated_top():
    cfg = preset("tiny", encoding="nibble").replace(head_dim=16)
    run_generated(cfg, OUT, ACCEL_TOP_NAME, "dstar.sim.tb_accelerator", _case(cfg),
                  "DSTAR_ACC", "acc_cases.npz", build="icarus_acc", accelerator=True)


@pytest.mark.slow       # the simulators' agreement; the default tier runs Verilator in dstar run
def test_verilator_runs_the_same_case():
    need_verilator()
    from dstar.hw.generate import generate

    cfg = preset("tiny", encoding="nibble").replace(head_dim=16)
    out = OUT.with_name("tiny-accelerator-verilator")
    generate(cfg, out, accelerator=True)
    save_cases(out / "acc_cases.npz", _case(cfg))
    run_verilator(out, ACCEL_TOP_NAME, "dstar.sim.tb_accelerator",
                  {"DSTAR_ACC_PARAMS": out / "params.json",
                   "DSTAR_ACC_CASES": out / "acc_cases.npz"})
