"""The cocotb testbench of ``dstar regress``: many constrained-random cases
(``dstar.sim.regress.run_cases``) on one compiled accelerator top, each after a reset.

It reads the folder ``DSTAR_REGRESS_DIR``: ``params.json`` (the manifest) and ``plan.json``
(``config``: the full configuration; ``seed``, ``first``, ``count``, ``seconds``, ``inject``: the
arguments of ``run_cases``) and writes there, whole and every 15 s, ``results.json``
(``run_cases``' results). Differences are the report's, not a failed test: the test fails only
if the bench itself breaks.
"""

import json
import os
from pathlib import Path

from dstar.config import Config
from dstar.outputs import write_atomic

from .regress import run_cases

__all__ = ["run_plan"]

#: The simulated time a case may take before it counts as a hang (10 ns cycles).
CASE_LIMIT_NS = 50_000_000


async def run_plan(io, folder: Path, reset, guard=None, log=None) -> dict:
    """Run the plan of ``folder`` (see the module docstring); returns the results."""
    man = json.loads((folder / "params.json").read_text())["accelerator"]
    plan = json.loads((folder / "plan.json").read_text())

    def progress(res):
        write_atomic(folder / "results.json", json.dumps(res) + "\n")

    return await run_cases(io, man, Config(**plan["config"]), seed=plan["seed"],
                           first=plan["first"], count=plan["count"], seconds=plan["seconds"],
                           inject=plan["inject"], reset=reset, guard=guard,
                           progress=progress, log=log)


# ----- cocotb -----
try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import with_timeout

    from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
except ImportError:                         # the runner is usable without cocotb
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def test_regress(dut):
        """The plan of ``DSTAR_REGRESS_DIR``, every case on a freshly reset design."""
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        folder = Path(os.environ["DSTAR_REGRESS_DIR"])
        ports = json.loads((folder / "params.json").read_text())["accelerator"]["ports"]
        io = dut_io(dut)

        def guard(coro):
            return with_timeout(coro, CASE_LIMIT_NS, "ns")

        await run_plan(io, folder, lambda: reset(dut, io, ports), guard, cocotb.log.info)
