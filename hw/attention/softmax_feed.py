"""Softmax feeder of the attention engine: the logits of a query block from the PE arrays'
accumulators into ``SoftmaxUnit``, and its outputs into P words, block sums and masses.

Ref: ``golden/ATTENTION.md`` (group format, block mass); ``dstar.hw.softmax.SoftmaxUnit``.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..geometry import AttentionGeometry, uwidth
from ..softmax import logit_layout, prob_layout, row_cmd_layout, row_sum_layout
from .layouts import block_list_layouts, ms_layout, p_word_layout

__all__ = ["SoftmaxFeed"]


class SoftmaxFeed(wiring.Component):
    """Streams the rows ``base_i .. base_i + rows - 1`` of a query block through the softmax
    unit over the keys of the selected blocks ``sel_j[0 .. n_sel - 1]`` (``n_valid`` keys in
    all), and collects what comes back:

    * per row a header (``(m, sh)`` from the multiplier memory at ``ms_addr``, ``n_valid``) on
      ``o_row``, then its logits in key order on ``o_logit``, read from the accumulators at
      ``y_addr = y_base + row * n_kc + chunk`` (one cycle of read latency, no enable: the
      address is the key to offer next, so the data in front of the unit always belongs to the
      offered key, stalls included);
    * P words: per group of ``G`` keys the 8-bit mantissas and the group's shift, written with
      the group's last ``p`` (``p_we``, zeros past a ragged end) at ``row * n_kg + group``
      (FMDQ: in bank ``p_bank = row mod T`` at ``(row // T) * n_kg + group``);
    * per row the block sums ``b`` of the applied weights ``p << shift`` (two banks by row
      parity, as the next row's ``p`` arrive while the divider works on this row's ``(r,
      L)``); with the row's ``(r, L)`` (``i_sum``) and ``full``, its share ``(b * r) >> L``
      (16-bit, truncating) is added to the block masses ``mass`` two cycles later (the last
      row's in the cycle after ``done`` rises: ``mass`` is complete from then on);
    * ``(r, L)`` of every row into table ``bank`` (of two, one per query-block parity), looked
      up combinationally by ``norm_bank`` and ``norm_row`` on ``norm_r`` / ``norm_big_l`` for
      the normalization (which reads one table while the next block writes the other);
    * per row its block sums ``b_rows`` (as they were when its ``(r, L)`` arrived) and
      ``max_block``, the block (one-hot, bit ``J``) of the row's first largest streamed logit,
      which a key step's mask always holds (``golden.attention.row_max_blocks``).

    With ``select = False`` (SAR: the host's masks, no selection) there are no block sums,
    masses or row-max blocks (no ``mass``, ``b_rows``, ``max_block``); with ``tables = False``
    no ``(r, L)`` tables (no ``norm_*``).

    ``start`` (a pulse) begins a query block (the masses restart at zero when ``full``);
    ``done`` is high once every row's ``(r, L)`` has arrived, the feeder is idle and every
    row's ``max_block`` is written (two cycles after its last logit was taken). ``i_p``
    and ``i_sum`` are always ready; ``o_row`` / ``o_logit`` follow the unit's ready. Reset
    stops a block.

    Parameters
    ----------
    ag : AttentionGeometry
    select : bool
        Build the block sums, masses and row-max blocks a key step's selection needs.
    tables : bool
        Build the ``(r, L)`` tables (``norm_*``); without them the caller keeps the rows'
        ``(r, L)`` from ``i_sum`` itself.

    Members
    -------
    start, full : In(1)
    y_base : In(range(y_depth)), bank : In(range(TABLES))
        Hold still until ``done``.
    sel_j, sel_len : In(block_list_layouts(ag)), n_sel : In(range(nkb + 1))
    n_valid : In(range(n_max + 1)), base_i : In(range(n_max + block_q + 1)),
    rows : In(range(block_q + 1))
    y_addr : Out, y_data : In(data.ArrayLayout(data.ArrayLayout(signed(acc_bits), m_tile),
        n_arrays))
        The accumulators of every array (one cycle of read latency).
    ms_addr : Out, ms_data : In(ms_layout())
    o_row, o_logit : Out(stream.Signature(...)), i_p, i_sum : In(stream.Signature(...))
        To and from ``SoftmaxUnit``.
    p_we : Out(1), p_addr : Out, p_bank : Out, p_data : Out(p_word_layout)
    mass : Out(data.ArrayLayout(unsigned(mass_bits), nkb))
    b_rows : Out(data.ArrayLayout(data.ArrayLayout(unsigned(b_bits), nkb), block_q))
    max_block : Out(data.ArrayLayout(unsigned(nkb), block_q))
    norm_bank : In(range(TABLES)), norm_row : In(range(block_q)), norm_r : Out,
    norm_big_l : Out
    done : Out(1)
    """

    #: Tables of ``(r, L)`` per row: two query blocks (by parity).
    TABLES = 2

    def __init__(self, ag: AttentionGeometry, select: bool = True, tables: bool = True):
        self._ag, self._select, self._tables = ag, select, tables
        cfg, sg, geo = ag.cfg, ag.softmax, ag.lin
        jb, bq = range(ag.nkb + 1), cfg.block_q
        sum_l = row_sum_layout(sg.max_row, cfg.e_max)
        sel_j_l, sel_len_l = block_list_layouts(ag)
        super().__init__({
            "start": In(1),
            "full": In(1),
            "y_base": In(uwidth(geo.y_depth)),
            "bank": In(range(self.TABLES)),
            "sel_j": In(sel_j_l),
            "sel_len": In(sel_len_l),
            "n_sel": In(jb),
            "n_valid": In(range(ag.n_max + 1)),
            "base_i": In(range(ag.n_max + bq + 1)),
            "rows": In(range(bq + 1)),
            "y_addr": Out(uwidth(geo.y_depth)),
            "y_data": In(data.ArrayLayout(data.ArrayLayout(signed(geo.acc_bits), cfg.m_tile),
                                          cfg.n_arrays)),
            "ms_addr": Out(uwidth(ag.n_max)),
            "ms_data": In(ms_layout()),
            "o_row": Out(stream.Signature(row_cmd_layout(sg.max_row))),
            "o_logit": Out(stream.Signature(logit_layout(sg.logit_bits, sg.lanes))),
            "i_p": In(stream.Signature(prob_layout(cfg.shift_bits, sg.lanes))),
            "i_sum": In(stream.Signature(sum_l)),
            "p_we": Out(1),
            "p_addr": Out(uwidth(ag.p_depth)),
            "p_bank": Out(uwidth(ag.p_banks)),
            "p_data": Out(p_word_layout(ag)),
            **({"mass": Out(data.ArrayLayout(unsigned(ag.mass_bits), ag.nkb)),
                "b_rows": Out(data.ArrayLayout(data.ArrayLayout(unsigned(ag.b_bits), ag.nkb),
                                               bq)),
                "max_block": Out(data.ArrayLayout(unsigned(ag.nkb), bq))} if select else {}),
            **({"norm_bank": In(range(self.TABLES)),
                "norm_row": In(range(bq)),
                "norm_r": Out(sum_l.members["r"]),
                "norm_big_l": Out(sum_l.members["big_l"])} if tables else {}),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        f_start = self._feed(m)
        s_row = self._collect(m)
        with m.If(self.start):
            m.d.sync += f_start
        busy = self._max_busy if self._select else 0
        m.d.comb += self.done.eq((s_row == self.rows) & ~self._f_on & ~busy)
        return m

    def _feed(self, m) -> list:
        """Headers and logits from the accumulators; returns the statements of ``start``."""
        ag = self._ag
        cfg = ag.cfg
        bq, bk, mt, n_arr = cfg.block_q, cfg.block_k, cfg.m_tile, cfg.n_arrays
        lanes = ag.softmax.lanes
        beats = ag.block_cols // lanes          # beats of P logits per accumulator chunk
        sel_j, rows = self.sel_j, self.rows
        self._f_on = f_on = Signal()
        f_have, f_hdr = Signal(), Signal()
        f_row = Signal(range(bq + 1))
        f_li = Signal(range(ag.nkb + 1))
        f_off = Signal(range(bk + 1))
        f_kc = Signal(range(ag.n_kc + 1))
        f_beat = Signal(range(beats))
        f_len = Signal(range(bk + 1))
        m.d.comb += f_len.eq(self.sel_len[f_li])
        take = Signal()
        m.d.comb += take.eq(f_have & self.o_logit.ready)
        blk_end = Signal()
        row_end = Signal()
        m.d.comb += [blk_end.eq(f_off + lanes >= f_len),
                     row_end.eq(blk_end & (f_li + 1 == self.n_sel))]
        nx_kc = Signal.like(f_kc)
        with m.If(blk_end):
            m.d.comb += nx_kc.eq(sel_j[f_li + 1] * ag.kc_per_block)
        with m.Elif(f_beat == beats - 1):
            m.d.comb += nx_kc.eq(f_kc + 1)
        with m.Else():
            m.d.comb += nx_kc.eq(f_kc)
        kc0 = Signal.like(f_kc)
        m.d.comb += kc0.eq(sel_j[0] * ag.kc_per_block)
        m.d.comb += self.y_addr.eq(self.y_base + Mux(take,
                                                     Mux(row_end, (f_row + 1) * ag.n_kc + kc0,
                                                         f_row * ag.n_kc + nx_kc),
                                                     f_row * ag.n_kc + f_kc))
        with m.If(take):
            with m.If(row_end):
                m.d.sync += [f_row.eq(f_row + 1), f_li.eq(0), f_off.eq(0), f_kc.eq(kc0),
                             f_beat.eq(0), f_hdr.eq(f_row + 1 != rows)]
                with m.If(f_row + 1 == rows):
                    m.d.sync += f_on.eq(0)
            with m.Elif(blk_end):
                m.d.sync += [f_li.eq(f_li + 1), f_off.eq(0), f_kc.eq(nx_kc), f_beat.eq(0)]
            with m.Else():
                m.d.sync += [f_off.eq(f_off + lanes), f_kc.eq(nx_kc),
                             f_beat.eq(Mux(f_beat == beats - 1, 0, f_beat + 1))]
        # A beat: keys f_off .. f_off + P - 1 of the block, P consecutive logits of the chunk
        # (the arrays' words side by side); lanes past a ragged block's end are don't-care.
        chunk = [self.y_data[a][c] for a in range(n_arr) for c in range(mt)]
        for lane in range(lanes):
            m.d.comb += self.o_logit.payload.s[lane].eq(
                Array(chunk[b * lanes + lane] for b in range(beats))[f_beat])
        if self._select:
            self._max_flags(m, take, row_end, f_row, f_li, f_off, f_len)
        m.d.sync += f_have.eq(f_on & ~(take & row_end & (f_row + 1 == rows)))
        with m.If(self.o_row.valid & self.o_row.ready):
            m.d.sync += f_hdr.eq(0)
        m.d.comb += [self.ms_addr.eq(self.base_i + f_row),
                     self.o_row.valid.eq(f_hdr),
                     self.o_row.payload.m.eq(self.ms_data.m),
                     self.o_row.payload.sh.eq(self.ms_data.sh),
                     self.o_row.payload.n.eq(self.n_valid),
                     self.o_logit.valid.eq(f_have)]
        return [f_on.eq(1), f_hdr.eq(1), f_row.eq(0), f_li.eq(0), f_off.eq(0), f_kc.eq(kc0),
                f_beat.eq(0)]

    def _max_flags(self, m, take, row_end, f_row, f_li, f_off, f_len):
        """``max_block``: per row the block where its running maximum was first attained (a
        beat's keys share one block; keys stream in ascending order). Off the stream's path:
        a taken beat is registered (stage a), its largest valid logit registered (stage b),
        then compared with the row's running maximum, so the accumulators' read feeds one
        register (the Fmax path); ``done`` waits for the two stages to drain."""
        ag = self._ag
        nkb, lanes = ag.nkb, ag.softmax.lanes
        lg = self.o_logit.payload.s
        a_v, a_first, a_end = Signal(), Signal(), Signal()
        a_lg, a_ok = Signal(lg.shape()), Signal(lanes)
        a_here, a_row = Signal(nkb), Signal.like(f_row)
        m.d.sync += a_v.eq(take)
        with m.If(take):
            m.d.sync += [a_lg.eq(lg), a_ok.eq(Cat(f_off + lane < f_len for lane in range(lanes))),
                         a_first.eq((f_li == 0) & (f_off == 0)), a_end.eq(row_end),
                         a_here.eq(Const(1, nkb) << self.sel_j[f_li]), a_row.eq(f_row)]
        b_v, b_first, b_end = Signal(), Signal(), Signal()
        b_s, b_here, b_row = Signal.like(lg[0]), Signal(nkb), Signal.like(f_row)
        m.d.sync += b_v.eq(a_v)
        with m.If(a_v):
            m.d.sync += [b_s.eq(self._beat_max(m, a_lg, a_ok)), b_first.eq(a_first),
                         b_end.eq(a_end), b_here.eq(a_here), b_row.eq(a_row)]
        self._max_busy = a_v | b_v
        cur_max = Signal.like(b_s)
        cur = Signal(nkb)
        nxt = Signal(nkb)
        new_max = b_first | (b_s > cur_max)
        m.d.comb += nxt.eq(Mux(new_max, b_here, cur))
        with m.If(b_v):
            m.d.sync += [cur.eq(nxt), cur_max.eq(Mux(new_max, b_s, cur_max))]
            with m.If(b_end):
                with m.Switch(b_row):
                    for i in range(self._ag.cfg.block_q):
                        with m.Case(i):
                            m.d.sync += self.max_block[i].eq(nxt)

    def _beat_max(self, m, lg, ok):
        """The largest logit of the beat ``lg``'s lanes that ``ok`` marks (lane 0 always is)."""
        vals = [lg[0]] + [Mux(ok[lane], lg[lane], lg[0]) for lane in range(1, len(lg))]
        while len(vals) > 1:
            nxt = []
            for i in range(0, len(vals) - 1, 2):
                v = Signal.like(lg[0], name=f"beat_max{len(vals)}_{i}")
                m.d.comb += v.eq(Mux(vals[i] >= vals[i + 1], vals[i], vals[i + 1]))
                nxt.append(v)
            vals = nxt + vals[len(vals) - len(vals) % 2:]
        return vals[0]

    def _collect(self, m) -> Signal:
        """P words, block sums, ``(r, L)`` per row and block masses; returns the count of rows
        whose ``(r, L)`` arrived."""
        ag = self._ag
        cfg = ag.cfg
        g, bq, bk, nkb = cfg.group, cfg.block_q, cfg.block_k, ag.nkb
        sel_j, i_p, i_sum = self.sel_j, self.i_p, self.i_sum
        # p arrive in key order over the selected blocks (whole lane groups, as block_k is a
        # multiple of G, so the unit's groups are the key-index groups): a group's word is
        # written with its last p and the group's shift, which every p of the group carries.
        p_row = Signal(range(bq + 1))
        p_li = Signal(range(nkb + 1))
        p_off = Signal(range(bk + 1))
        p_kg = Signal(range(ag.n_kg + 1))
        lanes = ag.softmax.lanes
        per_group = g // lanes                  # beats of a group
        p_q = Signal(range(per_group))          # the beat's place in its group
        pbuf = Signal(data.ArrayLayout(unsigned(8), g))
        b_sum = [[Signal(ag.b_bits, name=f"b{k}_{j}") for j in range(nkb)] for k in range(2)]
        mass = [Signal(ag.mass_bits, name=f"mass{j}") for j in range(nkb)]
        nt = self.TABLES
        sel, tables = self._select, self._tables
        sum_l = i_sum.payload.shape()
        r_row = Array(Signal(sum_l.members["r"], name=f"r_row{t}_{i}")
                      for t in range(nt if tables else 0) for i in range(bq))
        big_l_row = Array(Signal(sum_l.members["big_l"], name=f"L_row{t}_{i}")
                          for t in range(nt if tables else 0) for i in range(bq))
        s_row = Signal(range(bq + 1))
        norm_at, at = Signal(range(nt * bq)), Signal(range(nt * bq))
        m.d.comb += [*([norm_at.eq(self.norm_bank * bq + self.norm_row)] if tables else []),
                     at.eq(self.bank * bq + s_row)]
        pj = Signal(range(nkb + 1))
        p_len = Signal(range(bk + 1))
        m.d.comb += [pj.eq(sel_j[p_li]), p_len.eq(self.sel_len[p_li])]
        m.d.comb += [*([self.norm_r.eq(r_row[norm_at]),
                        self.norm_big_l.eq(big_l_row[norm_at])] if tables else []),
                     *([[self.mass[j].eq(mass[j]) for j in range(nkb)]] if sel else []),
                     i_p.ready.eq(1), i_sum.ready.eq(1)]
        pval = i_p.payload.p
        wval = Signal(ag.b_bits)
        # Lanes past a row's end carry p = 0.
        if sel:
            m.d.comb += wval.eq(sum(pval[lane] for lane in range(lanes)) << i_p.payload.shift)
        p_blk_end = Signal()
        m.d.comb += p_blk_end.eq(p_off + lanes >= p_len)
        group_end = Signal()
        m.d.comb += group_end.eq((p_q == per_group - 1) | p_blk_end)
        pword = self.p_data
        m.d.comb += pword.shift.eq(i_p.payload.shift)
        for k in range(g):
            m.d.comb += pword.p[k].eq(Mux(p_q == k // lanes, pval[k % lanes], pbuf[k]))
        tb = (ag.p_banks - 1).bit_length()     # FMDQ: row i in bank i mod token_tile
        m.d.comb += [self.p_addr.eq((p_row >> tb) * ag.n_kg + p_kg), self.p_bank.eq(p_row[:tb]),
                     self.p_we.eq(i_p.valid & group_end)]
        with m.If(i_p.valid):
            for k in range(g):
                with m.If(p_q == k // lanes):
                    m.d.sync += pbuf[k].eq(pval[k % lanes])
            with m.If(group_end):
                m.d.sync += pbuf.eq(0)
            for j in range(nkb if sel else 0):
                with m.If(pj == j):
                    with m.If(p_row[0]):
                        m.d.sync += b_sum[1][j].eq(b_sum[1][j] + wval)
                    with m.Else():
                        m.d.sync += b_sum[0][j].eq(b_sum[0][j] + wval)
            with m.If(i_p.payload.last):
                m.d.sync += [p_row.eq(p_row + 1), p_li.eq(0), p_off.eq(0),
                             p_kg.eq(sel_j[0] * ag.kg_per_block), p_q.eq(0)]
            with m.Elif(p_blk_end):
                m.d.sync += [p_li.eq(p_li + 1), p_off.eq(0),
                             p_kg.eq(sel_j[p_li + 1] * ag.kg_per_block), p_q.eq(0)]
            with m.Else():
                m.d.sync += [p_off.eq(p_off + lanes),
                             p_q.eq(Mux(p_q == per_group - 1, 0, p_q + 1))]
                with m.If(p_q == per_group - 1):
                    m.d.sync += p_kg.eq(p_kg + 1)
        rsum, lsum = i_sum.payload.r, i_sum.payload.big_l
        # q = (b * r) >> L, the row's share of block j (truncating), in two registered steps
        # (the product, then the shift and the sum; the Fmax path): a row's share is in ``mass``
        # two cycles after its (r, L), the last row's one cycle after ``done`` rises.
        sh_v, sh_l = Signal(), Signal.like(lsum)
        prods = [Signal(ag.b_bits + len(rsum), name=f"share_prod{j}") for j in range(nkb)]
        m.d.sync += sh_v.eq(i_sum.valid & self.full)
        with m.If(i_sum.valid):
            m.d.sync += [s_row.eq(s_row + 1), sh_l.eq(lsum),
                         *([r_row[at].eq(rsum), big_l_row[at].eq(lsum)] if tables else [])]
            for k in range(2 if sel else 0):
                with m.If(s_row[0] == k):
                    for j in range(nkb):
                        m.d.sync += [b_sum[k][j].eq(0), prods[j].eq(b_sum[k][j] * rsum)]
                        with m.Switch(s_row):
                            for i in range(bq):
                                if i % 2 == k:
                                    with m.Case(i):
                                        m.d.sync += self.b_rows[i][j].eq(b_sum[k][j])
        with m.If(sh_v):
            m.d.sync += [mass[j].eq(mass[j] + (prods[j] >> sh_l)[:ag.share_bits])
                         for j in range(nkb if sel else 0)]
        with m.If(self.start):
            m.d.sync += [p_row.eq(0), p_li.eq(0), p_off.eq(0), p_q.eq(0), pbuf.eq(0),
                         p_kg.eq(sel_j[0] * ag.kg_per_block), s_row.eq(0),
                         [mass[j].eq(Mux(self.full, 0, mass[j])) for j in range(nkb if sel
                                                                                  else 0)]]
        return s_row
