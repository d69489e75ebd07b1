"""Attention-reuse controller: one head, one step of DSTAR's sparse attention with reuse, from
on-chip memories, on the linear datapath's PE array and the softmax unit.

Ref: dstar-spec.md sections 4 and 5 ("Attention-reuse controller"); the bit-exact contract is
``golden/ATTENTION.md`` (``dstar.golden.attention.key_step_head`` / ``reuse_step_head``).
"""

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from dstar.golden.attention import THETA_BITS
from dstar.golden.softmax import MANT_BITS, RECIP_BITS, SHIFT_MAX, sum_bits

from dstar.config import Config, ConfigError, bits_signed

from .dispatcher import COUNTER_BITS
from .geometry import Geometry, uwidth
from .pe_array import PEArray
from .softmax import Normalizer, SoftmaxUnit

__all__ = ["AttentionEngine", "AttentionGeometry", "ms_layout", "p_word_layout"]

SH_BITS = SHIFT_MAX.bit_length()
OUT_BITS = 18           # O_sel + R, signed (golden/ATTENTION.md)
RES_BITS = 17           # R = O_full - O_sel, signed


def ms_layout() -> data.StructLayout:
    """A query row's logit multiplier ``(m, sh)`` (``dstar.golden.softmax.logit_multiplier``)."""
    return data.StructLayout({"m": unsigned(MANT_BITS), "sh": unsigned(SH_BITS)})


def p_word_layout(cfg: Config) -> data.StructLayout:
    """A P word: the 8-bit mantissas of one group of ``G`` keys (``dstar.golden.softmax`` group
    format; zeros past a ragged end) and the group's shift ``e_max - e_g``."""
    return data.StructLayout({"p": data.ArrayLayout(unsigned(8), cfg.group),
                              "shift": unsigned(cfg.shift_bits)})


class AttentionGeometry:
    """Sizes of the attention engine derived from a ``Config`` (the RTL, the cycle model and the
    manifest take them from here). Raises ``ConfigError`` for a configuration it cannot map."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        g, dh = cfg.group, cfg.head_dim
        self.lin = Geometry(cfg)
        self.block_cols = bc = cfg.m_tile * cfg.n_arrays
        if dh % g:
            raise ConfigError(f"head_dim={dh} must be a multiple of group={g} (Q rows run as "
                              f"whole lane groups)")
        if dh > cfg.k_tile:
            raise ConfigError(f"head_dim={dh} must be <= k_tile={cfg.k_tile} (one K^T tile "
                              f"holds a head's reduction)")
        if cfg.block_k % g:
            raise ConfigError(f"block_k={cfg.block_k} must be a multiple of group={g}")
        if cfg.block_k % bc:
            raise ConfigError(f"block_k={cfg.block_k} must be a multiple of m_tile * n_arrays="
                              f"{bc} (key chunks of QK^T must not straddle key blocks)")
        if cfg.block_k > cfg.k_tile:
            raise ConfigError(f"block_k={cfg.block_k} must be <= k_tile={cfg.k_tile} (one V "
                              f"tile holds a key block)")
        n = cfg.max_tokens
        self.n_max = n
        self.rows_q = dh // g                       # Q words (lane groups) per query row
        self.n_kc = -(-n // bc)                     # key chunks of K^T
        self.n_cp = -(-dh // bc)                    # column passes of PV
        self.n_kg = -(-n // g)                      # key groups of P
        self.nqb = -(-n // cfg.block_q)
        self.nkb = -(-n // cfg.block_k)
        self.kc_per_block = cfg.block_k // bc
        self.kg_per_block = cfg.block_k // g
        self.pv_base = cfg.block_q * self.n_kc      # PV accumulators after the logits in Y
        if self.pv_base + cfg.block_q * self.n_cp > self.lin.y_depth:
            raise ConfigError(f"the PE array's accumulator memory ({self.lin.y_depth} words) "
                              f"cannot hold a query block's logits and PV sums "
                              f"({self.pv_base + cfg.block_q * self.n_cp} words)")
        self.logit_bits = bits_signed(dh * 128 * 128)
        # Applied weights w = p << shift <= 255 * 2**e_max (golden.softmax group format).
        w_max = 255 << cfg.e_max
        self.pv_acc_bits = bits_signed(128 * w_max * n)
        if cfg.acc_bits < max(self.logit_bits, self.pv_acc_bits):
            raise ConfigError(f"acc_bits={cfg.acc_bits} is narrower than the attention sums "
                              f"({max(self.logit_bits, self.pv_acc_bits)} bits)")
        # A lane's PV partial sum runs over a key block's groups, a reduction over its keys.
        if bits_signed(128 * w_max * self.kg_per_block) > self.lin.psum_bits:
            raise ConfigError(f"block_k={cfg.block_k}: a lane's PV partial sum (up to "
                              f"{128 * w_max * self.kg_per_block}) overflows the PE array's "
                              f"{self.lin.psum_bits}-bit partial sums")
        if bits_signed(128 * w_max * cfg.block_k) > self.lin.tile_sum_bits:
            raise ConfigError(f"block_k={cfg.block_k}: a PV tile's sum (up to "
                              f"{128 * w_max * cfg.block_k}) overflows the PE array's "
                              f"{self.lin.tile_sum_bits}-bit tile sums")
        self.kt_depth = dh * self.n_kc
        self.v_depth = self.n_kg * g * self.n_cp
        self.q_depth = n * self.rows_q
        self.p_depth = cfg.block_q * self.n_kg
        self.o_depth = n * dh
        self.res_depth = cfg.attn_slots * n * dh
        self.mask_depth = cfg.attn_slots * self.nqb
        self.b_bits = sum_bits(cfg.block_k, cfg.e_max)
        self.mass_bits = 16 + (cfg.block_q - 1).bit_length()
        self.total_bits = self.mass_bits + (self.nkb - 1).bit_length()

    def to_dict(self) -> dict:
        names = ["block_cols", "n_max", "rows_q", "n_kc", "n_cp", "n_kg", "nqb", "nkb",
                 "kc_per_block", "kg_per_block", "pv_base", "logit_bits", "pv_acc_bits",
                 "kt_depth", "v_depth", "q_depth", "p_depth", "o_depth", "res_depth",
                 "mask_depth", "b_bits", "mass_bits"]
        return {n: getattr(self, n) for n in names}


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
      PV over all tiles and normalization into the output memory (``O_full``); then the
      masked softmax on the logits of the selected tiles (still in the accumulators: QK^T runs
      once per tile on a key step), PV of the selected tiles, and ``R = O_full - O_sel`` into
      the slot's residual cache;
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
    the selected) and PV (key step: all + the selected; reuse step: the selected), as the
    hook counts them. ``dstar.sim.attention_cycles`` predicts all three exactly from ``N`` and the
    mask.

    Why these choices: the lanes are the real ``PEArray`` (the spec runs QK^T and PV on the
    linear layers' lanes), fed through its own op/token/weight-row ports, its two weight banks
    alternating so that the next tile loads while the lanes run the current one; the phases
    of a query block (list, QK^T, softmax, mask, PV, normalization) do not overlap, which
    keeps the schedule and its model simple; the softmax unit streams one logit per cycle and
    is the bottleneck of a step (about 60 % of its cycles, ``dstar bench attention``).

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

    Ports are flat vectors (no structs) so that cocotb drives them directly.
    """

    def __init__(self, cfg: Config):
        self._ag = ag = AttentionGeometry(cfg)
        n_arr, mt = cfg.n_arrays, cfg.m_tile
        super().__init__({
            "start": In(1),
            "clear": In(1),
            "slot": In(uwidth(cfg.attn_slots)),
            "n_tokens": In(uwidth(cfg.max_tokens + 1)),
            "theta_q": In(THETA_BITS + 1),
            "refresh": In(16),
            "busy": Out(1),
            "key": Out(1),
            "cycles": Out(COUNTER_BITS),
            "count_qk": Out(COUNTER_BITS),
            "count_pv": Out(COUNTER_BITS),
            "host_addr": In(uwidth(max(ag.q_depth, ag.kt_depth, ag.v_depth, ag.n_max))),
            "host_q_we": In(1),
            "host_q_wdata": In(8 * cfg.group),
            "host_k_we": In(n_arr),
            "host_k_wdata": In(8 * mt),
            "host_v_we": In(n_arr),
            "host_v_wdata": In(8 * mt),
            "host_ms_we": In(1),
            "host_ms_wdata": In(ms_layout().size),
            "host_o_addr": In(uwidth(ag.o_depth)),
            "host_o_rdata": Out(OUT_BITS),
            "host_res_addr": In(uwidth(ag.res_depth)),
            "host_res_rdata": Out(RES_BITS),
            "host_mask_addr": In(uwidth(ag.mask_depth)),
            "host_mask_rdata": Out(ag.nkb),
        })

    @property
    def geometry(self) -> AttentionGeometry:
        return self._ag

    def elaborate(self, platform):
        ag = self._ag
        cfg, geo = ag.cfg, ag.lin
        g, dh, bq, bk = cfg.group, cfg.head_dim, cfg.block_q, cfg.block_k
        n_arr, mt, bc = cfg.n_arrays, cfg.m_tile, ag.block_cols
        nkb = ag.nkb
        m = Module()

        m.submodules.softmax = smx = SoftmaxUnit(cfg, logit_bits=ag.logit_bits,
                                                 max_row=ag.n_max)
        m.submodules.normalizer = nrm = Normalizer(cfg, max_row=ag.n_max,
                                                   acc_bits=ag.pv_acc_bits)
        arrays = []
        for a in range(n_arr):
            arr = PEArray(geo)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)

        # ----- memories -----
        s8g = data.ArrayLayout(signed(8), g)
        s8m = data.ArrayLayout(signed(8), mt)
        m.submodules.q = q_mem = Memory(shape=s8g, depth=ag.q_depth, init=[])
        q_wr, q_rd = q_mem.write_port(), q_mem.read_port()
        m.submodules.ms = ms_mem = Memory(shape=ms_layout(), depth=ag.n_max, init=[])
        ms_wr, ms_rd = ms_mem.write_port(), ms_mem.read_port(domain="comb")
        kt_rd, v_rd = [], []
        for a in range(n_arr):
            km = Memory(shape=s8m, depth=ag.kt_depth, init=[])
            vm = Memory(shape=s8m, depth=ag.v_depth, init=[])
            m.submodules[f"kt_{a}"], m.submodules[f"v_{a}"] = km, vm
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
        u8g = data.ArrayLayout(unsigned(8), g)
        m.submodules.p = p_mem = Memory(shape=p_word_layout(cfg), depth=ag.p_depth, init=[])
        p_wr, p_rd = p_mem.write_port(), p_mem.read_port()
        m.submodules.o = o_mem = Memory(shape=signed(OUT_BITS), depth=ag.o_depth, init=[])
        o_wr, o_rd = o_mem.write_port(), o_mem.read_port()
        m.submodules.res = r_mem = Memory(shape=signed(RES_BITS), depth=ag.res_depth, init=[])
        r_wr, r_rd = r_mem.write_port(), r_mem.read_port()
        m.submodules.mask = k_mem = Memory(shape=unsigned(nkb), depth=ag.mask_depth, init=[])
        k_wr, k_rd = k_mem.write_port(), k_mem.read_port(domain="comb")
        k_host = k_mem.read_port(domain="comb")
        m.d.comb += [self.host_o_rdata.eq(o_rd.data), self.host_res_rdata.eq(r_rd.data),
                     k_host.addr.eq(self.host_mask_addr), self.host_mask_rdata.eq(k_host.data)]

        # ----- run state -----
        run = Signal()
        phase = Signal(range(8))
        key = Signal()
        masked = Signal()                   # the pass on the selected tiles (else: all tiles)
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
        s_phase = Array(Signal(16, name=f"slot_phase{s}") for s in range(cfg.attn_slots))

        # Selected key blocks of the current query block: index and length, in ascending order.
        jb = range(nkb + 1)
        sel_j = Array(Signal(jb, name=f"sel_j{k}") for k in range(nkb))
        sel_len = Array(Signal(range(bk + 1), name=f"sel_len{k}") for k in range(nkb))
        cnt = Signal(jb)
        n_valid = Signal(range(ag.n_max + 1))

        # ----- LIST: scan the mask word of block I, one key block per cycle -----
        ls_j = Signal(jb)
        ls_start = Signal(range(ag.n_max + bk + 1))
        ls_len = Signal(range(bk + 1))
        m.d.comb += [k_rd.addr.eq(slot * ag.nqb + qb),
                     ls_len.eq(Mux(n_tok - ls_start >= bk, bk, n_tok - ls_start))]
        ls_bit = Signal()
        m.d.comb += ls_bit.eq(full | k_rd.data.bit_select(ls_j, 1))

        # ----- tile runner (QK^T or PV on the PE arrays) -----
        # Two walks over the same tile sequence (QK^T: chunks of each selected block; PV:
        # selected blocks of each column pass): the loader's, one tile ahead, fills the free
        # weight bank while the lanes run the previous tile from the other one.
        pv = Signal()                       # the tile phases run PV (else QK^T)
        tile_bits = 16

        class Walk:
            def __init__(self, name):
                self.li = Signal(jb, name=f"{name}_li")
                self.cpos = Signal(range(bk + bc + 1), name=f"{name}_cpos")  # QK chunk start
                self.kc = Signal(range(ag.n_kc + 1), name=f"{name}_kc")
                self.cp = Signal(range(ag.n_cp + 1), name=f"{name}_cp")
                self.more = Signal(name=f"{name}_more")
                self.bank = Signal(name=f"{name}_bank")
                self.count = Signal(tile_bits, name=f"{name}_count")   # tiles finished
                self.j = Signal(jb, name=f"{name}_j")
                self.len = Signal(range(bk + 1), name=f"{name}_len")
                m.d.comb += [self.j.eq(sel_j[self.li]), self.len.eq(sel_len[self.li])]

            def start(self):
                return [self.li.eq(0), self.cpos.eq(0), self.cp.eq(0), self.more.eq(1),
                        self.kc.eq(sel_j[0] * ag.kc_per_block), self.bank.eq(0),
                        self.count.eq(0)]

            def advance(self):
                """The tile finished: count it, step to the next one (or end)."""
                nxt = Signal(jb, name=f"{self.li.name}_next")
                m.d.comb += nxt.eq(self.li + 1)
                m.d.sync += [self.count.eq(self.count + 1), self.bank.eq(~self.bank)]
                with m.If(~pv & (self.cpos + bc < self.len)):
                    m.d.sync += [self.cpos.eq(self.cpos + bc), self.kc.eq(self.kc + 1)]
                with m.Elif(nxt < cnt):
                    m.d.sync += [self.li.eq(nxt), self.cpos.eq(0),
                                 self.kc.eq(sel_j[nxt] * ag.kc_per_block)]
                with m.Elif(pv & (self.cp + 1 < ag.n_cp)):
                    m.d.sync += [self.li.eq(0), self.cpos.eq(0), self.cp.eq(self.cp + 1),
                                 self.kc.eq(sel_j[0] * ag.kc_per_block)]
                with m.Else():
                    m.d.sync += self.more.eq(0)

        lw, xw = Walk("load"), Walk("ops")
        issued = Signal(16)
        in_tiles = Signal()                 # WAIT after tiles (else: the hop after LIST)
        done = Signal(16)

        # Loader: one weight row per cycle, written one cycle later (memory read latency), into
        # bank lw.bank once the lanes are done with the tile that bank held (two tiles back).
        ld_busy = Signal()
        l_row = Signal(range(max(dh, bk) + g + 1))
        l_gs = Signal(range(bk + g + 1))    # PV: start of the row's lane group in the block
        l_addr = Signal(uwidth(max(ag.kt_depth, ag.v_depth) + 1))
        w_valid, w_row, w_bank = Signal(), Signal(range(cfg.k_tile)), Signal()
        for a in range(n_arr):
            m.d.comb += [kt_rd[a].addr.eq(l_addr), v_rd[a].addr.eq(l_addr)]
            arr = arrays[a]
            m.d.comb += [arr.i_wrow.valid.eq(w_valid), arr.i_wrow.payload.bank.eq(w_bank),
                         arr.i_wrow.payload.row.eq(w_row),
                         arr.i_wrow.payload.w.eq(Mux(pv, v_rd[a].data, kt_rd[a].data))]
        load_last = Signal()
        m.d.comb += load_last.eq(Mux(pv, (l_row - l_gs == g - 1) & (l_gs + g >= lw.len),
                                     l_row == dh - 1))
        ld_go = Signal()
        m.d.comb += ld_go.eq((phase == TILES) & ~ld_busy & lw.more &
                             (lw.count - xw.count <= 1))
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
                lw.advance()

        # Lanes: per row, per lane group r, the low then the high nibble (Q / P are read a
        # cycle ahead), from bank xw.bank once the loader has finished that tile.
        x_busy = Signal()
        x_go = Signal()
        m.d.comb += x_go.eq((phase == TILES) & ~x_busy & xw.more & (lw.count != xw.count))
        cur_j, cur_len = xw.j, xw.len
        o_i = Signal(range(bq + 1))
        o_r = Signal(range(max(ag.rows_q, ag.kg_per_block) + 1))
        o_rg = Signal(range(bk + g + 1))    # PV: o_r * G
        o_h = Signal()
        r_last = Signal()
        m.d.comb += r_last.eq(Mux(pv, o_rg + g >= cur_len, o_r == ag.rows_q - 1))
        tok_ready = Signal()
        m.d.comb += tok_ready.eq(Cat(*[arr.i_token.ready for arr in arrays]).all())
        first_op = Signal()
        m.d.comb += first_op.eq((o_r == 0) & ~o_h)
        go = Signal()
        m.d.comb += go.eq(x_busy & (~first_op | tok_ready))
        kg_base = Signal(range(ag.n_kg + 1))
        m.d.comb += [q_rd.addr.eq((base_i + o_i) * ag.rows_q + o_r),
                     kg_base.eq(cur_j * ag.kg_per_block),
                     p_rd.addr.eq(o_i * ag.n_kg + kg_base + o_r)]
        for arr in arrays:
            tok = arr.i_token.payload
            m.d.comb += [
                arr.i_token.valid.eq(go & first_op),
                tok.mask.eq((1 << g) - 1),
                tok.meta.y_addr.eq(Mux(pv, ag.pv_base + o_i * ag.n_cp + xw.cp,
                                       o_i * ag.n_kc + xw.kc)),
                tok.meta.overwrite.eq(~pv | (xw.li == 0)),
                tok.meta.last.eq(o_i == rows - 1),
            ]
        with m.If(x_go):
            m.d.sync += [x_busy.eq(1), o_i.eq(0), o_r.eq(0), o_rg.eq(0), o_h.eq(0),
                         issued.eq(issued + 1)]
            with m.If(pv & (xw.cp == 0)):
                m.d.sync += self.count_pv.eq(self.count_pv + 1)
            with m.If(~pv & (xw.cpos == 0)):
                m.d.sync += self.count_qk.eq(self.count_qk + 1)
        op_v, op_h, op_close, op_pv, op_bank = Signal(), Signal(), Signal(), Signal(), Signal()
        op_r = Signal(geo.row_bits)
        m.d.sync += [op_v.eq(go), op_h.eq(o_h), op_r.eq(o_r), op_close.eq(o_h & r_last),
                     op_pv.eq(pv), op_bank.eq(xw.bank)]
        # Q: shift 0 / 4; p: the group's shift s / s + 4 (w = p << s, golden.softmax).
        op_shift = Signal(geo.op_shift_bits)
        m.d.comb += op_shift.eq(Mux(op_pv, p_rd.data.shift, 0) + Mux(op_h, 4, 0))
        for lane in range(g):
            qv, pval = q_rd.data[lane], p_rd.data.p[lane]
            # Q: unsigned low nibble, signed high nibble; p: two unsigned nibbles.
            nib = Mux(op_h, Mux(op_pv, pval[4:8], qv.as_signed() >> 4),
                      Mux(op_pv, pval[0:4], qv.as_unsigned()[0:4]))
            for arr in arrays:
                op = arr.i_op[lane]
                m.d.comb += [op.valid.eq(op_v), op.payload.nib.eq(nib),
                             op.payload.shift.eq(op_shift), op.payload.row.eq(op_r),
                             op.payload.rot.eq(0), op.payload.bank.eq(op_bank),
                             op.payload.close.eq(op_close)]
        m.d.comb += [nrm.o.ready.eq(1), smx.o_p.ready.eq(1), smx.o_sum.ready.eq(1)]

        # ----- softmax feeder: headers and logits (from the accumulators) -----
        # The accumulator read port has one cycle of latency and no enable: its address is the
        # key to offer next (the next one when this cycle's logit is taken), so the data in
        # front of the unit always belongs to the offered key, stalls included.
        f_on, f_have, f_hdr = Signal(), Signal(), Signal()
        f_row = Signal(range(bq + 1))
        f_li = Signal(jb)
        f_off = Signal(range(bk + 1))
        f_kc = Signal(range(ag.n_kc + 1))
        f_a = Signal(range(n_arr))
        f_col = Signal(range(mt))
        f_len = Signal(range(bk + 1))
        m.d.comb += f_len.eq(sel_len[f_li])
        take = Signal()
        m.d.comb += take.eq(f_have & smx.i_logit.ready)
        blk_end = Signal()
        row_end = Signal()
        m.d.comb += [blk_end.eq(f_off + 1 == f_len), row_end.eq(blk_end & (f_li + 1 == cnt))]
        nx_kc = Signal.like(f_kc)
        with m.If(blk_end):
            m.d.comb += nx_kc.eq(sel_j[f_li + 1] * ag.kc_per_block)
        with m.Elif((f_col == mt - 1) & (f_a == n_arr - 1)):
            m.d.comb += nx_kc.eq(f_kc + 1)
        with m.Else():
            m.d.comb += nx_kc.eq(f_kc)
        kc0 = Signal.like(f_kc)
        m.d.comb += kc0.eq(sel_j[0] * ag.kc_per_block)
        feed_addr = Signal(uwidth(geo.y_depth))
        m.d.comb += feed_addr.eq(Mux(take,
                                     Mux(row_end, (f_row + 1) * ag.n_kc + kc0,
                                         f_row * ag.n_kc + nx_kc),
                                     f_row * ag.n_kc + f_kc))
        with m.If(take):
            with m.If(row_end):
                m.d.sync += [f_row.eq(f_row + 1), f_li.eq(0), f_off.eq(0), f_kc.eq(kc0),
                             f_a.eq(0), f_col.eq(0), f_hdr.eq(f_row + 1 != rows)]
                with m.If(f_row + 1 == rows):
                    m.d.sync += f_on.eq(0)
            with m.Elif(blk_end):
                m.d.sync += [f_li.eq(f_li + 1), f_off.eq(0), f_kc.eq(nx_kc), f_a.eq(0),
                             f_col.eq(0)]
            with m.Else():
                m.d.sync += [f_off.eq(f_off + 1), f_kc.eq(nx_kc),
                             f_col.eq(Mux(f_col == mt - 1, 0, f_col + 1))]
                with m.If(f_col == mt - 1):
                    m.d.sync += f_a.eq(Mux(f_a == n_arr - 1, 0, f_a + 1))
        m.d.sync += f_have.eq(f_on & ~(take & row_end & (f_row + 1 == rows)))
        with m.If(smx.i_row.valid & smx.i_row.ready):
            m.d.sync += f_hdr.eq(0)
        y_rows = [data.View(data.ArrayLayout(signed(geo.acc_bits), mt), arr.host_y_rdata)
                  for arr in arrays]
        m.d.comb += [ms_rd.addr.eq(base_i + f_row),
                     smx.i_row.valid.eq(f_hdr),
                     smx.i_row.payload.m.eq(ms_rd.data.m), smx.i_row.payload.sh.eq(ms_rd.data.sh),
                     smx.i_row.payload.n.eq(n_valid),
                     smx.i_logit.valid.eq(f_have),
                     smx.i_logit.payload.s.eq(Array(y[f_col] for y in y_rows)[f_a])]

        # ----- softmax outputs: P words, block sums b, (r, L) per row, block masses M -----
        # p arrive in key order over the selected blocks (whole lane groups, as block_k is a
        # multiple of G, so the unit's groups are the key-index groups): a group's word is
        # written with its last p (zeros past a ragged end) and the group's shift, which every
        # p of the group carries. b sums the applied weights p << shift.
        # b has two banks by row parity: the next row's p arrive while the divider still works
        # on this row's (r, L); a bank is consumed and cleared with its row's o_sum beat.
        p_row = Signal(range(bq + 1))
        p_li = Signal(jb)
        p_off = Signal(range(bk + 1))
        p_kg = Signal(range(ag.n_kg + 1))
        p_lane = Signal(range(g))
        pbuf = Signal(u8g)
        b_sum = [[Signal(ag.b_bits, name=f"b{k}_{j}") for j in range(nkb)] for k in range(2)]
        mass = [Signal(ag.mass_bits, name=f"mass{j}") for j in range(nkb)]
        r_row = Array(Signal(RECIP_BITS + 1, name=f"r_row{i}") for i in range(bq))
        big_l_row = Array(Signal(smx.o_sum.payload.big_l.shape(), name=f"L_row{i}")
                          for i in range(bq))
        s_row = Signal(range(bq + 1))
        pj = Signal(jb)
        p_len = Signal(range(bk + 1))
        m.d.comb += [pj.eq(sel_j[p_li]), p_len.eq(sel_len[p_li])]
        pval = smx.o_p.payload.p
        wval = Signal(ag.b_bits)
        m.d.comb += wval.eq(pval << smx.o_p.payload.shift)
        p_blk_end = Signal()
        m.d.comb += p_blk_end.eq(p_off + 1 == p_len)
        pword = Signal(p_word_layout(cfg))
        m.d.comb += pword.shift.eq(smx.o_p.payload.shift)
        for lane in range(g):
            m.d.comb += pword.p[lane].eq(Mux(p_lane == lane, pval, pbuf[lane]))
        m.d.comb += [p_wr.addr.eq(p_row * ag.n_kg + p_kg), p_wr.data.eq(pword),
                     p_wr.en.eq(smx.o_p.valid & ((p_lane == g - 1) | p_blk_end))]
        with m.If(smx.o_p.valid):
            m.d.sync += pbuf[p_lane].eq(pval)
            with m.If((p_lane == g - 1) | p_blk_end):
                m.d.sync += pbuf.eq(0)
            for j in range(nkb):
                with m.If(pj == j):
                    with m.If(p_row[0]):
                        m.d.sync += b_sum[1][j].eq(b_sum[1][j] + wval)
                    with m.Else():
                        m.d.sync += b_sum[0][j].eq(b_sum[0][j] + wval)
            with m.If(smx.o_p.payload.last):
                m.d.sync += [p_row.eq(p_row + 1), p_li.eq(0), p_off.eq(0),
                             p_kg.eq(sel_j[0] * ag.kg_per_block), p_lane.eq(0)]
            with m.Elif(p_blk_end):
                m.d.sync += [p_li.eq(p_li + 1), p_off.eq(0),
                             p_kg.eq(sel_j[p_li + 1] * ag.kg_per_block), p_lane.eq(0)]
            with m.Else():
                m.d.sync += [p_off.eq(p_off + 1), p_lane.eq(Mux(p_lane == g - 1, 0, p_lane + 1))]
                with m.If(p_lane == g - 1):
                    m.d.sync += p_kg.eq(p_kg + 1)
        rsum, lsum = smx.o_sum.payload.r, smx.o_sum.payload.big_l
        with m.If(smx.o_sum.valid):
            m.d.sync += [s_row.eq(s_row + 1), r_row[s_row].eq(rsum), big_l_row[s_row].eq(lsum)]
            for k in range(2):
                with m.If(s_row[0] == k):
                    for j in range(nkb):
                        # q = (b * r) >> L, the row's share of block j (16-bit, truncating).
                        share = (b_sum[k][j] * rsum) >> lsum
                        m.d.sync += b_sum[k][j].eq(0)
                        with m.If(full):
                            m.d.sync += mass[j].eq(mass[j] + share[:16])

        # ----- SEL: the mask of block I from M -----
        chosen = Signal(nkb)
        sc_j = Signal(jb)
        sc_first = Signal()                 # no candidate yet in this scan
        sc_best = Signal(jb)
        sc_bm = Signal(ag.mass_bits)
        c_acc = Signal(ag.total_bits)
        t_acc = Signal(ag.total_bits)
        pick0 = Signal()                    # the first scan (also sums T)
        commit = Signal()                   # the cycle after a scan
        mass_a = Array(mass)
        m_j = Signal(ag.mass_bits)
        m.d.comb += m_j.eq(mass_a[sc_j])
        m.d.comb += [k_wr.addr.eq(slot * ag.nqb + qb), k_wr.data.eq(chosen)]
        c_new = Signal(ag.total_bits)
        m.d.comb += c_new.eq(c_acc + sc_bm)
        reached = Signal()
        m.d.comb += reached.eq((c_new << THETA_BITS) >= theta * t_acc)

        # ----- NORM: accumulators -> Normalizer -> output / residual -----
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
        norm_addr = Signal(uwidth(geo.y_depth))
        m.d.comb += norm_addr.eq(ag.pv_base + n_i * ag.n_cp + n_cp)
        for arr in arrays:
            m.d.comb += arr.host_y_addr.eq(Mux(phase == NORM, norm_addr, feed_addr))
        m.d.sync += [v1.eq(n_on), i1.eq(n_i), a1.eq(n_a), col1.eq(n_col), oa1.eq(n_oaddr),
                     v2.eq(v1), oa2.eq(oa1), oa3.eq(oa2)]
        m.d.comb += [nrm.i.valid.eq(v1),
                     nrm.i.payload.acc.eq(Array(y[col1] for y in y_rows)[a1]),
                     nrm.i.payload.r.eq(r_row[i1]), nrm.i.payload.big_l.eq(big_l_row[i1])]
        res_base = Signal(uwidth(ag.res_depth + 1))
        m.d.comb += res_base.eq(slot * (ag.n_max * dh))
        o_new = nrm.o.payload.o
        # The host reads O and R through the engine's read ports while no run is on (a second,
        # host-only port would double the residual cache, the engine's largest memory).
        m.d.comb += [o_rd.addr.eq(Mux(run, oa2, self.host_o_addr)),
                     r_rd.addr.eq(Mux(run, res_base + oa2, self.host_res_addr)),
                     o_wr.addr.eq(oa3), r_wr.addr.eq(res_base + oa3),
                     o_wr.en.eq(nrm.o.valid & (full | ~key)),
                     o_wr.data.eq(Mux(full, o_new, o_new + r_rd.data)),
                     r_wr.en.eq(nrm.o.valid & masked & key),
                     r_wr.data.eq(o_rd.data - o_new)]
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

        # ----- sequencer -----
        def start_list():
            return [phase.eq(LIST), ls_j.eq(0), ls_start.eq(0), cnt.eq(0), n_valid.eq(0)]

        def start_tiles(is_pv):
            return [phase.eq(TILES), pv.eq(is_pv), in_tiles.eq(1), ld_busy.eq(0),
                    x_busy.eq(0), lw.start(), xw.start()]

        def start_smax():
            return [phase.eq(SMAX), f_on.eq(1), f_hdr.eq(1), f_row.eq(0), f_li.eq(0),
                    f_off.eq(0), f_kc.eq(kc0), f_a.eq(0), f_col.eq(0),
                    p_row.eq(0), p_li.eq(0), p_off.eq(0), p_lane.eq(0), pbuf.eq(0),
                    p_kg.eq(sel_j[0] * ag.kg_per_block), s_row.eq(0),
                    [mass[j].eq(Mux(full, 0, mass[j])) for j in range(nkb)]]

        def start_norm():
            return [phase.eq(NORM), n_on.eq(1), n_i.eq(0), n_d.eq(0), n_cp.eq(0), n_a.eq(0),
                    n_col.eq(0), n_oaddr.eq(base_i * dh)]

        with m.If(run):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        with m.If(self.clear & ~run):
            for s in range(cfg.attn_slots):
                m.d.sync += [s_valid[s].eq(0), s_phase[s].eq(0)]

        with m.If(phase == IDLE):
            # A step of no tokens, or of more than the memories hold, is ignored.
            with m.If(self.start & ~run & (self.n_tokens != 0) & (self.n_tokens <= ag.n_max)):
                ph = s_phase[self.slot]
                is_key = ~s_valid[self.slot] | ((self.refresh != 0) & (ph == 0))
                m.d.sync += [run.eq(1), key.eq(is_key), masked.eq(~is_key),
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

        with m.If(go):
            m.d.sync += o_h.eq(~o_h)
            with m.If(o_h):
                m.d.sync += [o_r.eq(o_r + 1), o_rg.eq(o_rg + g)]
                with m.If(r_last):
                    m.d.sync += [o_r.eq(0), o_rg.eq(0), o_i.eq(o_i + 1)]
                    with m.If(o_i == rows - 1):
                        m.d.sync += x_busy.eq(0)
                        xw.advance()
                        # The last tile: wait for its reductions.
                        with m.If(~pv & (xw.cpos + bc >= xw.len) & (xw.li + 1 >= cnt) |
                                  pv & (xw.li + 1 >= cnt) & (xw.cp + 1 >= ag.n_cp)):
                            m.d.sync += phase.eq(WAIT)

        # WAIT: the reductions of every issued tile are written (or the hop after LIST).
        tiles_done = Signal()
        m.d.comb += tiles_done.eq(done == issued)
        with m.If(arrays[0].o_pass_done):
            m.d.sync += done.eq(done + 1)
        with m.If(phase == WAIT):
            with m.If(~in_tiles):
                with m.If(masked & key):
                    m.d.sync += start_smax()    # the logits of the full pass are kept
                with m.Else():
                    m.d.sync += start_tiles(0)
            with m.Elif(tiles_done):
                m.d.sync += in_tiles.eq(0)
                with m.If(pv):
                    m.d.sync += start_norm()
                with m.Else():
                    m.d.sync += start_smax()

        with m.If(phase == SMAX):
            with m.If((s_row == rows) & ~f_on):
                with m.If(full):
                    m.d.sync += [phase.eq(SEL), chosen.eq(0), sc_j.eq(0), sc_first.eq(1),
                                 c_acc.eq(0), t_acc.eq(0), pick0.eq(1), commit.eq(0)]
                with m.Else():
                    m.d.sync += start_tiles(1)

        with m.If(phase == SEL):
            done_sel = Signal()
            with m.If(theta[THETA_BITS]):
                # theta = 1: every block, also those of zero mass.
                m.d.comb += done_sel.eq(1)
                m.d.comb += k_wr.data.eq((1 << nkb) - 1)
            with m.Elif(commit):
                m.d.sync += [commit.eq(0), pick0.eq(0), c_acc.eq(c_new), sc_j.eq(0),
                             sc_first.eq(1), chosen.eq(chosen | (1 << sc_best))]
                m.d.comb += [done_sel.eq(reached), k_wr.data.eq(chosen | (1 << sc_best))]
            with m.Else():
                m.d.sync += sc_j.eq(sc_j + 1)
                with m.If(pick0):
                    m.d.sync += t_acc.eq(t_acc + m_j)
                with m.If(~chosen.bit_select(sc_j, 1) & (sc_first | (m_j > sc_bm))):
                    m.d.sync += [sc_best.eq(sc_j), sc_bm.eq(m_j), sc_first.eq(0)]
                with m.If(sc_j == cnt - 1):
                    m.d.sync += commit.eq(1)
            m.d.comb += k_wr.en.eq(done_sel)
            with m.If(done_sel):
                m.d.sync += start_tiles(1)

        with m.If(phase == NORM):
            with m.If(~n_on & ~v1 & ~v2 & ~nrm.o.valid):
                with m.If(full & key):
                    m.d.sync += [masked.eq(1), start_list()]
                with m.Elif(base_i + bq >= n_tok):
                    m.d.sync += [phase.eq(IDLE), run.eq(0)]
                with m.Else():
                    m.d.sync += [qb.eq(qb + 1), base_i.eq(base_i + bq), masked.eq(~key),
                                 start_list()]
        return m
