"""Attention engine top: the sequencer of one head step, the memories and the host ports.

Ref: dstar-spec.md sections 4 and 5 ("Attention-reuse controller"); the bit-exact contract is
``golden/ATTENTION.md`` (``dstar.golden.attention.key_step_head`` / ``reuse_step_head``).
"""

from amaranth import Array, Cat, Module, Mux, Shape, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.config import Config

from ..geometry import COUNTER_BITS, AttentionGeometry, uwidth
from ..pe_array import PEArray
from ..softmax import Normalizer, SoftmaxUnit
from .layouts import memory_layouts, p_word_layout
from .mask_select import MaskSelector
from .norm import NormStage
from .sel_recip import SelReciprocal
from .softmax_feed import SoftmaxFeed
from .tile_runner import TileRunner

__all__ = ["AttentionEngine"]

# Sequencer phases (plain comparisons, no m.FSM: see hw.softmax on Icarus and FSM decoders).
IDLE, LIST, TILES, WAIT, SMAX, SEL, NORM = range(7)


class AttentionEngine(wiring.Component):
    """The attention-reuse controller of one head for one step: per layer/head *slot* the step
    counter and refresh policy, the mask memory and the residual cache; the block schedule on
    the linear datapath's ``PEArray`` (QK^T and PV) and on ``SoftmaxUnit`` / ``Normalizer``;
    the residual add. Bit-exact with ``dstar.golden.attention`` (``key_step_head`` on key steps,
    ``reuse_step_head`` on reuse steps).

    Host memories (written while ``busy`` is low; word layouts in ``params.json``):

    * Q: ``max_tokens * Dh/G`` words of ``G`` INT8, address ``i * (Dh/G) + r`` (row ``i``,
      elements ``r*G ..``);
    * K^T, one per array (like the linear weights, reduction ``d``, columns = keys): words of
      ``m_tile`` INT8, address ``d * n_kc + kc``, array ``a`` holding keys
      ``kc * m_tile * n_arrays + a * m_tile ..``;
    * V, one per array (reduction = keys, columns = ``d``): address ``j * n_cp + cp``, array
      ``a`` holding ``d = cp * m_tile * n_arrays + a * m_tile ..``;
    * ``(m, sh)`` per query row, address ``i``.

    ``start`` (while idle; ignored unless ``1 <= n_tokens <= max_tokens``) runs ``n_tokens``
    (``N``) rows of slot ``slot`` with ``theta_q = rint(theta * 2**16)`` (``1 .. 2**16``;
    ``2**16`` and above select every block) and ``refresh``. The slot's step counter decides
    the kind of step: an attention key step on the slot's first call since ``clear`` (or
    reset) and every ``refresh`` calls (``refresh = 0``: only the first), as
    ``AttentionReuse.is_key`` for calls at steps 0, 1, 2, ...; ``key`` shows the decision. A
    reuse step must have its key step's ``N`` (the host's contract, as in the hook). Per query
    block ``I`` (``block_q`` rows, the last one ragged):

    * key step: all tiles of QK^T into the PE array's accumulators; the softmax of every row
      (in ``dstar.golden.softmax``'s group format: per group of ``G`` keys one P word of 8-bit
      mantissas ``p`` and the group's shift ``s = e_max - e_g``; the block sums ``b`` of the
      applied weights ``p << s`` and, with the row's ``(r, L)``, the block masses ``M``); the
      mask selection (descending ``M``, ties by ascending ``J``, the shortest prefix with
      ``C * 2**16 >= theta_q * T``, ``theta_q = 2**16``: all), written to the mask memory;
      then, if every row's largest logit lies in a selected block (``max_blocks`` of the
      softmax feeder; the masked softmax then has the same row max, hence the same ``p`` and
      shifts on the selected keys, ``golden.attention.second_pass_blocks``), one PV pass:
      the selected tiles, ``-O_sel`` into the slot's residual cache (normalized by the
      reciprocals of the selected blocks' row sums, ``SelReciprocal``, computed meanwhile),
      then the unselected tiles added to the same sums, ``O_full`` into the output memory and
      ``R = O_full - O_sel`` into the cache; otherwise (the *second pass*) PV over all tiles
      and ``O_full``, then the masked softmax on the logits of the selected tiles (still in
      the accumulators: QK^T runs once per tile on a key step), PV of the selected tiles, and
      ``R = O_full - O_sel``;
    * reuse step: QK^T, softmax and PV of the selected tiles only; output ``O_sel + R``.

    The PE lanes see QK^T as a linear layer with K^T as the weight tile and each Q element as a
    HIGH element (unsigned low nibble, signed high nibble with shift 4), and PV with the V
    block as the weight tile and each ``p`` as two unsigned nibbles with its group's shift
    (``s`` and ``s + 4``, at most ``e_max + 4``, the lanes' range): two lane ops per element, as
    spec section 5 prescribes for the linear layers. ``AttentionGeometry`` raises
    ``ConfigError`` when the PV sums (up to ``128 * 255 * 2**e_max`` per key) could overflow the
    lanes' partial sums, the tile sums or ``acc_bits``.

    Counters (cleared by ``start``): ``cycles`` (cycles ``busy`` was high), ``count_qk`` and
    ``count_pv``: query-block x key-block tiles run through QK^T (key step: all; reuse step:
    the selected) and PV (key step: all, plus the selected of the query blocks that take the
    second pass; reuse step: the selected), as the hook counts them.
    ``dstar.sim.attention_cycles`` predicts all three exactly from ``N``, the mask and the
    second-pass blocks.

    Why these choices: the lanes are the real ``PEArray`` (the spec runs QK^T and PV on the
    linear layers' lanes), fed through its own op/token/weight-row ports, its two weight banks
    alternating so that the next tile loads while the lanes run the current one; the phases
    of a query block (list, QK^T, softmax, mask, PV, normalization) do not overlap, which
    keeps the schedule and its model simple; the softmax unit streams one logit per cycle and
    is the bottleneck of a step.

    Latency and throughput: the phases of a query block run one after the other (a K^T or V
    tile loads at one row per cycle into the free weight bank, the lanes take one nibble op
    per cycle, the softmax unit one logit per cycle; see ``dstar.sim.attention_cycles``). No stream
    of this top has back-pressure from outside (the host only writes memories and polls
    ``busy``); the internal streams to the softmax unit honour its ready. Rounding and
    saturation are those of ``golden/ATTENTION.md``; outputs are exact. Reset stops a run and
    forgets every slot's step counter; the memories (mask, residual, inputs, outputs) keep
    their contents.

    Host reads: ``host_o_rdata`` / ``host_res_rdata`` / ``host_mask_rdata`` show the word at
    ``host_o_addr`` / ``host_res_addr`` one cycle after the address (the mask in the same
    cycle), valid only while ``busy`` is low: O and R share the engine's read ports.

    The engine's parts: ``TileRunner`` (QK^T and PV tiles), ``SoftmaxFeed`` (logits to the
    softmax unit, P words, block sums and masses), ``MaskSelector``, ``SelReciprocal`` and
    ``NormStage``; sizes
    from ``AttentionGeometry``, memory words from ``layouts()``. Ports are flat vectors (a
    choice: a testbench packs words through the manifest's field lists).
    """

    def __init__(self, cfg: Config):
        self._ag = ag = AttentionGeometry(cfg)
        lays = self.layouts()
        n_arr = cfg.n_arrays
        super().__init__({
            "start": In(1),
            "clear": In(1),
            "slot": In(uwidth(cfg.attn_slots)),
            "n_tokens": In(uwidth(cfg.max_tokens + 1)),
            "theta_q": In(ag.theta_bits),
            "refresh": In(ag.REFRESH_BITS),
            "busy": Out(1),
            "key": Out(1),
            "cycles": Out(COUNTER_BITS),
            "count_qk": Out(COUNTER_BITS),
            "count_pv": Out(COUNTER_BITS),
            "host_addr": In(ag.host_addr_bits),
            "host_q_we": In(1),
            "host_q_wdata": In(lays["q_word"].size),
            "host_k_we": In(n_arr),
            "host_k_wdata": In(lays["kt_word"].size),
            "host_v_we": In(n_arr),
            "host_v_wdata": In(lays["v_word"].size),
            "host_ms_we": In(1),
            "host_ms_wdata": In(lays["ms_word"].size),
            "host_o_addr": In(uwidth(ag.o_depth)),
            "host_o_rdata": Out(Shape.cast(lays["o_word"]).width),
            "host_res_addr": In(uwidth(ag.res_depth)),
            "host_res_rdata": Out(Shape.cast(lays["res_word"]).width),
            "host_mask_addr": In(uwidth(ag.mask_depth)),
            "host_mask_rdata": Out(Shape.cast(lays["mask_word"]).width),
        })

    @property
    def geometry(self) -> AttentionGeometry:
        return self._ag

    def layouts(self) -> dict:
        """The host-visible memory words (``params.json`` ``attention.layouts``)."""
        return memory_layouts(self._ag)

    def elaborate(self, platform):
        ag = self._ag
        cfg = ag.cfg
        m = Module()
        m.submodules.softmax = smx = SoftmaxUnit(cfg, logit_bits=ag.logit_bits,
                                                 max_row=ag.n_max)
        m.submodules.normalizer = nrm = Normalizer(cfg, max_row=ag.n_max,
                                                   acc_bits=ag.pv_acc_bits)
        m.submodules.tile_runner = tr = TileRunner(ag)
        m.submodules.softmax_feed = feed = SoftmaxFeed(ag)
        m.submodules.mask_select = sel = MaskSelector(ag)
        m.submodules.norm = ns = NormStage(ag)
        m.submodules.sel_recip = rcp = SelReciprocal(ag)
        arrays = []
        for a in range(cfg.n_arrays):
            arr = PEArray(ag.lin)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)
        mem = self._memories(m)
        st = self._sequencer(m, tr, feed, sel, ns, rcp, mem)

        # ----- the parts' wiring -----
        for part in (tr, feed):
            m.d.comb += [part.sel_j[k].eq(st["sel_j"][k]) for k in range(ag.nkb)]
            m.d.comb += [part.sel_len[k].eq(st["sel_len"][k]) for k in range(ag.nkb)]
            m.d.comb += part.n_sel.eq(st["cnt"])
        for part in (tr, feed, ns):
            m.d.comb += [part.base_i.eq(st["base_i"]), part.rows.eq(st["rows"])]
        m.d.comb += [tr.active.eq(st["phase"] == TILES), tr.pass_done.eq(arrays[0].o_pass_done),
                     tr.q_data.eq(mem["q_rd"].data), tr.p_data.eq(mem["p_rd"].data),
                     mem["q_rd"].addr.eq(tr.q_addr), mem["p_rd"].addr.eq(tr.p_addr),
                     tr.o_token.ready.eq(Cat(*[arr.i_token.ready for arr in arrays]).all())]
        for a, arr in enumerate(arrays):
            m.d.comb += [mem["kt_rd"][a].addr.eq(tr.weight_addr),
                         mem["v_rd"][a].addr.eq(tr.weight_addr),
                         arr.i_wrow.valid.eq(tr.wrow_valid),
                         arr.i_wrow.payload.bank.eq(tr.wrow_bank),
                         arr.i_wrow.payload.row.eq(tr.wrow_row),
                         arr.i_wrow.payload.w.eq(Mux(tr.pv, mem["v_rd"][a].data,
                                                     mem["kt_rd"][a].data)),
                         arr.i_token.valid.eq(tr.o_token.valid),
                         arr.i_token.payload.eq(tr.o_token.payload),
                         arr.host_y_addr.eq(Mux(st["phase"] == NORM, ns.y_addr, feed.y_addr)),
                         feed.y_data[a].eq(arr.host_y_rdata), ns.y_data[a].eq(arr.host_y_rdata)]
            for lane in range(cfg.group):
                m.d.comb += [arr.i_op[lane].valid.eq(tr.o_op[lane].valid),
                             arr.i_op[lane].payload.eq(tr.o_op[lane].payload)]
        wiring.connect(m, feed.o_row, smx.i_row)
        wiring.connect(m, feed.o_logit, smx.i_logit)
        wiring.connect(m, smx.o_p, feed.i_p)
        wiring.connect(m, smx.o_sum, feed.i_sum)
        wiring.connect(m, ns.o_norm, nrm.i)
        wiring.connect(m, nrm.o, ns.i_norm)
        m.d.comb += [feed.full.eq(st["full"]), feed.ms_data.eq(mem["ms_rd"].data),
                     mem["ms_rd"].addr.eq(feed.ms_addr),
                     mem["p_wr"].en.eq(feed.p_we), mem["p_wr"].addr.eq(feed.p_addr),
                     mem["p_wr"].data.eq(feed.p_data),
                     feed.norm_row.eq(ns.row), rcp.row.eq(ns.row),
                     rcp.rows.eq(st["rows"]), rcp.b.eq(feed.b_rows),
                     rcp.mask.eq(mem["k_rd"].data)]
        # The selected blocks' sums normalize with their own row sums' reciprocals.
        sel_first = st["split"] & st["masked"]
        m.d.comb += [ns.r.eq(Mux(sel_first, rcp.r, feed.norm_r)),
                     ns.big_l.eq(Mux(sel_first, rcp.big_l, feed.norm_big_l))]
        m.d.comb += [sel.n_blocks.eq(st["cnt"]), sel.theta_q.eq(st["theta"]),
                     [sel.mass[j].eq(feed.mass[j]) for j in range(ag.nkb)]]
        run = st["run"]
        m.d.comb += [ns.full.eq(st["full"]), ns.key.eq(st["key"]), ns.masked.eq(st["masked"]),
                     ns.split.eq(st["split"]), ns.unsel.eq(st["unsel"]),
                     tr.accumulate.eq(st["unsel"]),
                     ns.slot.eq(st["slot"]),
                     mem["o_rd"].addr.eq(Mux(run, ns.o_raddr, self.host_o_addr)),
                     mem["r_rd"].addr.eq(Mux(run, ns.r_raddr, self.host_res_addr)),
                     ns.o_rdata.eq(mem["o_rd"].data), ns.r_rdata.eq(mem["r_rd"].data),
                     mem["o_wr"].addr.eq(ns.o_waddr), mem["o_wr"].en.eq(ns.o_we),
                     mem["o_wr"].data.eq(ns.o_wdata),
                     mem["r_wr"].addr.eq(ns.r_waddr), mem["r_wr"].en.eq(ns.r_we),
                     mem["r_wr"].data.eq(ns.r_wdata)]
        return m

    def _memories(self, m) -> dict:
        """The host-written inputs, P, the outputs, the residual cache and the masks, with
        their host ports; returns the engine's ports of each."""
        ag = self._ag
        lays = self.layouts()

        def memory(name, shape, depth):
            m.submodules[name] = mem = Memory(shape=shape, depth=depth, init=[])
            return mem

        q_mem = memory("q", lays["q_word"], ag.q_depth)
        q_wr, q_rd = q_mem.write_port(), q_mem.read_port()
        ms_mem = memory("ms", lays["ms_word"], ag.n_max)
        ms_wr, ms_rd = ms_mem.write_port(), ms_mem.read_port(domain="comb")
        kt_rd, v_rd = [], []
        for a in range(ag.cfg.n_arrays):
            km = memory(f"kt_{a}", lays["kt_word"], ag.kt_depth)
            vm = memory(f"v_{a}", lays["v_word"], ag.v_depth)
            kw, vw = km.write_port(), vm.write_port()
            m.d.comb += [kw.en.eq(self.host_k_we[a]), kw.addr.eq(self.host_addr),
                         kw.data.eq(self.host_k_wdata),
                         vw.en.eq(self.host_v_we[a]), vw.addr.eq(self.host_addr),
                         vw.data.eq(self.host_v_wdata)]
            kt_rd.append(km.read_port())
            v_rd.append(vm.read_port())
        m.d.comb += [q_wr.en.eq(self.host_q_we), q_wr.addr.eq(self.host_addr),
                     q_wr.data.eq(self.host_q_wdata),
                     ms_wr.en.eq(self.host_ms_we), ms_wr.addr.eq(self.host_addr),
                     ms_wr.data.eq(self.host_ms_wdata)]
        p_mem = memory("p", p_word_layout(ag), ag.p_depth)
        o_mem = memory("o", lays["o_word"], ag.o_depth)
        r_mem = memory("res", lays["res_word"], ag.res_depth)
        k_mem = memory("mask", lays["mask_word"], ag.mask_depth)
        k_host = k_mem.read_port(domain="comb")
        out = {"q_rd": q_rd, "ms_rd": ms_rd, "kt_rd": kt_rd, "v_rd": v_rd,
               "p_wr": p_mem.write_port(), "p_rd": p_mem.read_port(),
               "o_wr": o_mem.write_port(), "o_rd": o_mem.read_port(),
               "r_wr": r_mem.write_port(), "r_rd": r_mem.read_port(),
               "k_wr": k_mem.write_port(), "k_rd": k_mem.read_port(domain="comb")}
        m.d.comb += [self.host_o_rdata.eq(out["o_rd"].data),
                     self.host_res_rdata.eq(out["r_rd"].data),
                     k_host.addr.eq(self.host_mask_addr), self.host_mask_rdata.eq(k_host.data)]
        return out

    def _sequencer(self, m, tr, feed, sel, ns, rcp, mem) -> dict:
        """The run state, the slots' step counters, the list of selected blocks and the phase
        sequence; returns the state the parts read."""
        ag = self._ag
        cfg = ag.cfg
        bq, bk, nkb = cfg.block_q, cfg.block_k, ag.nkb
        k_wr, k_rd = mem["k_wr"], mem["k_rd"]
        run = Signal()
        phase = Signal(range(8))
        key = Signal()
        masked = Signal()                   # the pass on the selected tiles (else: all tiles)
        split = Signal()                    # key step, O_sel from the full pass
        unsel = Signal()                    # its pass on the unselected tiles
        full = Signal()
        m.d.comb += [full.eq(~masked), self.busy.eq(run), self.key.eq(key)]
        slot = Signal.like(self.slot)
        n_tok = Signal.like(self.n_tokens)
        theta = Signal.like(self.theta_q)
        qb = Signal(range(ag.nqb + 1))      # query block index I
        base_i = Signal(range(ag.n_max + bq + 1))
        rows = Signal(range(bq + 1))
        m.d.comb += rows.eq(Mux(n_tok - base_i >= bq, bq, n_tok - base_i))

        # Slot step counters: valid since clear, calls modulo refresh.
        s_valid = Array(Signal(name=f"slot_valid{s}") for s in range(cfg.attn_slots))
        s_phase = Array(Signal(ag.REFRESH_BITS, name=f"slot_phase{s}")
                        for s in range(cfg.attn_slots))

        # Selected key blocks of the current query block: index and length, in ascending order.
        jb = range(nkb + 1)
        sel_j = Array(Signal(jb, name=f"sel_j{k}") for k in range(nkb))
        sel_len = Array(Signal(range(bk + 1), name=f"sel_len{k}") for k in range(nkb))
        cnt = Signal(jb)
        n_valid = Signal(range(ag.n_max + 1))
        m.d.comb += feed.n_valid.eq(n_valid)

        # ----- LIST: scan the mask word of block I, one key block per cycle -----
        ls_j = Signal(jb)
        ls_start = Signal(range(ag.n_max + bk + 1))
        ls_len = Signal(range(bk + 1))
        m.d.comb += [k_rd.addr.eq(slot * ag.nqb + qb),
                     ls_len.eq(Mux(n_tok - ls_start >= bk, bk, n_tok - ls_start))]
        ls_bit = Signal()
        m.d.comb += ls_bit.eq(Mux(unsel, ~k_rd.data.bit_select(ls_j, 1),
                                  full | k_rd.data.bit_select(ls_j, 1)))
        m.d.comb += [k_wr.addr.eq(slot * ag.nqb + qb), k_wr.data.eq(sel.mask),
                     k_wr.en.eq((phase == SEL) & sel.done)]
        in_tiles = Signal()                 # WAIT after tiles (else: the hop after LIST)

        def start_list():
            return [phase.eq(LIST), ls_j.eq(0), ls_start.eq(0), cnt.eq(0), n_valid.eq(0)]

        def start_tiles(is_pv):
            # The runner restarts on the same edge as the phase changes.
            m.d.comb += [tr.start.eq(1), tr.start_pv.eq(is_pv)]
            m.d.sync += [phase.eq(TILES), in_tiles.eq(1)]

        with m.If(run):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        with m.If(tr.qk_tile):
            m.d.sync += self.count_qk.eq(self.count_qk + 1)
        with m.If(tr.pv_tile):
            m.d.sync += self.count_pv.eq(self.count_pv + 1)

        with m.If(self.clear & ~run):
            for s in range(cfg.attn_slots):
                m.d.sync += [s_valid[s].eq(0), s_phase[s].eq(0)]

        with m.If(phase == IDLE):
            # A step of no tokens, or of more than the memories hold, is ignored.
            with m.If(self.start & ~run & (self.n_tokens != 0) & (self.n_tokens <= ag.n_max)):
                ph = s_phase[self.slot]
                is_key = ~s_valid[self.slot] | ((self.refresh != 0) & (ph == 0))
                m.d.sync += [run.eq(1), key.eq(is_key), masked.eq(~is_key), split.eq(0),
                             unsel.eq(0),
                             slot.eq(self.slot), n_tok.eq(self.n_tokens),
                             theta.eq(self.theta_q), qb.eq(0), base_i.eq(0),
                             self.cycles.eq(0), self.count_qk.eq(0), self.count_pv.eq(0),
                             s_valid[self.slot].eq(1),
                             s_phase[self.slot].eq(Mux((self.refresh == 0) |
                                                       (ph + 1 == self.refresh), 0, ph + 1)),
                             start_list()]

        with m.If(phase == LIST):
            m.d.sync += [ls_j.eq(ls_j + 1), ls_start.eq(ls_start + bk)]
            with m.If(ls_bit):
                m.d.sync += [sel_j[cnt].eq(ls_j), sel_len[cnt].eq(ls_len), cnt.eq(cnt + 1),
                             n_valid.eq(n_valid + ls_len)]
            with m.If(ls_start + bk >= n_tok):
                # A one-cycle hop through WAIT: the list written this cycle settles.
                m.d.sync += [phase.eq(WAIT), in_tiles.eq(0)]

        with m.If(tr.last):
            m.d.sync += phase.eq(WAIT)

        # WAIT: the reductions of every issued tile are written (or the hop after LIST).
        with m.If(phase == WAIT):
            with m.If(~in_tiles):
                with m.If(split):
                    with m.If(cnt == 0):            # no unselected block
                        m.d.sync += phase.eq(NORM)
                        m.d.comb += ns.start.eq(1)
                    with m.Else():
                        start_tiles(1)
                with m.Elif(masked & key):
                    m.d.sync += phase.eq(SMAX)      # the logits of the full pass are kept
                    m.d.comb += feed.start.eq(1)
                with m.Else():
                    start_tiles(0)
            with m.Elif(tr.idle & (~(split & masked) | rcp.done)):
                m.d.sync += in_tiles.eq(0)
                with m.If(tr.pv):
                    m.d.sync += phase.eq(NORM)
                    m.d.comb += ns.start.eq(1)
                with m.Else():
                    m.d.sync += phase.eq(SMAX)
                    m.d.comb += feed.start.eq(1)

        with m.If(phase == SMAX):
            with m.If(feed.done):
                with m.If(full):
                    m.d.sync += phase.eq(SEL)
                    m.d.comb += sel.start.eq(1)
                with m.Else():
                    start_tiles(1)

        # Where every row's largest logit lies in a selected block, the masked softmax equals
        # the full one on the selected keys: PV of the selected tiles gives O_sel, the
        # unselected tiles are added for O_full. Elsewhere the second, masked pass.
        fixup = Signal()
        m.d.comb += fixup.eq(Cat(*[(i < rows) & ((feed.max_blocks[i] & sel.mask) == 0)
                                   for i in range(bq)]).any())
        with m.If((phase == SEL) & sel.done):
            with m.If(fixup):
                start_tiles(1)
            with m.Else():
                m.d.sync += [split.eq(1), masked.eq(1), start_list()]
                m.d.comb += rcp.start.eq(1)

        with m.If(phase == NORM):
            with m.If(~ns.busy):
                with m.If(full & key & ~unsel):
                    m.d.sync += [masked.eq(1), start_list()]
                with m.Elif(split & masked):
                    m.d.sync += [masked.eq(0), unsel.eq(1), start_list()]
                with m.Elif(base_i + bq >= n_tok):
                    m.d.sync += [phase.eq(IDLE), run.eq(0)]
                with m.Else():
                    m.d.sync += [qb.eq(qb + 1), base_i.eq(base_i + bq), masked.eq(~key),
                                 split.eq(0), unsel.eq(0), start_list()]
        return {"run": run, "phase": phase, "key": key, "masked": masked, "full": full,
                "split": split, "unsel": unsel,
                "slot": slot, "theta": theta, "base_i": base_i, "rows": rows, "sel_j": sel_j,
                "sel_len": sel_len, "cnt": cnt}
