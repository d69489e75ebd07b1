"""FMDQ quantization unit: a token tile's differences in, its sorted SIMD-4 slice groups out.

Ref: dstar-spec.md sections 7.1, 7.2 and 7.4; the bit-exact contract is ``dstar.golden.fmdq``
(``fmdq_encode`` for the shifts, widths and codes, ``schedule_tile`` for the issue order,
``FmdqEncoded.slices`` for the slices). Design notes and measurements: docs/design/fmdq-qu.md.
"""

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.golden.encoder import _fit_bounds
from dstar.golden.fmdq import LANES, MAX_SLICES, SLICE_BITS

from ..extremes import extremes, pick
from ..geometry import COUNTER_BITS, uwidth
from .bucket import BucketOrder
from .layouts import slice_group_layout, total_shift_bits
from .sorter import BitonicSorter, SortNetwork, register_stages

__all__ = ["DESCENDING", "DEFAULT_ORDER", "qu_input_layout", "update_layout",
           "sort_entry_layout", "sort_latency", "default_buffers", "QuantUnit"]

#: The schedule's order of total shifts (``golden.fmdq.schedule_tile``): True descending, False
#: ascending (ties by ascending channel either way). The sort key is the only thing it changes.
DESCENDING = True

#: The unit's ordering stage unless given (``SortNetwork``; docs/design/fmdq-qu.md, "Bucket
#: ordering", says why).
DEFAULT_ORDER = SortNetwork.BUCKET

#: Front-end pipeline registers: max extraction, width/shift decision, quantize and slice.
FRONT_STAGES = 3


def qu_input_layout(tokens: int, per_beat: int, diff_bits: int,
                    channel_bits: int) -> data.StructLayout:
    """One input beat: ``per_beat`` consecutive sub-channels of a tile (``d[i][t]``: channel
    ``channel + i``, token ``t``, signed ``diff_bits``); ``last``: the last beat of a unit (one
    tile's sub-channels of one sort window, or of a tile's last, partial window)."""
    return data.StructLayout({
        "d": data.ArrayLayout(data.ArrayLayout(signed(diff_bits), tokens), per_beat),
        "channel": unsigned(channel_bits),
        "last": unsigned(1),
    })


def update_layout(tokens: int, per_beat: int, channel_bits: int, e_max: int):
    """The state update of one input beat: per sub-channel its shift ``p``, width ``b`` (bits),
    clipped and saturated flags and codes ``q[t]`` (``Xs[t, channel + i] += q[t] << p``);
    ``channel``: the beat's first channel; ``last``: as the input beat's."""
    sub = data.StructLayout({
        "shift": unsigned(uwidth(e_max + 1)),
        "width": unsigned(4),
        "clipped": unsigned(1),
        "saturated": unsigned(1),
        "q": data.ArrayLayout(signed(8), tokens),
    })
    return data.StructLayout({
        "channel": unsigned(channel_bits),
        "sub": data.ArrayLayout(sub, per_beat),
        "last": unsigned(1),
    })


def sort_entry_layout(window: int, e_max: int) -> data.StructLayout:
    """One (channel, slice) entry of a window, all key: ``ch`` (the tie-breaker), ``tkey`` (the
    total shift, or its complement for a descending order) and ``invalid`` (a slice beyond its
    code's width: sorts after every real one). The slice index and its sign follow from the
    channel's shift and width, read with its codes after the sort."""
    return data.StructLayout({
        "ch": unsigned(uwidth(window)),
        "tkey": unsigned(total_shift_bits(e_max)),
        "invalid": unsigned(1),
    })


def _entry_key(e):
    return Value.cast(e)


def code_word_layout(tokens: int, per_beat: int, e_max: int) -> data.ArrayLayout:
    """A code buffer word: per sub-channel of a beat its codes (raw bits), shift ``p`` and
    slice count ``n = width / 2``."""
    return data.ArrayLayout(data.StructLayout({
        "q": data.ArrayLayout(unsigned(8), tokens),
        "p": unsigned(uwidth(e_max + 1)),
        "n": unsigned(3),
    }), per_beat)


def sort_latency(window: int, reg_every: int = 1, network: SortNetwork | None = None) -> int:
    """Cycles from a window's last beat entering the ordering stage to the packer being able to
    load it: the network's registers (``register_stages``), or 2 for ``SortNetwork.BUCKET``
    (its masks are written into a FIFO as the last beat passes, then its first level is
    extracted into a register, ``BucketOrder``)."""
    if not SortNetwork(DEFAULT_ORDER if network is None else network).is_network:
        return 2
    return register_stages(window * MAX_SLICES, reg_every, MAX_SLICES)


def default_buffers(window: int, per_beat: int, sort_latency: int) -> int:
    """Code-buffer windows that keep the unit from waiting for a free buffer: one being
    written, the ones in the ordering stage, one being packed and read out
    (``dstar.sim.fmdq_qu_cycles`` checks that no window waits at any group count)."""
    beats = window // per_beat
    return 2 + -(-(sort_latency + 3) // beats)


class QuantUnit(wiring.Component):
    """The FMDQ quantization unit (spec 7.2): per token tile, each sub-channel's shift, width
    and codes exactly as ``golden.fmdq.fmdq_encode``, and its 2-bit slices issued as the groups
    of ``golden.fmdq.schedule_tile(shift, width, window)`` window by window, one
    ``slice_group_layout`` payload per group, ``last`` on each window's last group (a *unit* of
    ``hw.fmdq.pe_array``: one tile over one sort window; ``golden.fmdq_pe.units_of``).

    Input organisation: a beat is ``per_beat`` consecutive **sub-channels** (one channel over
    the tile's ``tokens`` tokens, the column of the PE array's output for one output channel),
    so every per-sub-channel decision is made as the beat passes, without a transpose or a
    second pass over the tile. A window is the beats of ``window`` consecutive channels from a
    multiple of ``window`` (``channel``: each beat's first channel), in order; it ends after
    ``window / per_beat`` beats or at a beat with ``last`` (a tile's last, partial window).
    Windows of any tiles may follow each other in any order (the PE array runs every tile of
    one window before the next window). A tile with fewer tokens than ``tokens`` gives its
    missing tokens as 0 (zeros change no decision, as golden's padding rows), and channels past
    ``K`` in a last beat as 0 (width 0: they issue nothing; their update is 0).

    Pipeline: (1) max extraction: per sub-channel the max and min of ``D`` (and of ``D`` with
    the dead zone ``|D| <= tau`` set to 0); (2) decision: the shift ``p`` by v1's rule in closed
    form (the smallest ``p <= e_max`` whose rounding of the extremes fits INT8; *clipped* if
    ``p > e_tol``, *saturated* if none fits, then ``p = e_max``); (3) quantize:
    ``q = (D + 2**(p-1)) >> p`` (round half up), saturated to INT8, 0 in the dead zone, and the
    width: the smallest of 0, 2, 4, 6, 8 bits holding the rounded dead-zoned extremes (rounding
    is monotone, so they bound every code). The codes, ``p`` and the width go to a code buffer
    (``buffers`` windows of ``window`` sub-channels) and to the ``u`` update stream; each
    channel's 4 (channel, slice) entries (key: invalid beyond the width, then total shift
    ``p + 2j`` or its complement for ``descending``, then channel) go to a collector in key
    order. (4) When a window is complete (``window / per_beat`` beats, or a ``last`` beat),
    it is ordered by the ordering stage ``network`` (``SortNetwork``): a sort network's
    ``4 * window`` entries are sorted in a pipelined network (``BitonicSorter`` with runs of 4
    presorted, ``register_stages(4 * window, reg_every, 4)`` cycles), and (5) a shift register
    walks the sorted window, each cycle taking the next up to 4 entries of equal total shift as
    one group; with ``SortNetwork.BUCKET`` the window's entries are instead one bit mask of its
    channels per total-shift key (channel ``c``'s bits: ``p_c + 2j`` for ``j < width_c / 2``,
    a constant pattern shifted by ``p_c``), queued in ``BucketOrder``'s FIFO (one slot per code
    buffer, 1 cycle, then its first key extracted into a register, 1 cycle) and (5) issued key
    by key, each cycle the next up to 4 channels of the current key's mask by their ranks
    (counted as the key enters ``BucketOrder``'s issue stage): the same groups in the same
    order. Either way a skid
    register (a register stage with a registered ``ready``, for the ECP5 Fmax:
    docs/design/fmdq-hw.md) passes the group on, and the next cycle its
    codes, shifts and widths are read from the code buffer (one read port per lane; a buffer is
    free once its window's last group is read); slice ``j = (total - p) / 2`` of each token's
    code is its bits ``2j, 2j + 1``, signed when ``j`` is the width's top slice.

    Output: padding lanes have ``valid = 0``, ``signed = 0``, channel = the window's first
    channel and slices 0 (as ``schedule_tile``). A window whose sub-channels are all width 0
    issues nothing (as ``units_of`` skips it), except a tile's first window (channel 0), which
    issues one empty group (shift 0, every lane padding with channel 0, ``last``): its unit
    writes the tile's rows in the PE array (``dstar.sim.fmdq_cycles``).

    Latency: an input beat's update leaves ``FRONT_STAGES`` cycles after the beat is accepted
    (when ``u`` is ready and the collector has room); a window's first group is offered
    ``sort_latency + 3`` cycles after its last beat's update at the earliest, when the packer
    is free (``sort_latency``: the network's registers, 2 for the bucket stage);
    ``dstar.sim.fmdq_qu_cycles`` gives every cycle with both outputs always ready (its
    ``capacity``: ``order_capacity``, the windows the ordering stage holds).
    Throughput: one input beat per cycle and one group per cycle; a window takes ``window /
    per_beat`` input cycles and ``max(groups, 1)`` packing cycles, so groups leave at one per
    cycle while a window's groups are at least its beats (otherwise the input is the bound).
    Back-pressure: ``o`` stalls the packer and, once the ordering stage and the code buffers
    are full, the front end (the bucket stage's FIFO holds a window per buffer: only the
    buffers); ``u`` stalls the front end; ``i.ready`` is low while the front end is
    stalled. No beat is lost or duplicated on either output. Reset empties every stage and the
    buffers' bookkeeping (not their contents) and zeroes the counters.

    Parameters: ``tokens`` T, ``window`` channels per sort, ``e_max``, ``tau``, ``diff_bits``
    (the differences' signed width), ``channel_bits`` (holds every channel index),
    ``per_beat`` sub-channels per input beat (divides ``window``), ``buffers`` (at least 2;
    default ``default_buffers``), ``reg_every`` comparator stages per sort-network register,
    ``network`` the ordering stage (``SortNetwork``: ``ODD_EVEN`` merges, a fifth fewer
    comparators than the paper's ``BITONIC`` network at the same latency, or ``BUCKET``, no
    network; the default is ``DEFAULT_ORDER``, docs/design/fmdq-qu.md), ``descending`` (the
    schedule's order, ``DESCENDING``).

    Members
    -------
    i : In(stream.Signature(qu_input_layout(tokens, per_beat, diff_bits, channel_bits)))
    o : Out(stream.Signature(slice_group_layout(tokens, channel_bits, e_max)))
    u : Out(stream.Signature(update_layout(tokens, per_beat, channel_bits, e_max)))
        One update per input beat, in input order.
    clear, count_clipped, count_saturated :
        Sub-channels clipped and saturated, counted as their updates leave; ``clear`` zeroes
        them.
    """

    def __init__(self, *, tokens: int, window: int, e_max: int, tau: int, diff_bits: int,
                 channel_bits: int, per_beat: int = 1, buffers: int | None = None,
                 reg_every: int = 1, network: SortNetwork | None = None,
                 descending: bool = DESCENDING):
        if tokens < 1 or window < 1 or per_beat < 1 or window % per_beat:
            raise ValueError(f"QuantUnit needs tokens, window >= 1 and per_beat dividing the "
                             f"window, got {tokens}, {window}, {per_beat}")
        if not 0 <= e_max <= 15 or tau < 0 or diff_bits < 2 or window > 1 << channel_bits:
            raise ValueError(f"QuantUnit needs 0 <= e_max <= 15, tau >= 0, diff_bits >= 2 and "
                             f"window <= 2**channel_bits, got {e_max}, {tau}, {diff_bits}, "
                             f"{channel_bits}")
        self.tokens, self.window, self.e_max, self.tau = tokens, window, e_max, tau
        self.diff_bits, self.channel_bits, self.per_beat = diff_bits, channel_bits, per_beat
        self.reg_every, self.descending = reg_every, descending
        self.network = DEFAULT_ORDER if network is None else SortNetwork(network)
        self.sort_latency = sort_latency(window, reg_every, self.network)
        self.buffers = buffers or default_buffers(window, per_beat, self.sort_latency)
        # Windows the ordering stage holds: a network's registers, or the bucket stage's FIFO
        # (one per buffer, so it never back-pressures the collector).
        self.order_capacity = (self.sort_latency if self.network.is_network
                               else self.buffers)
        if self.buffers < 2:
            raise ValueError("QuantUnit needs at least 2 code buffers (one window waits for "
                             "the next to resolve its last group)")
        e_tol = 0
        while e_tol < e_max and (1 << e_tol) <= tau:
            e_tol += 1
        self.e_tol = e_tol
        super().__init__({
            "i": In(stream.Signature(qu_input_layout(tokens, per_beat, diff_bits,
                                                      channel_bits))),
            "o": Out(stream.Signature(slice_group_layout(tokens, channel_bits, e_max))),
            "u": Out(stream.Signature(update_layout(tokens, per_beat, channel_bits, e_max))),
            "clear": In(1),
            "count_clipped": Out(COUNTER_BITS),
            "count_saturated": Out(COUNTER_BITS),
        })

    # ----- front end: one beat of sub-channels per cycle -----

    def _shifted(self, m, d, p, half, name):
        """``(d + half) >> p``, round half up (``half = 2**(p-1)``, 0 at ``p = 0``)."""
        s = Signal(signed(self.diff_bits + 1), name=f"{name}_sum")
        r = Signal(signed(self.diff_bits + 1), name=f"{name}_rs")
        m.d.comb += [s.eq(d + half), r.eq(s >> p)]
        return r

    def _quantize(self, m, d, p, half, name):
        """``sat8((d + half) >> p)``, round half up (``half = 2**(p-1)``, 0 at ``p = 0``)."""
        r = self._shifted(m, d, p, half, name)
        q = Signal(signed(8), name=name)
        m.d.comb += q.eq(Mux(r > 127, 127, Mux(r < -128, -128, r)))
        return q

    def _dead(self, d):
        return (d <= self.tau) & (d >= -self.tau)

    def _front(self, m, fadv):
        """Stages 1-3; returns the third stage's registers."""
        S, T, db, e_max, tau = self.per_beat, self.tokens, self.diff_bits, self.e_max, self.tau
        pb = uwidth(e_max + 1)
        beat = self.i.payload
        darr = data.ArrayLayout(data.ArrayLayout(signed(db), T), S)
        ext = data.ArrayLayout(data.StructLayout({
            "dmax": signed(db), "dmin": signed(db), "emax": signed(db), "emin": signed(db)}), S)

        # Stage 1: max extraction.
        v1, d1, x1, last1 = Signal(), Signal(darr), Signal(ext), Signal()
        ch1, ch2, ch3 = (Signal(self.channel_bits, name=f"ch{k}") for k in (1, 2, 3))
        for i in range(S):
            d = [beat.d[i][t] for t in range(T)]
            # One level of comparators (``extremes``), not trees of compare-and-select: the
            # stage is the Fmax path.
            top, bottom = extremes(m, d, f"d{i}")
            dmax, dmin = Signal(signed(db), name=f"dmax{i}"), Signal(signed(db), name=f"dmin{i}")
            m.d.comb += [dmax.eq(pick(top, d)), dmin.eq(pick(bottom, d))]
            if tau:
                # The extremes of D with its dead zone zeroed: D's own, unless every value on
                # that side is dead and one is (then 0), from per-value compares beside.
                above = Cat(*[d[t] > tau for t in range(T)]).any()
                below = Cat(*[d[t] < -tau for t in range(T)]).any()
                dead = Cat(*[self._dead(d[t]) for t in range(T)]).any()
                emax, emin = Signal(signed(db), name=f"emax{i}"), Signal(signed(db),
                                                                       name=f"emin{i}")
                m.d.comb += [emax.eq(Mux(above | ~dead, dmax, 0)),
                             emin.eq(Mux(below | ~dead, dmin, 0))]
            else:
                emax, emin = dmax, dmin
            with m.If(fadv):
                m.d.sync += [x1[i].dmax.eq(dmax), x1[i].dmin.eq(dmin), x1[i].emax.eq(emax),
                             x1[i].emin.eq(emin)]
        with m.If(fadv):
            m.d.sync += [v1.eq(self.i.valid), d1.eq(beat.d), last1.eq(beat.last),
                         ch1.eq(beat.channel)]

        # Stage 2: shift decision (round_shift's fit bounds in closed form, as golden).
        hi_e, lo_e = _fit_bounds(e_max)
        dec = data.ArrayLayout(data.StructLayout({
            "p": unsigned(pb), "clipped": unsigned(1), "saturated": unsigned(1),
            "emax": signed(db), "emin": signed(db)}), S)
        v2, d2, x2, last2 = Signal(), Signal(darr), Signal(dec), Signal()
        for i in range(S):
            fit = []
            for e in range(e_max + 1):
                f = Signal(name=f"fit{i}_{e}")
                m.d.comb += f.eq((x1[i].dmax <= int(hi_e[e])) & (x1[i].dmin >= -int(lo_e[e])))
                fit.append(f)
            sel = e_max
            for e in reversed(range(e_max + 1)):      # fitting is monotone in e
                sel = Mux(fit[e], e, sel)
            with m.If(fadv):
                m.d.sync += [x2[i].p.eq(sel), x2[i].clipped.eq(~fit[self.e_tol]),
                             x2[i].saturated.eq(~fit[e_max]), x2[i].emax.eq(x1[i].emax),
                             x2[i].emin.eq(x1[i].emin)]
        with m.If(fadv):
            m.d.sync += [v2.eq(v1), d2.eq(d1), last2.eq(last1), ch2.eq(ch1)]

        # Stage 3: quantize, width, codes.
        quant = data.ArrayLayout(data.StructLayout({
            "p": unsigned(pb), "n": unsigned(3), "clipped": unsigned(1),
            "saturated": unsigned(1), "q": data.ArrayLayout(signed(8), T)}), S)
        v3, x3, last3 = Signal(), Signal(quant), Signal()
        for i in range(S):
            p = x2[i].p
            half = Signal(e_max + 1, name=f"half{i}")
            m.d.comb += half.eq((Const(1, e_max + 2) << p)[1:])
            qs = []
            for t in range(T):
                q = self._quantize(m, d2[i][t], p, half, f"q{i}_{t}")
                qs.append(Mux(self._dead(d2[i][t]), 0, q) if tau else q)
            # The width from the extremes' codes before saturation (the same for every width
            # below 8), by bit tests rather than comparisons: the Fmax path.
            rmax = self._shifted(m, x2[i].emax, p, half, f"rmax{i}")
            rmin = self._shifted(m, x2[i].emin, p, half, f"rmin{i}")
            n = MAX_SLICES
            for k in reversed(range(1, MAX_SLICES)):      # slices = width / 2
                w = SLICE_BITS * k
                fits = ((rmax[-1] | ~rmax[w - 1:].any()) &    # rmax <= 2**(w-1) - 1
                        (~rmin[-1] | rmin[w - 1:].all()))     # rmin >= -2**(w-1)
                n = Mux(fits, k, n)
            n = Mux(~rmax.any() & ~rmin.any(), 0, n)
            with m.If(fadv):
                m.d.sync += [x3[i].p.eq(p), x3[i].n.eq(n), x3[i].clipped.eq(x2[i].clipped),
                             x3[i].saturated.eq(x2[i].saturated)]
                m.d.sync += [x3[i].q[t].eq(qs[t]) for t in range(T)]
        with m.If(fadv):
            m.d.sync += [v3.eq(v2), last3.eq(last2), ch3.eq(ch2)]
        return v3, x3, last3, ch3

    # ----- the whole unit -----

    def elaborate(self, platform):
        m = Module()
        S, T, W, e_max, nb = self.per_beat, self.tokens, self.window, self.e_max, self.buffers
        beats, n_ent = W // S, W * MAX_SLICES
        pb, sb = uwidth(e_max + 1), uwidth(nb)
        tmax = e_max + SLICE_BITS * (MAX_SLICES - 1)
        ent_l = sort_entry_layout(W, e_max)
        tag_l = data.StructLayout({"slot": unsigned(sb), "base": unsigned(self.channel_bits)})
        if self.network.is_network:
            m.submodules.sorter = srt = BitonicSorter(ent_l, n_ent, _entry_key, tag_l,
                                                      self.reg_every, MAX_SLICES, self.network)
        else:       # one level per total-shift key (0 .. tmax), its FIFO one window a buffer
            m.submodules.order = srt = BucketOrder(W, tmax + 1, tag_l, depth=nb, lanes=LANES)
        code_l = code_word_layout(T, S, e_max)
        m.submodules.codes = mem = Memory(shape=code_l, depth=nb * beats, init=[])
        wr = mem.write_port()
        rds = [mem.read_port() for _ in range(LANES)]

        fadv = Signal()
        v3, x3, last3, ch3 = self._front(m, fadv)

        # ----- collector: code buffers, the window's entries, the update stream -----
        busy = Signal(nb)
        free_slot = Signal(sb)
        sel = nb - 1
        for s in reversed(range(nb)):
            sel = Mux(~busy[s], s, sel)
        m.d.comb += free_slot.eq(sel)
        bidx = Signal(range(beats)) if beats > 1 else Const(0, 1)
        base_reg = Signal(self.channel_bits)
        base = Mux(bidx == 0, ch3, base_reg)          # the window's first channel
        cur_slot = Signal(sb)
        first = bidx == 0
        slot = Signal(sb)
        slot_ok, completing, fire = Signal(), Signal(), Signal()
        m.d.comb += [
            slot.eq(Mux(first, free_slot, cur_slot)),
            slot_ok.eq(~first | ~busy.all()),
            completing.eq((bidx == beats - 1) | last3),
            self.u.valid.eq(v3 & slot_ok & (~completing | srt.i.ready)),
            fire.eq(self.u.valid & self.u.ready),
            srt.i.valid.eq(v3 & slot_ok & completing & self.u.ready),
            fadv.eq(~v3 | fire),
            self.i.ready.eq(fadv),
        ]
        u = self.u.payload
        m.d.comb += [u.channel.eq(ch3), u.last.eq(last3)]
        for i in range(S):
            m.d.comb += [u.sub[i].shift.eq(x3[i].p), u.sub[i].width.eq(x3[i].n * SLICE_BITS),
                         u.sub[i].clipped.eq(x3[i].clipped),
                         u.sub[i].saturated.eq(x3[i].saturated), u.sub[i].q.eq(x3[i].q)]
        m.d.comb += [wr.en.eq(fire), wr.addr.eq(slot * beats + bidx)]
        for i in range(S):
            m.d.comb += [wr.data[i].p.eq(x3[i].p), wr.data[i].n.eq(x3[i].n)]
            m.d.comb += [wr.data[i].q[t].eq(x3[i].q[t].as_unsigned()) for t in range(T)]

        # Per channel of the window its shift and slice count: registers for the beats before
        # the last, the completing beat's straight from stage 3 (a partial window's later
        # channels are empty: the registers are cleared as a window leaves).
        held = W - S
        p_arr = Signal(data.ArrayLayout(unsigned(pb), max(held, 1)))
        n_arr = Signal(data.ArrayLayout(unsigned(3), max(held, 1)))
        for c in range(W):
            here = bidx == c // S
            p_c = Mux(here, x3[c % S].p, p_arr[c]) if c < held else x3[c % S].p
            n_c = Mux(here, x3[c % S].n, n_arr[c]) if c < held else Mux(here, x3[c % S].n, 0)
            if not self.network.is_network:
                # Its bits over the total shifts t = p + 2j, j < n: a constant pattern (every
                # other bit, n of them) shifted by p; level = key (t, or tmax - t descending).
                pat = Mux(n_c == 0, 0, 1)
                for k in range(2, MAX_SLICES + 1):
                    pat = Mux(n_c == k, int("01" * k, 2), pat)
                tb = Signal(tmax + 1, name=f"tbits{c}")
                m.d.comb += tb.eq(pat << p_c)
                for lv in range(tmax + 1):
                    m.d.comb += srt.i.payload.masks[lv][c].eq(
                        tb[tmax - lv] if self.descending else tb[lv])
                continue
            # A channel's entries in key order already (a presorted run of the network): its
            # valid slices from the first key on, then the invalid ones.
            for i in range(MAX_SLICES):
                e = srt.i.payload.entries[c * MAX_SLICES + i]
                if self.descending:      # slice n - 1 - i: total p + 2 (n - 1 - i)
                    tkey = tmax - p_c - SLICE_BITS * (n_c - 1 - i)
                else:                    # slice i
                    tkey = p_c + SLICE_BITS * i
                m.d.comb += [e.ch.eq(c), e.invalid.eq(n_c <= i), e.tkey.eq(tkey)]
        m.d.comb += [srt.i.payload.tag.slot.eq(slot), srt.i.payload.tag.base.eq(base)]

        alloc = Signal(nb)
        with m.If(fire):
            with m.If(first):
                m.d.sync += [cur_slot.eq(free_slot), base_reg.eq(ch3)]
                m.d.comb += alloc.eq(1 << free_slot)
            with m.If(completing):
                if beats > 1:
                    m.d.sync += bidx.eq(0)
                m.d.sync += n_arr.eq(0)
            with m.Else():
                if beats > 1:
                    m.d.sync += bidx.eq(bidx + 1)
                for c in range(held):
                    with m.If(bidx == c // S):
                        m.d.sync += [p_arr[c].eq(x3[c % S].p), n_arr[c].eq(x3[c % S].n)]
        self._count(m, x3, fire)

        # ----- packer: the ordered window's groups, one per cycle -----
        lane_l = data.StructLayout({"ch": unsigned(uwidth(W)), "valid": unsigned(1)})
        cmd_l = data.StructLayout({
            "lane": data.ArrayLayout(lane_l, LANES), "tkey": unsigned(total_shift_bits(e_max)),
            "slot": unsigned(sb), "base": unsigned(self.channel_bits),
            "last": unsigned(1),     # the window's last group: its buffer is free once read
            "empty": unsigned(1),    # the empty group of a tile's empty first window
        })
        if self.network.is_network:
            cmd, cmd_valid, cmd_ready, free_a = self._pack_network(m, srt, cmd_l, ent_l, tag_l)
        else:
            cmd, cmd_valid, cmd_ready, free_a = self._pack_bucket(m, srt, cmd_l)

        cmd, cmd_valid, cmd_ready = self._skid(m, cmd_l, cmd, cmd_valid, cmd_ready)
        free_b = self._read_out(m, rds, cmd_l, cmd, cmd_valid, cmd_ready, beats)
        m.d.sync += busy.eq((busy & ~free_a & ~free_b) | alloc)
        return m

    def _pack_network(self, m, srt, cmd_l, ent_l, tag_l):
        """The packer after a sort network: a shift register walks the sorted window. Returns
        the group command, its valid and ready, and the one-hot buffer freed by a dropped empty
        window this cycle."""
        nb, n_ent = self.buffers, self.window * MAX_SLICES
        fv = Signal()
        ents = Signal(data.ArrayLayout(ent_l, n_ent))
        ftag = Signal(tag_l)
        invalid = data.View(ent_l, Const(1 << ent_l["invalid"].offset, ent_l.size))

        def ent(k):
            return ents[k] if k < n_ent else invalid

        ok = []
        for k in range(LANES):
            o_k = Signal(name=f"lane_ok{k}")
            e_k = ent(k)
            m.d.comb += o_k.eq(~e_k.invalid if k == 0
                               else ~e_k.invalid & (e_k.tkey == ents[0].tkey))
            ok.append(o_k)
        count = Signal(range(LANES + 1))
        m.d.comb += count.eq(sum(o.as_unsigned() for o in ok))
        h_valid, eow = ok[0], Signal()
        eow_sel = 1
        for c in reversed(range(1, LANES + 1)):
            eow_sel = Mux(count == c, ent(c).invalid, eow_sel)
        m.d.comb += eow.eq(eow_sel)

        cmd, cmd_valid, cmd_ready = Signal(cmd_l), Signal(), Signal()
        # An empty window issues nothing, except a tile's first (one empty group: its unit
        # overwrites the tile's rows in the PE array).
        m.d.comb += [
            cmd_valid.eq(fv & (h_valid | (ftag.base == 0))),
            cmd.tkey.eq(ents[0].tkey), cmd.slot.eq(ftag.slot), cmd.base.eq(ftag.base),
            cmd.last.eq(eow), cmd.empty.eq(~h_valid),
        ]
        for k in range(LANES):
            e_k = ent(k)
            m.d.comb += [cmd.lane[k].valid.eq(ok[k]), cmd.lane[k].ch.eq(Mux(ok[k], e_k.ch, 0))]
        step, done = Signal(), Signal()
        m.d.comb += [step.eq(fv & (~cmd_valid | cmd_ready)), done.eq(~h_valid | eow),
                     srt.o.ready.eq(~fv | (step & done))]
        with m.If(srt.o.ready):
            m.d.sync += [fv.eq(srt.o.valid), ents.eq(srt.o.payload.entries),
                         ftag.eq(srt.o.payload.tag)]
        with m.Elif(step):
            for i in range(n_ent):
                shifted = Value.cast(ent(i + LANES))
                for c in reversed(range(1, LANES)):
                    shifted = Mux(count == c, Value.cast(ent(i + c)), shifted)
                m.d.sync += ents[i].eq(shifted)
        free_a = Signal(nb)
        m.d.comb += free_a.eq(Mux(step & ~h_valid, 1 << ftag.slot, 0))
        return cmd, cmd_valid, cmd_ready, free_a

    def _pack_bucket(self, m, order, cmd_l):
        """The packer is the bucket stage itself (``BucketOrder``: its level is the total-shift
        key); here only the empty-window rule. Returns as ``_pack_network``."""
        g = order.o.payload
        cmd, cmd_valid, cmd_ready = Signal(cmd_l), Signal(), Signal()
        # An empty window issues nothing, except a tile's first (as ``_pack_network``).
        issue = ~g.empty | (g.tag.base == 0)
        m.d.comb += [
            cmd_valid.eq(order.o.valid & issue), order.o.ready.eq(~issue | cmd_ready),
            cmd.tkey.eq(g.level), cmd.slot.eq(g.tag.slot), cmd.base.eq(g.tag.base),
            cmd.last.eq(g.last), cmd.empty.eq(g.empty),
        ]
        for k in range(LANES):
            m.d.comb += [cmd.lane[k].valid.eq(g.lane[k].valid), cmd.lane[k].ch.eq(g.lane[k].ch)]
        free_a = Signal(self.buffers)
        m.d.comb += free_a.eq(Mux(order.o.valid & order.o.ready & g.empty, 1 << g.tag.slot, 0))
        return cmd, cmd_valid, cmd_ready, free_a

    def _skid(self, m, cmd_l, cmd, cmd_valid, cmd_ready):
        """A register stage with a registered ``ready`` (a skid buffer) between the packer and
        the read-out, so that neither the packer's pick nor ``o.ready`` reaches the other side
        within a cycle: a group taken from the packer is offered to the read-out the next
        cycle; while the read-out stalls, one more is held in the skid register and then
        ``cmd_ready`` is low. Returns the command, its valid and ready towards the read-out."""
        r, rv, s, sv = Signal(cmd_l), Signal(), Signal(cmd_l), Signal()
        ready = Signal()
        take = Signal()
        m.d.comb += [cmd_ready.eq(~sv), take.eq(cmd_valid & ~sv)]
        with m.If(ready | ~rv):
            with m.If(sv):
                m.d.sync += [r.eq(s), rv.eq(1), sv.eq(0)]
            with m.Else():
                m.d.sync += [r.eq(cmd), rv.eq(take)]
        with m.Elif(take):
            m.d.sync += [s.eq(cmd), sv.eq(1)]
        return r, rv, ready

    def _count(self, m, x3, fire):
        """The clipped and saturated sub-channel counters (cleared by ``clear``)."""
        S = self.per_beat
        with m.If(self.clear):
            m.d.sync += [self.count_clipped.eq(0), self.count_saturated.eq(0)]
        with m.Elif(fire):
            m.d.sync += [
                self.count_clipped.eq(self.count_clipped
                                      + sum(x3[i].clipped.as_unsigned() for i in range(S))),
                self.count_saturated.eq(self.count_saturated
                                        + sum(x3[i].saturated.as_unsigned() for i in range(S)))]

    def _read_out(self, m, rds, cmd_l, cmd, cmd_valid, cmd_ready, beats):
        """The output stage: a packed group's codes read from its code buffer, its slices and
        metadata on ``o``. Returns the one-hot buffer freed this cycle."""
        S, T, e_max, nb = self.per_beat, self.tokens, self.e_max, self.buffers
        tmax = e_max + SLICE_BITS * (MAX_SLICES - 1)
        # ----- read: the group's codes, shifts and widths from the buffer (free once its
        # window's last group is read), its slices and metadata to the output -----
        rv, rd_meta, adv_r = self.o.valid, Signal(cmd_l), Signal()
        m.d.comb += [adv_r.eq(~rv | self.o.ready), cmd_ready.eq(adv_r)]
        for k, rd in enumerate(rds):
            m.d.comb += [rd.addr.eq(cmd.slot * beats + cmd.lane[k].ch // S), rd.en.eq(adv_r)]
        with m.If(adv_r):
            m.d.sync += [rv.eq(cmd_valid), rd_meta.eq(cmd)]
        free_b = Signal(nb)
        m.d.comb += free_b.eq(Mux(adv_r & cmd_valid & cmd.last, 1 << cmd.slot, 0))

        o = self.o.payload
        total = Signal(total_shift_bits(e_max))
        m.d.comb += [total.eq(tmax - rd_meta.tkey if self.descending else rd_meta.tkey),
                     o.shift.eq(Mux(rd_meta.empty, 0, total)), o.last.eq(rd_meta.last)]
        for k, rd in enumerate(rds):
            ln = rd_meta.lane[k]
            word = rd.data[ln.ch % S] if S > 1 else rd.data[0]
            j = Signal(2, name=f"j{k}")                  # the lane's slice: total = p + 2j
            m.d.comb += [j.eq((total - word.p)[1:]),
                         o.lane[k].channel.eq(rd_meta.base + ln.ch),
                         o.lane[k].signed.eq(ln.valid & (j + 1 == word.n)),
                         o.lane[k].valid.eq(ln.valid)]
            for t in range(T):
                m.d.comb += o.act[t][k].eq(Mux(ln.valid, word.q[t].word_select(j, 2), 0))
        return free_b
