"""The self-test on a ULX3S 85F: an ECP5 PLL for the ``sync`` clock, LEDs and a restart button.

Ref: toolchain.md section 5 (board flow).

``BoardTop`` puts a ``SelfTest`` on a ULX3S 85F (``amaranth_boards.ulx3s.ULX3S_85F_Platform``,
LFE5U-85F, 25 MHz oscillator) behind an ECP5 PLL: the accelerator does not close 25 MHz
(``board_config()`` routes at 21.59 MHz, nextpnr-0.11.1 router2), so ``EHXPLLL`` makes
``SYNC_MHZ`` (12.5 MHz) for the ``sync`` domain, held in reset until the PLL locks. LED 0 lights
when every word matched, LED 1 on any mismatch, LED 2 when the program has finished, LED 7
blinks (about 0.75 Hz) to show the clock runs; button FIRE1 restarts the program.
"""

from amaranth import ClockDomain, ClockSignal, Elaboratable, Instance, Module, ResetInserter, Signal
from amaranth.lib import io
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer

from dstar.config import preset

__all__ = ["board_config", "CLKIN_MHZ", "PLL_DIVS", "SYNC_MHZ", "Pll", "BoardTop"]

#: PLL dividers for 25 MHz in (ecppll's constraints: PFD = 25 / CLKI_DIV >= 10 MHz, VCO =
#: out * CLKOP_DIV in 400..800 MHz; feedback from CLKOP, so out = 25 / CLKI_DIV * CLKFB_DIV).
#: 12.5 MHz: PFD 12.5 MHz, VCO 600 MHz, and margin below the 21.59 MHz routed Fmax.
CLKIN_MHZ = 25.0
PLL_DIVS = {"CLKI_DIV": 2, "CLKFB_DIV": 1, "CLKOP_DIV": 48}
SYNC_MHZ = CLKIN_MHZ / PLL_DIVS["CLKI_DIV"] * PLL_DIVS["CLKFB_DIV"]


def board_config():
    """The configuration built for the board: the ``tiny`` preset with fixed dispatcher lanes
    (``lane_rotation=1``).

    Why (it routes; ``tiny`` itself congests the router): ``docs/design/board.md``. The
    datapath, the command stream and the integer contract are the same, and the self-test
    checks this configuration bit-exactly (``dstar.sim.selftest.simulate``)."""
    return preset("tiny").replace(lane_rotation=1)


class Pll(Elaboratable):
    """ECP5 ``EHXPLLL``: ``clk_in`` (``CLKIN_MHZ``) in, ``clk_out`` (``SYNC_MHZ``) and ``locked``
    out, dividers ``PLL_DIVS`` with CLKOP as feedback; dividers, phase and attributes as
    ``yowasp-ecppll -i 25 -o 12.5`` writes them."""

    def __init__(self, clk_in):
        self.clk_in = clk_in
        self.clk_out = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        m = Module()
        d = PLL_DIVS
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=f"{CLKIN_MHZ:g}", a_FREQUENCY_PIN_CLKOP=f"{SYNC_MHZ:g}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=d["CLKI_DIV"], p_CLKFB_DIV=d["CLKFB_DIV"], p_FEEDBK_PATH="CLKOP",
            p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=d["CLKOP_DIV"],
            p_CLKOP_CPHASE=(d["CLKOP_DIV"] - 1) // 2, p_CLKOP_FPHASE=0,
            i_CLKI=self.clk_in, i_CLKFB=self.clk_out, o_CLKOP=self.clk_out,
            i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
            i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_LOCK=self.locked)
        return m


class BoardTop(Elaboratable):
    """``selftest`` (a ``SelfTest``) on a board: LEDs 0/1/2 = passed/failed/done, LED 7
    heartbeat, FIRE1 = restart. The ``sync`` domain is the PLL's ``SYNC_MHZ`` clock (from the
    25 MHz oscillator of the ULX3S), in reset until the PLL locks and released synchronously
    (``ResetSynchronizer``); it carries a clock constraint of ``SYNC_MHZ`` so nextpnr checks
    that frequency."""

    def __init__(self, selftest):
        self.selftest = selftest

    def elaborate(self, platform):
        m = Module()
        clk_io = platform.request(platform.default_clk, dir="-")
        m.submodules.clk_buf = clk_buf = io.Buffer("i", clk_io)
        m.submodules.pll = pll = Pll(clk_buf.i)
        m.domains.sync = ClockDomain("sync")
        # The constrained net needs a name that survives flattening: Yosys keeps one of the
        # clock net's many names (here it kept "button_sync.clk", and nextpnr ignored a
        # constraint on "pll.clk_out"), unless a wire is marked keep.
        clk = Signal(name="sync_clk", attrs={"keep": 1})
        m.d.comb += [clk.eq(pll.clk_out), ClockSignal("sync").eq(clk)]
        m.submodules.rst_sync = ResetSynchronizer(~pll.locked, domain="sync")
        platform.add_clock_constraint(clk, SYNC_MHZ * 1e6)

        st = self.selftest
        m.submodules.button = button = io.Buffer("i", platform.request("button_fire", 0,
                                                                        dir="-"))
        # FIRE1 resets the self-test and the layer (the memories keep their contents; the
        # program rewrites them all and starts with a key step). The button is asynchronous
        # to the PLL clock, hence the synchronizer.
        restart = Signal()
        m.submodules.button_sync = FFSynchronizer(button.i, restart)
        m.submodules.selftest = ResetInserter(restart)(st)
        leds = []
        for i in (0, 1, 2, 7):
            m.submodules[f"led_{i}"] = led = io.Buffer("o", platform.request("led", i, dir="-"))
            leds.append(led)
        beat = Signal(24)
        m.d.sync += beat.eq(beat + 1)
        m.d.comb += [leds[0].o.eq(st.passed), leds[1].o.eq(st.failed), leds[2].o.eq(st.done),
                     leds[3].o.eq(beat[-1])]
        return m
