"""``amaranth.lib.fifo.SyncFIFO`` with its storage in registers, for proofs by induction.

An SMT solver sees a ``Memory`` as an array no harness can name, so an invariant cannot say
what a queue holds; k-induction then fails on states whose queued words differ, since a
stalled consumer may leave a word unread for any number of cycles. ``RegisterFIFO`` is
``SyncFIFO``'s logic (the same ``produce`` / ``consume`` / ``level`` updates, ``w_rdy`` /
``r_rdy`` from ``level``, the head word read combinationally, a write visible from the next
cycle) with the words in registers (``words``) and the pointers as attributes.
``FifoMatchHarness`` checks the two behave alike: same inputs, same outputs, whatever the
pushes and pops.
"""

from amaranth import Array, Module, Mux, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Elaboratable
from amaranth.lib.fifo import SyncFIFO

from .formal import reset_first

__all__ = ["FifoMatchHarness", "RegisterFIFO"]


class RegisterFIFO(SyncFIFO):
    """``SyncFIFO(width=width, depth=depth)`` with its storage in ``words`` (registers) and
    its read and write pointers ``consume`` and ``produce``, for harnesses to name."""

    def __init__(self, *, width, depth):
        super().__init__(width=width, depth=depth)
        self.words = [Signal(width, name=f"word_{i}") for i in range(depth)]
        self.produce = Signal(range(depth))
        self.consume = Signal(range(depth))

    def consistent(self):
        """Whether the pointers and the level agree (``level <= depth``, ``produce`` at
        ``consume + level`` modulo ``depth``): true in every reachable state, an invariant for
        k-induction (whose start states are arbitrary)."""
        at = self.consume + self.level
        wrapped = Mux(at >= self.depth, at - self.depth, at)
        return (self.level <= self.depth) & (self.produce == wrapped[:len(self.produce)])

    def elaborate(self, platform):
        m = Module()
        depth, level = self.depth, self.level
        m.d.comb += [self.w_rdy.eq(level != depth), self.r_rdy.eq(level != 0),
                     self.w_level.eq(level), self.r_level.eq(level)]
        do_read, do_write = self.r_rdy & self.r_en, self.w_rdy & self.w_en
        words = Array(self.words)

        def incr(v):
            return Mux(v == depth - 1, 0, v + 1)

        with m.If(do_write):
            m.d.sync += [words[self.produce].eq(self.w_data), self.produce.eq(incr(self.produce))]
        m.d.comb += self.r_data.eq(words[self.consume])
        with m.If(do_read):
            m.d.sync += self.consume.eq(incr(self.consume))
        with m.If(do_write & ~do_read):
            m.d.sync += level.eq(level + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += level.eq(level - 1)
        return m


class FifoMatchHarness(Elaboratable):
    """``RegisterFIFO`` and ``SyncFIFO`` of the same size, fed the same free pushes, words and
    pops: same ``w_rdy``, ``r_rdy``, ``level``, and the same head word whenever there is one.
    Mutant ``stale_head``: the register queue shows the head word a cycle late."""

    def __init__(self, width: int = 2, depth: int = 4, *, stale_head: bool = False):
        self.width, self.depth, self.stale_head = width, depth, stale_head

    def elaborate(self, platform):
        m = Module()
        m.submodules.ref = ref = SyncFIFO(width=self.width, depth=self.depth)
        m.submodules.reg = reg = RegisterFIFO(width=self.width, depth=self.depth)
        reset_first(m)
        w_en, w_data, r_en = Signal(), Signal(self.width), Signal()
        m.d.comb += [w_en.eq(AnySeq(1)), w_data.eq(AnySeq(self.width)), r_en.eq(AnySeq(1))]
        for q in (ref, reg):
            m.d.comb += [q.w_en.eq(w_en), q.w_data.eq(w_data), q.r_en.eq(r_en)]
        head = reg.r_data
        if self.stale_head:
            head = Signal(self.width)
            m.d.sync += head.eq(reg.r_data)
        m.d.comb += [Assert(ref.w_rdy == reg.w_rdy, "w_rdy differs"),
                     Assert(ref.r_rdy == reg.r_rdy, "r_rdy differs"),
                     Assert(ref.level == reg.level, "level differs")]
        with m.If(ref.r_rdy):
            m.d.comb += Assert(ref.r_data == head, "head word differs")
        m.d.comb += Cover((ref.level == self.depth) & r_en & w_en)
        return m
