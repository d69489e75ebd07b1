"""cocotb on Icarus: the generated FMDQ ``dstar_linear`` Verilog (``encoding = "fmdq"``) runs
random, adversarial and all-zero steps bit-exact against the golden twin, with every counter
equal to the cycle model's. The cases are ``tests/hw/cases/fmdq_linear.py``'s; the testbench
(``sim/tb_fmdq_linear.py``) reads every size from ``params.json``."""

import pytest

from dstar.config import preset
from dstar.hw.generate import TOP_NAME, generate
from dstar.paths import build_dir
from dstar.sim.case_files import save_cases
from tests.hw.cases import fmdq_linear as cases
from tests.hw.fixtures import need_iverilog, run_icarus

BUILD = build_dir("cocotb")


def run_generated(cfg, out, named: dict) -> None:
    """Generate ``cfg``'s linear top alone (no attention engine) in ``out``, save the cases
    and run ``sim/tb_fmdq_linear.py`` on Icarus."""
    need_iverilog()
    generate(cfg, out, attention=False)
    save_cases(out / "cases.npz", named)
    run_icarus(out, TOP_NAME, "dstar.sim.tb_fmdq_linear",
               {"DSTAR_PARAMS": out / "params.json", "DSTAR_CASES": out / "cases.npz"})


def test_small_cases_icarus():
    cfg = cases.small_config()
    named = {"random": cases.random_case(cfg), "adversarial": cases.adversarial_case(cfg),
             "zero": cases.zero_case(cfg)}
    run_generated(cfg, BUILD / "fmdq-small", named)


@pytest.mark.slow
def test_real_layer_tiny_icarus():
    cfg = preset("tiny").replace(encoding="fmdq")
    run_generated(cfg, BUILD / "fmdq-tiny", {"fc1": cases.real_case(cfg, m=16)})
