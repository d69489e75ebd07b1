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

With ``invariant`` the proof is by k-induction (``mode="prove"``), for every depth: the
stage's FIFO is a ``RegisterFIFO`` (``SyncFIFO``'s logic with its words in registers), its
registers are named (``STAGE_NAMES``: tuple assignments leave them without names of their
own), and ``_invariant`` states, in every cycle, what each holds: G's ranks, lanes and count
left consistent with its level's channels; the harness's counters (windows taken, popped
from the head, ended) ordered, their differences the windows waiting (head and FIFO) and the
windows taken apart (extraction, R, G); the followed window, while waiting, unchanged in the
head or its FIFO entry, and while taken apart, its entries not yet issued exactly G's
channels left, R's level and the extraction's ``rest`` (whole levels of it, in order, the
issued ones all before them). Traces are limited to fewer than ``2**_COUNT_BITS`` windows
(the counters do not wrap).

Cover: the followed window (not the first) leaves after a stall, with two groups of one level.

Mutations: ``drop_ready`` hides ``o.ready`` from the stage (it sees it high: groups are lost);
``reverse_levels`` makes it pick the highest non-empty level instead of the lowest (its
``first_level`` picks: a window's first level and the next one). The proof must fail on each.
"""

from contextlib import ExitStack
from unittest import mock

from amaranth import Array, Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover

import dstar.hw.fmdq.bucket as bucket_mod
from dstar.hw.fmdq.bucket import BucketOrder, _or

from .formal import reset_first, unnamed_signals
from .formal_fifo import RegisterFIFO
from .formal_sorter import _driven

__all__ = ["BucketHarness", "STAGE_NAMES"]

#: The signals ``BucketOrder.elaborate`` creates without a ``name`` argument, in order.
STAGE_NAMES = ("hv", "head", "pop", "hfree", "bypass", "head_nz", "fv", "rest", "rest_nz",
               "tag", "src", "stag", "more", "r_v", "r_bits", "r_lvl", "r_last", "r_empty",
               "r_tag", "g_v", "g_bits", "g_lvl", "g_last", "g_empty", "g_tag", "g_rank",
               "left", "level_end", "step", "take_r", "ext")

#: Bits of the harness's window counters (more than any proof depth).
_COUNT_BITS = 6


class BucketHarness(Elaboratable):
    """A ``BucketOrder(channels, levels, tag 2 bits, depth, lanes)`` passes on every window's
    entries once, in order (the module docstring); ``invariant``: with the invariants that make
    it a proof by k-induction."""

    def __init__(self, channels: int = 4, levels: int = 3, *, lanes: int = 2, depth: int = 2,
                 drop_ready: bool = False, reverse_levels: bool = False,
                 invariant: bool = False):
        self.channels, self.levels, self.lanes, self.depth = channels, levels, lanes, depth
        self.drop_ready, self.reverse_levels = drop_ready, reverse_levels
        self.invariant = invariant

    def _stage(self, platform):
        """The stage elaborated (its ``Module``, to reach its registers), with the mutation;
        with ``invariant`` its FIFO a ``RegisterFIFO`` and its registers by ``STAGE_NAMES``."""
        dut = BucketOrder(self.channels, self.levels, 2, depth=self.depth, lanes=self.lanes)
        dut._MustUse__silence = True
        real = bucket_mod._lowest

        def highest(m, v, name):
            if name != "first_level":
                return real(m, v, name)
            # The highest set bit: reverse, isolate the lowest, reverse back.
            low = real(m, v[::-1], name)
            return low[::-1]

        with ExitStack() as patches:
            if self.reverse_levels:
                patches.enter_context(mock.patch.object(bucket_mod, "_lowest", highest))
            if not self.invariant:
                return dut, dut.elaborate(platform), None
            patches.enter_context(mock.patch.object(bucket_mod, "SyncFIFO", RegisterFIFO))
            with unnamed_signals(bucket_mod, STAGE_NAMES, "BucketOrder.elaborate") as regs:
                body = dut.elaborate(platform)
        return dut, body, regs

    def elaborate(self, platform):
        C, L, K = self.channels, self.levels, self.lanes
        m = Module()
        dut, body, regs = self._stage(platform)
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

        if regs is not None:
            m.d.comb += Assume(~take | (taken != (1 << _COUNT_BITS) - 1))
            self._invariant(m, body, regs, sym, taken, popped, ended, got, rec, rec_tag,
                            issued)

        stall, two = Signal(), Signal()
        m.d.sync += stall.eq(stall | (dut.o.valid & ~ready & (ended == sym) & got))
        with m.If(mine & ~o.last):
            m.d.sync += two.eq(two | ((after & level_bits) != 0))
        m.d.comb += Cover(mine & o.last & stall & two & (sym > 0),
                          "a window with two groups of one level leaves after a stall")
        return m

    def _invariant(self, m, body, r, sym, taken, popped, ended, got, rec, rec_tag, issued):
        """Where each window is (the FIFO, the head, the extraction's ``rest``, R, G, by the
        counters: every window taken and not popped waits in the head or the FIFO, every one
        popped and not ended is in the extraction, R or G) and what each register holds of
        the followed one, asserted in every cycle so that the proof is k-inductive (for
        traces of fewer than ``2**_COUNT_BITS`` windows)."""
        C, L, K = self.channels, self.levels, self.lanes
        fifo = body.submodules.fifo
        want = [_driven(body, f"want{k}") for k in range(K)]
        hv, fv, r_v, g_v = r["hv"], r["fv"], r["r_v"], r["g_v"]
        g_bits, g_rank, g_lvl = r["g_bits"], r["g_rank"], r["g_lvl"]

        def popcount(bits):
            return sum(bits[c].as_unsigned() for c in range(len(bits)))

        def at_level(bits, lv):                 # ``bits`` (C) placed at level ``lv``
            return Cat(*[bits & (lv == lev).replicate(C) for lev in range(L)])

        def levels_above(lv):
            return Cat(*[(lv < lev).replicate(C) for lev in range(L)])

        inv = []
        # The registered non-empty levels: those of the head's masks and of ``rest``.
        inv += [r["head_nz"] == Cat(*[r["head"].masks[lv].any() for lv in range(L)]),
                r["rest_nz"] == Cat(*[r["rest"][lv].any() for lv in range(L)])]
        # The stages by themselves.
        inv += [fifo.consistent(), (fifo.level == 0) | hv,
                ~r_v | (r["r_last"] == ~fv), ~r_v | (r["r_empty"] == (r["r_bits"] == 0)),
                ~r_v | (r["r_lvl"] < L), ~r_v | ~r["r_empty"] | ((r["r_lvl"] == 0) & ~fv),
                ~fv | (r["rest"].as_value() != 0),
                ~g_v | (g_lvl < L), ~g_v | (r["g_empty"] == (g_bits == 0)),
                ~g_v | ~r["g_empty"] | (r["g_last"] & (r["left"] == 0) & (want[0] == 0)),
                ~g_v | r["g_last"] | r_v | fv]
        # G: the ranks of its channels, lane k at rank ``want[0] + k``, ``left`` the rest.
        inv += [~g_v | (want[k] == want[0] + k) for k in range(1, K)]
        inv += [~g_v | (g_rank[c] == popcount(g_bits[:c])) for c in range(1, C)]
        inv += [~g_v | (g_rank[0] == 0), ~g_v | (want[0] % K == 0),
                ~g_v | (want[0] + r["left"] == popcount(g_bits)),
                ~g_v | r["g_empty"] | (r["left"] > 0)]
        # The counters: taken >= popped >= ended, the difference the windows in between.
        inv += [ended <= popped, popped <= taken, got == (sym < taken),
                taken - popped == hv + fifo.level,
                popped - ended == g_v + ((r_v | fv) & ~(g_v & ~r["g_last"]))]
        # The followed window waiting: in the head or the FIFO, unchanged.
        window = Cat(rec, rec_tag)
        inv.append(~hv | (sym != popped) | (r["head"].as_value() == window))
        words = Array(fifo.words)
        for j in range(fifo.depth):
            at = Signal(range(fifo.depth), name=f"fifo_at{j}")
            s = fifo.consume + j
            m.d.comb += at.eq(Mux(s >= fifo.depth, s - fifo.depth, s))
            inv.append((fifo.level <= j) | (sym != popped + 1 + j) | (words[at] == window))
        # Taken apart: issued, then G's channels left, R's level, ``rest``, in this order.
        in_g = g_v & (ended == sym)
        in_r = r_v & (popped - 1 == sym)
        in_x = fv & (popped - 1 == sym)
        started = (ended <= sym) & (sym < popped)
        g_left = Cat(*[g_bits[c] & (g_rank[c] >= want[0]) for c in range(C)])
        g_done = Cat(*[g_bits[c] & (g_rank[c] < want[0]) for c in range(C)])
        parts = Signal(C * L)
        m.d.comb += parts.eq(Mux(in_g, at_level(g_left, g_lvl), 0)
                             | Mux(in_r, at_level(r["r_bits"], r["r_lvl"]), 0)
                             | Mux(in_x, r["rest"].as_value(), 0))
        rem = rec & ~issued
        inv += [~started | (rem == parts), started | (issued == 0),
                ~started | (rem == 0) | ((issued & ~((rem & (~rem + 1)[:C * L]) - 1)) == 0)]
        g_level = at_level(Const((1 << C) - 1, C), g_lvl)
        inv += [~in_g | (at_level(g_bits, g_lvl) == (rec & g_level)),
                ~in_g | ((issued & g_level) == at_level(g_done, g_lvl)),
                ~in_g | (r["g_tag"] == rec_tag), ~in_g | (r["g_empty"] == (rec == 0)),
                ~in_g | (r["g_last"] == ~(in_r | in_x)),
                ~in_g | ~in_r | (g_lvl < r["r_lvl"]),
                ~in_g | ~in_x | ((r["rest"].as_value() & ~levels_above(g_lvl)) == 0),
                ~in_r | (r["r_tag"] == rec_tag), ~in_r | (r["r_empty"] == (rec == 0)),
                ~in_r | ~in_x | ((r["rest"].as_value() & ~levels_above(r["r_lvl"])) == 0),
                ~in_x | (r["tag"] == rec_tag),
                ~in_r | (at_level(r["r_bits"], r["r_lvl"])
                         == (rec & at_level(Const((1 << C) - 1, C), r["r_lvl"])))]
        rest = r["rest"]
        inv += [~in_x | (rest[lev] == 0) | (rest[lev] == rec[lev * C:(lev + 1) * C])
                for lev in range(L)]
        inv += [
                ~started | in_g | in_r | in_x]
        for k, cond in enumerate(inv):
            m.d.comb += Assert(cond, f"bucket invariant {k}")
