"""A bucket ordering stage: a window's (channel, level) entries issued in groups, level by level.

The quantization unit (``dstar.hw.fmdq.quant_unit``) can order a window's (channel, slice)
entries with it instead of a sort network (``SortNetwork.BUCKET``): an entry's key is a total
shift of at most ``e_max + 7`` values and a channel, so one bit mask of the window's channels per
key value (a *level*) holds the whole order, and a counting (bucket) sort needs no comparator.
The stage itself knows nothing of FMDQ: it issues any channels-by-levels bit matrix in level
order, channels ascending within a level, up to ``lanes`` entries of one level per group.
Design notes: docs/design/fmdq-qu.md, "Bucket ordering".
"""

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..geometry import uwidth

__all__ = ["bucket_input_layout", "bucket_group_layout", "BucketOrder"]


def bucket_input_layout(channels: int, levels: int, tag) -> data.StructLayout:
    """One window: ``masks[l]`` bit ``c`` set when channel ``c`` has an entry at level ``l``
    (level 0 issued first); ``tag`` rides along."""
    return data.StructLayout({"masks": data.ArrayLayout(unsigned(channels), levels), "tag": tag})


def bucket_group_layout(channels: int, levels: int, lanes: int, tag) -> data.StructLayout:
    """One group: per lane its channel (0 on a padding lane) and ``valid``; the group's
    ``level``; ``last`` on the window's last group; ``empty`` on the one group of a window
    without entries (every lane padding, ``last`` set); the window's ``tag``."""
    lane = data.StructLayout({"ch": unsigned(uwidth(channels)), "valid": unsigned(1)})
    return data.StructLayout({
        "lane": data.ArrayLayout(lane, lanes),
        "level": unsigned(uwidth(levels)),
        "last": unsigned(1),
        "empty": unsigned(1),
        "tag": tag,
    })


def _lowest(m: Module, v, name: str):
    """The lowest set bit of ``v`` alone (0 when ``v`` is 0): ``v & -v``."""
    low = Signal(len(v), name=name)
    m.d.comb += low.eq(v & (~v + 1)[:len(v)])
    return low


def _encode(onehot, width: int):
    """The index of the set bit of a one-hot (or zero: 0) value, ``width`` bits: per index bit
    an OR of the positions that have it (no priority logic; the input has one bit at most)."""
    return Cat(*[Cat(*[onehot[c] for c in range(len(onehot)) if c >> b & 1]).any()
                 for b in range(width)])


class BucketOrder(wiring.Component):
    """Issue each window's entries (a ``channels`` x ``levels`` bit matrix, ``masks[l]`` bit
    ``c``) in groups: levels from 0 up, each level's channels ascending, a group the next up to
    ``lanes`` entries of the current level (a level's last group may be partial; no group mixes
    levels), one group per cycle; ``last`` on the window's last group. A window without entries
    issues one group with ``empty`` (and ``last``) set; the caller may drop it.

    The windows wait in a FIFO of ``depth`` (their masks and tags, ``channels x levels`` bits
    and the tag each; its head in a register, the others in a ``SyncFIFO`` of ``depth - 1``).
    Three stages, each from registers, so that no cycle's work runs through the next one's (the
    ECP5 Fmax, docs/design/fmdq-hw.md): (1) extraction passes one level a cycle, the lowest
    non-empty one (a priority pick over the levels' OR), of the window being taken apart (its
    later levels in a register) or of the FIFO's head; (2) R holds that level's channels while
    their ranks (set bits below each one) are counted, a prefix-sum tree; (3) G issues the
    level: lane ``k`` of a group takes the channel of rank ``base + k``, ``base`` stepping by
    ``lanes``, and a counter of the entries left decides the lanes' ``valid``, the level's end
    and, on the window's last level, ``last``. This is a parallel counting sort: the same order
    as a sort network on (level, channel) keys, without comparators.

    Latency: a window taken at cycle ``t`` is at the FIFO's head at ``t + 1`` and its first
    group is offered at ``t + 3`` at the earliest (extraction, R, G), or in the cycle after the
    previous window's last group is taken if that is later: extraction and R run ahead of G, so
    windows and levels follow each other without a bubble. Throughput: one group per cycle, a
    window taking ``max(groups, 1)`` cycles of G. Back-pressure: a group is held (payload
    unchanged) until taken; ``i.ready`` is low only when the FIFO is full. Reset empties the
    FIFO and the stages.

    Members
    -------
    i : In(stream.Signature(bucket_input_layout(channels, levels, tag)))
    o : Out(stream.Signature(bucket_group_layout(channels, levels, lanes, tag)))
    """

    def __init__(self, channels: int, levels: int, tag=1, *, depth: int = 2, lanes: int = 4):
        if channels < 1 or levels < 1 or depth < 1 or lanes < 1:
            raise ValueError(f"BucketOrder needs channels, levels, depth and lanes >= 1, got "
                             f"{channels}, {levels}, {depth}, {lanes}")
        self.channels, self.levels, self.depth, self.lanes = channels, levels, depth, lanes
        self.tag_layout = tag
        super().__init__({
            "i": In(stream.Signature(bucket_input_layout(channels, levels, tag))),
            "o": Out(stream.Signature(bucket_group_layout(channels, levels, lanes, tag))),
        })

    def elaborate(self, platform):
        m = Module()
        C, L = self.channels, self.levels
        in_l = bucket_input_layout(C, L, self.tag_layout)
        # The head in a register (``hv``, ``head``), the rest in a FIFO of ``depth - 1``: the
        # extraction starts from a register, not from the storage's read. The head is loaded
        # from the FIFO or, when that is empty, straight from the input, so a window taken at
        # ``t`` is the head at ``t + 1`` and the head is empty only when the FIFO is too.
        m.submodules.fifo = fifo = SyncFIFO(width=in_l.size, depth=self.depth - 1)
        hv = Signal()
        head = Signal(in_l)
        pop = Signal()                                  # the extraction takes the head
        hfree = Signal()
        bypass = Signal()
        # With a FIFO of at least one entry, ``bypass | w_rdy`` is ``w_rdy`` (the bypass is
        # taken only when the FIFO is empty, and an empty FIFO has room): ``i.ready`` is then
        # the FIFO level's alone, not through the stages' hand-offs (the Fmax path: it is the
        # quantization unit's ready, and its source's enables, behind it).
        m.d.comb += [hfree.eq(~hv | pop), bypass.eq(hfree & ~fifo.r_rdy),
                     fifo.w_data.eq(self.i.payload.as_value()),
                     fifo.w_en.eq(self.i.valid & ~bypass),
                     self.i.ready.eq(fifo.w_rdy if self.depth > 1 else bypass),
                     fifo.r_en.eq(hfree)]
        # Which of the head's levels hold entries, registered with it (and ``rest_nz`` with the
        # window being taken apart), so the extraction's level pick starts from flip-flops.
        head_nz = Signal(L)
        f_head = data.View(in_l, fifo.r_data)
        with m.If(hfree):
            with m.If(fifo.r_rdy):
                m.d.sync += [head.eq(fifo.r_data), hv.eq(1), head_nz.eq(_levels(f_head.masks))]
            with m.Else():
                m.d.sync += [head.eq(self.i.payload), hv.eq(self.i.valid),
                             head_nz.eq(_levels(self.i.payload.masks))]
        cb = uwidth(C + 1)                              # holds a count of 0 .. C entries

        # (1) Extraction, one level a cycle: the lowest non-empty level of the window in
        # ``rest`` or, when none is there, of the FIFO's head (then popped), on to R. The only
        # loop is the level pick and its clearing; the lanes' work is in the stages after it.
        fv = Signal()
        rest = Signal(data.ArrayLayout(unsigned(C), L))
        rest_nz = Signal(L)
        tag = Signal(self.tag_layout)
        src = Signal(data.ArrayLayout(unsigned(C), L))
        stag = Signal(self.tag_layout)
        nz = Signal(L, name="next_nz")
        m.d.comb += [src.eq(Mux(fv, rest, head.masks)), stag.eq(Mux(fv, tag, head.tag)),
                     nz.eq(Mux(fv, rest_nz, head_nz))]
        first, bits = _first_level(m, src, nz, C, L, "next")
        more = Signal()                                 # a later level holds entries
        m.d.comb += more.eq((nz & ~first).any())

        # (2) R: one level's channels, its level, ``last`` (the window's last level), ``empty``
        # (a window without entries); its ranks are counted on the way to G.
        r_v, r_bits, r_lvl = Signal(), Signal(C), Signal(uwidth(L))
        r_last, r_empty, r_tag = Signal(), Signal(), Signal(self.tag_layout)
        # (3) G: the level being issued, per channel its rank among the level's channels;
        # ``want[k]``: the rank lane k takes in this group, ``left``: entries still to issue.
        g_v, g_bits, g_lvl = Signal(), Signal(C), Signal(uwidth(L))
        g_last, g_empty, g_tag = Signal(), Signal(), Signal(self.tag_layout)
        g_rank = Signal(data.ArrayLayout(unsigned(cb), C))
        want = [Signal(cb, name=f"want{k}") for k in range(self.lanes)]
        left = Signal(cb)

        o = self.o.payload
        level_end = Signal()
        m.d.comb += level_end.eq(left <= self.lanes)
        for k in range(self.lanes):
            sel = Signal(C, name=f"sel{k}")
            m.d.comb += sel.eq(Cat(*[g_bits[c] & (g_rank[c] == want[k]) for c in range(C)]))
            m.d.comb += [o.lane[k].valid.eq(left > k),
                         o.lane[k].ch.eq(_encode(sel, len(o.lane[k].ch)))]
        m.d.comb += [o.level.eq(g_lvl), o.last.eq(g_last & level_end), o.empty.eq(g_empty),
                     o.tag.eq(g_tag), self.o.valid.eq(g_v)]

        step = Signal()                                 # G issues a group
        take_r = Signal()                               # G loads R's level
        ext = Signal()                                  # R loads the extracted level
        m.d.comb += [step.eq(g_v & self.o.ready),
                     take_r.eq(r_v & (~g_v | (step & level_end))),
                     ext.eq((fv | hv) & (~r_v | take_r)),
                     pop.eq(ext & ~fv)]
        with m.If(ext):
            m.d.sync += [fv.eq(more), tag.eq(stag), r_v.eq(1), r_bits.eq(bits),
                         r_lvl.eq(_encode(first, len(r_lvl))), r_last.eq(~more),
                         r_empty.eq(~nz.any()), r_tag.eq(stag)]
            m.d.sync += [rest[lv].eq(src[lv] & ~first[lv].replicate(C)) for lv in range(L)]
            m.d.sync += rest_nz.eq(nz & ~first)
        with m.Elif(take_r):
            m.d.sync += r_v.eq(0)

        ranks, total = _prefix_counts(m, r_bits, cb)
        with m.If(take_r):
            m.d.sync += [g_v.eq(1), g_bits.eq(r_bits), g_lvl.eq(r_lvl), g_last.eq(r_last),
                         g_empty.eq(r_empty), g_tag.eq(r_tag), left.eq(total)]
            m.d.sync += [g_rank[c].eq(ranks[c]) for c in range(C)]
            m.d.sync += [want[k].eq(k) for k in range(self.lanes)]
        with m.Elif(step):
            with m.If(level_end):
                m.d.sync += g_v.eq(0)
            m.d.sync += [left.eq(left - self.lanes)]
            m.d.sync += [want[k].eq(want[k] + self.lanes) for k in range(self.lanes)]
        return m


def _prefix_counts(m: Module, bits, width: int):
    """Per bit of ``bits`` the number of set bits below it (its rank), and their total,
    ``width`` bits each: inclusive prefix sums over a Sklansky tree (``log2 n`` adders deep),
    on the way from one register to the next."""
    n = len(bits)
    p = [bits[c].as_unsigned() for c in range(n)]
    span = 1
    while span < n:
        for c in range(n):
            if c // span % 2:                           # upper half of a 2 * span block
                s = Signal(width, name=f"psum{span}_{c}")
                m.d.comb += s.eq(p[c] + p[c // span * span - 1])
                p[c] = s
        span *= 2
    ranks = [Const(0, width)] + p[:-1]
    return ranks, p[-1]


def _levels(masks):
    """Which levels of ``masks`` hold entries (bit ``l`` set when ``masks[l]`` is not zero)."""
    return Cat(*[masks[lv].any() for lv in range(len(masks))])


def _first_level(m: Module, masks, nz, channels: int, levels: int, name: str):
    """The lowest of the levels ``nz`` marks (those of ``masks`` that hold entries), one-hot (0
    if none; the pick is named ``first_level``), and its channels."""
    first = _lowest(m, nz, "first_level")
    bits = Signal(channels, name=f"{name}_bits")
    m.d.comb += bits.eq(_or(masks[lv] & first[lv].replicate(channels) for lv in range(levels)))
    return first, bits


def _or(values):
    """The OR of ``values`` (a balanced tree)."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] | values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]
