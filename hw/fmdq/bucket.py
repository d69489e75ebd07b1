"""A bucket ordering stage: a window's (channel, level) entries issued in groups, level by level.

The quantization unit (``dstar.hw.fmdq.quant_unit``) can order a window's (channel, slice)
entries with it instead of a sort network (``SortNetwork.BUCKET``): an entry's key is a total
shift of at most ``e_max + 7`` values and a channel, so one bit mask of the window's channels per
key value (a *level*) holds the whole order, and a counting (bucket) sort needs no comparator.
The stage itself knows nothing of FMDQ: it issues any channels-by-levels bit matrix in level
order, channels ascending within a level, up to ``lanes`` entries of one level per group.
Design notes: docs/design/fmdq-qu.md, "Bucket ordering".
"""

from amaranth import Cat, Module, Signal, unsigned
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
    and the tag each); the window being issued is copied into working registers: its current
    level's channels (cleared as they leave) apart from its later levels. Per cycle: the
    current level's lowest ``lanes`` set bits (clear-lowest-bit ``lanes`` times) and, beside
    them, the lowest non-empty later level (a priority pick over the levels' OR), which the
    current level's register loads once it is used up; what remains of both decides ``last``.
    A window is loaded with its lowest non-empty level picked out the same way. This is a
    parallel counting sort: the same order as a sort network on (level, channel) keys, without
    comparators.

    Latency: a window taken at cycle ``t`` can be loaded at ``t + 1`` and its first group is
    offered at ``t + 2`` at the earliest (when the previous window has left: the next one loads
    in the cycle its last group is taken). Throughput: one group per cycle, a window taking
    ``max(groups, 1)`` cycles. Back-pressure: a group is held (payload unchanged) until taken;
    ``i.ready`` is low only when the FIFO is full. Reset empties the FIFO and the working
    register.

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
        m.submodules.fifo = fifo = SyncFIFO(width=in_l.size, depth=self.depth)
        m.d.comb += [fifo.w_data.eq(self.i.payload.as_value()), fifo.w_en.eq(self.i.valid),
                     self.i.ready.eq(fifo.w_rdy)]
        head = data.View(in_l, fifo.r_data)

        # The window being issued: its current level's channels still to issue (``cur``, at
        # level ``lvl``) apart from its later levels (``rest``), so that a cycle's pick and the
        # decision what comes next start from registers: the next level is picked from
        # ``rest`` beside the lanes' pick from ``cur``, not after it.
        fv = Signal()
        cur = Signal(C)
        lvl = Signal(uwidth(L))
        rest = Signal(data.ArrayLayout(unsigned(C), L))
        tag = Signal(self.tag_layout)
        o = self.o.payload
        rem = cur
        for k in range(self.lanes):                     # find-first-``lanes``
            low = _lowest(m, rem, f"pick{k}")
            m.d.comb += [o.lane[k].valid.eq(rem.any()),
                         o.lane[k].ch.eq(_encode(low, len(o.lane[k].ch)))]
            nxt = Signal(C, name=f"left{k}")
            m.d.comb += nxt.eq(rem & ~low)
            rem = nxt
        nz, nfirst, nbits = _first_level(m, rest, C, L, "next")
        more = Signal()                                 # a later level holds entries
        m.d.comb += more.eq(nz.any())
        m.d.comb += [o.level.eq(lvl), o.last.eq(~rem.any() & ~more), o.empty.eq(~cur.any()),
                     o.tag.eq(tag), self.o.valid.eq(fv)]

        # The next window loads in the cycle the last group is taken: no bubble between windows.
        _, hfirst, hbits = _first_level(m, head.masks, C, L, "head")
        load = Signal()
        m.d.comb += [load.eq(~fv | (self.o.ready & o.last)), fifo.r_en.eq(load)]
        with m.If(load):
            m.d.sync += [fv.eq(fifo.r_rdy), cur.eq(hbits), lvl.eq(_encode(hfirst, len(lvl))),
                         tag.eq(head.tag)]
            m.d.sync += [rest[lv].eq(head.masks[lv] & ~hfirst[lv].replicate(C))
                         for lv in range(L)]
        with m.Elif(self.o.ready):
            with m.If(rem.any()):
                m.d.sync += cur.eq(rem)
            with m.Else():                              # on to the next level
                m.d.sync += [cur.eq(nbits), lvl.eq(_encode(nfirst, len(lvl)))]
                for lv in range(L):
                    with m.If(nfirst[lv]):
                        m.d.sync += rest[lv].eq(0)
        return m


def _first_level(m: Module, masks, channels: int, levels: int, name: str):
    """The levels of ``masks`` that hold entries, the lowest of them one-hot (0 if none; the
    pick is named ``first_level``) and its channels."""
    nz = Signal(levels, name=f"{name}_nz")
    m.d.comb += nz.eq(Cat(*[masks[lv].any() for lv in range(levels)]))
    first = _lowest(m, nz, "first_level")
    bits = Signal(channels, name=f"{name}_bits")
    m.d.comb += bits.eq(_or(masks[lv] & first[lv].replicate(channels) for lv in range(levels)))
    return nz, first, bits


def _or(values):
    """The OR of ``values`` (a balanced tree)."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] | values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]
