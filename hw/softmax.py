"""Streaming fixed-point softmax unit (and the output normalizer of the deferred division).

Ref: dstar-spec.md section 4 (fixed-point softmax); the bit-exact contract is
``dstar.golden.softmax.softmax_groups`` (mantissas ``p``, group shifts, ``l``),
``dstar.golden.softmax.reciprocal`` (``r``, ``L``) and
``dstar.golden.softmax.normalize``; ``golden/ATTENTION.md`` restates it with widths.
"""


from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.config import Config
from dstar.golden.softmax import EXP_EXTRA_BITS, RECIP_BITS, exp_lut, sum_bits

from .extremes import extremes, pick
from .geometry import LOGIT_BITS, SoftmaxGeometry

__all__ = ["row_cmd_layout", "logit_layout", "prob_layout", "row_sum_layout", "norm_in_layout",
           "norm_out_layout", "SoftmaxUnit", "Normalizer"]

MANT_BITS, SH_BITS = SoftmaxGeometry.MANT_BITS, SoftmaxGeometry.SH_BITS
P_BITS, R_BITS = SoftmaxGeometry.P_BITS, SoftmaxGeometry.R_BITS
EXP_STAGES = SoftmaxGeometry.EXP_STAGES


def row_cmd_layout(max_row: int) -> data.StructLayout:
    """A row's header: the multiplier ``(m, sh)`` of ``golden.softmax.logit_multiplier`` and the
    row length ``n`` (``1 .. max_row``)."""
    return data.StructLayout({
        "m": unsigned(MANT_BITS),
        "sh": unsigned(SH_BITS),
        "n": range(max_row + 1),
    })


def logit_layout(logit_bits: int, lanes: int = 1) -> data.StructLayout:
    """The integer logits ``S`` of ``lanes`` consecutive keys of a row (``s[0]`` first)."""
    return data.StructLayout({"s": data.ArrayLayout(signed(logit_bits), lanes)})


def prob_layout(shift_bits: int, lanes: int = 1) -> data.StructLayout:
    """The unnormalized probabilities of ``lanes`` consecutive keys of one group in group
    format: the 8-bit mantissas ``p`` (``0 .. 255``, ``p[0]`` first) and the group's ``shift =
    e_max - e_g`` (``shift_bits = Config.shift_bits`` wide), the applied weights being ``p <<
    shift``; ``last``: the row's last beat."""
    return data.StructLayout({"p": data.ArrayLayout(unsigned(P_BITS), lanes),
                              "shift": unsigned(shift_bits), "last": unsigned(1)})


def row_sum_layout(max_row: int, e_max: int) -> data.StructLayout:
    """A row's sum ``l`` (``dstar.golden.softmax.sum_bits(max_row, e_max)`` wide), its reciprocal
    ``r = floor((2**(L+16) - 1) / l)`` and ``big_l = L = bit_length(l)``."""
    lb = sum_bits(max_row, e_max)
    return data.StructLayout({
        "l": unsigned(lb),
        "r": unsigned(R_BITS),
        "big_l": range(lb + 1),
    })


def norm_in_layout(acc_bits: int, max_row: int, e_max: int) -> data.StructLayout:
    """One PV accumulator value with its row's ``(r, L)``."""
    return data.StructLayout({
        "acc": signed(acc_bits),
        "r": unsigned(R_BITS),
        "big_l": range(sum_bits(max_row, e_max) + 1),
    })


def norm_out_layout(out_bits: int) -> data.StructLayout:
    """One normalized output ``O`` (``out_frac_bits`` fraction bits)."""
    return data.StructLayout({"o": signed(out_bits)})


def _bit_length(m: Module, v, width: int, name: str) -> Signal:
    """Combinational ``bit_length`` of the unsigned value ``v``."""
    out = Signal(range(width + 1), name=name)
    sel = Const(0, out.shape())
    for i in range(width):
        sel = Mux(v[i], i + 1, sel)
    m.d.comb += out.eq(sel)
    return out


def _smear(m: Module, v, name: str, drop: int = 0) -> Signal:
    """``v`` with every bit below its leading one set, shifted right by ``drop``, by one carry
    chain: with ``r`` the bit-reversed ``v``, ``r | -r`` sets every bit from ``r``'s lowest one
    up (an OR over a prefix would map to a chain of LUTs)."""
    r = Signal(len(v), name=f"{name}_rev")
    out = Signal(len(v) - drop, name=name)
    m.d.comb += [r.eq(v[::-1]), out.eq((r | (-r)[:len(v)])[::-1][drop:])]
    return out


def _times(v, j: int):
    """``v * j`` for a small odd constant ``j``: one adder (or subtractor) of shifted ``v``,
    not a multiplier (which synthesis may map to a DSP block)."""
    hi = j.bit_length()
    if j == (1 << hi) - 1:                          # 2**hi - 1
        return (v << hi) - v
    return sum(v << b for b in range(hi) if j >> b & 1)


def _sfx(j: int, lanes: int) -> str:
    """Name suffix of lane ``j``'s copy (none with one lane)."""
    return "" if lanes == 1 else f"_{j}"


class SoftmaxUnit(wiring.Component):
    """Fixed-point softmax of integer logit rows in DSTAR's group format, ``P =
    cfg.softmax_lanes`` keys per cycle: per row, the keys' 8-bit mantissas ``p`` with their
    group's shift, in key order, then the integer sum ``l`` and the reciprocal ``(r, L)`` of
    the deferred normalization, bit-exact with ``golden.softmax.softmax_groups`` and
    ``golden.softmax.reciprocal`` (every streamed key is a valid key; the groups are ``G =
    cfg.group`` consecutive streamed keys, the row's last group possibly shorter; ``E =
    cfg.e_max``).

    A row is a header on ``i_row`` (``m``, ``sh``, ``n``) and then ``W = ceil(n / P)`` beats on
    ``i_logit``, each the logits of ``P`` consecutive keys; the last beat's lanes from ``n -
    (W - 1) * P`` on are ignored. An ``o_p`` beat holds the mantissas of ``P`` consecutive
    keys, which share one group (``P`` divides ``G``), and that group's shift; lanes past the
    row's end carry ``p = 0``; ``last`` marks the row's last beat. Three processes, each with
    its own registers, work on consecutive rows:

    * the *loader* takes the header, then writes the ``W`` beats into one half of a ``2 *
      ceil(max_row / P)``-word memory of ``P`` logits (ping-pong) while tracking the row max
      ``Smax`` and, into one half of a ``2 * ceil(max_row / G)``-word memory beside it, each
      group's max ``Gmax``;
    * the *exponent pass* reads the row back, one word per cycle, through a 7-stage pipeline
      with a copy per lane: memory read (two registers); ``d = Smax - S``; ``d * m``; ``x =
      (d*m + 2**(sh-1)) >> sh`` (round half up, ``d*m`` for ``sh = 0``; a coarse and a fine
      shift stage) saturated at ``(E + 9) * 2**F``; ``p = (LUT[f] + 2**(k+7)) >> (k+8)`` with
      ``k = xi - e_g`` (0 for ``k >= 9``) into the ``o_p`` register; ``l`` adds the beat's
      ``sum(p) << (E - e_g)`` the cycle after. Alongside each word, one more copy of stages 1-6
      (the group-max memory's read port, its own multiplier) runs the word's group max
      ``Gmax``: ``x`` of the group's largest key is the group's smallest (``x`` is
      non-decreasing in ``d``), so ``e_g = min(x_g >> F, E)`` (``x_g`` saturated at ``E *
      2**F``). With ``E = 0`` every ``e_g`` is 0 and neither the group-max memory nor the copy
      exist. With ``P > 1`` rows overlap in the pipeline: the exponent pass keeps two sets of
      row registers (``Smax``, ``m``, ``sh``, ``l``; one per memory half) and each word carries
      its set along; with ``P = 1`` it has one set and drains between rows;
    * the *divider* takes ``l`` and runs a restoring division of ``2**(L+16) - 1`` by ``l``,
      ``b = min(P, 3)`` quotient bits per cycle (``b`` chained trial subtractions) in ``D =
      ceil(17 / b)`` cycles, then offers ``(l, r, L)`` on ``o_sum``; it takes ``l`` from the
      row set's register the cycle after the row's last beat completed it, and with ``P > 1``
      the next ``l`` in the cycle ``o_sum`` is taken.

    The loader fills one half while the exponent pass reads the other, and the exponent pass of
    a row overlaps the division of the previous one.

    Timing with inputs always valid and outputs always ready (``dstar.sim.softmax_cycles`` is the
    exact model; cycle 0 is the first header's beat): a lone row has its header at 0, beats at
    ``1 .. W``, is handed to the exponent pass at ``W + 2``, gives beat ``j`` of ``p`` at ``W +
    10 + j`` and ``(l, r, L)`` at ``2W + 11 + D`` (latency ``2W + 12 + D`` cycles including the
    header beat; ``2n + 29`` for ``P = 1``). Back to back, rows of ``W`` beats flow at:

    * ``P = 1``: ``max(n + 9, 19)`` cycles per row (the exponent pass holds a row ``n + 9``
      cycles, the divider 19);
    * ``P > 1``: ``max(W + 3, D + 1, (W + 9) / 2)`` cycles per row: the loader takes ``W + 3``
      per row, the divider ``D + 1``, and a memory half is free again once its row's ``l`` went
      to the divider (``W + 9`` cycles after the hand-off). So a 16-row block of 256 keys
      takes about ``16 * (256 / P + 3)`` cycles, and for ``P <= 8`` rows of 16 keys or more
      are never held by the divider (``D + 1 <= W + 3``; ``P = 4``: ``D = 5``).

    Back-pressure: every stream is valid/ready, no beat is dropped or duplicated. ``o_p.ready``
    low freezes the exponent pipeline (the memory read port holds its data); ``o_sum.ready`` low
    holds the divider, which then holds the finished ``l`` in its row set; a row is handed to the
    exponent pass only when its set is free, which holds the loader. No ready or valid output
    depends combinationally on any input. ``o_sum`` of a row may be offered before its last
    ``p`` is taken (they are separate streams).

    Rounding and saturation: exactly those of ``dstar.golden.softmax`` (``x`` saturates at
    ``(E + 9) * 2**F``, where ``p`` is 0 either way as ``e_g <= E``; ``r`` is the exact
    floor). Row lengths outside
    ``1 .. max_row`` are clamped into it (``n = 0`` reads as 1). ``sh`` of 48 .. 63 (outside the
    golden contract, which stops at 47) goes through the same formula.

    Reset (synchronous) empties every process and the pipeline; memory contents are not reset
    and need not be.

    Parameters
    ----------
    cfg : Config
        ``attn_frac_bits`` (``F``, LUT of ``2**F`` entries, one copy per lane), ``group``
        (``G``), ``e_max`` (``E``), ``softmax_lanes`` (``P``) and ``max_tokens`` (the default
        ``max_row``).
    logit_bits : int
        Width of the signed logits (23 for ``Dh <= 128``).
    max_row : int or None
        Longest row (memory of ``2 * ceil(max_row / P)`` words); default ``cfg.max_tokens``.

    Members
    -------
    i_row : In(stream.Signature(row_cmd_layout(max_row)))
        Row headers.
    i_logit : In(stream.Signature(logit_layout(logit_bits, P)))
        Logits of the row, ``P`` per beat, in key order.
    o_p : Out(stream.Signature(prob_layout(cfg.shift_bits, P)))
        Mantissas (``P`` per beat) and their group's shift, in key order; ``last`` marks the
        row's last beat.
    o_sum : Out(stream.Signature(row_sum_layout(max_row, cfg.e_max)))
        One beat per row: ``l`` (up to ``255 * 2**E * n``), ``r``, ``big_l``.
    """

    def __init__(self, cfg: Config, *, logit_bits: int = LOGIT_BITS, max_row: int | None = None):
        self._geo = sg = SoftmaxGeometry(cfg, logit_bits=logit_bits, max_row=max_row)
        self._cfg = cfg
        self._logit_bits = logit_bits
        self._max_row = max_row = sg.max_row
        super().__init__({name: (In if name.startswith("i_") else Out)(stream.Signature(lay))
                          for name, lay in self.layouts().items()})

    @property
    def geometry(self) -> SoftmaxGeometry:
        return self._geo

    def layouts(self) -> dict:
        """The payload layout of each stream member, by member name."""
        sg = self._geo
        return {"i_row": row_cmd_layout(sg.max_row),
                "i_logit": logit_layout(sg.logit_bits, sg.lanes),
                "o_p": prob_layout(sg.cfg.shift_bits, sg.lanes),
                "o_sum": row_sum_layout(sg.max_row, sg.cfg.e_max)}

    @property
    def cfg(self) -> Config:
        return self._cfg

    @property
    def logit_bits(self) -> int:
        return self._logit_bits

    @property
    def max_row(self) -> int:
        return self._max_row

    @property
    def lanes(self) -> int:
        return self._geo.lanes

    @property
    def frac_bits(self) -> int:
        return self._cfg.attn_frac_bits

    def elaborate(self, platform):
        m = Module()
        mems = self._memories(m)
        ld = self._loader(m, mems)
        ex = self._exp_pass(m, mems, ld)
        self._divider(m, ex)
        return m

    def _memories(self, m) -> dict:
        """The ping-pong logit memory, the exponent LUT (a read port per lane) and
        (``e_max > 0``) the group maxima."""
        sg, w, frac = self._geo, self._logit_bits, self.frac_bits
        ng_max = -(-sg.max_row // self._cfg.group)
        m.submodules.logits = mem = Memory(shape=data.ArrayLayout(signed(w), sg.lanes),
                                           depth=2 * sg.row_words, init=[])
        m.submodules.lut = lut = Memory(shape=unsigned(16), depth=1 << frac,
                                        init=[int(v) for v in exp_lut(frac)])
        out = {"wr": mem.write_port(), "rd": mem.read_port(),
               "lut_rd": [lut.read_port(domain="comb") for _ in range(sg.lanes)],
               "gwr": None, "grd": None}
        if self._cfg.e_max > 0:             # else every e_g is 0: no group maxima needed
            m.submodules.gmax = gmem = Memory(shape=signed(w), depth=2 * ng_max, init=[])
            out["gwr"], out["grd"] = gmem.write_port(), gmem.read_port()
        return out

    def _bases(self, bank):
        """Start addresses of a bank's row in the logit and group-max memories."""
        return Mux(bank, self._geo.row_words, 0), Mux(bank, -(-self._max_row // self._cfg.group), 0)

    def _loader(self, m, mems) -> dict:
        """Header, then the row's words into one bank with the row and group maxima."""
        sg, g_n = self._geo, self._cfg.group
        n_max, w, lanes, nw_max = sg.max_row, sg.logit_bits, sg.lanes, sg.row_words
        wpg = g_n // lanes                  # words per group
        ng_max = -(-n_max // g_n)
        wr, gwr = mems["wr"], mems["gwr"]
        a_bank = Signal()
        a_cnt = Signal(range(nw_max + 1))   # words taken
        a_nw = Signal(range(nw_max + 1))    # words of the row
        a_rem = Signal(range(lanes))        # keys of the row's last word, less one
        a_m = Signal(MANT_BITS)
        a_sh = Signal(SH_BITS)
        a_max = Signal(signed(w))
        a_gcnt = Signal(range(wpg))         # word within its group
        a_gidx = Signal(range(ng_max + 1))  # group of the row
        a_gmax = Signal(signed(w))
        a_wait = Signal()                   # a loaded row waits for the exponent pass
        may_take = Signal()                 # the exponent pass can take the row (its rule)
        handoff = Signal()

        n_in = self.i_row.payload.n
        n_clamped = Signal(range(n_max + 1))
        m.d.comb += n_clamped.eq(Mux(n_in == 0, 1, Mux(n_in > n_max, n_max, n_in)))
        log_p = lanes.bit_length() - 1
        s_in = self.i_logit.payload.s
        base, gbase = self._bases(a_bank)
        m.d.comb += handoff.eq(a_wait & may_take)
        # Plain comparisons rather than m.FSM: Icarus (-g2012) never runs an ``always @*``
        # whose inputs do not change, so FSM-decoded outputs would stay X after reset.
        a_head = Signal(init=1)             # loader states: HEAD, LOAD, else WAIT (a_wait)
        a_load = Signal()
        take_logit = Signal()
        m.d.comb += [
            self.i_row.ready.eq(a_head),
            self.i_logit.ready.eq(a_load),
            take_logit.eq(a_load & self.i_logit.valid),
        ]
        # Stage L: a taken beat is registered with its addresses and flags before anything
        # uses it, so the logits' source (the PE arrays' accumulator read, through the feed's
        # beat multiplexer) feeds one register (the Fmax path). The stage writes the word,
        # takes the beat's max over its keys (lanes past the row's end repeat lane 0) and
        # writes the group's running max with every word of the group: the last write (the
        # group's last word) leaves the group's max.
        last_word = a_cnt == a_nw - 1
        l_v, l_first, l_gfirst, l_last = Signal(), Signal(), Signal(), Signal()
        l_s = Signal.like(s_in)
        l_ok = Signal(lanes)
        l_addr, l_gaddr = Signal.like(wr.addr), Signal(range(2 * ng_max))
        m.d.sync += l_v.eq(take_logit)
        with m.If(take_logit):
            m.d.sync += [l_s.eq(s_in), l_first.eq(a_cnt == 0), l_gfirst.eq(a_gcnt == 0),
                         l_last.eq(last_word), l_addr.eq(base + a_cnt),
                         l_gaddr.eq(gbase + a_gidx),
                         l_ok.eq(Cat(Const(1, 1),     # lane 0 always holds a key
                                     *[~last_word | (a_rem >= j) for j in range(1, lanes)]))]
        m.d.comb += [wr.addr.eq(l_addr), wr.data.eq(l_s), wr.en.eq(l_v)]
        # The beat's max and its compares with the row's and the group's running maxima in one
        # level of comparators (a tournament, not a tree), so the stage fits one cycle.
        vals = [l_s[0]] + [Mux(l_ok[j], l_s[j], l_s[0]) for j in range(1, lanes)]
        win, _ = extremes(m, vals, "beat", bottom=False)
        beat_max = Signal(signed(w))
        m.d.comb += beat_max.eq(pick(win, vals))
        above_max = Cat(*[win[j] & (vals[j] > a_max) for j in range(lanes)]).any()
        above_gmax = Cat(*[win[j] & (vals[j] > a_gmax) for j in range(lanes)]).any()
        gmax_new = Signal(signed(w))
        m.d.comb += gmax_new.eq(Mux(l_gfirst | above_gmax, beat_max, a_gmax))
        if gwr is not None:
            m.d.comb += [gwr.addr.eq(l_gaddr), gwr.data.eq(gmax_new), gwr.en.eq(l_v)]
        with m.If(l_v):
            m.d.sync += [a_gmax.eq(gmax_new),
                         a_max.eq(Mux(l_first | above_max, beat_max, a_max))]
            with m.If(l_last):
                m.d.sync += a_wait.eq(1)
        with m.If(a_head & self.i_row.valid):
            m.d.sync += [a_m.eq(self.i_row.payload.m), a_sh.eq(self.i_row.payload.sh),
                         a_nw.eq((n_clamped + (lanes - 1)) >> log_p), a_cnt.eq(0),
                         a_gcnt.eq(0), a_gidx.eq(0), a_head.eq(0), a_load.eq(1)]
            if lanes > 1:
                m.d.sync += a_rem.eq((n_clamped - 1)[:log_p])
        with m.If(take_logit):
            m.d.sync += [a_cnt.eq(a_cnt + 1),
                         a_gcnt.eq(Mux(a_gcnt == wpg - 1, 0, a_gcnt + 1))]
            with m.If(a_gcnt == wpg - 1):
                m.d.sync += a_gidx.eq(a_gidx + 1)
            with m.If(last_word):
                m.d.sync += a_load.eq(0)
        with m.If(handoff):
            m.d.sync += [a_wait.eq(0), a_bank.eq(~a_bank), a_head.eq(1)]
        return {"bank": a_bank, "nw": a_nw, "rem": a_rem, "m": a_m, "sh": a_sh, "max": a_max,
                "may_take": may_take, "handoff": handoff}

    def _x_stages(self, m, adv, b, first, x_sat, sfx):
        """Exponent stages 2-6 from the read port's data ``first``: ``x`` saturated at
        ``x_sat``, with the row parameters ``b`` (``max``, ``m``, ``sh_hi``, ``sh_lo``: those of
        the key in the stage that uses each)."""
        w = self._logit_bits
        s_reg = Signal(signed(w), name=f"s_reg{sfx}")
        d = Signal(w, name=f"d{sfx}")
        prod = Signal(w + MANT_BITS, name=f"prod{sfx}")
        coarse = Signal(w + MANT_BITS + 1, name=f"coarse{sfx}")
        xs = Signal(range(x_sat + 1), name=f"xs{sfx}")
        # x = (v + 2**(s-1)) >> s == ((2v >> s) + 1) >> 1 (also for s = 0), and
        # x >= x_sat <=> (2v >> s) >= 2 x_sat - 1: only a narrow adder after the shifter.
        halves = Signal(w + MANT_BITS + 1, name=f"halves{sfx}")
        m.d.comb += halves.eq(coarse >> b["sh_lo"])
        x_low = (halves[:(2 * x_sat).bit_length()] + 1) >> 1
        with m.If(adv):
            m.d.sync += [
                s_reg.eq(first),
                d.eq(b["max"] - s_reg),
                prod.eq(d * b["m"]),
                coarse.eq((prod << 1) >> (b["sh_hi"] << 3)),
                xs.eq(Mux(halves >= 2 * x_sat - 1, x_sat, x_low)),
            ]
        return xs

    def _mantissas(self, m, xs_lanes, luts, e_g) -> list:
        """Each lane's ``p`` (combinational) from its ``x`` (through its LUT read port ``luts``)
        and the word's group exponent."""
        frac, e_max, lanes = self.frac_bits, self._cfg.e_max, self._geo.lanes
        out = []
        for j, (xs, lut_rd) in enumerate(zip(xs_lanes, luts, strict=True)):
            sfx = _sfx(j, lanes)
            k_off = Signal(range(e_max + 10), name=f"k_off{sfx}")   # xi - e_g >= 0: the key
            m.d.comb += [lut_rd.addr.eq(xs[:frac]), k_off.eq(xs[frac:] - e_g)]  # <= Gmax
            p_new = Signal(P_BITS, name=f"p_new{sfx}")
            # k = 9 rounds to 0 by itself (LUT < 2**16); larger k are cut off before the shifter.
            k_cut = Mux(k_off > 9, 9, k_off)[:4]
            # (v + 2**(s-1)) >> s == ((v >> (s-1)) + 1) >> 1: a narrow adder after the shifter
            # instead of a wide one before it (the Fmax path).
            m.d.comb += p_new.eq(((lut_rd.data >> (k_cut + (EXP_EXTRA_BITS - 1))) + 1) >> 1)
            out.append(p_new)
        return out

    def _row_sets(self) -> list:
        """The exponent pass's row registers, one set per memory half with ``P > 1`` (rows
        overlap), else one: ``max``, ``m``, ``sh``, the sum ``l``, ``busy`` (a row whose ``l``
        the divider has not taken) and ``done`` (its ``l`` is complete)."""
        sg = self._geo
        nsets = 2 if sg.overlap else 1
        return [{"max": Signal(signed(sg.logit_bits), name=f"b_max{k}"),
                 "m": Signal(MANT_BITS, name=f"b_m{k}"), "sh": Signal(SH_BITS, name=f"b_sh{k}"),
                 "l": Signal(sg.sum_bits, name=f"b_l{k}"), "busy": Signal(name=f"b_busy{k}"),
                 "done": Signal(name=f"b_done{k}")}
                for k in (range(2) if nsets == 2 else [""])]

    @staticmethod
    def _pick(sets, tag, name):
        """Field ``name`` of the row set ``tag`` selects (the only set if there is one)."""
        return sets[0][name] if len(sets) == 1 else Mux(tag, sets[1][name], sets[0][name])

    def _exp_pass(self, m, mems, ld) -> dict:
        """One word per cycle through the exponent pipeline into ``o_p``, summing ``l``."""
        sg, cfg = self._geo, self._cfg
        frac, lanes, nw_max = self.frac_bits, sg.lanes, sg.row_words
        g_n, e_max = cfg.group, cfg.e_max
        wpg = g_n // lanes
        ng_max = -(-sg.max_row // g_n)
        rd, grd = mems["rd"], mems["grd"]
        sets = self._row_sets()
        b_bank = Signal()
        b_nw = Signal(range(nw_max + 1))
        b_rem = Signal(range(lanes))
        b_issue = Signal(range(nw_max + 1))  # words read so far
        b_gcnt = Signal(range(wpg))         # the next word's place in its group
        b_gidx = Signal(range(ng_max + 1))  # the next word's group

        adv = Signal()
        m.d.comb += adv.eq(~self.o_p.valid | self.o_p.ready)
        issuing = Signal()
        base, gbase = self._bases(b_bank)
        m.d.comb += [
            issuing.eq(b_issue != b_nw),
            rd.addr.eq(base + b_issue),
            rd.en.eq(adv),
        ]
        if grd is not None:
            m.d.comb += [grd.addr.eq(gbase + b_gidx), grd.en.eq(adv)]
        with m.If(adv & issuing):
            m.d.sync += [b_issue.eq(b_issue + 1),
                         b_gcnt.eq(Mux(b_gcnt == wpg - 1, 0, b_gcnt + 1))]
            with m.If(b_gcnt == wpg - 1):
                m.d.sync += b_gidx.eq(b_gidx + 1)

        # Pipeline (each register loads only when adv): 1 the read port's data register,
        # 2 S (off the memory's slow output), 3 d = Smax - S, 4 d * m, 5 2 d m >> (sh & ~7),
        # 6 x saturated at (E + 9) * 2**F, 7 p (the o_p register). valid[k] / last[k] (and
        # the row set tag[k], the last word's key count rem[k]) travel along; stages 2-6 have
        # a copy per lane and one for the word's group max, giving e_g at stage 6.
        n_st = EXP_STAGES - 1
        valid = [Signal(name=f"valid{k}") for k in range(1, EXP_STAGES)]
        last = [Signal(name=f"last{k}") for k in range(1, EXP_STAGES)]
        tag = [Signal(name=f"tag{k}") for k in range(1, EXP_STAGES)] if sg.overlap else None
        rem = [Signal(range(lanes), name=f"rem{k}") for k in range(1, EXP_STAGES)]
        row = {"max": self._pick(sets, tag and tag[1], "max"),
               "m": self._pick(sets, tag and tag[2], "m"),
               "sh_hi": self._pick(sets, tag and tag[3], "sh")[3:],
               "sh_lo": self._pick(sets, tag and tag[4], "sh")[:3]}
        xs = [self._x_stages(m, adv, row, rd.data[j], (e_max + 9) << frac, _sfx(j, lanes))
              for j in range(lanes)]
        e_g = Signal(range(e_max + 1))
        if grd is not None:
            # x_g only matters up to E * 2**F: e_g = min(x_g >> F, E).
            m.d.comb += e_g.eq(self._x_stages(m, adv, row, grd.data, e_max << frac,
                                              "_g")[frac:])
        p_new = self._mantissas(m, xs, mems["lut_rd"], e_g)
        o_tag = Signal()                    # the row set of the word in the o_p register
        chains = [valid, last] + ([tag] if tag else []) + ([rem] if lanes > 1 else [])
        with m.If(adv):
            m.d.sync += [
                valid[0].eq(issuing), last[0].eq(b_issue == b_nw - 1),
                [c[k].eq(c[k - 1]) for c in chains for k in range(1, n_st)],
                self.o_p.valid.eq(valid[-1]), self.o_p.payload.last.eq(last[-1]),
                self.o_p.payload.shift.eq((e_max - e_g)[:cfg.shift_bits]),
                self.o_p.payload.p[0].eq(p_new[0]),
                # Lanes past the row's end (its last word's) hold no key: p = 0.
                [self.o_p.payload.p[j].eq(Mux(~last[-1] | (rem[-1] >= j), p_new[j], 0))
                 for j in range(1, lanes)],
            ]
            if tag:
                m.d.sync += [tag[0].eq(b_bank), o_tag.eq(tag[-1])]
            if lanes > 1:
                m.d.sync += rem[0].eq(b_rem)
        # l adds each beat's sum(p) << shift the cycle after it entered the o_p register (off
        # the LUT/shift path).
        fresh, fresh_last = Signal(), Signal()
        m.d.sync += [fresh.eq(adv & valid[-1]), fresh_last.eq(adv & valid[-1] & last[-1])]
        row_end = Signal()                  # l is complete (with the row's last beat)
        l_final = Signal(sg.sum_bits)
        psum = sum(self.o_p.payload.p[j] for j in range(lanes))
        m.d.comb += [row_end.eq(fresh & fresh_last),
                     l_final.eq(self._pick(sets, o_tag, "l") + (psum << self.o_p.payload.shift))]
        for k, s in enumerate(sets):
            with m.If(fresh & (o_tag == k)):
                m.d.sync += s["l"].eq(l_final)
        # A row enters when its set is free: with one set once the last row's l went to the
        # divider (the pipeline has drained), else once the last row is read out.
        if sg.overlap:
            m.d.comb += ld["may_take"].eq(~issuing & ~self._pick(sets, ld["bank"], "busy"))
        else:
            m.d.comb += ld["may_take"].eq(~sets[0]["busy"])
        with m.If(ld["handoff"]):
            m.d.sync += [b_bank.eq(ld["bank"]), b_nw.eq(ld["nw"]), b_rem.eq(ld["rem"]),
                         b_issue.eq(0), b_gcnt.eq(0), b_gidx.eq(0)]
            for k, s in enumerate(sets):
                with m.If((ld["bank"] == k) if sg.overlap else 1):
                    m.d.sync += [s["max"].eq(ld["max"]), s["m"].eq(ld["m"]),
                                 s["sh"].eq(ld["sh"]), s["l"].eq(0), s["busy"].eq(1)]
        return {"sets": sets, "row_end": row_end, "o_tag": o_tag, "l_final": l_final}

    def _divider(self, m, ex):
        """Takes ``l`` from the exponent pass (rows in order) and divides; frees the row's
        set."""
        sg = self._geo
        lb, steps, k_bits = sg.sum_bits, sg.div_steps, sg.div_bits
        sets, row_end, o_tag = ex["sets"], ex["row_end"], ex["o_tag"]
        c_busy = Signal()
        c_l = Signal(lb)
        c_rem = Signal(lb)
        c_q = Signal(R_BITS)
        c_step = Signal(range(steps + 1))
        # c_step == steps, registered: o_sum.valid (which enables the softmax feed's row
        # registers) starts from a flip-flop, not from the counter's comparison (the Fmax path).
        c_fin = Signal()
        c_ptr = Signal()                    # the set of the next row to divide
        taken = Signal()
        transfer = Signal()
        ready_l = Signal()                  # the next row's l is complete
        # The next l is taken from its row set's register once complete (not from the adder that
        # completes it), so the transfer's smear starts from flip-flops.
        m.d.comb += [taken.eq(self.o_sum.valid & self.o_sum.ready),
                     ready_l.eq(self._pick(sets, c_ptr, "done"))]
        # With overlapping rows the next l enters as o_sum is taken.
        free = (~c_busy | taken) if sg.overlap else ~c_busy
        m.d.comb += transfer.eq(ready_l & free)
        with m.If(taken):
            m.d.sync += c_busy.eq(0)
        for k, s in enumerate(sets):
            with m.If(row_end & (o_tag == k)):
                m.d.sync += s["done"].eq(1)
        l_in = Signal(lb)                   # the l entering the divider
        m.d.comb += l_in.eq(self._pick(sets, c_ptr, "l"))
        # Restoring division of 2**(L+16) - 1 (all ones) by l, k_bits trials per cycle. Its
        # first trial is 2**L - 1, l with every bit below its leading one set (an OR smear, no
        # priority encoder), preceded by ``extra`` trials of the ones below it that give 0 bits
        # (2**i - 1 < 2**(L-1) <= l): the division starts from smear >> (extra + 1), which the
        # transfer registers, so the trials' chain starts from flip-flops. Each set's smear is
        # taken from its own l register (``_smear``: a carry chain) and the set picked after
        # it: the transfer's path is not a chain of ORs behind the pick (the Fmax path).
        extra = k_bits * steps - sg.DIV_CYCLES
        rem0 = Signal(lb - extra - 1, name="rem0")     # the smear >> (extra + 1)
        m.d.comb += rem0.eq(self._pick(
            [{"rem0": _smear(m, s["l"], f"smear{k}", extra + 1)} for k, s in enumerate(sets)],
            c_ptr, "rem0"))
        # A step's k_bits trials are one radix-2**k_bits digit: it compares against the
        # multiples j * l (j < 2**k), the odd ones registered with l (each set's from its own l
        # register), the even ones their shifts.
        n_mul = 1 << k_bits
        c_mul = [None, c_l]
        for j in range(2, n_mul):
            if j % 2:
                x = Signal(lb + k_bits, name=f"c_l_x{j}")
                with m.If(transfer):
                    m.d.sync += x.eq(self._pick([{"x": _times(s["l"], j)} for s in sets],
                                                c_ptr, "x"))
                c_mul.append(x)
            else:
                c_mul.append(c_mul[j // 2] << 1)
        with m.If(transfer):
            m.d.sync += [c_busy.eq(1), c_step.eq(0), c_fin.eq(0), c_l.eq(l_in),
                         c_rem.eq(rem0)]
            for k, s in enumerate(sets):
                with m.If(c_ptr == k):
                    m.d.sync += [s["done"].eq(0), s["busy"].eq(0)]
            if len(sets) > 1:
                m.d.sync += c_ptr.eq(~c_ptr)

        # L = bit_length(l), registered in the division's first cycle (o_sum is offered later).
        c_big_l = Signal(range(lb + 1))
        with m.If(c_busy & (c_step == 0)):
            m.d.sync += c_big_l.eq(_bit_length(m, c_l, lb, "big_l"))
        # The step's k_bits restoring trials at once: with T = rem * 2**k + 2**k - 1 (the
        # dividend's next bits are ones), the digit d = T // l is the number of multiples
        # j * l <= T (T < 2**k * l), and the new remainder T - d * l. The differences are taken
        # side by side and the digit's picked (one subtraction deep, not k in a chain).
        trial = Signal(lb + k_bits, name="trial")
        m.d.comb += trial.eq(Cat(Const(n_mul - 1, k_bits), c_rem))
        ge = Signal(n_mul, name="ge")               # ge[j]: j * l <= T (a thermometer code)
        # diff[j]: T - j * l below l's width (the remainder's bits when j is the digit).
        diff = [trial[:lb]] + [Signal(lb, name=f"trial_less{j}") for j in range(1, n_mul)]
        m.d.comb += ge[0].eq(1)
        for j in range(1, n_mul):
            d = trial - c_mul[j]
            m.d.comb += [diff[j].eq(d[:lb]), ge[j].eq(~d[-1])]
        top = Signal(n_mul, name="digit_1hot")      # the largest j with ge[j]
        m.d.comb += top.eq(ge & ~(ge >> 1))
        digit = Signal(k_bits, name="digit")
        rem = Signal(lb, name="rem_next")           # < l
        m.d.comb += [
            digit.eq(Cat(Cat(top[j] for j in range(n_mul) if j >> b & 1).any()
                         for b in range(k_bits))),
            rem.eq(Cat(Cat(top[j] & diff[j][i] for j in range(n_mul)).any()
                       for i in range(lb)))]
        q = Cat(digit, c_q)
        # c_q is not cleared per row: its k_bits * steps >= 17 shifts push the previous
        # quotient out.
        with m.If(c_busy & ~c_fin):
            m.d.sync += [c_rem.eq(rem), c_q.eq(q[:R_BITS]), c_step.eq(c_step + 1),
                         c_fin.eq(c_step + 1 == steps)]
        m.d.comb += [
            self.o_sum.valid.eq(c_busy & c_fin),
            self.o_sum.payload.l.eq(c_l),
            self.o_sum.payload.r.eq(c_q),
            self.o_sum.payload.big_l.eq(c_big_l),
        ]


class Normalizer(wiring.Component):
    """Deferred softmax division of the PV outputs: ``O = (acc * r + 2**(s-1)) >> s`` with
    ``s = L + 16 - out_frac_bits`` (arithmetic shift, round half up), bit-exact with
    ``dstar.golden.softmax.normalize``; ``(r, L)`` are the row's, from ``SoftmaxUnit.o_sum``.

    ``O ~= acc * 2**out_frac_bits / l`` within 1 LSB; the output holds it for
    ``|acc| <= 128 * l`` (INT8 V), the accumulator bound of ``golden/ATTENTION.md``; larger
    ``|acc|`` wrap. ``l`` and ``L`` are as wide as ``SoftmaxUnit``'s (``l <= 255 * 2**E * n``).

    Latency 2 cycles (the product register, then the output register), throughput one value
    per cycle, full back-pressure: ``o.ready`` low freezes both stages, and ``i.ready`` is
    ``~o.valid | o.ready`` (combinational from ``o.ready``). Reset empties both stages.

    Parameters
    ----------
    cfg : Config
        ``attn_out_frac_bits``, ``e_max`` and ``max_tokens`` (the default ``max_row``).
    max_row : int or None
        Longest row; with ``e_max`` sets the widths of ``L`` and of the accumulator.
    acc_bits : int or None
        Width of the signed accumulator; default ``bits_signed(128 * 255 * 2**e_max * max_row)``.

    Members
    -------
    i : In(stream.Signature(norm_in_layout(acc_bits, max_row, cfg.e_max)))
        Accumulator values, each with its row's ``r`` and ``big_l``.
    o : Out(stream.Signature(norm_out_layout(out_bits)))
        Normalized outputs, in order (``out_bits = bits_signed(128 << out_frac_bits)``).
    """

    def __init__(self, cfg: Config, *, max_row: int | None = None, acc_bits: int | None = None):
        self._geo = sg = SoftmaxGeometry(cfg, max_row=max_row, acc_bits=acc_bits)
        self._cfg, self._max_row, self._acc_bits = cfg, sg.max_row, sg.acc_bits
        self._out_bits = sg.out_bits
        super().__init__({name: (In if name == "i" else Out)(stream.Signature(lay))
                          for name, lay in self.layouts().items()})

    @property
    def geometry(self) -> SoftmaxGeometry:
        return self._geo

    def layouts(self) -> dict:
        """The payload layout of each stream member, by member name."""
        sg = self._geo
        return {"i": norm_in_layout(sg.acc_bits, sg.max_row, sg.cfg.e_max),
                "o": norm_out_layout(sg.out_bits)}

    @property
    def acc_bits(self) -> int:
        return self._acc_bits

    @property
    def out_bits(self) -> int:
        return self._out_bits

    @property
    def max_row(self) -> int:
        return self._max_row

    def elaborate(self, platform):
        frac_out = self._cfg.attn_out_frac_bits
        lb = sum_bits(self._max_row, self._cfg.e_max)
        m = Module()
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]
        v1 = Signal()
        prod = Signal(signed(self._acc_bits + R_BITS + 1))
        shift = Signal(range(lb + RECIP_BITS + 1))
        halves = Signal(signed(self._acc_bits + R_BITS + 2))
        rounded = Signal(signed(self._acc_bits + R_BITS + 1))
        # (v + 2**(s-1)) >> s == ((2v >> s) + 1) >> 1 (arithmetic, also for s = 0).
        m.d.comb += [halves.eq((prod << 1) >> shift), rounded.eq((halves + 1) >> 1)]
        with m.If(adv):
            m.d.sync += [
                v1.eq(self.i.valid),
                prod.eq(self.i.payload.acc * self.i.payload.r),
                shift.eq(self.i.payload.big_l + (RECIP_BITS - frac_out)),
                self.o.valid.eq(v1),
                self.o.payload.o.eq(rounded),
            ]
        return m
