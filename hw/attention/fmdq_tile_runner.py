"""Tile runner of the attention engine on the FMDQ PE arrays: QK^T or PV tiles of one query
block as units of 2-bit slices (spec section 7.4). Golden twin: ``dstar.golden.fmdq_attention``.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from dstar.golden.fmdq import LANES, MAX_SLICES, SLICE_BITS

from ..fmdq.pe_array import group_op_layout
from ..geometry import AttentionGeometry, uwidth
from .layouts import block_list_layouts, p_word_layout, q_tile_word_layout
from .tile_runner import _Walk, phase_control

__all__ = ["FmdqTileRunner"]


class FmdqTileRunner(wiring.Component):
    """Runs the QK^T (``pv = 0``) or PV (``pv = 1``) tiles of one query block on FMDQ PE arrays
    (``hw.fmdq.pe_array.FmdqPEArray`` built with ``token_shifts`` and ``y_steps``): a loader
    streams each tile's K^T or V rows into the arrays' free weight-window buffer (one row per
    cycle, from the memory word at ``weight_addr`` the cycle before; K^T: ``head_dim`` rows,
    row ``d`` at window row ``d``; V: the block's keys, key ``k`` at window row ``k``), and the
    issue stage sends the units of ``golden.fmdq_attention`` against the other buffer: per tile,
    per token tile of ``T`` query rows, QK^T one unit of ``head_dim`` groups, PV one unit of
    ``G`` groups per softmax group of the block's keys (row ``t``'s sum shifted by its P word's
    shift). The loader is at most one tile ahead of the issue (two buffers).

    Tile order and where the sums go are ``dstar.hw.attention.tile_runner.TileRunner``'s:
    QK^T, per selected block its chunks of ``block_cols`` keys, logits at ``y_base + i * n_kc +
    kc`` (overwriting); PV, per column pass of ``block_cols`` outputs the selected blocks, sums
    at ``y_base + i * n_cp + cp`` (the first unit of each column pass overwrites).

    Reads (one cycle of latency, a port's address held while ``rd_en`` is low): Q words
    (``q_tile_word_layout``) at ``(base_t + tt) * head_dim / 4 + c`` (token tile ``tt`` of the
    block, dimensions ``4 c ..``); P words, one per row of a token tile, row ``tt * T + t`` of
    the block in ``p_data[t]``, from the P memory's bank ``t`` at ``tt * n_kg + kg``.

    ``start`` (a pulse; ``start_pv`` the kind) resets the walk; tiles then run while
    ``active``, over the selected blocks ``sel_j[0 .. n_sel - 1]`` (ascending, lengths
    ``sel_len``) and the query rows ``base_i .. base_i + rows - 1`` (``base_i = base_t * T``;
    ``rows`` is read as each tile's issue begins). ``last`` pulses when the arrays accept the
    phase's last group; ``idle`` is high once every unit accepted is written (``unit_done`` of
    one array, counted). ``qk_tile`` / ``pv_tile`` pulse when the issue begins a query-block x
    key-block tile.

    Latency (``dstar.sim.attention_cycles`` is the exact model): a tile loads in its row count
    plus one cycle; its groups issue one per cycle from the cycle after its load is counted,
    plus one cycle for the reads. Back-pressure: ``o_group`` waits for ``ready`` (the arrays
    never stall units of at least ``T`` groups whose shifts step by 2). A unit's shifts never
    step down by more than 2, so its groups never wait for an array's bubble: the engine takes
    ``ready`` from the arrays' ``o_hold`` and the group's ``last`` alone. Reset stops a phase.

    Parameters
    ----------
    ag : AttentionGeometry
    tokens, window, channel_bits, y_depth : the arrays' (``FmdqPEArray``'s) sizes.
    """

    def __init__(self, ag: AttentionGeometry, *, tokens: int, window: int, channel_bits: int,
                 y_depth: int):
        cfg = ag.cfg
        if cfg.head_dim % LANES or cfg.group % LANES:
            raise ValueError("head_dim and group must be multiples of 4")
        if max(cfg.head_dim, cfg.block_k) > window:
            raise ValueError(f"head_dim and block_k must fit the weight window ({window})")
        if cfg.block_q % tokens:
            raise ValueError(f"block_q={cfg.block_q} must be a multiple of the token tile")
        if min(cfg.head_dim, cfg.group) < tokens:
            raise ValueError(f"head_dim and group must be >= the token tile ({tokens}): a "
                             f"unit shorter than its write-out would stall the arrays")
        self._ag, self.tokens, self.window = ag, tokens, window
        self.n_cg = cfg.head_dim // LANES
        self.n_sub = cfg.group // LANES
        jb, bq = range(ag.nkb + 1), cfg.block_q
        sel_j_l, sel_len_l = block_list_layouts(ag)
        n_tt_max = -(-ag.n_max // tokens)
        self.op_layout = group_op_layout(tokens, channel_bits, cfg.e_max, y_depth,
                                         token_shifts=True, y_steps=True)
        super().__init__({
            "start": In(1),
            "start_pv": In(1),
            "active": In(1),
            "y_base": In(uwidth(y_depth)),
            "sel_j": In(sel_j_l),
            "sel_len": In(sel_len_l),
            "n_sel": In(jb),
            "base_i": In(range(ag.n_max + bq + 1)),
            "base_t": In(range(n_tt_max + bq // tokens + 1)),
            "rows": In(range(bq + 1)),
            "unit_done": In(1),
            "rd_en": Out(1),
            "q_addr": Out(uwidth(n_tt_max * self.n_cg)),
            "q_data": In(q_tile_word_layout(tokens)),
            "p_addr": Out(uwidth(bq // tokens * ag.n_kg)),
            "p_data": In(data.ArrayLayout(p_word_layout(ag), tokens)),
            "weight_addr": Out(uwidth(max(ag.kt_depth, ag.v_depth) + 1)),
            "wrow_valid": Out(1),
            "wrow_bank": Out(1),
            "wrow_row": Out(range(window)),
            "o_group": Out(stream.Signature(self.op_layout)),
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
        x_busy, _ = self._issue(m, lw, xw)
        # Units accepted and units written.
        grp = self.o_group
        phase_control(m, self, grp.valid & grp.ready & grp.payload.group.last, self.unit_done,
                      [ld_busy, x_busy], [lw, xw])
        return m

    def _loader(self, m, lw, xw) -> Signal:
        """One weight row per cycle, written one cycle later (memory read latency), into
        buffer ``lw.bank`` once the issue is done with the tile that buffer held."""
        ag, pv = self._ag, self.pv
        cfg = ag.cfg
        dh, bk = cfg.head_dim, cfg.block_k
        ld_busy = Signal()
        l_row = Signal(range(max(dh, bk) + 1))
        l_addr = Signal(uwidth(max(ag.kt_depth, ag.v_depth) + 1))
        w_valid, w_row, w_bank = Signal(), Signal(range(self.window)), Signal()
        m.d.comb += [self.weight_addr.eq(l_addr), self.wrow_valid.eq(w_valid),
                     self.wrow_bank.eq(w_bank), self.wrow_row.eq(w_row)]
        load_last = Signal()
        m.d.comb += load_last.eq(Mux(pv, l_row == lw.len - 1, l_row == dh - 1))
        ld_go = Signal()
        m.d.comb += ld_go.eq(self.active & ~ld_busy & lw.more & (lw.count - xw.count <= 1))
        m.d.sync += w_valid.eq(0)
        with m.If(ld_go):
            m.d.sync += [ld_busy.eq(1), l_row.eq(0),
                         l_addr.eq(Mux(pv, lw.j * (bk * ag.n_cp) + lw.cp, lw.kc))]
        with m.If(ld_busy):
            m.d.sync += [w_valid.eq(1), w_row.eq(l_row), w_bank.eq(lw.bank),
                         l_row.eq(l_row + 1), l_addr.eq(l_addr + Mux(pv, ag.n_cp, ag.n_kc))]
            with m.If(load_last):
                m.d.sync += ld_busy.eq(0)
                lw.advance(pv)
        return ld_busy

    def _issue(self, m, lw, xw) -> tuple[Signal, Signal]:
        """Per token tile ``tt``, per unit ``u`` (PV: the block's softmax groups), per slice
        ``j`` (3 .. 0), per group ``c`` of 4 channels: one group, its words read a cycle
        ahead (stage S: the position and the read addresses; stage O: the op)."""
        ag, t_n = self._ag, self.tokens
        cfg, pv = ag.cfg, self.pv
        g, bc = cfg.group, ag.block_cols
        x_busy, x_go = Signal(), Signal()
        m.d.comb += x_go.eq(self.active & ~x_busy & xw.more & (lw.count != xw.count))
        tt = Signal(range(cfg.block_q // t_n + 1))
        u = Signal(range(ag.kg_per_block + 1))
        j = Signal(range(MAX_SLICES))
        c = Signal(range(max(self.n_cg, self.n_sub) + 1))
        c_last, u_last, tt_last, j_last = Signal(), Signal(), Signal(), Signal()
        n_tok = Signal(range(t_n + 1))
        # The query rows from token tile tt on: a register (rows at the tile's start, less T a
        # tile), so the tile's end compares start from flip-flops, not from rows' arithmetic.
        left = Signal(range(cfg.block_q + 1), name="rows_left")
        m.d.comb += [n_tok.eq(Mux(left >= t_n, t_n, left)),
                     c_last.eq(c == Mux(pv, self.n_sub - 1, self.n_cg - 1)),
                     j_last.eq(j == 0),
                     u_last.eq(~pv | ((u + 1) * g >= xw.len)),
                     tt_last.eq(left <= t_n)]
        unit_end = c_last & j_last
        tile_end = unit_end & u_last & tt_last

        # Stage O (the op the arrays see) and the hand-off from stage S.
        o_v = Signal()
        adv = Signal()
        m.d.comb += [adv.eq(~o_v | self.o_group.ready), self.rd_en.eq(adv)]
        go = x_busy & adv
        m.d.comb += [self.q_addr.eq((self.base_t + tt) * self.n_cg + c),
                     self.p_addr.eq(tt * ag.n_kg + xw.j * ag.kg_per_block + u)]
        meta = {"j": j, "c": c, "u": u, "last": unit_end, "n_tok": n_tok, "bank": xw.bank,
                "over": Mux(pv, (xw.li == 0) & (u == 0), 1),
                "y_addr": self.y_base + Mux(pv, tt * t_n * ag.n_cp + xw.cp,
                                            tt * t_n * ag.n_kc + xw.kc),
                "phase_last": Signal(name="phase_last"), "len": xw.len}
        m.d.comb += meta["phase_last"].eq(
            tile_end & (~pv & (xw.cpos + bc >= xw.len) & (xw.li + 1 >= self.n_sel) |
                        pv & (xw.li + 1 >= self.n_sel) & (xw.cp + 1 >= ag.n_cp)))
        o = {k: Signal.like(v, name=f"o_{k}") for k, v in meta.items()}
        with m.If(adv):
            m.d.sync += [o_v.eq(go)] + [o[k].eq(v) for k, v in meta.items()]
        self._payload(m, o, o_v)
        m.d.comb += self.last.eq(o_v & self.o_group.ready & o["phase_last"])

        with m.If(x_go):
            m.d.sync += [x_busy.eq(1), tt.eq(0), u.eq(0), j.eq(MAX_SLICES - 1), c.eq(0),
                         left.eq(self.rows)]
        m.d.comb += [self.pv_tile.eq(x_go & pv & (xw.cp == 0)),
                     self.qk_tile.eq(x_go & ~pv & (xw.cpos == 0))]
        with m.If(go):
            m.d.sync += c.eq(c + 1)
            with m.If(c_last):
                m.d.sync += [c.eq(0), j.eq(j - 1)]
                with m.If(j_last):
                    m.d.sync += [j.eq(MAX_SLICES - 1), u.eq(u + 1)]
                    with m.If(u_last):
                        m.d.sync += [u.eq(0), tt.eq(tt + 1), left.eq(left - t_n)]
                        with m.If(tt_last):
                            m.d.sync += x_busy.eq(0)
                            xw.advance(pv)
        return x_busy, x_go

    def _payload(self, m, o, o_v):
        """The group of stage O's position, from the words read for it."""
        ag, t_n = self._ag, self.tokens
        cfg, pv = ag.cfg, self.pv
        g, n_k = cfg.group, ag.n_kc
        pay = self.o_group.payload
        grp = pay.group
        m.d.comb += [self.o_group.valid.eq(o_v), grp.shift.eq(o["j"] * SLICE_BITS),
                     grp.last.eq(o["last"]), pay.bank.eq(o["bank"]), pay.y_addr.eq(o["y_addr"]),
                     pay.n_tok.eq(o["n_tok"]), pay.overwrite.eq(o["over"]),
                     pay.y_step.eq(Mux(pv, ag.n_cp, n_k))]
        key0 = Signal(range(cfg.block_k + LANES + 1))    # PV: the group's first key
        m.d.comb += key0.eq(o["u"] * g + o["c"] * LANES)
        top = o["j"] == MAX_SLICES - 1
        for i in range(LANES):
            lane = grp.lane[i]
            m.d.comb += [lane.channel.eq(Mux(pv, key0 + i, o["c"] * LANES + i)),
                         lane.signed.eq(~pv & top),
                         lane.valid.eq(~pv | (key0 + i < o["len"]))]
        for t in range(t_n):
            word = self.p_data[t]
            m.d.comb += pay.tok_shift[t].eq(Mux(pv, word.shift, 0))
            for i in range(LANES):
                # QK: dimension 4 c + i of row t (the word holds the group's four); PV: key
                # 4 c + i of the unit's softmax group.
                q = self.q_data[t][i].as_unsigned()
                p = Signal(8, name=f"p_{t}_{i}")
                with m.Switch(o["c"]):
                    for k in range(self.n_sub):
                        with m.Case(k):
                            m.d.comb += p.eq(word.p[k * LANES + i])
                val = Mux(pv, p, q)
                m.d.comb += grp.act[t][i].eq(val.word_select(o["j"], SLICE_BITS))
