"""The board self-test: ``dstar_linear`` driven from a ROM program that ends by checking every
accumulator word against a stored result.

Ref: dstar-spec.md section 5 (top level and command stream).

The program (``dstar.sim.selftest.program_ops`` builds it from the golden model) writes the
weights, writes a step's target rows, starts the step (key, then differential steps), and
finally compares every accumulator word with the golden model's ``Y_int``. It drives the
``dstar_linear`` host ports exactly as ``dstar.sim.layer_io.run_step`` does.
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

__all__ = ["OP_WEIGHT", "OP_TARGET", "OP_START", "OP_CHECK", "OP_END", "rom_widths",
           "rom_words", "SelfTest"]

#: Program opcodes of the self-test ROM. An operation is ``(op, sel, addr, data)``:
#: ``OP_WEIGHT`` writes ``data`` at weight address ``addr`` of the arrays whose bit is set in
#: ``sel``; ``OP_TARGET`` writes target row word ``addr``; ``OP_START`` starts a step (``sel``
#: bit 0: key step; ``data``: ``n_tokens | n_kt << .. | n_mt << ..``) and waits until it is done;
#: ``OP_CHECK`` compares accumulator word ``addr`` (all arrays, array 0 lowest) with ``data``;
#: ``OP_END`` raises ``done``.
OP_WEIGHT, OP_TARGET, OP_START, OP_CHECK, OP_END = range(5)


def rom_widths(layer) -> dict:
    """Field widths of a ROM word for ``layer`` (a ``LinearLayer``): ``op``, ``sel`` (one bit per
    PE array), ``addr`` (the widest host address) and ``data`` (the widest host word, the
    accumulator words of all arrays, or the step sizes), LSB first in that order."""
    n_arr = len(layer.host_y_rdata)
    sizes = len(layer.n_tokens) + len(layer.n_kt) + len(layer.n_mt)
    return {"op": 3, "sel": max(1, n_arr),
            "addr": max(len(layer.host_w_addr), len(layer.host_row_addr),
                        len(layer.host_y_addr)),
            "data": max(len(layer.host_w_wdata), len(layer.host_target_wdata),
                        n_arr * len(layer.host_y_rdata[0]), sizes)}


def rom_words(ops, widths: dict) -> list[int]:
    """The ROM words of the operations ``ops`` (``(op, sel, addr, data)`` each)."""
    words = []
    for op, sel, addr, data in ops:
        w = op
        w |= sel << widths["op"]
        w |= addr << (widths["op"] + widths["sel"])
        w |= data << (widths["op"] + widths["sel"] + widths["addr"])
        words.append(w)
    return words


class SelfTest(wiring.Component):
    """Run a ROM program on ``layer`` (a ``LinearLayer``) and compare its results.

    After reset the program runs from its first word: one host write per
    two cycles (fetch, execute), each step waits for ``busy`` to fall, each accumulator word is
    compared one cycle after its address. ``done`` rises at the end and stays; ``passed`` is
    ``done`` and no mismatch, ``failed`` any mismatch so far (``failed`` may rise before
    ``done``). No back-pressure, no rounding: exact integer compares.

    Parameters
    ----------
    layer : LinearLayer
        The layer under test, elaborated as the submodule ``layer``.
    ops : list of (op, sel, addr, data)
        The program (``OP_*``), ending with ``OP_END``.

    Members
    -------
    done, passed, failed : Out(1)
    """

    done: Out(1)
    passed: Out(1)
    failed: Out(1)

    def __init__(self, layer, ops):
        self.dut = layer
        self.widths = rom_widths(layer)
        self.program = rom_words(ops, self.widths)
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
        n_arr = len(dut.host_y_rdata)
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
