"""The ``(set, get, tick)`` port adapter of the host drivers (``dstar.sim.layer_io``,
``dstar.sim.tb_attention``) over a cocotb handle of the generated Verilog, and the reset they start
each case from."""

from cocotb.triggers import FallingEdge, RisingEdge, SimTimeoutError, with_timeout

from dstar.sim.layer_io import SimIO

__all__ = ["CLOCK_NS", "dut_io", "reset"]

#: The clock period of every testbench (ns); ``until`` bounds its waits in these periods.
CLOCK_NS = 10


def dut_io(dut, clock_ns: int = CLOCK_NS):
    """``(set_, get, tick)`` on ``dut``'s top-level ports: ``get`` reads unsigned (1-bit ports
    are Logic); ``tick`` waits for the falling clock edge, so writes land before the next rising
    edge and reads see its settled outputs."""
    def set_(name, value):
        getattr(dut, name).value = int(value)

    def get(name):
        return int(getattr(dut, name).value)

    async def tick():
        await FallingEdge(dut.clk)

    async def until(name, max_cycles=None):
        # At a falling edge (settled): while low, wait for it to rise and settle (a glitch
        # has gone again by the next falling edge); then the one tick after the read of 1. A
        # port already high takes one tick, as a loop of get and tick would. A port that stays
        # low ends in TimeoutError after max_cycles clock periods (a hung design fails its
        # test instead of running until the job's time limit).
        sig = getattr(dut, name)
        while not int(sig.value):
            if max_cycles is None:
                await RisingEdge(sig)
            else:
                try:
                    await with_timeout(RisingEdge(sig), max_cycles * clock_ns, "ns")
                except SimTimeoutError:
                    raise TimeoutError(f"{name} not high after {max_cycles} cycles") from None
            await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)

    return SimIO(set_, get, tick, until)


async def reset(dut, io, ports: dict):
    """Every input of ``ports`` (a manifest's ``ports``: name -> ``{"dir": ...}``) to 0, then
    ``rst`` high for two cycles and one more cycle after it falls."""
    set_, _, tick = io
    for name, port in ports.items():
        if port["dir"] == "in":
            set_(name, 0)
    dut.rst.value = 1
    await tick()
    await tick()
    dut.rst.value = 0
    await tick()
