"""cocotb on Icarus: the generated accelerator top (``dstar.v``) runs two linear layers and an
attention head on its shared PE arrays, through its command and data streams, from the
manifest alone: two layers' key steps, an attention key step and reuse step, then each layer's
delta step from its saved state and Y, bit-exact against the golden model, every counter equal
to the cycle models'. The case is computed in ``tests/hw/cases/accelerator.py`` and handed to
``sim/tb_accelerator.py`` in an ``.npz``."""

import numpy as np

from dstar.config import preset
from dstar.hw.generate import ACCEL_TOP_NAME
from dstar.paths import build_dir
from tests.hw.cases.accelerator import interleaved
from tests.hw.fixtures import run_generated


def test_layers_and_attention_on_the_generated_top():
    cfg = preset("tiny").replace(head_dim=16)
    cases = {"interleaved": interleaved(cfg, np.random.default_rng(31))}
    run_generated(cfg, build_dir("cocotb") / "tiny-accelerator", ACCEL_TOP_NAME,
                  "dstar.sim.tb_accelerator", cases, "DSTAR_ACC", "acc_cases.npz",
                  build="icarus_acc", accelerator=True)
