"""Attention engine top: the sequencer of one head step, the memories and the host ports.

Ref: dstar-spec.md sections 4 and 5 ("Attention-reuse controller") and 7.3 (SAR); the
bit-exact contract is ``golden/ATTENTION.md`` (``dstar.golden.attention.key_step_head`` /
``reuse_step_head``; SAR: ``dstar.golden.sar.sar_cache_step`` / ``sar_reuse_step``).
"""

from types import SimpleNamespace

from amaranth import Array, Cat, Module, Mux, Shape, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.config import Config

from ..fmdq.geometry import attention_array_args
from ..fmdq.pe_array import FmdqPEArray, lend_signature
from ..geometry import COUNTER_BITS, AttentionGeometry, uwidth
from ..pe_array import PEArray, pe_array_signature
from ..softmax import Normalizer, SoftmaxUnit
from .block_list import BlockList, ListMode
from .fmdq_tile_runner import FmdqTileRunner
from .layouts import memory_layouts, p_word_layout
from .mask_select import MaskSelector
from .norm import NormSource, NormStage, OutMode, ResMode
from .sel_recip import SelReciprocal
from .softmax_feed import SoftmaxFeed
from .tile_runner import TileRunner

__all__ = ["AttentionEngine"]

# Phases and machine states (plain comparisons, no m.FSM: see hw.softmax on Icarus and FSM
# decoders).
_IDLE, _X, _Y, _FIN = range(4)
_A_DONE, _A_LIST, _A_TILES, _A_WAIT = range(4)                  # QK^T ahead
_M_DONE, _M_LIST, _M_SMAX, _M_SEL = range(4)                    # softmax and selection
_V_DONE, _V_LIST, _V_TILES, _V_WAIT = range(4)                  # PV
_N_IDLE, _N_P1, _N_P2 = range(3)                                # normalization passes
_REUSE, _KEY = range(2)                                         # kinds of query block


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
    * ``(m, sh)`` per query row, address ``i``;
    * a slot's residual cache, mask and step counter (``host_res_we`` / ``host_mask_we`` /
      ``host_slot_we``, whole words at ``host_addr``): a slot saved (read) and restored, so
      that ``attn_slots`` slots serve more heads.

    Host reads (while ``busy`` is low): the output ``O`` (words of ``block_cols`` columns,
    row ``i``'s columns ``cp * block_cols ..`` at ``i * n_cp + cp``), the residual cache (as
    ``O``, slot ``s``'s from ``s * max_tokens * n_cp``), the masks (``s * nqb + I``) and a
    slot's step counter (``host_slot_addr``).

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
      ``C * 2**16 >= theta_q * T``, ``theta_q = 2**16``: all), with the block of every row's
      first largest logit added (``golden.attention.row_max_blocks``), written to the mask
      memory. The masked softmax then has the full one's row max, hence its ``p`` and shifts on
      the selected keys: PV of the selected tiles into ``S`` gives ``-O_sel`` for the slot's
      residual cache (normalized by the reciprocals of the selected blocks' row sums,
      ``SelReciprocal``), PV of the unselected tiles into ``U`` gives ``O_full`` from ``S +
      U``, written to the output memory, and ``R = O_full - O_sel`` into the cache;
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
    the selected) and PV (key step: all; reuse step: the selected), as the hook counts them.
    ``dstar.sim.attention_cycles`` predicts all three exactly from ``N``, the mask and (key
    steps) the mass rule's picks.

    Why these choices: the lanes are the real ``PEArray`` (the spec runs QK^T and PV on the
    linear layers' lanes), fed through its own op/token/weight-row ports, its two weight banks
    alternating so that the next tile loads while the lanes run the current one. The
    accumulators have four banks, the logits and the PV sums (``S``, ``U``) of each
    query-block parity, so that the lanes write one bank while the softmax feeder and the
    normalization read two others through the banks' own read ports.

    Pipeline (``dstar.sim.attention_cycles`` is its exact model): a prologue runs QK^T of
    block 0; then per block ``I`` a phase X, in which the lanes run QK^T of block ``I + 1``
    while the softmax unit runs block ``I`` (and, on key steps, the selection), and a phase Y,
    in which the lanes run PV of block ``I``; the normalization of block ``I - 1`` runs from
    the start of X to the end of Y (and ``SelReciprocal`` of block ``I`` from its selection to
    the end of Y); a phase ends when all its parts are done. A K^T or V
    tile loads at one row per cycle into the free weight bank, the lanes take one nibble op
    per cycle, the softmax unit ``softmax_lanes`` logits per cycle. No stream of this top has
    back-pressure from outside (the host only writes memories and polls ``busy``); the
    internal streams to the softmax unit honour its ready. Rounding and saturation are those
    of ``golden/ATTENTION.md``; outputs are exact. Reset stops a run and forgets every slot's
    step counter; the memories (mask, residual, inputs, outputs) keep their contents.

    With ``shared`` the engine owns no PE arrays: it drives the ``pe`` members (one
    ``pe_array_signature`` per array, of ``AttentionGeometry(cfg, shared=True).lin``, whose
    banks also hold a linear layer's accumulators) and the arrays' owner
    (``dstar.hw.accelerator.Accelerator``) lends them; ``host_k_wdata`` / ``host_v_wdata`` then
    hold every array's word (array ``a``'s at word ``a``), written into the arrays
    ``host_k_we`` / ``host_v_we`` select.

    With ``attention = "sar"`` (``AttentionGeometry.sar``, the paper's sparse attention
    reuse, ``dstar.golden.sar``) the masks are the host's (``host_mask_we``; the engine only
    reads them, ``theta_q`` is ignored), there is no residual cache (no ``host_res_*`` ports;
    no ``MaskSelector``, ``SelReciprocal``, block masses or ``(r, L)`` tables in the feeder),
    and the slot's step counter chooses, on the key steps' cadence, a *cache step* (``key``
    high) or a *reuse step*:

    * cache step: QK^T, the softmax (row max and row sum over the kept keys only) and PV of the
      kept tiles, ``O`` normalized (``golden.sar.sar_cache_step``); the P words of the kept
      key groups and every row's ``(r, L)`` go to the slot's score cache;
    * reuse step: only V is read (Q, K^T and ``(m, sh)`` need not be written); PV of the kept
      tiles from the cached P words, normalized by the cached ``(r, L)``
      (``golden.sar.sar_reuse_step``): no QK^T, no softmax. It must have its cache step's
      ``N`` and mask (the host's contract).

    The score cache is dense per slot (a row's words sit at fixed addresses, whatever the
    mask): the P memory (``score_p``, ``p_banks`` banks by row) holds ``n_kg`` P words of every
    one of a slot's ``sc_rows = nqb * block_q`` rows, ``score_rl`` one ``rl_word`` ``(r, L)``
    per row (``AttentionGeometry.score_cache_bits``); words of key groups outside the mask are
    neither written nor read. The host saves a slot (with its mask and step counter) through
    ``host_sc_addr`` / ``host_sc_rdata`` (a cycle later) and ``host_rl_addr`` /
    ``host_rl_rdata`` (the same cycle), and restores it with ``host_sc_we`` / ``host_rl_we``
    at ``host_addr``: slot ``s``'s P word of row ``i`` and key group ``kg`` at ``((s *
    sc_rows + i) // p_banks * n_kg + kg) * p_banks + i % p_banks``, its row word at ``s *
    sc_rows + i``. Counters: ``count_qk`` the kept tiles on cache steps, 0 on reuse steps;
    ``count_pv`` the kept tiles. A cache step takes a v1 reuse step's cycles on the same
    mask; a reuse step its lists, PV and normalization only (``dstar.sim.attention_cycles``).

    With ``encoding = "fmdq"`` (``AttentionGeometry.fmdq``) the arrays are the SIMD-4
    ``FmdqPEArray``s (``hw.fmdq.geometry.attention_array_args``; ``shared``: the ``pe``
    members are ``hw.fmdq.pe_array.lend_signature``) and the tiles run on ``FmdqTileRunner``
    as 2-bit-sliced 8-bit units (``golden.fmdq_attention``): a Q word holds 4 dimensions of a
    token tile's rows (``q_tile_word_layout``, address ``tt * head_dim / 4 + c``) and P lives
    in ``token_tile`` banks. Results, counters and the phases are the same; the tile phases
    take ``dstar.sim.attention_cycles.fmdq_tile_cycles``.

    Host reads: ``host_o_rdata`` / ``host_res_rdata`` / ``host_mask_rdata`` /
    ``host_slot_rdata`` show the word at ``host_o_addr`` / ``host_res_addr`` one cycle after
    the address (the mask and the slot counter in the same cycle), valid only while ``busy``
    is low: O and R share the engine's read ports.

    The engine's parts: ``TileRunner`` (QK^T and PV tiles), ``BlockList`` (the blocks a
    phase runs over), ``SoftmaxFeed`` (logits to the softmax unit, P words, block sums and
    masses), ``MaskSelector``, ``SelReciprocal`` and ``NormStage``; sizes
    from ``AttentionGeometry``, memory words from ``layouts()``. Ports are flat vectors (a
    choice: a testbench packs words through the manifest's field lists).
    """

    def __init__(self, cfg: Config, *, shared: bool = False):
        self._shared = shared
        self._ag = ag = AttentionGeometry(cfg, shared=shared)
        lays = self.layouts()
        n_arr = cfg.n_arrays
        sig = {
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
            "host_k_wdata": In(lays["kt_word"].size * (n_arr if shared else 1)),
            "host_v_we": In(n_arr),
            "host_v_wdata": In(lays["v_word"].size * (n_arr if shared else 1)),
            "host_ms_we": In(1),
            "host_ms_wdata": In(lays["ms_word"].size),
            **({} if ag.sar else {               # SAR: no residual cache
                "host_res_we": In(1),
                "host_res_wdata": In(Shape.cast(lays["res_word"]).width)}),
            "host_mask_we": In(1),
            "host_mask_wdata": In(Shape.cast(lays["mask_word"]).width),
            "host_slot_we": In(1),
            "host_slot_wdata": In(Shape.cast(lays["slot_word"]).width),
            "host_o_addr": In(uwidth(ag.o_depth)),
            "host_o_rdata": Out(Shape.cast(lays["o_word"]).width),
            **({} if ag.sar else {
                "host_res_addr": In(uwidth(ag.res_depth)),
                "host_res_rdata": Out(Shape.cast(lays["res_word"]).width)}),
            "host_mask_addr": In(uwidth(ag.mask_depth)),
            "host_mask_rdata": Out(Shape.cast(lays["mask_word"]).width),
            "host_slot_addr": In(uwidth(cfg.attn_slots)),
            "host_slot_rdata": Out(Shape.cast(lays["slot_word"]).width),
            **({"pe": Out(self._lend_signature()).array(n_arr)} if shared else {}),
        }
        if ag.sar:
            # The score cache's host ports (P words at ``host_sc_addr``, row words at
            # ``host_rl_addr``; written at ``host_addr``).
            sc_w, rl_w = (Shape.cast(lays[k]).width for k in ("sc_word", "rl_word"))
            sig.update({"host_sc_we": In(1), "host_sc_wdata": In(sc_w),
                        "host_sc_addr": In(uwidth(ag.sc_depth * ag.p_banks)),
                        "host_sc_rdata": Out(sc_w),
                        "host_rl_we": In(1), "host_rl_wdata": In(rl_w),
                        "host_rl_addr": In(uwidth(ag.rl_depth)), "host_rl_rdata": Out(rl_w)})
        super().__init__(sig)

    @property
    def geometry(self) -> AttentionGeometry:
        return self._ag

    def _lend_signature(self):
        """The ``pe`` members' signature (``shared``): the arrays the owner lends."""
        if self._ag.fmdq:
            return lend_signature(attention_array_args(self._ag.cfg, True))
        return pe_array_signature(self._ag.lin, driver=True)

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
        fmdq = ag.fmdq
        if fmdq:
            arr_args = attention_array_args(cfg, self._shared)
            runner = FmdqTileRunner(ag, **{k: arr_args[k] for k in ("tokens", "window",
                                                                     "channel_bits", "y_depth")})
        else:
            runner = TileRunner(ag)
        # SAR has no selection (the masks are the host's): no MaskSelector, no SelReciprocal.
        parts = {
            "tr": runner, "feed": SoftmaxFeed(ag, select=not ag.sar, tables=not ag.sar),
            **({} if ag.sar else {"sel": MaskSelector(ag)}),
            "ns": NormStage(ag), **({} if ag.sar else {"rcp": SelReciprocal(ag)}),
            "lst_a": BlockList(ag), "lst_c": BlockList(ag),
        }
        names = {"tr": "tile_runner", "feed": "softmax_feed", "sel": "mask_select",
                 "ns": "norm", "rcp": "sel_recip", "lst_a": "block_list_0", "lst_c": "block_list_1"}
        for k, part in parts.items():
            m.submodules[names[k]] = part
        arrays = list(self.pe) if self._shared else []
        for a in range(0 if self._shared else cfg.n_arrays):
            if fmdq:
                arr = FmdqPEArray(**arr_args)
            else:
                arr = PEArray(ag.lin)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)
        mem = self._memories(m)
        st = self._sequencer(m, parts, mem)
        parts.update(smx=smx, nrm=nrm, st=st)
        if fmdq:
            self._wire_fmdq(m, parts, mem, arrays, st)
        else:
            self._wire_lanes(m, parts, mem, arrays, st)

        # ----- the parts' wiring -----
        self._wire_common(m, parts, mem)
        return m

    def _wire_fmdq(self, m, parts, mem, arrays, st):
        """The tile runner, the FMDQ arrays and the memories they read: the runner's reads
        held while ``rd_en`` is low, P in ``p_banks`` banks, the accumulators' readers."""
        ag = self._ag
        tr, feed, ns = parts["tr"], parts["feed"], parts["ns"]
        tb = (ag.p_banks - 1).bit_length()
        m.d.comb += [tr.unit_done.eq(arrays[0].o_unit_done),
                     tr.base_t.eq(tr.base_i >> tb),
                     mem["q_rd"].addr.eq(tr.q_addr), mem["q_rd"].en.eq(tr.rd_en),
                     tr.q_data.eq(mem["q_rd"].data),
                     # The runner's groups never wait for a bubble (a unit's slices descend one
                     # at a time), so the arrays take them unless a unit's last group must wait
                     # for the write-out: the ready from registers, not through the arrays'
                     # shift compare from the shared op multiplexer (the Fmax path).
                     tr.o_group.ready.eq(~(tr.o_group.payload.group.last & arrays[0].o_hold))]
        pa = self._p_access(m, feed, tr, mem, st)
        for b, (wr, rd) in enumerate(zip(mem["p_wr"], mem["p_rd"], strict=True)):
            m.d.comb += [wr.en.eq(pa.we & (pa.wbank == b)), wr.addr.eq(pa.waddr),
                         wr.data.eq(pa.wdata), rd.addr.eq(pa.raddr), rd.en.eq(pa.ren),
                         tr.p_data[b].eq(rd.data)]
        y1, y2 = self._reader_addrs(feed, ns, st)
        for a, arr in enumerate(arrays):
            m.d.comb += [*self._weight_rows(tr, mem, a, arr),
                         arr.i_op.valid.eq(tr.o_group.valid),
                         arr.i_op.payload.eq(tr.o_group.payload),
                         arr.rd_addr[0].eq(y1), arr.rd_addr[1].eq(y2)]
            for c in range(self._ag.cfg.m_tile):       # element by element: Y rows are wider
                m.d.comb += [feed.y_data[a][c].eq(arr.rd_data[0][c]),
                             ns.y_data[a][c].eq(arr.rd_data[1][c])]

    def _wire_lanes(self, m, parts, mem, arrays, st):
        """The tile runner, v1's PE arrays and the memories they read."""
        cfg = self._ag.cfg
        tr, feed, ns = parts["tr"], parts["feed"], parts["ns"]
        pa = self._p_access(m, feed, tr, mem, st)
        m.d.comb += [mem["p_wr"][0].en.eq(pa.we), mem["p_wr"][0].addr.eq(pa.waddr),
                     mem["p_wr"][0].data.eq(pa.wdata)]
        m.d.comb += [tr.pass_done.eq(arrays[0].o_pass_done),
                     tr.q_data.eq(mem["q_rd"].data), tr.p_data.eq(mem["p_rd"][0].data),
                     mem["q_rd"].addr.eq(tr.q_addr), mem["p_rd"][0].addr.eq(pa.raddr),
                     tr.o_token.ready.eq(Cat(*[arr.i_token.ready for arr in arrays]).all())]
        y1, y2 = self._reader_addrs(feed, ns, st)
        for a, arr in enumerate(arrays):
            m.d.comb += [*self._weight_rows(tr, mem, a, arr),
                         arr.i_token.valid.eq(tr.o_token.valid),
                         arr.i_token.payload.eq(tr.o_token.payload),
                         arr.host_y_addr.eq(y1), arr.host_y2_addr.eq(y2),
                         feed.y_data[a].eq(arr.host_y_rdata), ns.y_data[a].eq(arr.host_y2_rdata)]
            for lane in range(cfg.group):
                m.d.comb += [arr.i_op[lane].valid.eq(tr.o_op[lane].valid),
                             arr.i_op[lane].payload.eq(tr.o_op[lane].payload)]

    def _p_access(self, m, feed, tr, mem, st) -> SimpleNamespace:
        """The P memories' write (the feeder's words) and read (the tile runner's) ports.
        v1: one query block's words, at the parts' own addresses. SAR: the score cache, the
        slot's rows from ``(slot * sc_rows + base_i) // p_banks * n_kg`` on, and while no step
        runs the host's words: bank ``a mod p_banks``, word ``a // p_banks`` of ``host_addr``
        (``host_sc_we``) and ``host_sc_addr`` (read back on ``host_sc_rdata`` a cycle later)."""
        ag = self._ag
        ren = getattr(tr, "rd_en", 1)
        if not ag.sar:
            return SimpleNamespace(we=feed.p_we, wbank=feed.p_bank, waddr=feed.p_addr,
                                   wdata=feed.p_data, raddr=tr.p_addr, ren=ren)
        tb = (ag.p_banks - 1).bit_length()
        run = st["run"]
        off = Signal(uwidth(ag.sc_depth), name="sc_base")
        m.d.comb += off.eq((st["slot"] * (ag.sc_rows >> tb) + (st["base_i"] >> tb)) * ag.n_kg)
        h_bank = Signal(range(ag.p_banks), name="host_sc_bank")
        m.d.sync += h_bank.eq(self.host_sc_addr[:tb])
        m.d.comb += self.host_sc_rdata.eq(
            Array(rd.data.as_value() for rd in mem["p_rd"])[h_bank] if tb else mem["p_rd"][0].data)
        ha = self.host_addr
        return SimpleNamespace(
            we=Mux(run, feed.p_we, self.host_sc_we),
            wbank=Mux(run, feed.p_bank, ha[:tb] if tb else 0),
            waddr=Mux(run, off + feed.p_addr, ha >> tb),
            wdata=Mux(run, feed.p_data, self.host_sc_wdata),
            raddr=Mux(run, off + tr.p_addr, self.host_sc_addr >> tb),
            ren=Mux(run, ren, 1))

    @staticmethod
    def _weight_rows(tr, mem, a, arr) -> list:
        """Array ``a``'s weight-row beats: the K^T or V word at the runner's address."""
        return [mem["kt_rd"][a].addr.eq(tr.weight_addr), mem["v_rd"][a].addr.eq(tr.weight_addr),
                arr.i_wrow.valid.eq(tr.wrow_valid), arr.i_wrow.payload.bank.eq(tr.wrow_bank),
                arr.i_wrow.payload.row.eq(tr.wrow_row),
                arr.i_wrow.payload.w.eq(Mux(tr.pv, mem["v_rd"][a].data, mem["kt_rd"][a].data))]

    def _reader_addrs(self, feed, ns, st) -> tuple:
        """The arrays' two accumulator readers: the feeder reads the logits of block I, NORM
        the sums of block I - 1, banks the lanes do not write meanwhile (each reader kept in
        its bank, where its address runs past the end when idle)."""
        bb = self._ag.bank_bits
        return Cat(feed.y_addr[:bb], st["par"], 0), Cat(ns.y_addr[:bb], st["n_par"], 1)

    def _wire_common(self, m, parts, mem):
        """The softmax unit, the normalizer and the memories every variant shares."""
        ag = self._ag
        feed, ns = parts["feed"], parts["ns"]
        smx, nrm, st = parts["smx"], parts["nrm"], parts["st"]
        wiring.connect(m, feed.o_row, smx.i_row)
        wiring.connect(m, feed.o_logit, smx.i_logit)
        wiring.connect(m, smx.o_p, feed.i_p)
        wiring.connect(m, smx.o_sum, feed.i_sum)
        wiring.connect(m, ns.o_norm, nrm.i)
        wiring.connect(m, nrm.o, ns.i_norm)
        run = st["run"]
        if ag.sar:
            m.d.comb += [feed.ms_data.eq(mem["ms_rd"].data), mem["ms_rd"].addr.eq(feed.ms_addr),
                         mem["o_rd"].addr.eq(self.host_o_addr),
                         mem["o_wr"].addr.eq(ns.o_waddr), mem["o_wr"].en.eq(ns.o_we),
                         mem["o_wr"].data.eq(Cat(*[ns.o_wdata] * ag.block_cols))]
            self._wire_rows(m, parts, mem)
            return
        m.d.comb += [feed.ms_data.eq(mem["ms_rd"].data), mem["ms_rd"].addr.eq(feed.ms_addr),
                     mem["o_rd"].addr.eq(self.host_o_addr),
                     mem["r_rd"].addr.eq(Mux(run, ns.r_raddr, self.host_res_addr)),
                     ns.r_rdata.eq(mem["r_rd"].data),
                     mem["o_wr"].addr.eq(ns.o_waddr), mem["o_wr"].en.eq(ns.o_we),
                     mem["o_wr"].data.eq(Cat(*[ns.o_wdata] * ag.block_cols))]
        # The residual cache: the normalization's element writes while a step runs, the
        # host's whole words (a slot restored) while idle.
        with m.If(run):
            m.d.comb += [mem["r_wr"].addr.eq(ns.r_waddr), mem["r_wr"].en.eq(ns.r_we),
                         mem["r_wr"].data.eq(Cat(*[ns.r_wdata] * ag.block_cols))]
        with m.Else():
            m.d.comb += [mem["r_wr"].addr.eq(self.host_addr),
                         mem["r_wr"].en.eq(Mux(self.host_res_we, (1 << ag.block_cols) - 1, 0)),
                         mem["r_wr"].data.eq(self.host_res_wdata)]

    def _wire_rows(self, m, parts, mem):
        """SAR: the score cache's row words. A cache step writes each row's ``(r, L)`` as the
        softmax unit hands it to the feeder (row ``slot * sc_rows + base_i + k`` for the
        block's ``k``-th row sum); the normalization reads its rows' back (cache and reuse
        steps alike); while no step runs, the host writes at ``host_addr`` (``host_rl_we``)
        and reads ``host_rl_addr`` (``host_rl_rdata``, the same cycle)."""
        ag = self._ag
        feed, ns, smx, st = parts["feed"], parts["ns"], parts["smx"], parts["st"]
        run, wr, rd = st["run"], mem["rl_wr"], mem["rl_rd"]
        k = Signal(range(ag.cfg.block_q + 1), name="rl_row")
        got = smx.o_sum.valid & feed.i_sum.ready
        with m.If(got):
            m.d.sync += k.eq(k + 1)
        with m.If(feed.start):
            m.d.sync += k.eq(0)
        slot_base = st["slot"] * ag.sc_rows
        m.d.comb += [
            wr.addr.eq(Mux(run, slot_base + st["base_i"] + k, self.host_addr)),
            wr.en.eq(Mux(run, got, self.host_rl_we)),
            wr.data.eq(Mux(run, Cat(smx.o_sum.payload.r, smx.o_sum.payload.big_l),
                           self.host_rl_wdata)),
            rd.addr.eq(Mux(run, slot_base + st["n_base"] + ns.row, self.host_rl_addr)),
            self.host_rl_rdata.eq(rd.data),
            ns.r.eq(rd.data.r), ns.big_l.eq(rd.data.big_l)]

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
            kd, vd = self.host_k_wdata, self.host_v_wdata
            if self._shared:        # every array's word in one write, array a's at slice a
                kd = kd.word_select(a, lays["kt_word"].size)
                vd = vd.word_select(a, lays["v_word"].size)
            m.d.comb += [kw.en.eq(self.host_k_we[a]), kw.addr.eq(self.host_addr),
                         kw.data.eq(kd), vw.en.eq(self.host_v_we[a]), vw.addr.eq(self.host_addr),
                         vw.data.eq(vd)]
            kt_rd.append(km.read_port())
            v_rd.append(vm.read_port())
        m.d.comb += [q_wr.en.eq(self.host_q_we), q_wr.addr.eq(self.host_addr),
                     q_wr.data.eq(self.host_q_wdata),
                     ms_wr.en.eq(self.host_ms_we), ms_wr.addr.eq(self.host_addr),
                     ms_wr.data.eq(self.host_ms_wdata)]
        # SAR: P is the score cache, every row of every slot (no residual cache).
        p_name, p_depth = ("score_p", ag.sc_depth) if ag.sar else ("p", ag.p_depth)
        p_mems = [memory(p_name if ag.p_banks == 1 else f"{p_name}_{b}", p_word_layout(ag),
                         p_depth) for b in range(ag.p_banks)]
        o_mem = memory("o", lays["o_word"], ag.o_depth)
        if not ag.sar:
            r_mem = memory("res", lays["res_word"], ag.res_depth)
        k_mem = memory("mask", lays["mask_word"], ag.mask_depth)
        k_host = k_mem.read_port(domain="comb")
        out = {"q_rd": q_rd, "ms_rd": ms_rd, "kt_rd": kt_rd, "v_rd": v_rd,
               "p_wr": [pm.write_port() for pm in p_mems],
               "p_rd": [pm.read_port() for pm in p_mems],
               "o_wr": o_mem.write_port(granularity=1), "o_rd": o_mem.read_port()}
        if ag.sar:
            rl_mem = memory("score_rl", lays["rl_word"], ag.rl_depth)
            # Read combinationally: the normalization looks a row's (r, L) up in the cycle it
            # names the row, as it does the softmax's tables on v1.
            out.update(rl_wr=rl_mem.write_port(), rl_rd=rl_mem.read_port(domain="comb"))
        else:
            out.update(r_wr=r_mem.write_port(granularity=1), r_rd=r_mem.read_port())
        out.update({"k_wr": k_mem.write_port(),
                    # The mask words of the current and of the next query block.
                    "k_rd_c": k_mem.read_port(domain="comb"),
                    "k_rd_a": k_mem.read_port(domain="comb")})
        m.d.comb += self.host_o_rdata.eq(out["o_rd"].data)
        if not ag.sar:
            m.d.comb += self.host_res_rdata.eq(out["r_rd"].data)
        m.d.comb += [k_host.addr.eq(self.host_mask_addr), self.host_mask_rdata.eq(k_host.data)]
        return out

    def _sequencer(self, m, parts, mem) -> dict:
        """The run state, the slots' step counters and the machines of a step; returns the
        state the wiring reads. Per query block ``I`` (parity ``p``): X runs the softmax (and
        on key steps the selection) of ``I`` beside QK^T of ``I + 1``; Y runs PV of ``I``
        beside the normalization of ``I - 1``."""
        ag = self._ag
        cfg = ag.cfg
        bq, nqb = cfg.block_q, ag.nqb
        tr, feed, sel, ns, rcp = (parts.get(k) for k in ("tr", "feed", "sel", "ns", "rcp"))
        lst_a, lst_c = parts["lst_a"], parts["lst_c"]
        k_wr = mem["k_wr"]
        run, key = Signal(), Signal()
        phase = Signal(range(4))
        x_first, y_first, f_first = Signal(), Signal(), Signal()
        pro = Signal()                      # the prologue: QK^T of block 0 alone
        m.d.comb += [self.busy.eq(run), self.key.eq(key)]
        slot = Signal.like(self.slot)
        n_tok = Signal.like(self.n_tokens)
        theta = Signal.like(self.theta_q)
        qb = Signal(range(nqb + 1))         # query block I
        base_i = Signal(range(ag.n_max + bq + 1))
        par = Signal()
        rows = Signal(range(bq + 1))
        m.d.comb += [par.eq(qb[0]), rows.eq(Mux(n_tok - base_i >= bq, bq, n_tok - base_i))]
        # The block QK^T runs on: block 0 in the prologue, else I + 1.
        a_qb, a_base, a_par = Signal.like(qb), Signal.like(base_i), Signal()
        a_rows, a_has = Signal.like(rows), Signal()
        # SAR: the masks are the host's (no selection: every list is the mask's), and a reuse
        # step runs no QK^T and no softmax.
        sar = ag.sar
        full = 0 if sar else key           # every block's QK^T and the selection (v1 key step)
        m.d.comb += [a_qb.eq(Mux(pro, qb, qb + 1)), a_base.eq(Mux(pro, base_i, base_i + bq)),
                     a_par.eq(Mux(pro, par, ~par)),
                     a_has.eq((a_base < n_tok) & key if sar else a_base < n_tok),
                     a_rows.eq(Mux(n_tok - a_base >= bq, bq, n_tok - a_base))]
        in_x, in_y = Signal(), Signal()
        m.d.comb += [in_x.eq(phase == _X), in_y.eq(phase == _Y)]

        s_valid, s_phase = self._slot_counters(m, run)
        bump = Signal(name="slot_bump")     # the step's slot counter moves next cycle
        refresh = Signal.like(self.refresh, name="refresh_r")
        phase_r = Signal.like(s_phase[0], name="slot_phase_r")   # its value at the start

        with m.If(run):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        with m.If(tr.qk_tile):
            m.d.sync += self.count_qk.eq(self.count_qk + 1)
        with m.If(tr.pv_tile):
            m.d.sync += self.count_pv.eq(self.count_pv + 1)

        a_st, m_st, v_st, n_st = (Signal(range(8), name=n) for n in ("a_st", "m_st", "v_st",
                                                                     "n_st"))
        kind = Signal()                     # block I: _REUSE or _KEY
        v_pass2 = Signal()                  # Y: the second PV phase
        has_u = Signal()                    # Y: unselected tiles ran
        c_mode = Signal(ListMode)
        sel_mask = Signal(ag.nkb)
        # The block waiting for (or in) its normalization.
        n_pend, n_kind, n_par, n_hasu = Signal(), Signal.like(kind), Signal(), Signal()
        n_base, n_rows = Signal.like(base_i), Signal.like(rows)

        # ----- the parts' inputs -----
        mrow = slot * nqb
        m.d.comb += [mem["k_rd_c"].addr.eq(mrow + qb), mem["k_rd_a"].addr.eq(mrow + a_qb),
                     lst_c.mask.eq(mem["k_rd_c"].data), lst_a.mask.eq(mem["k_rd_a"].data),
                     lst_c.n_tokens.eq(n_tok), lst_a.n_tokens.eq(n_tok), lst_c.mode.eq(c_mode),
                     lst_a.mode.eq(Mux(full, ListMode.ALL, ListMode.SELECTED)),
                     k_wr.addr.eq(Mux(run, mrow + qb, self.host_addr))]
        m.d.comb += [
            tr.active.eq(in_x & (a_st == _A_TILES) | in_y & (v_st == _V_TILES)),
            tr.sel_j.eq(Mux(in_x, lst_a.sel_j.as_value(), lst_c.sel_j.as_value())),
            tr.sel_len.eq(Mux(in_x, lst_a.sel_len.as_value(), lst_c.sel_len.as_value())),
            tr.n_sel.eq(Mux(in_x, lst_a.n_sel, lst_c.n_sel)),
            tr.base_i.eq(Mux(in_x, a_base, base_i)), tr.rows.eq(Mux(in_x, a_rows, rows)),
            # Y: the selected tiles into S, then the unselected (key steps) into U.
            tr.y_base.eq(Mux(in_x, ag.logit_base(a_par), Mux(v_pass2, ag.u_base(par),
                                                              ag.s_base(par)))),
            feed.sel_j.eq(lst_c.sel_j), feed.sel_len.eq(lst_c.sel_len),
            feed.n_sel.eq(lst_c.n_sel), feed.n_valid.eq(lst_c.n_valid),
            feed.base_i.eq(base_i), feed.rows.eq(rows), feed.full.eq(full),
            feed.y_base.eq(ag.logit_base(par)), feed.bank.eq(par),
            *([] if sar else [
                sel.n_blocks.eq(lst_c.n_sel), sel.theta_q.eq(theta),
                [sel.mass[j].eq(feed.mass[j]) for j in range(ag.nkb)],
                rcp.rows.eq(rows), rcp.b.eq(feed.b_rows), rcp.mask.eq(sel_mask),
                rcp.bank.eq(par), rcp.rd_bank.eq(n_par), rcp.row.eq(ns.row)]),
            *([] if sar else [feed.norm_row.eq(ns.row)]),
        ]
        self._norm_machine(m, ns, rcp, feed, {
            "n_st": n_st, "n_kind": n_kind, "n_par": n_par, "n_hasu": n_hasu, "n_pend": n_pend,
            "n_base": n_base, "n_rows": n_rows, "slot": slot})

        # ----- IDLE: a step starts with the prologue -----
        with m.If((phase == _IDLE) & self.start & ~run & (self.n_tokens != 0)
                  & (self.n_tokens <= ag.n_max)):
            ph = s_phase[self.slot]
            is_key = ~s_valid[self.slot] | ((self.refresh != 0) & (ph == 0))
            m.d.sync += [run.eq(1), key.eq(is_key), slot.eq(self.slot), n_tok.eq(self.n_tokens),
                         theta.eq(self.theta_q), qb.eq(0), base_i.eq(0),
                         self.cycles.eq(0), self.count_qk.eq(0), self.count_pv.eq(0),
                         s_valid[self.slot].eq(1), bump.eq(1), refresh.eq(self.refresh),
                         phase_r.eq(ph),
                         phase.eq(_X), x_first.eq(1), pro.eq(1), n_pend.eq(0),
                         a_st.eq(_A_DONE), m_st.eq(_M_DONE), v_st.eq(_V_DONE)]
        # The slot's counter moves in the step's first cycle, from registers (its slot, value
        # and refresh), not behind the start's conditions and the command's arguments: nothing
        # reads it during a step (the host's slot port is for idle steps). Its value is the one
        # read at the start, not a second read by the slot register: that read's Verilog
        # (``always @*`` on registers that may not change from their initial values) is never
        # evaluated in Icarus, and gave X.
        with m.If(bump):
            m.d.sync += [bump.eq(0),
                         s_phase[slot].eq(Mux((refresh == 0) | (phase_r + 1 == refresh), 0,
                                              phase_r + 1))]

        # ----- X: QK^T of the next block beside the softmax (and selection) of this one -----
        start_norm = self._start_norm
        with m.If(in_x & x_first):
            m.d.sync += x_first.eq(0)
            with m.If(n_pend):              # block I - 1 (its PV sums are complete)
                m.d.comb += start_norm.eq(1)
            with m.If(a_has):
                m.d.comb += lst_a.start.eq(1)
                m.d.sync += a_st.eq(_A_LIST)
            with m.If(~pro):
                m.d.comb += lst_c.start.eq(1)
                m.d.sync += [m_st.eq(_M_LIST),
                             c_mode.eq(Mux(full, ListMode.ALL, ListMode.SELECTED))]
        with m.If((a_st == _A_LIST) & lst_a.done):
            m.d.comb += tr.start.eq(1)
            m.d.sync += a_st.eq(_A_TILES)
        with m.If(in_x & (a_st == _A_TILES) & tr.last):
            m.d.sync += a_st.eq(_A_WAIT)
        with m.If((a_st == _A_WAIT) & tr.idle):
            m.d.sync += a_st.eq(_A_DONE)

        self._softmax_machine(m, SimpleNamespace(**{k: v for k, v in locals().items()
                                                    if k != "self"}))

        with m.If(in_x & ~x_first & (a_st == _A_DONE) & (m_st == _M_DONE)):
            with m.If(pro):
                m.d.sync += [pro.eq(0), x_first.eq(1)]
            with m.Else():
                m.d.sync += [phase.eq(_Y), y_first.eq(1)]

        self._phase_y(m, SimpleNamespace(**{k: v for k, v in locals().items() if k != "self"}))
        return {"run": run, "par": par, "n_par": n_par, "slot": slot, "base_i": base_i,
                "n_base": n_base}

    def _softmax_machine(self, m, s) -> None:
        """Phase X's softmax side of block ``I`` (``s``: the sequencer's state): the list
        of its blocks, the softmax feeder and, on v1 key steps, the selection and the mask
        written for the slot; SAR writes the host's masks only."""
        m_st, lst_c, sar, key, feed, kind = s.m_st, s.lst_c, s.sar, s.key, s.feed, s.kind
        full, sel, k_wr, run, rows, bq = s.full, s.sel, s.k_wr, s.run, s.rows, s.bq
        ag, rcp, sel_mask = s.ag, s.rcp, s.sel_mask
        with m.If((m_st == _M_LIST) & lst_c.done):
            if sar:                         # a reuse step's PV reads the score cache
                with m.If(key):
                    m.d.comb += feed.start.eq(1)
                    m.d.sync += m_st.eq(_M_SMAX)
                with m.Else():
                    m.d.sync += [m_st.eq(_M_DONE), kind.eq(_REUSE)]
            else:
                m.d.comb += feed.start.eq(1)
                m.d.sync += m_st.eq(_M_SMAX)
        with m.If((m_st == _M_SMAX) & feed.done):
            if sar:
                m.d.sync += [m_st.eq(_M_DONE), kind.eq(_REUSE)]
            else:
                with m.If(full):
                    m.d.comb += sel.start.eq(1)
                    m.d.sync += m_st.eq(_M_SEL)
                with m.Else():
                    m.d.sync += [m_st.eq(_M_DONE), kind.eq(_REUSE)]
        if sar:                             # the host's masks only
            m.d.comb += [k_wr.data.eq(self.host_mask_wdata),
                         k_wr.en.eq(~run & self.host_mask_we)]
        else:
            # The mask holds the block of every row's first largest logit: the masked softmax
            # then has the full one's row max, so PV of the selected tiles of the full pass,
            # normalized by the selected blocks' own sums (SelReciprocal), is O_sel.
            mask = Signal(ag.nkb)
            forced = 0
            for i in range(bq):
                forced = forced | Mux(i < rows, feed.max_block[i], 0)
            m.d.comb += [mask.eq(sel.mask | forced),
                         k_wr.data.eq(Mux(run, mask, self.host_mask_wdata))]
            with m.If(~run & self.host_mask_we):
                m.d.comb += k_wr.en.eq(1)
            with m.If((m_st == _M_SEL) & sel.done):
                m.d.comb += [k_wr.en.eq(1), rcp.start.eq(1)]
                m.d.sync += [sel_mask.eq(mask), m_st.eq(_M_DONE), kind.eq(_KEY)]

    def _slot_counters(self, m, run):
        """The slots' step counters (valid since clear, calls modulo refresh), cleared by
        ``clear`` and saved and restored by the host (with the slot's residual and mask, to
        run more heads than there are slots) while no step runs."""
        ag = self._ag
        cfg = ag.cfg
        s_valid = Array(Signal(name=f"slot_valid{s}") for s in range(cfg.attn_slots))
        s_phase = Array(Signal(ag.REFRESH_BITS, name=f"slot_phase{s}")
                        for s in range(cfg.attn_slots))
        with m.If(self.clear & ~run):
            for s in range(cfg.attn_slots):
                m.d.sync += [s_valid[s].eq(0), s_phase[s].eq(0)]
        slot_w = data.View(self.layouts()["slot_word"], self.host_slot_wdata)
        with m.If(self.host_slot_we & ~run):
            with m.Switch(self.host_addr):
                for s in range(cfg.attn_slots):
                    with m.Case(s):
                        m.d.sync += [s_valid[s].eq(slot_w.valid), s_phase[s].eq(slot_w.phase)]
        m.d.comb += self.host_slot_rdata.eq(Cat(s_valid[self.host_slot_addr],
                                                s_phase[self.host_slot_addr]))
        return s_valid, s_phase

    def _phase_y(self, m, s) -> None:
        """Phase Y (PV of block I while the normalization of block I - 1 finishes) and the
        step's end (the last block's normalization); ``s``: the sequencer's state."""
        in_y, y_first, v_pass2, has_u, kind = s.in_y, s.y_first, s.v_pass2, s.has_u, s.kind
        lst_c, c_mode, tr, v_st, n_st, rcp = s.lst_c, s.c_mode, s.tr, s.v_st, s.n_st, s.rcp
        n_pend, n_kind, n_par, n_hasu, n_base, n_rows = (s.n_pend, s.n_kind, s.n_par, s.n_hasu,
                                                         s.n_base, s.n_rows)
        par, base_i, rows, bq, n_tok, phase = s.par, s.base_i, s.rows, s.bq, s.n_tok, s.phase
        f_first, qb, x_first, start_norm, run = s.f_first, s.qb, s.x_first, s.start_norm, s.run
        # ----- Y: PV of this block while the normalization of the previous one finishes -----
        with m.If(in_y & y_first):
            m.d.sync += [y_first.eq(0), v_pass2.eq(0), has_u.eq(0)]
            with m.If(kind == _KEY):
                m.d.comb += lst_c.start.eq(1)
                m.d.sync += [v_st.eq(_V_LIST), c_mode.eq(ListMode.SELECTED)]
            with m.Else():                  # the list of X
                m.d.comb += [tr.start.eq(1), tr.start_pv.eq(1)]
                m.d.sync += v_st.eq(_V_TILES)
        with m.If(in_y & (v_st == _V_LIST) & lst_c.done):
            with m.If(lst_c.n_sel == 0):
                m.d.sync += v_st.eq(_V_DONE)
            with m.Else():
                m.d.comb += [tr.start.eq(1), tr.start_pv.eq(1)]
                m.d.sync += [v_st.eq(_V_TILES), has_u.eq(v_pass2)]
        with m.If(in_y & (v_st == _V_TILES) & tr.last):
            m.d.sync += v_st.eq(_V_WAIT)
        with m.If((v_st == _V_WAIT) & tr.idle):
            with m.If(~v_pass2 & (kind == _KEY)):
                m.d.comb += lst_c.start.eq(1)
                m.d.sync += [v_pass2.eq(1), v_st.eq(_V_LIST), c_mode.eq(ListMode.UNSELECTED)]
            with m.Else():
                m.d.sync += v_st.eq(_V_DONE)

        y_done = in_y & ~y_first & (v_st == _V_DONE) & (n_st == _N_IDLE)
        with m.If(y_done if rcp is None else y_done & rcp.done):
            m.d.sync += [n_pend.eq(1), n_kind.eq(kind), n_par.eq(par), n_hasu.eq(has_u),
                         n_base.eq(base_i), n_rows.eq(rows)]
            with m.If(base_i + bq >= n_tok):
                m.d.sync += [phase.eq(_FIN), f_first.eq(1)]
            with m.Else():
                m.d.sync += [qb.eq(qb + 1), base_i.eq(base_i + bq), phase.eq(_X),
                             x_first.eq(1)]

        # ----- FIN: the last block's normalization -----
        with m.If(phase == _FIN):
            with m.If(f_first):
                m.d.sync += f_first.eq(0)
                m.d.comb += start_norm.eq(1)
            with m.Elif(n_st == _N_IDLE):
                m.d.sync += [phase.eq(_IDLE), run.eq(0)]

    def _norm_machine(self, m, ns, rcp, feed, v) -> None:
        """The normalization of a finished block (``n_*``): one or two ``NormStage`` passes
        (``NormStage`` lists them per kind of block), begun by ``_start_norm``."""
        ag = self._ag
        n_st, n_kind, n_par, n_hasu, n_pend = (v[k] for k in ("n_st", "n_kind", "n_par",
                                                              "n_hasu", "n_pend"))
        self._start_norm = start_norm = Signal()
        second = Signal()                   # the pass being started (or run) is the second
        m.d.comb += second.eq(n_st != _N_IDLE)
        m.d.comb += [ns.s_base.eq(ag.s_base(n_par)), ns.u_base.eq(ag.u_base(n_par)),
                     ns.base_i.eq(v["n_base"]), ns.rows.eq(v["n_rows"]), ns.slot.eq(v["slot"])]
        with m.Switch(n_kind):
            with m.Case(_REUSE):            # SAR: no residual, O itself
                m.d.comb += [ns.source.eq(NormSource.S),
                             ns.out_mode.eq(OutMode.NEW if ag.sar else OutMode.O_PLUS_R),
                             ns.res_mode.eq(ResMode.NONE)]
            with m.Default():
                m.d.comb += [ns.source.eq(Mux(second & n_hasu, NormSource.S_PLUS_U, NormSource.S)),
                             ns.out_mode.eq(Mux(second, OutMode.NEW, OutMode.NONE)),
                             ns.res_mode.eq(Mux(second, ResMode.ADD, ResMode.NEG))]
        # Tables while a pass runs: the selected blocks' reciprocals for a key step's O_sel,
        # else the softmax's.
        # SAR: the score cache's rows (``_wire_rows``).
        use_rcp = (n_kind == _KEY) & (n_st == _N_P1)
        if not ag.sar:
            m.d.comb += feed.norm_bank.eq(n_par)
            m.d.comb += [ns.r.eq(Mux(use_rcp, rcp.r, feed.norm_r)),
                         ns.big_l.eq(Mux(use_rcp, rcp.big_l, feed.norm_big_l))]
        with m.If(start_norm):
            m.d.comb += ns.start.eq(1)
            m.d.sync += n_st.eq(_N_P1)
        with m.If((n_st == _N_P1) & ~ns.busy):
            with m.If(n_kind == _REUSE):
                m.d.sync += [n_st.eq(_N_IDLE), n_pend.eq(0)]
            with m.Else():
                m.d.comb += ns.start.eq(1)
                m.d.sync += n_st.eq(_N_P2)
        with m.If((n_st == _N_P2) & ~ns.busy):
            m.d.sync += [n_st.eq(_N_IDLE), n_pend.eq(0)]
