"""Streaming fixed-point softmax unit (and the output normalizer of the deferred division).

Ref: dstar-spec.md section 4 (fixed-point softmax); the bit-exact contract is
``dstar.golden.softmax.softmax_groups`` (mantissas ``p``, group shifts, ``l``),
``dstar.golden.softmax.reciprocal`` (``r``, ``L``) and
``dstar.golden.softmax.normalize``; ``golden/ATTENTION.md`` restates it with widths.
"""

from amaranth import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.config import Config
from dstar.golden.softmax import EXP_EXTRA_BITS, RECIP_BITS, exp_lut, sum_bits

from .geometry import LOGIT_BITS, SoftmaxGeometry

__all__ = ["row_cmd_layout", "logit_layout", "prob_layout", "row_sum_layout", "norm_in_layout",
           "norm_out_layout", "SoftmaxUnit", "Normalizer"]

MANT_BITS, SH_BITS = SoftmaxGeometry.MANT_BITS, SoftmaxGeometry.SH_BITS
P_BITS, R_BITS = SoftmaxGeometry.P_BITS, SoftmaxGeometry.R_BITS
EXP_STAGES, DIV_CYCLES = SoftmaxGeometry.EXP_STAGES, SoftmaxGeometry.DIV_CYCLES


def row_cmd_layout(max_row: int) -> data.StructLayout:
    """A row's header: the multiplier ``(m, sh)`` of ``golden.softmax.logit_multiplier`` and the
    row length ``n`` (``1 .. max_row``)."""
    return data.StructLayout({
        "m": unsigned(MANT_BITS),
        "sh": unsigned(SH_BITS),
        "n": range(max_row + 1),
    })


def logit_layout(logit_bits: int) -> data.StructLayout:
    """One integer logit ``S``."""
    return data.StructLayout({"s": signed(logit_bits)})


def prob_layout(shift_bits: int) -> data.StructLayout:
    """One unnormalized probability in group format: the 8-bit mantissa ``p`` (``0 .. 255``)
    and its group's ``shift = e_max - e_g`` (``shift_bits = Config.shift_bits`` wide), the
    applied weight being ``p << shift``; ``last``: the row's last key."""
    return data.StructLayout({"p": unsigned(P_BITS), "shift": unsigned(shift_bits),
                              "last": unsigned(1)})


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


class SoftmaxUnit(wiring.Component):
    """Fixed-point softmax of integer logit rows in DSTAR's group format: per row, each key's
    8-bit mantissa ``p`` with its group's shift, in key order, then the integer sum ``l`` and
    the reciprocal ``(r, L)`` of the deferred normalization, bit-exact with
    ``golden.softmax.softmax_groups`` and ``golden.softmax.reciprocal`` (every streamed key is
    a valid key; the groups are ``G = cfg.group`` consecutive streamed keys, the row's last
    group possibly shorter; ``E = cfg.e_max``).

    A row is a header on ``i_row`` (``m``, ``sh``, ``n``) and then ``n`` logits on ``i_logit``,
    one per beat. Three processes, each with its own registers, work on consecutive rows:

    * the *loader* takes the header, then writes the ``n`` logits into one half of a
      ``2 * max_row``-word memory (ping-pong) while tracking the row max ``Smax`` and, into one
      half of a ``2 * ceil(max_row / G)``-word memory beside it, each group's max ``Gmax``;
    * the *exponent pass* reads the row back, one key per cycle, through a 7-stage pipeline:
      memory read (two registers); ``d = Smax - S``; ``d * m``; ``x = (d*m + 2**(sh-1)) >> sh``
      (round half up, ``d*m`` for ``sh = 0``; a coarse and a fine shift stage) saturated at
      ``(E + 9) * 2**F``; ``p = (LUT[f] + 2**(k+7)) >> (k+8)`` with ``k = xi - e_g`` (0 for
      ``k >= 9``) into the ``o_p`` register; ``l`` adds each ``p << (E - e_g)`` the cycle
      after. Alongside each key, a copy of stages 1-6 (the group-max memory's read port, its
      own multiplier) runs the key's group max ``Gmax``: ``x`` of the group's largest key is the
      group's smallest (``x`` is non-decreasing in ``d``), so ``e_g = min(x_g >> F, E)``
      (``x_g`` saturated at ``E * 2**F``). With ``E = 0`` every ``e_g`` is 0 and neither the
      group-max memory nor the copy exist;
    * the *divider* takes ``l`` and runs a 17-step restoring division of ``2**(L+16) - 1`` by
      ``l`` (one quotient bit per cycle), then offers ``(l, r, L)`` on ``o_sum``.

    The loader fills one half while the exponent pass reads the other, and the exponent pass of
    a row overlaps the division of the previous one.

    Timing with inputs always valid and outputs always ready (``dstar.sim.softmax_cycles`` is the
    exact model; cycle 0 is the first header's beat): a lone row of ``n`` keys has its header
    at 0, logits at ``1 .. n``, is handed to the exponent pass at ``n + 1``, gives ``p_j`` at
    ``n + 9 + j`` and ``(l, r, L)`` at ``2n + 26`` (latency ``2n + 27`` cycles including the
    header beat). Back to back, a row of ``n`` keys occupies the exponent pass ``n + 8`` cycles
    and the divider 19, so the rows flow at ``max(n + 8, 19)`` cycles per row once the loader
    (``n + 2`` per row) is ahead.

    Back-pressure: every stream is valid/ready, no beat is dropped or duplicated. ``o_p.ready``
    low freezes the exponent pipeline (the memory read port holds its data); ``o_sum.ready`` low
    holds the divider, which then holds the exponent pass at the end of its next row, which holds
    the loader. No ready or valid output depends combinationally on any input. ``o_sum`` of a row
    may be offered before its last ``p`` is taken (they are separate streams).

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
        ``attn_frac_bits`` (``F``, LUT of ``2**F`` entries), ``group`` (``G``), ``e_max``
        (``E``) and ``max_tokens`` (the default ``max_row``).
    logit_bits : int
        Width of the signed logits (23 for ``Dh <= 128``).
    max_row : int or None
        Longest row (memory of ``2 * max_row`` logits); default ``cfg.max_tokens``.

    Members
    -------
    i_row : In(stream.Signature(row_cmd_layout(max_row)))
        Row headers.
    i_logit : In(stream.Signature(logit_layout(logit_bits)))
        Logits of the row, in key order.
    o_p : Out(stream.Signature(prob_layout(cfg.shift_bits)))
        Mantissas and their group's shift, in key order; ``last`` marks the row's last key.
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
        return {"i_row": row_cmd_layout(sg.max_row), "i_logit": logit_layout(sg.logit_bits),
                "o_p": prob_layout(sg.cfg.shift_bits),
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
    def frac_bits(self) -> int:
        return self._cfg.attn_frac_bits

    def elaborate(self, platform):
        m = Module()
        mems = self._memories(m)
        ld = self._loader(m, mems)
        ex = self._exp_pass(m, mems, ld)
        self._divider(m, ld, ex)
        return m

    def _memories(self, m) -> dict:
        """The ping-pong logit memory, the exponent LUT and (``e_max > 0``) the group maxima."""
        n_max, w, frac = self._max_row, self._logit_bits, self.frac_bits
        ng_max = -(-n_max // self._cfg.group)
        m.submodules.logits = mem = Memory(shape=signed(w), depth=2 * n_max, init=[])
        m.submodules.lut = lut = Memory(shape=unsigned(16), depth=1 << frac,
                                        init=[int(v) for v in exp_lut(frac)])
        out = {"wr": mem.write_port(), "rd": mem.read_port(),
               "lut_rd": lut.read_port(domain="comb"), "gwr": None, "grd": None}
        if self._cfg.e_max > 0:             # else every e_g is 0: no group maxima needed
            m.submodules.gmax = gmem = Memory(shape=signed(w), depth=2 * ng_max, init=[])
            out["gwr"], out["grd"] = gmem.write_port(), gmem.read_port()
        return out

    def _bases(self, bank):
        """Start addresses of a bank's row in the logit and group-max memories."""
        n_max = self._max_row
        return Mux(bank, n_max, 0), Mux(bank, -(-n_max // self._cfg.group), 0)

    def _loader(self, m, mems) -> dict:
        """Header, then the row's logits into one bank with the row and group maxima."""
        n_max, w, g_n = self._max_row, self._logit_bits, self._cfg.group
        ng_max = -(-n_max // g_n)
        wr, gwr = mems["wr"], mems["gwr"]
        a_bank = Signal()
        a_cnt = Signal(range(n_max + 1))
        a_n = Signal(range(n_max + 1))
        a_m = Signal(MANT_BITS)
        a_sh = Signal(SH_BITS)
        a_max = Signal(signed(w))
        a_gcnt = Signal(range(g_n))         # key within its group
        a_gidx = Signal(range(ng_max + 1))  # group of the row
        a_gmax = Signal(signed(w))
        a_wait = Signal()                   # a loaded row waits for the exponent pass
        b_busy = Signal()
        handoff = Signal()

        n_in = self.i_row.payload.n
        n_clamped = Mux(n_in == 0, 1, Mux(n_in > n_max, n_max, n_in))
        s_in = self.i_logit.payload.s
        base, gbase = self._bases(a_bank)
        m.d.comb += [
            wr.addr.eq(base + a_cnt),
            wr.data.eq(s_in),
            handoff.eq(a_wait & ~b_busy),
        ]
        # Plain comparisons rather than m.FSM: Icarus (-g2012) never runs an ``always @*``
        # whose inputs do not change, so FSM-decoded outputs would stay X after reset.
        a_head = Signal(init=1)             # loader states: HEAD, LOAD, else WAIT (a_wait)
        a_load = Signal()
        take_logit = Signal()
        m.d.comb += [
            self.i_row.ready.eq(a_head),
            self.i_logit.ready.eq(a_load),
            take_logit.eq(a_load & self.i_logit.valid),
            wr.en.eq(take_logit),
        ]
        # The group's running max is written with every key of the group: the last write
        # (the group's last key) leaves the group's max.
        gmax_new = Signal(signed(w))
        m.d.comb += gmax_new.eq(Mux((a_gcnt == 0) | (s_in > a_gmax), s_in, a_gmax))
        if gwr is not None:
            m.d.comb += [gwr.addr.eq(gbase + a_gidx), gwr.data.eq(gmax_new),
                         gwr.en.eq(take_logit)]
        with m.If(a_head & self.i_row.valid):
            m.d.sync += [a_m.eq(self.i_row.payload.m), a_sh.eq(self.i_row.payload.sh),
                         a_n.eq(n_clamped), a_cnt.eq(0), a_gcnt.eq(0), a_gidx.eq(0),
                         a_head.eq(0), a_load.eq(1)]
        with m.If(take_logit):
            m.d.sync += [a_cnt.eq(a_cnt + 1), a_gmax.eq(gmax_new),
                         a_max.eq(Mux((a_cnt == 0) | (s_in > a_max), s_in, a_max)),
                         a_gcnt.eq(Mux(a_gcnt == g_n - 1, 0, a_gcnt + 1))]
            with m.If(a_gcnt == g_n - 1):
                m.d.sync += a_gidx.eq(a_gidx + 1)
            with m.If(a_cnt == a_n - 1):
                m.d.sync += [a_load.eq(0), a_wait.eq(1)]
        with m.If(handoff):
            m.d.sync += [a_wait.eq(0), a_bank.eq(~a_bank), a_head.eq(1)]
        return {"bank": a_bank, "n": a_n, "m": a_m, "sh": a_sh, "max": a_max,
                "b_busy": b_busy, "handoff": handoff}

    def _x_stages(self, m, adv, b, first, x_sat, sfx):
        """Exponent stages 2-6 from the read port's data ``first``: ``x`` saturated at
        ``x_sat``, for the row ``b`` (``max``, ``m``, ``sh``)."""
        w = self._logit_bits
        s_reg = Signal(signed(w), name=f"s_reg{sfx}")
        d = Signal(w, name=f"d{sfx}")
        prod = Signal(w + MANT_BITS, name=f"prod{sfx}")
        coarse = Signal(w + MANT_BITS + 1, name=f"coarse{sfx}")
        xs = Signal(range(x_sat + 1), name=f"xs{sfx}")
        # x = (v + 2**(s-1)) >> s == ((2v >> s) + 1) >> 1 (also for s = 0), and
        # x >= x_sat <=> (2v >> s) >= 2 x_sat - 1: only a narrow adder after the shifter.
        halves = Signal(w + MANT_BITS + 1, name=f"halves{sfx}")
        m.d.comb += halves.eq(coarse >> b["sh"][:3])
        x_low = (halves[:(2 * x_sat).bit_length()] + 1) >> 1
        with m.If(adv):
            m.d.sync += [
                s_reg.eq(first),
                d.eq(b["max"] - s_reg),
                prod.eq(d * b["m"]),
                coarse.eq((prod << 1) >> (b["sh"][3:] << 3)),
                xs.eq(Mux(halves >= 2 * x_sat - 1, x_sat, x_low)),
            ]
        return xs

    def _exp_pass(self, m, mems, ld) -> dict:
        """One key per cycle through the exponent pipeline into ``o_p``, summing ``l``."""
        n_max, w, frac = self._max_row, self._logit_bits, self.frac_bits
        g_n, e_max = self._cfg.group, self._cfg.e_max
        ng_max = -(-n_max // g_n)
        lb = sum_bits(n_max, e_max)
        rd, grd, lut_rd = mems["rd"], mems["grd"], mems["lut_rd"]
        b_busy = ld["b_busy"]
        b_bank = Signal()
        b_n = Signal(range(n_max + 1))
        b_m = Signal(MANT_BITS)
        b_sh = Signal(SH_BITS)
        b_max = Signal(signed(w))
        b_issue = Signal(range(n_max + 1))  # keys read so far
        b_gcnt = Signal(range(g_n))         # the next key's place in its group
        b_gidx = Signal(range(ng_max + 1))  # the next key's group
        b_l = Signal(lb)

        adv = Signal()
        m.d.comb += adv.eq(~self.o_p.valid | self.o_p.ready)
        issuing = Signal()
        base, gbase = self._bases(b_bank)
        m.d.comb += [
            issuing.eq(b_busy & (b_issue != b_n)),
            rd.addr.eq(base + b_issue),
            rd.en.eq(adv),
        ]
        if grd is not None:
            m.d.comb += [grd.addr.eq(gbase + b_gidx), grd.en.eq(adv)]
        with m.If(adv & issuing):
            m.d.sync += [b_issue.eq(b_issue + 1),
                         b_gcnt.eq(Mux(b_gcnt == g_n - 1, 0, b_gcnt + 1))]
            with m.If(b_gcnt == g_n - 1):
                m.d.sync += b_gidx.eq(b_gidx + 1)

        # Pipeline (each register loads only when adv): 1 the read port's data register,
        # 2 S (off the memory's slow output), 3 d = Smax - S, 4 d * m, 5 2 d m >> (sh & ~7),
        # 6 x saturated at (E + 9) * 2**F, 7 p (the o_p register). valid[k] / last[k] travel
        # along; stages 2-6 have a copy for the key's group max, giving e_g at stage 6.
        valid = [Signal(name=f"valid{k}") for k in range(1, EXP_STAGES)]
        last = [Signal(name=f"last{k}") for k in range(1, EXP_STAGES)]
        shift_bits = self._cfg.shift_bits
        row = {"max": b_max, "m": b_m, "sh": b_sh}
        xs = self._x_stages(m, adv, row, rd.data, (e_max + 9) << frac, "")
        xi = xs[frac:]
        e_g = Signal(range(e_max + 1))
        if grd is not None:
            # x_g only matters up to E * 2**F: e_g = min(x_g >> F, E).
            m.d.comb += e_g.eq(self._x_stages(m, adv, row, grd.data, e_max << frac,
                                              "_g")[frac:])
        k_off = Signal(range(e_max + 10))   # xi - e_g >= 0: the key is no larger than Gmax
        m.d.comb += [lut_rd.addr.eq(xs[:frac]), k_off.eq(xi - e_g)]
        p_new = Signal(P_BITS)
        # k = 9 rounds to 0 by itself (LUT < 2**16); larger k are cut off before the shifter.
        k_cut = Mux(k_off > 9, 9, k_off)[:4]
        m.d.comb += p_new.eq((lut_rd.data + (Const(1, 1) << (k_cut + (EXP_EXTRA_BITS - 1))))
                             >> (k_cut + EXP_EXTRA_BITS))
        with m.If(adv):
            m.d.sync += [
                valid[0].eq(issuing), last[0].eq(b_issue == b_n - 1),
                [valid[k].eq(valid[k - 1]) for k in range(1, EXP_STAGES - 1)],
                [last[k].eq(last[k - 1]) for k in range(1, EXP_STAGES - 1)],
                self.o_p.valid.eq(valid[-1]),
                self.o_p.payload.p.eq(p_new), self.o_p.payload.last.eq(last[-1]),
                self.o_p.payload.shift.eq((e_max - e_g)[:shift_bits]),
            ]
        # l adds each w = p << shift the cycle after p entered the o_p register (off the
        # LUT/shift path).
        fresh, fresh_last = Signal(), Signal()
        m.d.sync += [fresh.eq(adv & valid[-1]), fresh_last.eq(adv & valid[-1] & last[-1])]
        row_end = Signal()                  # l is complete (with the row's last p)
        l_final = Signal(lb)
        m.d.comb += [row_end.eq(fresh & fresh_last),
                     l_final.eq(b_l + (self.o_p.payload.p << self.o_p.payload.shift))]
        with m.If(fresh):
            m.d.sync += b_l.eq(l_final)
        handoff = [b_busy.eq(1), b_bank.eq(ld["bank"]), b_n.eq(ld["n"]), b_m.eq(ld["m"]),
                   b_sh.eq(ld["sh"]), b_max.eq(ld["max"]), b_issue.eq(0), b_gcnt.eq(0),
                   b_gidx.eq(0), b_l.eq(0)]
        return {"row_end": row_end, "l": b_l, "l_final": l_final, "handoff": handoff}

    def _divider(self, m, ld, ex):
        """Takes ``l`` from the exponent pass and divides; frees the exponent pass."""
        lb = sum_bits(self._max_row, self._cfg.e_max)
        row_end, b_l, l_final, b_busy = ex["row_end"], ex["l"], ex["l_final"], ld["b_busy"]
        c_busy = Signal()
        c_l = Signal(lb)
        c_rem = Signal(lb)
        c_q = Signal(R_BITS)
        c_step = Signal(range(DIV_CYCLES + 1))
        transfer = Signal()
        b_done = Signal()                   # the exponent pass holds a finished l
        m.d.comb += transfer.eq((row_end | b_done) & ~c_busy)
        with m.If(row_end & c_busy):
            m.d.sync += b_done.eq(1)
        with m.If(transfer):
            m.d.sync += [b_done.eq(0), b_busy.eq(0),
                         c_busy.eq(1), c_l.eq(Mux(b_done, b_l, l_final)), c_step.eq(0)]

        with m.If(ld["handoff"]):
            m.d.sync += ex["handoff"]

        big_l = _bit_length(m, c_l, lb, "big_l")
        # Restoring division of 2**(L+16) - 1 (all ones) by l, from the remainder
        # 2**(L-1) - 1 < l of its top L-1 bits: the first trial is 2**L - 1, l with every bit
        # below its leading one set (an OR smear, no priority encoder on this path).
        smear = c_l
        k = 1
        while k < lb:
            smear = smear | (smear >> k)
            k *= 2
        trial = Signal(lb + 1)
        m.d.comb += trial.eq(Mux(c_step == 0, smear, Const(1, 1) | (c_rem << 1)))
        ge = Signal()
        m.d.comb += ge.eq(trial >= c_l)
        # c_q is not cleared per row: its 17 shifts push the previous quotient out.
        with m.If(c_busy & (c_step != DIV_CYCLES)):
            m.d.sync += [c_rem.eq(Mux(ge, trial - c_l, trial)), c_q.eq((c_q << 1) | ge),
                         c_step.eq(c_step + 1)]
        m.d.comb += [
            self.o_sum.valid.eq(c_busy & (c_step == DIV_CYCLES)),
            self.o_sum.payload.l.eq(c_l),
            self.o_sum.payload.r.eq(c_q),
            self.o_sum.payload.big_l.eq(big_l),
        ]
        with m.If(self.o_sum.valid & self.o_sum.ready):
            m.d.sync += c_busy.eq(0)


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
