"""Tile runner of the attention engine: QK^T or PV tiles of one query block on the PE arrays.

Ref: dstar-spec.md section 5 (the attention matmuls on the linear layers' lanes).
"""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..geometry import AttentionGeometry, uwidth
from ..layouts import lane_op_layout, token_layout
from .layouts import block_list_layouts, p_word_layout

__all__ = ["TileRunner"]


class _Walk:
    """A position in the tile sequence of a phase (QK^T: chunks of ``block_cols`` keys of each
    selected block; PV: the selected blocks of each column pass), its weight bank and the
    tiles finished so far."""

    def __init__(self, m: Module, runner: "TileRunner", name: str):
        ag = runner.geometry
        bk, bc, jb = ag.cfg.block_k, ag.block_cols, range(ag.nkb + 1)
        self._m, self._r = m, runner
        self.li = Signal(jb, name=f"{name}_li")
        self.cpos = Signal(range(bk + bc + 1), name=f"{name}_cpos")     # QK chunk start
        self.kc = Signal(range(ag.n_kc + 1), name=f"{name}_kc")
        self.cp = Signal(range(ag.n_cp + 1), name=f"{name}_cp")
        self.more = Signal(name=f"{name}_more")
        self.bank = Signal(name=f"{name}_bank")
        self.count = Signal(ag.TILE_COUNT_BITS, name=f"{name}_count")   # tiles finished
        # The block ``li`` and its length, registered as ``li`` moves (the list holds still
        # during a phase), so the walk's compares start from flip-flops.
        self.j = Signal(jb, name=f"{name}_j")
        self.len = Signal(range(bk + 1), name=f"{name}_len")

    def _at(self, li):
        """``li`` and the registered block and length that go with it."""
        r = self._r
        return [self.li.eq(li), self.j.eq(r.sel_j[li]), self.len.eq(r.sel_len[li])]

    def start(self):
        ag, r = self._r.geometry, self._r
        return [*self._at(0), self.cpos.eq(0), self.cp.eq(0), self.more.eq(1),
                self.kc.eq(r.sel_j[0] * ag.kc_per_block), self.bank.eq(0), self.count.eq(0)]

    def advance(self, pv):
        """The tile finished: count it, step to the next one (or end)."""
        m, r, ag = self._m, self._r, self._r.geometry
        bc = ag.block_cols
        nxt = Signal(range(ag.nkb + 1), name=f"{self.li.name}_next")
        m.d.comb += nxt.eq(self.li + 1)
        m.d.sync += [self.count.eq(self.count + 1), self.bank.eq(~self.bank)]
        with m.If(~pv & (self.cpos + bc < self.len)):
            m.d.sync += [self.cpos.eq(self.cpos + bc), self.kc.eq(self.kc + 1)]
        with m.Elif(nxt < r.n_sel):
            m.d.sync += [*self._at(nxt), self.cpos.eq(0),
                         self.kc.eq(r.sel_j[nxt] * ag.kc_per_block)]
        with m.Elif(pv & (self.cp + 1 < ag.n_cp)):
            m.d.sync += [*self._at(0), self.cpos.eq(0), self.cp.eq(self.cp + 1),
                         self.kc.eq(r.sel_j[0] * ag.kc_per_block)]
        with m.Else():
            m.d.sync += self.more.eq(0)


def phase_control(m: Module, runner, issued_pulse, done_pulse, busy: list, walks: list):
    """A tile runner's ``idle`` (as many ``done_pulse`` as ``issued_pulse`` since reset: the
    counters wrap, only their equality counts) and its ``start`` (the phase's kind into
    ``pv``, the ``busy`` flags cleared, the ``walks`` restarted)."""
    bits = runner.geometry.TILE_COUNT_BITS
    issued, done = Signal(bits, name="issued"), Signal(bits, name="done")
    with m.If(issued_pulse):
        m.d.sync += issued.eq(issued + 1)
    with m.If(done_pulse):
        m.d.sync += done.eq(done + 1)
    m.d.comb += runner.idle.eq(done == issued)
    with m.If(runner.start):
        m.d.sync += [runner.pv.eq(runner.start_pv), *(b.eq(0) for b in busy),
                     *(st for w in walks for st in w.start())]


class TileRunner(wiring.Component):
    """Runs the QK^T (``pv = 0``) or PV (``pv = 1``) tiles of one query block on the PE
    arrays: a loader streams each tile's K^T or V rows into the arrays' free weight bank (one
    row per cycle, from the memory word at ``weight_addr`` the cycle before), and the lane
    issue runs the block's Q rows or P words against the other bank, two nibble ops per element
    (Q: unsigned low nibble then signed high nibble with shift 4; ``p``: two unsigned nibbles
    with the group's shift ``s`` and ``s + 4``), one op per lane per cycle, one slice per query
    row and lane group. The loader is at most one tile ahead of the lanes (two banks).

    Tile order: QK^T, per selected block its chunks of ``block_cols`` keys; PV, per column pass
    of ``block_cols`` outputs the selected blocks. QK^T writes the logits at ``y_base + i *
    n_kc + kc`` of the accumulators (overwriting), PV sums into ``y_base + i * n_cp + cp``
    (the first listed block of each column pass overwrites) from the P words at ``i * n_kg +
    group``.

    ``start`` (a pulse; ``start_pv`` the kind) resets the walk; tiles then run while
    ``active``, over the selected blocks ``sel_j[0 .. n_sel - 1]`` (ascending, lengths
    ``sel_len``) and the query rows ``base_i .. base_i + rows - 1``. ``last`` pulses when the
    lanes have issued the phase's last op; ``idle`` is high once every issued tile's last
    reduction is written (``pass_done`` of one array, counted). ``qk_tile`` / ``pv_tile``
    pulse when the lanes begin a query-block x key-block tile (the engine's counters).

    Latency: a tile loads in its row count plus one cycle, its ops take ``rows * 2 *
    groups`` cycles plus one; a tile's ops start the cycle after its load is counted
    (``dstar.sim.attention_cycles.tile_phase`` is the exact model). Back-pressure: the first op
    of each query row waits for ``o_token.ready``; ``o_op`` has none (the lanes take one op per
    cycle). Reset stops a phase.

    Parameters
    ----------
    ag : AttentionGeometry

    Members
    -------
    start, start_pv, active : In(1)
    y_base : In(range(y_depth))
        Where the phase's sums go; it must hold still.
    sel_j, sel_len : In(block_list_layouts(ag)), n_sel : In(range(nkb + 1))
        The selected key blocks, ascending, and their lengths.
    base_i : In(range(n_max + block_q + 1)), rows : In(range(block_q + 1))
    pass_done : In(1)
    q_addr : Out, q_data : In(q_word)
        Q memory read (one cycle of latency).
    p_addr : Out, p_data : In(p_word_layout)
        P memory read (one cycle of latency).
    weight_addr : Out
        K^T / V memory read address (one cycle of latency) of every array.
    wrow_valid, wrow_bank : Out(1), wrow_row : Out(range(k_tile))
        The arrays' weight-row beat; its ``w`` is the K^T (QK^T) or V (PV) word read.
    o_token : Out(stream.Signature(token_layout))
    o_op : Out(stream.Signature(lane_op_layout, always_ready=True)).array(G)
    pv, last, idle, qk_tile, pv_tile : Out(1)
    """

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        cfg, geo = ag.cfg, ag.lin
        jb, bq = range(ag.nkb + 1), cfg.block_q
        sel_j_l, sel_len_l = block_list_layouts(ag)
        super().__init__({
            "start": In(1),
            "start_pv": In(1),
            "active": In(1),
            "y_base": In(uwidth(geo.y_depth)),
            "sel_j": In(sel_j_l),
            "sel_len": In(sel_len_l),
            "n_sel": In(jb),
            "base_i": In(range(ag.n_max + bq + 1)),
            "rows": In(range(bq + 1)),
            "pass_done": In(1),
            "q_addr": Out(uwidth(ag.q_depth)),
            "q_data": In(data.ArrayLayout(signed(8), cfg.group)),
            "p_addr": Out(uwidth(ag.p_depth)),
            "p_data": In(p_word_layout(ag)),
            "weight_addr": Out(uwidth(max(ag.kt_depth, ag.v_depth) + 1)),
            "wrow_valid": Out(1),
            "wrow_bank": Out(1),
            "wrow_row": Out(range(cfg.k_tile)),
            "o_token": Out(stream.Signature(token_layout(geo))),
            "o_op": Out(stream.Signature(lane_op_layout(geo), always_ready=True)).array(cfg.group),
            "pv": Out(1),
            "last": Out(1),
            "idle": Out(1),
            "qk_tile": Out(1),
            "pv_tile": Out(1),
        })

    @property
    def geometry(self) -> AttentionGeometry:
        return self._ag

    def elaborate(self, platform):
        m = Module()
        lw, xw = _Walk(m, self, "load"), _Walk(m, self, "ops")
        ld_busy = self._loader(m, lw, xw)
        x_busy, x_go = self._lanes(m, lw, xw)
        # Tiles issued and tiles whose last reduction is written.
        phase_control(m, self, x_go, self.pass_done, [ld_busy, x_busy], [lw, xw])
        return m

    def _loader(self, m, lw, xw) -> Signal:
        """One weight row per cycle, written one cycle later (memory read latency), into bank
        ``lw.bank`` once the lanes are done with the tile that bank held (two tiles back)."""
        ag = self._ag
        cfg, pv = ag.cfg, self.pv
        g, dh, bk = cfg.group, cfg.head_dim, cfg.block_k
        ld_busy = Signal()
        l_row = Signal(range(max(dh, bk) + g + 1))
        l_gs = Signal(range(bk + g + 1))    # PV: start of the row's lane group in the block
        l_addr = Signal(uwidth(max(ag.kt_depth, ag.v_depth) + 1))
        w_valid, w_row, w_bank = Signal(), Signal(range(cfg.k_tile)), Signal()
        m.d.comb += [self.weight_addr.eq(l_addr), self.wrow_valid.eq(w_valid),
                     self.wrow_bank.eq(w_bank), self.wrow_row.eq(w_row)]
        load_last = Signal()
        m.d.comb += load_last.eq(Mux(pv, (l_row - l_gs == g - 1) & (l_gs + g >= lw.len),
                                     l_row == dh - 1))
        ld_go = Signal()
        m.d.comb += ld_go.eq(self.active & ~ld_busy & lw.more & (lw.count - xw.count <= 1))
        m.d.sync += w_valid.eq(0)
        with m.If(ld_go):
            m.d.sync += [ld_busy.eq(1), l_row.eq(0), l_gs.eq(0),
                         l_addr.eq(Mux(pv, lw.j * (bk * ag.n_cp) + lw.cp, lw.kc))]
        with m.If(ld_busy):
            m.d.sync += [w_valid.eq(1), w_row.eq(l_row), w_bank.eq(lw.bank),
                         l_row.eq(l_row + 1), l_addr.eq(l_addr + Mux(pv, ag.n_cp, ag.n_kc))]
            with m.If(pv & (l_row - l_gs == g - 1)):
                m.d.sync += l_gs.eq(l_gs + g)
            with m.If(load_last):
                m.d.sync += ld_busy.eq(0)
                lw.advance(pv)
        return ld_busy

    def _lanes(self, m, lw, xw) -> tuple[Signal, Signal]:
        """Per query row, per lane group ``r``, the low then the high nibble (Q / P are read a
        cycle ahead), from bank ``xw.bank`` once the loader has finished that tile."""
        ag = self._ag
        cfg, geo, pv, rows = ag.cfg, ag.lin, self.pv, self.rows
        g, bq, bk, bc = cfg.group, cfg.block_q, cfg.block_k, ag.block_cols
        x_busy = Signal()
        x_go = Signal()
        m.d.comb += x_go.eq(self.active & ~x_busy & xw.more & (lw.count != xw.count))
        o_i = Signal(range(bq + 1))
        o_r = Signal(range(max(ag.rows_q, ag.kg_per_block) + 1))
        o_rg = Signal(range(bk + g + 1))    # PV: o_r * G
        o_h = Signal()
        r_last = Signal()
        m.d.comb += r_last.eq(Mux(pv, o_rg + g >= xw.len, o_r == ag.rows_q - 1))
        first_op = Signal()
        m.d.comb += first_op.eq((o_r == 0) & ~o_h)
        go = Signal()
        m.d.comb += go.eq(x_busy & (~first_op | self.o_token.ready))
        kg_base = Signal(range(ag.n_kg + 1))
        m.d.comb += [self.q_addr.eq((self.base_i + o_i) * ag.rows_q + o_r),
                     kg_base.eq(xw.j * ag.kg_per_block),
                     self.p_addr.eq(o_i * ag.n_kg + kg_base + o_r)]
        tok = self.o_token.payload
        m.d.comb += [
            self.o_token.valid.eq(go & first_op),
            tok.mask.eq((1 << g) - 1),
            tok.meta.y_addr.eq(self.y_base + Mux(pv, o_i * ag.n_cp + xw.cp,
                                                 o_i * ag.n_kc + xw.kc)),
            tok.meta.overwrite.eq(~pv | (xw.li == 0)),
            tok.meta.last.eq(o_i == rows - 1),
        ]
        with m.If(x_go):
            m.d.sync += [x_busy.eq(1), o_i.eq(0), o_r.eq(0), o_rg.eq(0), o_h.eq(0)]
        m.d.comb += [self.pv_tile.eq(x_go & pv & (xw.cp == 0)),
                     self.qk_tile.eq(x_go & ~pv & (xw.cpos == 0))]
        op_v, op_h, op_close, op_pv, op_bank = Signal(), Signal(), Signal(), Signal(), Signal()
        op_r = Signal(geo.row_bits)
        m.d.sync += [op_v.eq(go), op_h.eq(o_h), op_r.eq(o_r), op_close.eq(o_h & r_last),
                     op_pv.eq(pv), op_bank.eq(xw.bank)]
        # Q: shift 0 / 4; p: the group's shift s / s + 4 (w = p << s, golden.softmax).
        op_shift = Signal(geo.op_shift_bits)
        m.d.comb += op_shift.eq(Mux(op_pv, self.p_data.shift, 0) + Mux(op_h, 4, 0))
        for lane in range(g):
            qv, pval = self.q_data[lane], self.p_data.p[lane]
            # Q: unsigned low nibble, signed high nibble; p: two unsigned nibbles.
            nib = Mux(op_h, Mux(op_pv, pval[4:8], qv.as_signed() >> 4),
                      Mux(op_pv, pval[0:4], qv.as_unsigned()[0:4]))
            op = self.o_op[lane]
            m.d.comb += [op.valid.eq(op_v), op.payload.nib.eq(nib),
                         op.payload.shift.eq(op_shift), op.payload.row.eq(op_r),
                         op.payload.rot.eq(0), op.payload.bank.eq(op_bank),
                         op.payload.close.eq(op_close)]
        with m.If(go):
            m.d.sync += o_h.eq(~o_h)
            with m.If(o_h):
                m.d.sync += [o_r.eq(o_r + 1), o_rg.eq(o_rg + g)]
                with m.If(r_last):
                    m.d.sync += [o_r.eq(0), o_rg.eq(0), o_i.eq(o_i + 1)]
                    with m.If(o_i == rows - 1):
                        m.d.sync += x_busy.eq(0)
                        xw.advance(pv)
                        # The last tile: wait for its reductions.
                        with m.If(~pv & (xw.cpos + bc >= xw.len) & (xw.li + 1 >= self.n_sel) |
                                  pv & (xw.li + 1 >= self.n_sel) & (xw.cp + 1 >= ag.n_cp)):
                            m.d.comb += self.last.eq(1)
        return x_busy, x_go
