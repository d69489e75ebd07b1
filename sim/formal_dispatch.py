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

Mutation (``drop_lane0``): lane 0's ops that do not close a bundle are hidden from the
harness (a dispatcher that loses ops); the proof must fail on it.
"""

from amaranth import Array, Cat, Elaboratable, Module, Mux, Signal, signed
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring

from dstar.config import Packing
from dstar.hw.dispatcher import DISPATCHERS
from dstar.hw.geometry import Geometry

from .formal import reset_first

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

    def __init__(self, geo: Geometry, packing: Packing, *, drop_lane0: bool = False):
        self.geo = geo
        self.packing = Packing(packing)
        self.drop_lane0 = drop_lane0

    def elaborate(self, platform):
        geo = self.geo
        g_n, s_n = geo.lanes, geo.slice_groups
        strict = self.packing is Packing.COMPACT     # lockstep issues idle (nibble 0) ops
        m = Module()
        m.submodules.dut = dut = DISPATCHERS[self.packing](geo)
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
        # Reachable: a slice with both classes completes, after a slice was held back.
        stall = Signal()
        m.d.sync += stall.eq(stall | (dut.i.valid & ~dut.i.ready & (taken == n)))
        m.d.comb += Cover(closed & Cat(*any_high).any() & Cat(*any_low).any() & stall & (n > 0),
                          "a mixed slice, held back, fully dispatched")
        return m
