"""cocotb tests of the cocotb port adapter's ``until`` (``dstar.sim.cocotb_io``) on a counter
whose ``done`` rises 20 cycles after ``go``: a port that stays low ends in ``TimeoutError`` after
the bound, one that rises returns. Run by ``tests/hw/test_cocotb_io_icarus.py``."""

import cocotb
from cocotb.clock import Clock
from cocotb.utils import get_sim_time

from dstar.sim.cocotb_io import dut_io


@cocotb.test()
async def test_until_ends_at_its_bound(dut):
    """``done`` stays low (``go`` is 0): ``until`` raises after 50 cycles, not later."""
    Clock(dut.clk, 10, unit="ns").start()
    set_, _, tick = io = dut_io(dut)
    set_("go", 0)
    await tick()
    t0 = get_sim_time("ns")
    try:
        await io.until("done", 50)
    except TimeoutError as e:
        assert str(e) == "done not high after 50 cycles", e
    else:
        raise AssertionError("until returned on a port that never rose")
    assert 500 <= get_sim_time("ns") - t0 <= 520, get_sim_time("ns") - t0


@cocotb.test()
async def test_until_returns_when_the_port_rises(dut):
    """With ``go`` high, ``done`` rises after 20 cycles: ``until`` returns within the bound."""
    Clock(dut.clk, 10, unit="ns").start()
    set_, get, tick = io = dut_io(dut)
    set_("go", 1)
    await tick()
    await io.until("done", 50)
    assert get("done") == 1
