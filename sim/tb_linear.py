"""cocotb testbench of the generated ``dstar_linear`` Verilog (any datapath's top).

Everything it needs comes from files named by environment variables (set by
``tests/hw/test_linear_icarus.py``): ``DSTAR_PARAMS`` (the generation's ``params.json``) and
``DSTAR_CASES`` (an ``.npz`` of cases: per case the shape, weights, per-step targets and key
flags, an optional initial state, and the expected per-step ``Y_int``, state and cycle-model
counters, computed outside the simulator from ``golden`` and the cycle model). A dense INT8 top's
cases have no state (``xs``): their targets are the INT8 activations, their counters those of
``dstar.sim.layer_cycles``. Each case runs on a freshly reset design; results are compared as
integers with equality.
"""

import cocotb
import numpy as np
from cocotb.clock import Clock

from dstar.sim.case_files import from_env
from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
from dstar.sim.layer_io import LayerImage, run_step


@cocotb.test()
async def test_cases(dut):
    """Every case of ``DSTAR_CASES``: bit-exact Y (and state), counters equal to the model."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    man, cases = from_env("DSTAR_PARAMS", "DSTAR_CASES")
    io = dut_io(dut)
    failures = []
    for name, c in cases:
        await reset(dut, io, man["ports"])
        n, k, m = (int(x) for x in c["shape"])
        img = LayerImage(man, k, m, n)
        state = c.get("state0")
        for s in range(len(c["keys"])):
            out = await run_step(io, img, c["targets"][s], key=bool(c["keys"][s]),
                                 w_q=c["w_q"] if s == 0 else None,
                                 state=state if s == 0 else None)
            want = dict(zip(out.counters, (int(x) for x in c["counters"][s]), strict=True))
            cocotb.log.info(f"{name} step {s}: {out.counters}")
            if not np.array_equal(out.y, c["y"][s]):
                failures.append(f"{name} step {s}: Y differs")
            if "xs" in c and not np.array_equal(out.state, c["xs"][s]):
                failures.append(f"{name} step {s}: state differs")
            if out.counters != want:
                failures.append(f"{name} step {s}: counters {out.counters} != model {want}")
    assert not failures, "; ".join(failures)
