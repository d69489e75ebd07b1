"""Normalization stage of the attention engine: a query block's PV sums through the deferred
division, into the output memory, with the residual add of DSTAR's reuse.

Ref: ``golden/ATTENTION.md`` (steps 4-6; ``O_full``, ``R = O_full - O_sel``, ``O_sel + R``);
``dstar.hw.softmax.Normalizer``.
"""

import enum

from amaranth import Array, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..geometry import AttentionGeometry, uwidth
from ..softmax import norm_in_layout, norm_out_layout, row_sum_layout

__all__ = ["NormStage", "NormSource", "OutMode", "ResMode"]


class NormSource(enum.IntEnum):
    """The PV sums a normalization pass reads: ``S`` or ``S + U``."""
    S = 0
    S_PLUS_U = 1


class OutMode(enum.IntEnum):
    """What a pass writes to the output memory: nothing, ``O`` (``NEW``), or ``O + R`` (reuse)."""
    NONE = 0
    NEW = 1
    O_PLUS_R = 2


class ResMode(enum.IntEnum):
    """What a pass writes to the slot's residual cache: nothing, ``-O`` or ``R + O``."""
    NONE = 0
    NEG = 1
    ADD = 2


class NormStage(wiring.Component):
    """One normalization pass over the rows ``base_i .. base_i + rows - 1`` of a query block:
    every PV sum of ``source`` (``NormSource``: the words at ``s_base + i * n_cp + cp``, or
    those plus the words at ``u_base + ...``) goes with its row's ``(r, L)`` (looked up by ``row``)
    through the engine's ``Normalizer`` (``o_norm`` / ``i_norm``), one per cycle, in the order
    ``i``, then ``d``. Output ``d`` of row ``i`` (``O``) is written by ``out_mode``
    (``OutMode``) into element ``d % block_cols`` of word ``i * n_cp + d // block_cols`` of the
    output memory and by ``res_mode`` (``ResMode``) into that element of word ``slot * n_max *
    n_cp + i * n_cp + d // block_cols`` of the residual cache, from the element read there (the
    memories' words are ``block_cols`` elements with a write enable each):

    * key step: ``S`` (selected tiles, their own reciprocals) with ``res_mode = NEG`` (``R =
      -O_sel``), then ``S + U`` with ``out_mode = NEW``, ``res_mode = ADD`` (``O_full``, ``R +=
      O_full``);
    * reuse step: ``S`` with ``out_mode = O_PLUS_R`` (``O_sel + R``).

    ``start`` (a pulse) samples every input but ``r`` / ``big_l`` / the data ports (the engine
    may move on to the next block meanwhile); ``busy`` stays high until the last write.
    Latency: ``rows * head_dim`` cycles of accumulator reads, plus one per word (``rows *
    n_cp``) with ``S_PLUS_U`` (the ``S`` word is fetched first), then ``NORM_DRAIN``
    (``AttentionGeometry``) until ``busy`` is low; no back-pressure (the normalizer's output is
    always taken). Reset stops a pass.

    Parameters
    ----------
    ag : AttentionGeometry

    Members
    -------
    start : In(1), source : In(NormSource), out_mode : In(OutMode), res_mode : In(ResMode)
    s_base, u_base : In(range(y_depth)), base_i, rows, slot : In
    y_addr : Out, y_data : In(data.ArrayLayout(data.ArrayLayout(signed(acc_bits), m_tile),
        n_arrays))
    row : Out(range(block_q)), r, big_l : In
        The row of the accumulator read and that row's ``(r, L)``.
    o_norm : Out(stream.Signature(norm_in_layout)), i_norm : In(stream.Signature(norm_out_layout))
        To and from the ``Normalizer`` (``i_norm`` is always ready).
    o_waddr, o_we, o_wdata : Out
        Output memory: ``o_we`` one enable per element, ``o_wdata`` the element (for each).
    r_raddr, r_waddr, r_we, r_wdata : Out; r_rdata : In
        Residual cache (one cycle of read latency; ``r_rdata`` the whole word), enables and
        element as the output's.
    busy : Out(1)
    """

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        cfg, geo = ag.cfg, ag.lin
        sum_l = row_sum_layout(ag.n_max, cfg.e_max)
        super().__init__({
            "start": In(1),
            "source": In(NormSource),
            "out_mode": In(OutMode),
            "res_mode": In(ResMode),
            "s_base": In(uwidth(geo.y_depth)),
            "u_base": In(uwidth(geo.y_depth)),
            "base_i": In(range(ag.n_max + cfg.block_q + 1)),
            "rows": In(range(cfg.block_q + 1)),
            "slot": In(uwidth(cfg.attn_slots)),
            "y_addr": Out(uwidth(geo.y_depth)),
            "y_data": In(data.ArrayLayout(data.ArrayLayout(signed(geo.acc_bits), cfg.m_tile),
                                          cfg.n_arrays)),
            "row": Out(range(cfg.block_q)),
            "r": In(sum_l.members["r"]),
            "big_l": In(sum_l.members["big_l"]),
            "o_norm": Out(stream.Signature(norm_in_layout(ag.pv_acc_bits, ag.n_max, cfg.e_max))),
            "i_norm": In(stream.Signature(norm_out_layout(ag.softmax.out_bits))),
            "o_waddr": Out(uwidth(ag.o_depth)),
            "o_we": Out(ag.block_cols),
            "o_wdata": Out(signed(ag.out_bits)),
            "r_raddr": Out(uwidth(ag.res_depth)),
            "r_rdata": In(data.ArrayLayout(signed(ag.res_bits), ag.block_cols)),
            "r_waddr": Out(uwidth(ag.res_depth)),
            "r_we": Out(ag.block_cols),
            "r_wdata": Out(signed(ag.res_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        ag = self._ag
        cfg = ag.cfg
        bq, dh, mt, n_arr = cfg.block_q, cfg.head_dim, cfg.m_tile, cfg.n_arrays
        m = Module()
        n_in, n_out = self.o_norm, self.i_norm
        # The pass's parameters, sampled by start.
        src, out, res = (Signal.like(p, name=f"{p.name}_q") for p in (self.source,
                                                                        self.out_mode,
                                                                        self.res_mode))
        s_base, u_base = Signal.like(self.s_base), Signal.like(self.u_base)
        rows, slot = Signal.like(self.rows), Signal.like(self.slot)
        n_on = Signal()
        n_i = Signal(range(bq + 1))
        n_d = Signal(range(dh + 1))
        n_cp = Signal(range(ag.n_cp + 1))
        n_a = Signal(range(n_arr))
        n_col = Signal(range(mt))
        n_oaddr = Signal(uwidth(ag.o_depth + 1))     # the word of row i, columns cp * bc ..
        # S + U: the cycle before a word's first output reads its S word (fetched).
        fetch, fetched = Signal(), Signal()
        m.d.comb += fetch.eq(n_on & (src == NormSource.S_PLUS_U) & (n_a == 0) & (n_col == 0)
                             & ~fetched)
        emit = Signal()
        m.d.comb += emit.eq(n_on & ~fetch)
        v1, va, vp = Signal(), Signal(), Signal()
        i1 = Signal(range(bq))
        a1, col1 = Signal.like(n_a), Signal.like(n_col)
        oa1, oa2, oa3, oa4 = (Signal.like(n_oaddr, name=f"oaddr{k}") for k in (1, 2, 3, 4))
        el0 = Signal(range(ag.block_cols))        # the element of the word: column d % bc
        m.d.comb += el0.eq(n_a * mt + n_col)
        el1, el2, el3, el4 = (Signal.like(el0, name=f"el{k}") for k in (1, 2, 3, 4))
        word = Signal.like(self.y_addr)
        m.d.comb += [word.eq(n_i * ag.n_cp + n_cp),
                     self.y_addr.eq(Mux(fetch | (src == NormSource.S), s_base, u_base) + word)]
        fetch1 = Signal()
        s_word = Signal.like(self.y_data)
        m.d.sync += [fetch1.eq(fetch), v1.eq(emit), i1.eq(n_i), a1.eq(n_a), col1.eq(n_col),
                     oa1.eq(n_oaddr), va.eq(v1), vp.eq(va), oa2.eq(oa1), oa3.eq(oa2),
                     oa4.eq(oa3), el1.eq(el0), el2.eq(el1), el3.eq(el2), el4.eq(el3)]
        with m.If(fetch1):
            m.d.sync += s_word.eq(self.y_data)
        acc = Array(self.y_data[a][col1] for a in range(n_arr))[a1]
        acc_s = Array(s_word[a][col1] for a in range(n_arr))[a1]
        # Stage A: the accumulator (S + U added) and the row's (r, L) registered in front of the
        # normalizer, so its multiplier starts from flip-flops, not from the arrays' Y read (the
        # Fmax path).
        acc_a = Signal.like(n_in.payload.acc)
        r_a, big_l_a = Signal.like(self.r), Signal.like(self.big_l)
        m.d.sync += [acc_a.eq(Mux(src == NormSource.S_PLUS_U, acc + acc_s, acc)),
                     r_a.eq(self.r), big_l_a.eq(self.big_l)]
        m.d.comb += [self.row.eq(i1),
                     n_in.valid.eq(va),
                     n_in.payload.acc.eq(acc_a),
                     n_in.payload.r.eq(r_a), n_in.payload.big_l.eq(big_l_a),
                     n_out.ready.eq(1)]
        res_base = Signal(uwidth(ag.res_depth + 1))
        m.d.comb += res_base.eq(slot * (ag.n_max * ag.n_cp))
        o_new = n_out.payload.o
        # The residual is read a stage early and its element registered, so the write-back's
        # sum starts from flip-flops, not from the memory's output (the Fmax path). Each element
        # is written once per pass, by its own output, so the early read sees its old value.
        r_old = Signal(signed(ag.res_bits))
        onehot = Signal(ag.block_cols)
        m.d.sync += r_old.eq(self.r_rdata[el3])
        m.d.comb += onehot.eq(1 << el4)
        m.d.comb += [self.r_raddr.eq(res_base + oa2),
                     self.o_waddr.eq(oa4), self.r_waddr.eq(res_base + oa4),
                     self.o_we.eq(Mux(n_out.valid & (out != OutMode.NONE), onehot, 0)),
                     self.o_wdata.eq(Mux(out == OutMode.O_PLUS_R, o_new + r_old, o_new)),
                     self.r_we.eq(Mux(n_out.valid & (res != ResMode.NONE), onehot, 0)),
                     self.busy.eq(n_on | v1 | va | vp | n_out.valid)]
        m.d.comb += self.r_wdata.eq(Mux(res == ResMode.NEG, -o_new, r_old + o_new))
        with m.If(fetch):
            m.d.sync += fetched.eq(1)
        with m.If(emit & ((n_a == n_arr - 1) & (n_col == mt - 1) | (n_d == dh - 1))):
            m.d.sync += n_oaddr.eq(n_oaddr + 1)      # the word's last column, or the row's
        with m.If(emit):
            m.d.sync += [n_d.eq(n_d + 1),
                         n_col.eq(Mux(n_col == mt - 1, 0, n_col + 1))]
            with m.If(n_col == mt - 1):
                m.d.sync += n_a.eq(Mux(n_a == n_arr - 1, 0, n_a + 1))
                with m.If(n_a == n_arr - 1):
                    m.d.sync += [n_cp.eq(n_cp + 1), fetched.eq(0)]
            with m.If(n_d == dh - 1):
                m.d.sync += [n_d.eq(0), n_cp.eq(0), n_a.eq(0), n_col.eq(0), n_i.eq(n_i + 1),
                             fetched.eq(0)]
                with m.If(n_i == rows - 1):
                    m.d.sync += n_on.eq(0)
        with m.If(self.start):
            m.d.sync += [n_on.eq(1), n_i.eq(0), n_d.eq(0), n_cp.eq(0), n_a.eq(0), n_col.eq(0),
                         fetched.eq(0), n_oaddr.eq(self.base_i * ag.n_cp),
                         src.eq(self.source), out.eq(self.out_mode), res.eq(self.res_mode),
                         s_base.eq(self.s_base), u_base.eq(self.u_base), rows.eq(self.rows),
                         slot.eq(self.slot)]
        return m
