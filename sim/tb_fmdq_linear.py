"""cocotb testbench of the generated FMDQ linear top (``dstar_linear`` of a configuration with
``encoding = "fmdq"``: ``dstar.hw.fmdq.linear.FmdqLinear``).

Its inputs come from files named by environment variables (set by
``tests/hw/test_fmdq_linear_icarus.py``): ``DSTAR_PARAMS`` (the generation's ``params.json``;
sizes from its ``geometry`` and ``config``) and ``DSTAR_CASES`` (an ``.npz`` of cases from
``tests/hw/cases/fmdq_linear.py``: shape, weights, per-step targets and key flags, and the
expected per-step ``Y``, state and counters). Each case runs on a freshly reset design; results
are compared as integers with equality.
"""

import cocotb
import numpy as np
from cocotb.clock import Clock

from dstar.sim.case_files import from_env
from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
from dstar.sim.fmdq_linear_io import COUNTERS, FmdqImage, run_fmdq_step


@cocotb.test()
async def test_cases(dut):
    """Every case of ``DSTAR_CASES``: bit-exact Y and state, counters equal to the model."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    man, cases = from_env("DSTAR_PARAMS", "DSTAR_CASES")
    io = dut_io(dut)
    cfg = man["config"]
    failures = []
    for name, c in cases:
        await reset(dut, io, man["ports"])
        n, k, m = (int(x) for x in c["shape"])
        img = FmdqImage(man["geometry"], cfg["state_bits"], cfg["max_k"], k, m, n)
        state = c["state0"] if "state0" in c else None
        for s in range(len(c["keys"])):     # the host keeps the state between steps
            out = await run_fmdq_step(io, img, c["targets"][s], key=bool(c["keys"][s]),
                                      w_q=c["w_q"] if s == 0 else None, state=state)
            state = out.state
            want = dict(zip(COUNTERS, (int(x) for x in c["counters"][s]), strict=True))
            cocotb.log.info(f"{name} step {s}: {out.counters}")
            if not np.array_equal(out.y, c["y"][s]):
                failures.append(f"{name} step {s}: Y differs")
            if not np.array_equal(out.state, c["xs"][s]):
                failures.append(f"{name} step {s}: state differs")
            if out.counters != want:
                failures.append(f"{name} step {s}: counters {out.counters} != model {want}")
    assert not failures, "; ".join(failures)
