"""Formal property: the FMDQ quantization unit's bucket ordering stage issues every entry once,
in order, and holds each group until it is taken.

``BucketHarness`` drives a ``BucketOrder`` (``dstar.hw.fmdq.bucket``) with free windows (bit
matrices of ``channels x levels``), free ``i.valid`` and free ``o.ready``, and follows one
symbolic window (the ``n``-th taken, ``n`` an ``AnyConst``): it records its masks and tag when
it is taken, and the entries issued for it so far (``issued``), over the groups that leave
while ``n`` windows have ended before (a window ends with its ``last`` group). Asserted:

* stream stability: a group offered and not taken is offered again, unchanged;
* of every group of the followed window: the window was taken before; its tag is the recorded
  one; its valid lanes are a prefix, their channels ascending, each a recorded entry of the
  group's level not issued before (no entry invented or duplicated); no entry still to issue
  precedes the group's first (a lower level, or its level with a lower channel: the order, no
  entry skipped); a group with a padding lane leaves nothing of its level behind (groups as
  full as the order allows); ``last`` exactly when nothing is left after it (no entry lost);
  ``empty`` exactly on the one group of a window without entries (all lanes padding, ``last``).

Since ``n`` is free, this holds for every window: windows leave in the order taken, each a
permutation of its entries into the (level, channel) order cut into groups, whatever
``i.valid`` and ``o.ready`` do. The input obeys the stream rule (an offer held until taken).

Cover: the followed window (not the first) leaves after a stall, with two groups of one level.

Mutations: ``drop_ready`` hides ``o.ready`` from the stage (it sees it high: groups are lost);
``reverse_levels`` makes it pick the highest non-empty level instead of the lowest (its
``first_level`` picks: a window's first level and the next one). The proof must fail on each.
"""

from amaranth import Cat, Elaboratable, Module, Signal
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover

import dstar.hw.fmdq.bucket as bucket_mod
from dstar.hw.fmdq.bucket import BucketOrder, _or

from .formal import elaborate_patched, reset_first
from .formal_sorter import _driven

__all__ = ["BucketHarness"]

#: Bits of the harness's window counters (more than any proof depth).
_COUNT_BITS = 6


class BucketHarness(Elaboratable):
    """A ``BucketOrder(channels, levels, tag 2 bits, depth, lanes)`` passes on every window's
    entries once, in order (the module docstring)."""

    def __init__(self, channels: int = 4, levels: int = 3, *, lanes: int = 2, depth: int = 2,
                 drop_ready: bool = False, reverse_levels: bool = False):
        self.channels, self.levels, self.lanes, self.depth = channels, levels, lanes, depth
        self.drop_ready, self.reverse_levels = drop_ready, reverse_levels

    def _stage(self, platform):
        dut = BucketOrder(self.channels, self.levels, 2, depth=self.depth, lanes=self.lanes)
        if not self.reverse_levels:
            return dut, dut
        real = bucket_mod._lowest

        def highest(m, v, name):
            if name != "first_level":
                return real(m, v, name)
            # The highest set bit: reverse, isolate the lowest, reverse back.
            low = real(m, v[::-1], name)
            return low[::-1]

        return dut, elaborate_patched(dut, platform, bucket_mod, "_lowest", highest)

    def elaborate(self, platform):
        C, L, K = self.channels, self.levels, self.lanes
        m = Module()
        dut, body = self._stage(platform)
        if body is dut:                         # its Module, to reach its registers
            dut._MustUse__silence = True
            body = dut.elaborate(platform)
        m.submodules.dut = body
        reset_first(m)
        m.d.comb += [dut.i.valid.eq(AnySeq(1)),
                     dut.i.payload.eq(AnySeq(dut.i.payload.shape().size))]
        ready = Signal()
        m.d.comb += ready.eq(AnySeq(1))
        m.d.comb += dut.o.ready.eq(1 if self.drop_ready else ready)

        # The input contract: an offer is held until taken.
        held = Signal()
        prev = Signal.like(dut.i.payload.as_value())
        m.d.sync += [held.eq(dut.i.valid & ~dut.i.ready), prev.eq(dut.i.payload.as_value())]
        with m.If(held):
            m.d.comb += Assume(dut.i.valid & (dut.i.payload.as_value() == prev))

        # Stream stability of the output.
        o = dut.o.payload
        stalled = Signal()
        o_prev = Signal.like(o.as_value())
        m.d.sync += [stalled.eq(dut.o.valid & ~ready), o_prev.eq(o.as_value())]
        with m.If(stalled):
            m.d.comb += Assert(dut.o.valid, "a stalled group was withdrawn")
            m.d.comb += Assert(o.as_value() == o_prev, "a stalled group changed")

        # The followed window.
        sym = Signal(_COUNT_BITS)
        m.d.comb += sym.eq(AnyConst(_COUNT_BITS))
        taken, ended = Signal(_COUNT_BITS), Signal(_COUNT_BITS)
        take = dut.i.valid & dut.i.ready
        out = dut.o.valid & ready
        m.d.sync += [taken.eq(taken + take), ended.eq(ended + (out & o.last))]
        got = Signal()
        rec = Signal(C * L)                    # bit l * C + c: channel c at level l
        rec_tag = Signal(2)
        with m.If(take & (taken == sym)):
            m.d.sync += [got.eq(1), rec.eq(dut.i.payload.masks.as_value()),
                         rec_tag.eq(dut.i.payload.tag)]
        issued = Signal(C * L)
        mine = Signal()
        m.d.comb += mine.eq(out & (ended == sym))

        # This group's entries as a bit matrix, and what is left to issue before it.
        here = []
        for k in range(K):
            ln = o.lane[k]
            one = Signal(C * L, name=f"lane_bit{k}")
            m.d.comb += one.eq(Cat(*[ln.valid & (o.level == lv) & (ln.ch == c)
                                     for lv in range(L) for c in range(C)]))
            here.append(one)
        group = Signal(C * L)
        m.d.comb += group.eq(_or(here))
        todo = Signal(C * L)
        m.d.comb += todo.eq(rec & ~issued)
        first_bit = Signal(C * L)               # the group's first entry's position
        m.d.comb += first_bit.eq(here[0])
        before = Signal(C * L)                  # positions before it (level-major, channel)
        m.d.comb += before.eq(first_bit - 1)
        after = Signal(C * L)
        m.d.comb += after.eq(todo & ~group)
        level_bits = Signal(C * L)              # the group's level
        m.d.comb += level_bits.eq(Cat(*[(o.level == lv).replicate(C) for lv in range(L)]))

        with m.If(mine):
            m.d.comb += Assert(got, "a window's group left before the window was taken")
            m.d.comb += Assert(o.tag == rec_tag, "the tag changed")
            m.d.comb += Assert(o.level < L, "a level beyond the last")
            m.d.comb += Assert(o.empty == (rec == 0), "empty on a window with entries or not "
                                                      "on one without")
            with m.If(o.empty):
                m.d.comb += Assert(o.last, "an empty window's group without last")
                for k in range(K):
                    m.d.comb += Assert(~o.lane[k].valid, f"lane {k} valid in an empty group")
            with m.Else():
                m.d.comb += Assert(o.lane[0].valid, "a group without entries")
                for k in range(1, K):
                    ln, pv = o.lane[k], o.lane[k - 1]
                    m.d.comb += Assert(~ln.valid | pv.valid, f"lane {k} valid after padding")
                    m.d.comb += Assert(~ln.valid | (ln.ch > pv.ch),
                                       f"lanes {k - 1} and {k} not ascending")
                for k in range(K):
                    m.d.comb += Assert((here[k] & ~todo) == 0,
                                       f"lane {k}: not an entry still to issue")
                m.d.comb += Assert((todo & before) == 0, "an entry skipped")
                m.d.comb += Assert(o.lane[K - 1].valid | ((after & level_bits) == 0),
                                   "a partial group leaves entries of its level behind")
                m.d.comb += Assert(o.last == (after == 0), "last is not the end of the window")
            for k in range(K):
                ln = o.lane[k]
                m.d.comb += Assert(ln.valid | (ln.ch == 0), f"lane {k}: padding channel not 0")
            m.d.sync += issued.eq(issued | group)
        with m.If(out & o.last & (ended == sym)):
            m.d.sync += issued.eq(0)

        # The FIFO and its head register: the ``sym``-th window the extraction takes is the
        # followed one, unchanged.
        hv, head, pop = (_driven(body, n) for n in ("hv", "head", "pop"))
        popped = Signal(_COUNT_BITS)
        m.d.sync += popped.eq(popped + pop)
        with m.If(pop & (popped == sym)):
            m.d.comb += Assert(hv, "the extraction took an empty head")
            m.d.comb += Assert(got, "the followed window left the FIFO before it was taken")
            m.d.comb += Assert(head == Cat(rec, rec_tag), "the FIFO changed a window")
        m.d.comb += Assert((issued & ~rec) == 0, "an entry issued twice or invented")

        stall, two = Signal(), Signal()
        m.d.sync += stall.eq(stall | (dut.o.valid & ~ready & (ended == sym) & got))
        with m.If(mine & ~o.last):
            m.d.sync += two.eq(two | ((after & level_bits) != 0))
        m.d.comb += Cover(mine & o.last & stall & two & (sym > 0),
                          "a window with two groups of one level leaves after a stall")
        return m

