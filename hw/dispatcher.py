"""Precision dispatcher: encoded slices in, nibble operations on the PE lanes out.

Ref: dstar-spec.md sections 3 and 5 ("Precision dispatcher"); the operation lists and costs of
both strategies are modelled in ``golden.dispatch`` and, cycle by cycle, in ``sim.cycle_model``.

Element ops: ZERO no op; LOW one op (``nib = q``, shift ``e``); HIGH two ops (``q & 15``
unsigned at shift ``e``, then ``q >> 4`` signed at shift ``e + 4``), so ``sum == q << e``.

Strategies (``cfg.packing``, a ``dstar.config.Packing``; ``DISPATCHERS`` holds each component):

``lockstep``
    The ``G`` lanes run each group of a slice together, for as many passes as its most
    expensive element (all-ZERO groups cost nothing): a slice costs the sum of its groups'
    costs. Lanes of cheaper elements idle (counted as ``count_zero``).

``compact`` (chosen design)
    Per-lane queues over each lane's share of K. A slice is split into ``G`` lane bundles
    (lane ``l`` gets one element of each of the slice's groups, with their shifts: element
    ``(l - r (r + 1) / 2) mod G`` under the slice's rotation ``r``, ``0 <= r < R``, see
    ``Geometry.lane_element``); bundles with a non-zero element enter the lane's queue
    (``lane_fifo_depth`` deep) and a lane sequencer issues only their non-zero nibbles, each
    carrying its weight row and rotation, closing the lane's partial sum with the bundle's last
    nibble. The reduction in the PE array adds the lanes' partial sums of a slice in slice
    order, so lanes drift apart by up to ``lane_fifo_depth`` queued bundles plus ``psum_depth``
    unreduced sums: cost differences between tokens and lanes average out instead of costing
    the maximum each time. The front end takes one whole slice (``k_tile`` elements) per
    cycle.

    Lane balancing: the dispatcher keeps each lane's *excess* (``excess_max``-saturated count
    of the nibble ops given to it beyond the least loaded lane) and gives each slice the
    rotation that minimises ``sum_l excess[l] * ops_r[l]`` (``ops_r[l]``: ops lane ``l`` would
    get under rotation ``r``), ties to ``r = token mod R`` first; the chosen bundle costs are
    then added to the excess and the minimum subtracted. The rule is
    ``dstar.golden.dispatch.lane_rotations``; it depends only on the slice sequence (not on timing),
    and ``clear`` (the start of a layer run) zeroes the excess. Hardware: ``G`` per-element op
    counts, ``R`` excess-weighted sums of ``G`` small products, an ``R``-way minimum, ``G``
    excess registers with a minimum tree; the PE array's weight-row selection is the same as
    for any ``R`` rotations.

    Why this design (the measurements against the alternatives): ``docs/design/dispatcher.md``.

Arrays: every array holds a different block of ``m_tile`` output columns of the same weight
rows, so all arrays receive the same operations (broadcast); their load is equal by
construction, and what the dispatcher balances is lanes and tokens.

Both strategies: throughput one slice per cycle into the dispatcher, with back-pressure on
``i`` while a lane queue the slice needs is full (compact), while the sequencer is busy or the
partial-sum credits are used up (lockstep), or while the reduction's slice queue (``o_token``)
is full. ``i.ready`` depends combinationally on ``i.payload`` (which lanes the slice needs);
no ``valid`` depends on a ``ready``. Lane ops have no back-pressure (the PE array takes one per
lane per cycle); instead a lane starts a bundle only while it holds a partial-sum credit,
returned on ``i_pop``. Ops are never dropped, duplicated or moved to another lane or slice
(``tests/hw/test_dispatcher.py`` and ``tests/hw/test_dispatcher_icarus.py`` check every lane's op
sequence under random gaps, back-pressure and slow reduction). Reset empties the queues;
``clear`` zeroes the op counters.

Members
-------
i : In(stream.Signature(encoded_slice_layout))
o_op : Out(stream.Signature(lane_op_layout, always_ready=True)).array(G)
o_token : Out(stream.Signature(token_layout))
i_pop : In(G)
    Partial sums consumed by the reduction, per lane.
clear : In(1)
count_low, count_high, count_zero : Out(32)
    Issued lane ops on LOW elements, on HIGH elements, and on nothing (lockstep's idle lanes).
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from dstar.config import Packing

from .geometry import COUNTER_BITS, Geometry
from .layouts import encoded_group_layout, encoded_slice_layout, lane_op_layout, token_layout

__all__ = ["LockstepDispatcher", "CompactDispatcher", "DISPATCHERS", "make_dispatcher",
           "bundle_layout"]


def bundle_layout(geo: Geometry) -> data.StructLayout:
    """A lane's share of a slice: one code per group, with the group shifts."""
    return data.StructLayout({
        "q": data.ArrayLayout(signed(8), geo.slice_groups),
        "shift": data.ArrayLayout(unsigned(geo.cfg.shift_bits), geo.slice_groups),
        "rot": unsigned(geo.rot_bits),
        "bank": unsigned(1),
    })


def _signature(geo):
    return {
        "i": In(stream.Signature(encoded_slice_layout(geo))),
        "o_op": Out(stream.Signature(lane_op_layout(geo), always_ready=True)).array(geo.lanes),
        "o_token": Out(stream.Signature(token_layout(geo))),
        "i_pop": In(geo.lanes),
        "clear": In(1),
        "count_low": Out(COUNTER_BITS),
        "count_high": Out(COUNTER_BITS),
        "count_zero": Out(COUNTER_BITS),
    }


def _is_high(q):
    return (q > 7) | (q < -8)


def _nibble(q, second):
    """Operand of pass ``second`` (0 or 1) of code ``q``: LOW ``q`` then nothing, HIGH the
    unsigned low nibble then the signed high nibble."""
    high = _is_high(q)
    lo = Cat(q[0:4], 0).as_signed()
    hi = q >> 4
    return Mux(second, Mux(high, hi, 0), Mux(high, lo, q))


def _lowest(m, bits, name):
    """Index of the lowest set bit of ``bits`` (combinational priority encoder)."""
    idx = Signal(range(max(2, len(bits))), name=name)
    sel = 0
    for b in reversed(range(len(bits))):
        sel = Mux(bits[b], b, sel)
    m.d.comb += idx.eq(sel)
    return idx


def _popcount(bits):
    total = 0
    for b in bits:
        total = total + b
    return total


def _tree_sum(terms):
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def _tree_min(m, values, name):
    level = 0
    while len(values) > 1:
        nxt = []
        for i in range(0, len(values), 2):
            if i + 1 == len(values):
                nxt.append(values[i])
                continue
            v = Signal.like(values[i], name=f"{name}_{level}_{i // 2}")
            a, b = values[i], values[i + 1]
            m.d.comb += v.eq(Mux(b < a, b, a))
            nxt.append(v)
        values, level = nxt, level + 1
    return values[0]


def _counters(m, comp, low, high, zero):
    with m.If(comp.clear):
        m.d.sync += [comp.count_low.eq(0), comp.count_high.eq(0), comp.count_zero.eq(0)]
    with m.Else():
        m.d.sync += [comp.count_low.eq(comp.count_low + _popcount(low)),
                     comp.count_high.eq(comp.count_high + _popcount(high)),
                     comp.count_zero.eq(comp.count_zero + _popcount(zero))]


class CompactDispatcher(wiring.Component):
    """Compacting strategy of the precision dispatcher (contract: the module docstring)."""

    def __init__(self, geo: Geometry):
        self._geo = geo
        super().__init__(_signature(geo))

    def elaborate(self, platform):
        geo = self._geo
        g_n, s_n, depth = geo.lanes, geo.slice_groups, geo.psum_depth
        m = Module()
        sl = self.i.payload
        b_layout = bundle_layout(geo)

        # Each slice takes the rotation that best balances the lanes (golden.dispatch.
        # lane_rotations): ops per element, then per candidate rotation the excess-weighted sum.
        rot = Signal(range(geo.rotation), name="rot")
        ecost = []
        for e in range(g_n):
            c = Signal(range(2 * s_n + 1), name=f"ecost_{e}")
            m.d.comb += c.eq(_popcount([bit for j in range(s_n)
                                        for bit in (sl.groups[j].q[e] != 0,
                                                    _is_high(sl.groups[j].q[e]))]))
            ecost.append(c)
        excess = [Signal(range(geo.excess_max + 1), name=f"excess_{lane}")
                  for lane in range(g_n)]
        if geo.rotation > 1:
            best_key, best_r = None, None
            for r in range(geo.rotation):
                score = Signal(range(g_n * geo.excess_max * 2 * s_n + 1), name=f"score_{r}")
                m.d.comb += score.eq(_tree_sum([excess[lane] * ecost[geo.lane_element(lane, r)]
                                                for lane in range(g_n)]))
                # Ties go to rotation t mod R first: the order is the key's low bits.
                key = Signal(len(score) + geo.rot_bits, name=f"key_{r}")
                m.d.comb += key.eq(Cat((r - sl.meta.token[:geo.rot_bits])[:geo.rot_bits],
                                       score))
                if best_key is None:
                    best_key, best_r = key, r
                else:
                    nk = Signal.like(key, name=f"best_key_{r}")
                    nr = Signal(range(geo.rotation), name=f"best_rot_{r}")
                    m.d.comb += [nk.eq(Mux(key < best_key, key, best_key)),
                                 nr.eq(Mux(key < best_key, r, best_r))]
                    best_key, best_r = nk, nr
            m.d.comb += rot.eq(best_r)
        queues, needs, cands = [], [], []
        for lane in range(g_n):
            q = SyncFIFO(width=b_layout.size, depth=self._geo.cfg.lane_fifo_depth)
            m.submodules[f"queue_{lane}"] = q
            queues.append(q)
            bundle = Signal(b_layout, name=f"bundle_{lane}")
            m.d.comb += [bundle.bank.eq(sl.meta.bank), bundle.rot.eq(rot)]
            for j in range(s_n):
                code = sl.groups[j].q[geo.lane_element(lane, 0)]
                for r in range(1, geo.rotation):
                    code = Mux(rot == r, sl.groups[j].q[geo.lane_element(lane, r)], code)
                m.d.comb += [bundle.q[j].eq(code), bundle.shift[j].eq(sl.groups[j].shift)]
            cand = Signal(range(2 * s_n + 1), name=f"cand_{lane}")
            sel = ecost[geo.lane_element(lane, 0)]
            for r in range(1, geo.rotation):
                sel = Mux(rot == r, ecost[geo.lane_element(lane, r)], sel)
            m.d.comb += cand.eq(sel)
            cands.append(cand)
            need = Signal(name=f"need_{lane}")
            m.d.comb += [need.eq(Cat(*[bundle.q[j] != 0 for j in range(s_n)]).any()),
                         q.w_data.eq(bundle)]
            needs.append(need)

        # Front end: a slice goes in when every lane it has work for has room, and the
        # reduction has room for its mask.
        room = Signal()
        m.d.comb += room.eq(Cat(*[~needs[n] | queues[n].w_rdy for n in range(g_n)]).all())
        m.d.comb += [
            self.o_token.valid.eq(self.i.valid & room),
            self.o_token.payload.mask.eq(Cat(*needs)),
            self.o_token.payload.meta.eq(sl.meta),
            self.i.ready.eq(self.o_token.ready & room),
        ]
        take = self.i.valid & self.i.ready
        for lane in range(g_n):
            m.d.comb += queues[lane].w_en.eq(take & needs[lane])

        # Excess update on take: add the slice's ops, subtract the least loaded lane's, saturate.
        if geo.rotation > 1:
            news = []
            for lane in range(g_n):
                nw = Signal(range(geo.excess_max + 2 * s_n + 1), name=f"excess_new_{lane}")
                m.d.comb += nw.eq(excess[lane] + cands[lane])
                news.append(nw)
            low = _tree_min(m, news, "excess_low")
            with m.If(self.clear):
                m.d.sync += [x.eq(0) for x in excess]
            with m.Elif(take):
                for lane in range(g_n):
                    d = news[lane] - low
                    m.d.sync += excess[lane].eq(Mux(d > geo.excess_max, geo.excess_max, d))

        # Lane sequencers.
        lows, highs = [], []
        for lane in range(g_n):
            cur = Signal(b_layout, name=f"cur_{lane}")
            rem = Signal(2 * s_n, name=f"rem_{lane}")
            out = Signal(range(depth + 1), name=f"credit_used_{lane}")
            b = _lowest(m, rem, f"pick_{lane}")
            j, second = b >> 1, b[0]
            qj = Signal(signed(8), name=f"qsel_{lane}")
            ej = Signal(unsigned(geo.cfg.shift_bits), name=f"esel_{lane}")
            m.d.comb += [qj.eq(cur.q[j]), ej.eq(cur.shift[j])]
            rest = Signal(2 * s_n, name=f"rest_{lane}")
            m.d.comb += rest.eq(rem & ~(1 << b))
            op = self.o_op[lane]
            close = rest == 0
            m.d.comb += [
                op.valid.eq(rem != 0),
                op.payload.nib.eq(_nibble(qj, second)),
                op.payload.shift.eq(ej + Mux(second, 4, 0)),
                op.payload.row.eq(j),
                op.payload.rot.eq(cur.rot),
                op.payload.bank.eq(cur.bank),
                op.payload.close.eq(close),
            ]
            head = data.View(b_layout, queues[lane].r_data)
            load = Signal(name=f"load_{lane}")
            m.d.comb += [load.eq(((rem == 0) | close) & queues[lane].r_rdy & (out < depth)),
                         queues[lane].r_en.eq(load)]
            with m.If(load):
                m.d.sync += [cur.eq(head), rem.eq(_passes(head.q))]
            with m.Elif(rem != 0):
                m.d.sync += rem.eq(rest)
            m.d.sync += out.eq(out + load - self.i_pop[lane])
            high = _is_high(qj)
            lows.append(op.valid & ~high)
            highs.append(op.valid & high)
        _counters(m, self, lows, highs, [])
        return m


def _passes(codes):
    """Remaining-pass mask of a list of codes: bit 2j pass 0 of code j, bit 2j+1 pass 1."""
    bits = []
    for q in codes:
        bits += [q != 0, _is_high(q)]
    return Cat(*bits)


class LockstepDispatcher(wiring.Component):
    """Lockstep strategy of the precision dispatcher (contract: the module docstring)."""

    def __init__(self, geo: Geometry):
        self._geo = geo
        super().__init__(_signature(geo))

    def elaborate(self, platform):
        geo = self._geo
        g_n, s_n, depth = geo.lanes, geo.slice_groups, geo.psum_depth
        m = Module()
        sl = self.i.payload
        cur = Signal(encoded_slice_layout(geo))
        rem = Signal(2 * s_n)
        out = Signal(range(depth + 1), name="credit_used")

        b = _lowest(m, rem, "pick")
        j, second = b >> 1, b[0]
        rest = Signal(2 * s_n)
        m.d.comb += rest.eq(rem & ~(1 << b))
        close = rest == 0
        free = (rem == 0) | close

        group_bits = []
        for g in range(s_n):
            codes = [sl.groups[g].q[lane] for lane in range(g_n)]
            group_bits += [Cat(*[q != 0 for q in codes]).any(),
                           Cat(*[_is_high(q) for q in codes]).any()]
        nonzero = Signal()
        m.d.comb += nonzero.eq(Cat(*group_bits).any())
        ok = Signal()
        m.d.comb += [
            ok.eq(free & (~nonzero | (out < depth))),
            self.o_token.valid.eq(self.i.valid & ok),
            self.o_token.payload.mask.eq(Mux(nonzero, (1 << g_n) - 1, 0)),
            self.o_token.payload.meta.eq(sl.meta),
            self.i.ready.eq(self.o_token.ready & ok),
        ]
        take = self.i.valid & self.i.ready
        with m.If(take):
            m.d.sync += [cur.eq(sl), rem.eq(Cat(*group_bits))]
        with m.Elif(rem != 0):
            m.d.sync += rem.eq(rest)
        m.d.sync += out.eq(out + (take & nonzero) - self.i_pop[0])

        group = Signal(encoded_group_layout(geo))
        m.d.comb += group.eq(cur.groups[j])
        lows, highs, zeros = [], [], []
        for lane in range(g_n):
            op = self.o_op[lane]
            q = group.q[lane]
            nib = _nibble(q, second)
            m.d.comb += [
                op.valid.eq(rem != 0),
                op.payload.nib.eq(nib),
                op.payload.shift.eq(group.shift + Mux(second, 4, 0)),
                op.payload.row.eq(j),
                op.payload.bank.eq(cur.meta.bank),
                op.payload.close.eq(close),
            ]
            high = _is_high(q)
            useful = (q != 0) & (~second | high)
            lows.append(op.valid & useful & ~high)
            highs.append(op.valid & useful & high)
            zeros.append(op.valid & ~useful)
        _counters(m, self, lows, highs, zeros)
        return m


#: The dispatcher component of each ``Packing`` (all take a ``Geometry``, same signature).
DISPATCHERS: dict[Packing, type[wiring.Component]] = {
    Packing.LOCKSTEP: LockstepDispatcher,
    Packing.COMPACT: CompactDispatcher,
}


def make_dispatcher(geo: Geometry) -> wiring.Component:
    """The dispatcher of ``geo.cfg.packing``."""
    return DISPATCHERS[geo.cfg.packing](geo)
