"""cocotb tests of the cocotb port adapter's ``until`` (``dstar.sim.cocotb_io``) on a counter
whose ``done`` rises 20 cycles after ``go``: a port that stays low ends in ``TimeoutError`` after
the bound, one that rises returns. Run by ``tests/hw/test_cocotb_io_icarus.py``."""

import cocotb
from cocotb.clock import Clock
from cocotb.utils import get_sim_time

from dstar.sim.cocotb_io import CLOCK_NS, dut_io


async def _start(dut, go: int):
    """The clock started, ``go`` set and one tick taken; returns the port adapter."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    io = dut_io(dut)
    set_, _, tick = io
    set_("go", go)
    await tick()
    return io


@cocotb.test()
async def test_until_ends_at_its_bound(dut):
    """``done`` stays low (``go`` is 0): ``until`` raises after 50 cycles, not later."""
    io = await _start(dut, 0)
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
    io = await _start(dut, 1)
    _, get, _ = io
    await io.until("done", 50)
    assert get("done") == 1
