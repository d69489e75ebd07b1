"""Normalization stage of the attention engine: a query block's PV sums through the deferred
division, into the output memory, with the residual add of DSTAR's reuse.

Ref: ``golden/ATTENTION.md`` (steps 4-6; ``O_full``, ``R = O_full - O_sel``, ``O_sel + R``);
``dstar.hw.softmax.Normalizer``.
"""

from amaranth import Array, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..geometry import AttentionGeometry, uwidth
from ..softmax import norm_in_layout, norm_out_layout, row_sum_layout

__all__ = ["NormStage"]


class NormStage(wiring.Component):
    """Normalizes the rows ``base_i .. base_i + rows - 1`` of a query block: every PV
    accumulator (``pv_base + i * n_cp + cp``, read at ``y_addr`` with one cycle of latency)
    goes with its row's ``(r, L)`` (looked up by ``row``) through the engine's ``Normalizer``
    (``o_norm`` / ``i_norm``), one per cycle, in the order ``i``, then ``d``; output ``d`` of
    row ``i`` is written at ``i * head_dim + d``:

    * ``full`` (the pass over every tile): ``O_full``, written on key steps; on a key step's
      masked pass (``masked & key``) the residual ``R = O_full - O_sel`` goes to the slot's
      residual cache at ``slot * n_max * head_dim + i * head_dim + d``, from the ``O_full``
      read back;
    * a key step taking ``O_sel`` from its full pass (``split``): first the selected tiles'
      sums (``masked & split``), ``R = -O_sel`` into the cache; then, once the unselected
      tiles have been added, ``O_full`` (``unsel``, with ``full``), written, and ``R +
      O_full`` into the cache;
    * reuse steps (``~full``, ``~key``): ``O_sel + R``, from the slot's cache.

    ``start`` (a pulse) begins the block; ``busy`` stays high until the last write. Latency
    ``NORM_DRAIN`` (``AttentionGeometry``) from the last accumulator read to ``busy`` low;
    no back-pressure (the normalizer's output is always taken). Reset stops a block.

    Parameters
    ----------
    ag : AttentionGeometry

    Members
    -------
    start, full, key, masked, split, unsel : In(1)
    base_i, rows, slot : In
    y_addr : Out, y_data : In(data.ArrayLayout(data.ArrayLayout(signed(acc_bits), m_tile),
        n_arrays))
    row : Out(range(block_q)), r, big_l : In
        The row of the accumulator read and that row's ``(r, L)``.
    o_norm : Out(stream.Signature(norm_in_layout)), i_norm : In(stream.Signature(norm_out_layout))
        To and from the ``Normalizer`` (``i_norm`` is always ready).
    o_raddr, o_waddr, o_we, o_wdata : Out; o_rdata : In
        Output memory (one cycle of read latency).
    r_raddr, r_waddr, r_we, r_wdata : Out; r_rdata : In
        Residual cache (one cycle of read latency).
    busy : Out(1)
    """

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        cfg, geo = ag.cfg, ag.lin
        sum_l = row_sum_layout(ag.n_max, cfg.e_max)
        super().__init__({
            "start": In(1),
            "full": In(1),
            "key": In(1),
            "masked": In(1),
            "split": In(1),
            "unsel": In(1),
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
            "o_raddr": Out(uwidth(ag.o_depth)),
            "o_rdata": In(signed(ag.out_bits)),
            "o_waddr": Out(uwidth(ag.o_depth)),
            "o_we": Out(1),
            "o_wdata": Out(signed(ag.out_bits)),
            "r_raddr": Out(uwidth(ag.res_depth)),
            "r_rdata": In(signed(ag.res_bits)),
            "r_waddr": Out(uwidth(ag.res_depth)),
            "r_we": Out(1),
            "r_wdata": Out(signed(ag.res_bits)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        ag = self._ag
        cfg = ag.cfg
        bq, dh, mt, n_arr = cfg.block_q, cfg.head_dim, cfg.m_tile, cfg.n_arrays
        m = Module()
        n_in, n_out = self.o_norm, self.i_norm
        rows = self.rows
        n_on = Signal()
        n_i = Signal(range(bq + 1))
        n_d = Signal(range(dh + 1))
        n_cp = Signal(range(ag.n_cp + 1))
        n_a = Signal(range(n_arr))
        n_col = Signal(range(mt))
        n_oaddr = Signal(uwidth(ag.o_depth + 1))
        v1, v2 = Signal(), Signal()
        i1 = Signal(range(bq))
        a1, col1 = Signal.like(n_a), Signal.like(n_col)
        oa1, oa2, oa3 = (Signal.like(n_oaddr, name=f"oaddr{k}") for k in (1, 2, 3))
        m.d.comb += self.y_addr.eq(ag.pv_base + n_i * ag.n_cp + n_cp)
        m.d.sync += [v1.eq(n_on), i1.eq(n_i), a1.eq(n_a), col1.eq(n_col), oa1.eq(n_oaddr),
                     v2.eq(v1), oa2.eq(oa1), oa3.eq(oa2)]
        m.d.comb += [self.row.eq(i1),
                     n_in.valid.eq(v1),
                     n_in.payload.acc.eq(Array(self.y_data[a][col1] for a in range(n_arr))[a1]),
                     n_in.payload.r.eq(self.r), n_in.payload.big_l.eq(self.big_l),
                     n_out.ready.eq(1)]
        res_base = Signal(uwidth(ag.res_depth + 1))
        m.d.comb += res_base.eq(self.slot * (ag.n_max * dh))
        o_new = n_out.payload.o
        full, key = self.full, self.key
        m.d.comb += [self.o_raddr.eq(oa2), self.r_raddr.eq(res_base + oa2),
                     self.o_waddr.eq(oa3), self.r_waddr.eq(res_base + oa3),
                     self.o_we.eq(n_out.valid & (full | ~key)),
                     self.o_wdata.eq(Mux(full, o_new, o_new + self.r_rdata)),
                     self.r_we.eq(n_out.valid & (self.masked | self.unsel) & key),
                     self.r_wdata.eq(Mux(self.unsel, self.r_rdata + o_new,
                                         Mux(self.split, -o_new, self.o_rdata - o_new))),
                     self.busy.eq(n_on | v1 | v2 | n_out.valid)]
        with m.If(n_on):
            m.d.sync += [n_oaddr.eq(n_oaddr + 1), n_d.eq(n_d + 1),
                         n_col.eq(Mux(n_col == mt - 1, 0, n_col + 1))]
            with m.If(n_col == mt - 1):
                m.d.sync += n_a.eq(Mux(n_a == n_arr - 1, 0, n_a + 1))
                with m.If(n_a == n_arr - 1):
                    m.d.sync += n_cp.eq(n_cp + 1)
            with m.If(n_d == dh - 1):
                m.d.sync += [n_d.eq(0), n_cp.eq(0), n_a.eq(0), n_col.eq(0), n_i.eq(n_i + 1)]
                with m.If(n_i == rows - 1):
                    m.d.sync += n_on.eq(0)
        with m.If(self.start):
            m.d.sync += [n_on.eq(1), n_i.eq(0), n_d.eq(0), n_cp.eq(0), n_a.eq(0), n_col.eq(0),
                         n_oaddr.eq(self.base_i * dh)]
        return m
