"""Formal property: the precision dispatcher passes on every nibble operation exactly once.

``DispatchHarness`` drives a dispatcher (either ``Packing``) with free slices, free
``o_token.ready`` and free partial-sum returns (``dispatcher_contract``), and follows one
symbolic slice (the ``n``-th taken, ``n`` an ``AnyConst``) through the lanes: a lane's ops come
in its bundles' order and ``close`` ends a bundle, so counting each lane's bundles in
(``o_token.payload.mask``) and out (``close``) tells which of a lane's ops belong to slice ``n``;
the op's ``row`` (group ``j``), ``rot`` (element ``lane_element(lane, rot)``) and ``shift``
(``e_j``: first pass, ``e_j + 4``: second) name the element and pass it carries. Asserted:

* every op of slice ``n`` is one its elements need (LOW ``q`` at ``e_j``; HIGH ``q & 15`` at
  ``e_j`` and ``q >> 4`` at ``e_j + 4``), with that nibble, and no element pass is issued twice
  (lockstep's idle lanes may issue ops of nibble 0 for elements that need none);
* once every lane the slice was given to has closed it, every pass its elements need was issued
  (nothing lost).

With ``invariant`` (the compact dispatcher only) the harness also asserts what makes the
property inductive (``_lane_invariant``: where slice ``n``'s bundle is in each lane and what it
holds; the lane queues become ``RegisterFIFO`` s so that their words can be named), and the
proof runs by k-induction (``mode="prove"``), for every depth; plain bmc of the compact
dispatcher did not reach depth 20.

Mutation (``drop_lane0``): lane 0's ops that do not close a bundle are hidden from the
harness (a dispatcher that loses ops); the proof must fail on it.
"""

from unittest import mock

from amaranth import Array, Cat, Elaboratable, Module, Mux, Signal, signed
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data, wiring

import dstar.hw.dispatcher as dispatcher_mod
from dstar.config import Packing
from dstar.hw.dispatcher import DISPATCHERS, bundle_layout
from dstar.hw.geometry import Geometry

from .formal import reset_first
from .formal_fifo import RegisterFIFO
from .formal_sorter import _driven

__all__ = ["dispatcher_contract", "DispatchHarness"]

#: Bits of the harness's slice and bundle counters (more than any proof depth).
_COUNT_BITS = 6


def dispatcher_contract(m: Module, dut: wiring.Component) -> None:
    """The dispatcher's input contract as assumptions: a lane's partial sum is returned
    (``i_pop``) only after the lane closed it (a partial sum the reduction holds), and ``clear``
    (a layer run's start) comes while no slice is offered (the lane rotation chosen for an
    offered slice depends on the excess that ``clear`` zeroes)."""
    for lane, op in enumerate(dut.o_op):
        owed = Signal(_COUNT_BITS, name=f"owed_{lane}")
        m.d.sync += owed.eq(owed + (op.valid & op.payload.close) - dut.i_pop[lane])
        m.d.comb += Assume(~dut.i_pop[lane] | (owed != 0))
    m.d.comb += Assume(~dut.clear | ~dut.i.valid)


def _nibble(q, second):
    """The operand of pass ``second`` of code ``q`` (spec: LOW ``q``; HIGH ``q & 15`` then
    ``q >> 4``), written apart from ``hw.dispatcher``'s."""
    high = (q > 7) | (q < -8)
    return Mux(second, q >> 4, Mux(high, q & 15, q))


class DispatchHarness(Elaboratable):
    """Every op of one symbolic slice exactly once (the module docstring), for the dispatcher
    of ``packing`` on ``geo``."""

    def __init__(self, geo: Geometry, packing: Packing, *, drop_lane0: bool = False,
                 invariant: bool = False):
        self.geo = geo
        self.packing = Packing(packing)
        self.drop_lane0 = drop_lane0
        self.invariant = invariant
        if invariant and self.packing is not Packing.COMPACT:
            raise ValueError("the lane-queue invariant is the compact dispatcher's")

    def elaborate(self, platform):
        geo = self.geo
        g_n, s_n = geo.lanes, geo.slice_groups
        strict = self.packing is Packing.COMPACT     # lockstep issues idle (nibble 0) ops
        m = Module()
        dut = DISPATCHERS[self.packing](geo)
        queues = []
        if self.invariant:
            # The lane queues as RegisterFIFOs, so that the invariant can name their words.
            def fifo(*, width, depth):
                queues.append(RegisterFIFO(width=width, depth=depth))
                return queues[-1]

            dut._MustUse__silence = True
            with mock.patch.object(dispatcher_mod, "SyncFIFO", fifo):
                body = dut.elaborate(platform)
            m.submodules.dut = body
        else:
            m.submodules.dut = dut
        reset_first(m)
        m.d.comb += [dut.i.valid.eq(AnySeq(1)),
                     dut.i.payload.eq(AnySeq(dut.i.payload.shape().size)),
                     dut.o_token.ready.eq(AnySeq(1)), dut.i_pop.eq(AnySeq(g_n)),
                     dut.clear.eq(AnySeq(1))]
        dispatcher_contract(m, dut)

        n = Signal(_COUNT_BITS)
        m.d.comb += n.eq(AnyConst(_COUNT_BITS))
        take = Signal()
        m.d.comb += take.eq(dut.i.valid & dut.i.ready)
        taken = Signal(_COUNT_BITS)           # slices taken so far
        m.d.sync += taken.eq(taken + take)
        mine = take & (taken == n)

        # Slice n as it was taken: codes, shifts, the lanes it was given to, and each lane's
        # bundle number for it.
        got = Signal()
        codes = [[Signal(signed(8), name=f"q_{j}_{e}") for e in range(g_n)] for j in range(s_n)]
        shifts = [Signal(geo.cfg.shift_bits, name=f"e_{j}") for j in range(s_n)]
        mask = Signal(g_n)
        b_in = [Signal(_COUNT_BITS, name=f"bundles_in_{lane}") for lane in range(g_n)]
        b_out = [Signal(_COUNT_BITS, name=f"bundles_out_{lane}") for lane in range(g_n)]
        b_mine = [Signal(_COUNT_BITS, name=f"bundle_n_{lane}") for lane in range(g_n)]
        with m.If(mine):
            m.d.sync += [got.eq(1), mask.eq(dut.o_token.payload.mask)]
            m.d.sync += [b_mine[lane].eq(b_in[lane]) for lane in range(g_n)]
            for j in range(s_n):
                grp = dut.i.payload.groups[j]
                m.d.sync += shifts[j].eq(grp.shift)
                m.d.sync += [codes[j][e].eq(grp.q[e]) for e in range(g_n)]
        for lane in range(g_n):
            m.d.sync += b_in[lane].eq(b_in[lane] + (take & dut.o_token.payload.mask[lane]))

        # Which element passes of slice n were seen: [j][e][pass].
        seen = [[[Signal(name=f"seen_{j}_{e}_{p}") for p in range(2)] for e in range(g_n)]
                for j in range(s_n)]
        for lane in range(g_n):
            op = dut.o_op[lane]
            valid = op.valid
            if self.drop_lane0 and lane == 0:
                valid = op.valid & op.payload.close
            m.d.sync += b_out[lane].eq(b_out[lane] + (valid & op.payload.close))
            ours = Signal(name=f"ours_{lane}")
            m.d.comb += ours.eq(valid & got & mask[lane] & (b_out[lane] == b_mine[lane]))
            j = op.payload.row
            elem = Signal(range(g_n), name=f"elem_{lane}")
            sel = geo.lane_element(lane, 0)
            for r in range(1, geo.rotation):
                sel = Mux(op.payload.rot == r, geo.lane_element(lane, r), sel)
            m.d.comb += elem.eq(sel)
            q = Signal(signed(8), name=f"op_q_{lane}")
            e_j = Signal(geo.cfg.shift_bits, name=f"op_e_{lane}")
            m.d.comb += [q.eq(Array(Array(row) for row in codes)[j][elem]),
                         e_j.eq(Array(shifts)[j])]
            second = Signal(name=f"second_{lane}")
            m.d.comb += second.eq(op.payload.shift == e_j + 4)
            needed = (q != 0) & (~second | (q > 7) | (q < -8))
            with m.If(ours):
                m.d.comb += Assert(j < s_n, f"lane {lane}: row beyond the slice")
                m.d.comb += Assert((op.payload.shift == e_j) | second,
                                   f"lane {lane}: shift is neither e nor e + 4")
                with m.If(needed):
                    m.d.comb += Assert(op.payload.nib == _nibble(q, second),
                                       f"lane {lane}: wrong nibble")
                    for jj in range(s_n):
                        for ee in range(g_n):
                            for p in range(2):
                                hit = (j == jj) & (elem == ee) & (second == p)
                                with m.If(hit):
                                    m.d.comb += Assert(~seen[jj][ee][p],
                                                       f"lane {lane}: op issued twice")
                                    m.d.sync += seen[jj][ee][p].eq(1)
                with m.Else():
                    if strict:
                        m.d.comb += Assert(0, f"lane {lane}: op for a pass nobody needs")
                    else:
                        m.d.comb += Assert(op.payload.nib == 0,
                                           f"lane {lane}: idle op with a non-zero nibble")

        # Completion: every lane slice n went to has closed it, so every needed pass was seen.
        closed = Signal()
        m.d.comb += closed.eq(got & Cat(*[~mask[lane] | (b_out[lane] > b_mine[lane])
                                          for lane in range(g_n)]).all())
        all_seen, any_high, any_low = [], [], []
        for j in range(s_n):
            for e in range(g_n):
                q = codes[j][e]
                high = (q > 7) | (q < -8)
                all_seen += [(q == 0) | seen[j][e][0], ~high | seen[j][e][1]]
                any_high.append(high)
                any_low.append((q != 0) & ~high)
        with m.If(closed):
            m.d.comb += Assert(Cat(*all_seen).all(), "slice closed with a pass missing")
        if self.invariant:
            self._lane_invariant(m, body, queues, take, taken, n, got, mask, codes, shifts,
                                 seen, b_in, b_out, b_mine, mine)
        # Reachable: a slice with both classes completes, after a slice was held back.
        stall = Signal()
        m.d.sync += stall.eq(stall | (dut.i.valid & ~dut.i.ready & (taken == n)))
        m.d.comb += Cover(closed & Cat(*any_high).any() & Cat(*any_low).any() & stall & (n > 0),
                          "a mixed slice, held back, fully dispatched")
        return m

    def _lane_invariant(self, m, body, queues, take, taken, n, got, mask, codes, shifts,
                        seen, b_in, b_out, b_mine, mine):
        """What makes the compact dispatcher's proof inductive (``mode="prove"``), per lane:
        the bundles given to it and not closed are the one its sequencer holds (``rem`` not
        0) and its queue's; while slice ``n``'s bundle is among them, it holds ``n``'s codes
        and shifts of the lane's elements (the rotation recorded) and, in the sequencer, the
        passes still to issue are exactly the needed ones not seen (in the queue: none seen);
        once the lane has closed it, every needed pass of its elements was seen; a lane ``n``
        gave nothing to has elements without passes. At most ``2**_COUNT_BITS - 1`` slices
        (the counters never wrap; no bound on cycles)."""
        geo = self.geo
        g_n, s_n = geo.lanes, geo.slice_groups
        lay = bundle_layout(geo)
        m.d.comb += [Assume(~take | (taken != 2 ** _COUNT_BITS - 1)),
                     Assert(got == (taken > n), "slice n recorded, or not, out of turn")]
        rot = _driven(body, "rot") if geo.rotation > 1 else 0
        rec_rot = Signal(geo.rot_bits)
        with m.If(mine):
            m.d.sync += rec_rot.eq(rot)
        with m.If(~got):
            m.d.comb += Assert(~Cat(*[b for row in seen for e in row for b in e]).any(),
                               "a pass seen before slice n")

        def needed(q, p):
            return (q != 0) & ((q > 7) | (q < -8)) if p else q != 0

        for lane in range(g_n):
            q = queues[lane]
            rem = _driven(body, f"rem_{lane}")
            cur = data.View(lay, _driven(body, f"cur_{lane}"))
            busy = rem != 0
            in_lane = Signal(_COUNT_BITS + 2, name=f"in_lane_{lane}")
            m.d.comb += [in_lane.eq(b_out[lane] + q.level + busy),
                         Assert(in_lane == b_in[lane], f"lane {lane}: bundles miscounted"),
                         Assert(q.consistent(), f"lane {lane}: queue pointers and level"),
                         Assert(b_in[lane] <= taken, f"lane {lane}: more bundles than slices")]
            for k, w in enumerate(q.words):     # a lane is given only bundles with work
                off = Mux(q.consume <= k, k - q.consume, k + q.depth - q.consume)
                queued = data.View(lay, w)
                with m.If(off < q.level):
                    m.d.comb += Assert(Cat(*[queued.q[j] != 0 for j in range(s_n)]).any(),
                                       f"lane {lane}: a queued bundle without work")
            elem = geo.lane_element(lane, 0)
            for r in range(1, geo.rotation):
                elem = Mux(rec_rot == r, geo.lane_element(lane, r), elem)
            mine_codes = [Array(codes[j])[elem] for j in range(s_n)]
            mine_seen = [[Array(seen[j][e][p] for e in range(g_n))[elem] for p in range(2)]
                         for j in range(s_n)]

            def holds(bundle, rec_rot=rec_rot, mine_codes=mine_codes):
                return Cat(bundle.rot == rec_rot,
                           *[(bundle.q[j] == mine_codes[j]) & (bundle.shift[j] == shifts[j])
                             for j in range(s_n)]).all()

            given = got & mask[lane]
            pos = Signal(_COUNT_BITS + 1, name=f"pos_{lane}")
            m.d.comb += pos.eq(b_mine[lane] - b_out[lane])
            waiting = given & (b_out[lane] <= b_mine[lane])
            none_seen = ~Cat(*[b for row in mine_seen for b in row]).any()
            with m.If(given):
                m.d.comb += Assert(b_mine[lane] < b_in[lane], f"lane {lane}: n's bundle lost")
            with m.If(waiting & busy & (pos == 0)):
                todo = Cat(*[needed(mine_codes[j], p) & ~mine_seen[j][p]
                             for j in range(s_n) for p in range(2)])
                m.d.comb += [Assert(holds(cur), f"lane {lane}: n's bundle changed"),
                             Assert(rem == todo, f"lane {lane}: passes left differ")]
            with m.Elif(waiting):
                idx = pos - busy + q.consume
                word = data.View(lay, Array(q.words)[Mux(idx >= q.depth, idx - q.depth, idx)])
                m.d.comb += [Assert(holds(word), f"lane {lane}: n's queued bundle changed"),
                             Assert(none_seen, f"lane {lane}: a pass of a queued bundle seen")]
            with m.If(given & (b_out[lane] > b_mine[lane])):
                m.d.comb += Assert(Cat(*[~needed(mine_codes[j], p) | mine_seen[j][p]
                                         for j in range(s_n) for p in range(2)]).all(),
                                   f"lane {lane}: closed with a pass missing")
            with m.If(got & ~mask[lane]):
                m.d.comb += Assert(Cat(*[mine_codes[j] == 0 for j in range(s_n)]).all()
                                   & none_seen, f"lane {lane}: work for a lane not given any")
