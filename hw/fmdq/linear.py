"""The FMDQ differential linear layer: target and state sub-channels streamed in (the new state
streamed out), the quantization unit, a group memory, the SIMD-4 PE arrays and their ``Y``
memories (spec 7.2 and 7.4, issue 28).

Golden twin: ``dstar.golden.fmdq_pe.linear_step``; exact cycles: ``dstar.sim.fmdq_cycles``
(``linear_cycles``); sizes and memory layouts: ``dstar.hw.fmdq.geometry.FmdqGeometry``.
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..geometry import COUNTER_BITS, uwidth
from .geometry import FmdqGeometry
from .layouts import slice_group_layout
from .pe_array import FmdqPEArray, issue_gap, lend_signature, must_wait
from .quant_unit import QuantUnit

__all__ = ["FmdqLinear", "sub_word_layout", "sub_pair_layout", "group_entry_layout"]

def sub_word_layout(geo: FmdqGeometry) -> data.ArrayLayout:
    """A target or state word: one sub-channel, ``tokens`` signed ``state_bits`` integers."""
    return data.ArrayLayout(signed(geo.cfg.state_bits), geo.tokens)


def sub_pair_layout(geo: FmdqGeometry) -> data.StructLayout:
    """A beat of the encode phase's input: one sub-channel's target and old state (target in
    the low bits)."""
    return data.StructLayout({"target": sub_word_layout(geo), "state": sub_word_layout(geo)})


def group_entry_layout(geo: FmdqGeometry) -> data.StructLayout:
    """A group memory entry: the quantization unit's group and its unit's ``tile`` and
    ``window`` (indices)."""
    return data.StructLayout({
        "group": slice_group_layout(geo.tokens, geo.channel_bits, geo.cfg.e_max),
        "tile": unsigned(uwidth(geo.n_tiles_max)),
        "window": unsigned(uwidth(geo.n_win_max)),
    })


class FmdqLinear(wiring.Component):
    """One step of an FMDQ differential linear layer (``encoding = "fmdq"``)::

        D = X - (0 if key else Xs);   Xs' = (0 if key else Xs) + decode(fmdq(D))
        Y' = (0 if key else Y) + W_q^T . decode(fmdq(D))

    exactly as ``golden.fmdq_pe.linear_step`` (``golden.fmdq.fmdq_encode``'s lossless rule,
    round half up, INT8 saturation of saturated sub-channels; ``Y`` and the state are exact
    integers, the caller keeps them within ``y_bits`` / ``state_bits`` as the golden model's
    invariants do).

    A run (``start`` while idle; ``n_tokens`` rows, ``n_k`` = K channels, ``n_mt`` column
    blocks of ``m_tile * n_arrays`` columns, ``key`` and the weights' first word ``w_base``,
    captured at ``start``; nothing runs if any count is zero) runs its sort windows (``W =
    sort_window`` channels each) through two phases, *encode* and *replay*, which overlap: the
    group memory has two banks (``FmdqGeometry.bank_depth`` entries each), and the windows that
    issue a group take them in turn, so window ``j + 1`` is encoded into one while window ``j``
    replays from the other.

    1. *Encode*, one window at a time: the window's sub-channels come in on ``i_sub``, a beat
       each (``sub_pair_layout``: the target and the old state of one channel over one token
       tile), token tiles outer, channels inner (over the run: ``FmdqGeometry.beats``,
       ``n_tiles x n_k`` beats). Tokens past ``n_tokens`` in the last tile are taken as 0, and
       so is the state on a key step. Each beat's new state goes out on ``o_state``, in the
       same order. The quantization unit (``QuantUnit``) takes a beat per cycle; its groups
       (with their unit's tile and window) go to the window's bank, which holds one window's
       units (tiles in order; empty units skipped but for each tile's first window). The
       encode ends once the unit has given every update and group (it is idle again); a window
       that issued a group is then *handed* to the replay. The next window's encode
       (``i_sub.ready``) starts the next cycle if its bank is free (the window handed two
       before it has had its last group accepted), else two cycles after that group's
       acceptance. With a beat offered on ``i_sub`` whenever it is ready and ``o_state``
       always ready, each encode takes the unit's own cycles from idle
       (``dstar.sim.fmdq_qu_cycles.predict``); a gap on ``i_sub`` or back-pressure on
       ``o_state`` only stalls it (no beat is lost or repeated).
       ``i_sub.ready`` is a function of registers alone (a skid entry holds one beat taken
       while the unit stalls), and is low while no window is being encoded (waiting for a
       bank, or after the last window).
    2. *Replay*, the handed windows in order, each as soon as it is handed and the previous
       window's last group has been accepted: each column block is a *pass*: the window's rows
       (``min(W, K - j W)``) are loaded, one per cycle, from the weight memory into the
       arrays' double-buffered weight window (pass ``p`` of the run into bank ``p % 2`` once
       pass ``p - 2``'s last group is accepted: the loader runs ahead into the next handed
       window's first pass), and the window's groups are replayed from its bank into every
       array (``FmdqPEArray``; a group reaches the arrays two cycles after its window is
       handed, through the bank's read register and a second register), a pass's first group
       once its rows are written. A unit adds its
       sum into ``Y`` rows ``(tile * T + t) * n_mt_max + mt``, or overwrites them in the first
       window of a key step. A window's bank is free once its last group is accepted.

    ``busy`` falls when every window is encoded and the last unit of the last block is
    written into ``Y``; ``cycles`` then holds the cycles ``busy`` was high
    (``dstar.sim.fmdq_cycles.linear_cycles``), ``stall_load`` the cycles a fetched group waited
    for its pass's weights, ``count_groups`` / ``count_units`` the groups and units the
    quantization unit issued, ``count_clipped`` / ``count_saturated`` the clipped and
    saturated sub-channels (all cleared by ``start``).

    Host ports (flat vectors, for cocotb; memory layouts in ``FmdqGeometry``): the weights by
    ``host_w_addr``, a whole row of a column block per word (array ``a``'s ``m_tile`` weights
    at element ``a * m_tile``) written into the arrays ``host_w_we`` selects; ``Y`` by
    ``host_y_addr`` (read one cycle later; ``host_y_we`` writes a whole row of a column block,
    array ``a``'s at element ``a * m_tile``); only while ``busy`` is low. Reset stops a run;
    the memories keep their contents.

    With ``shared`` (the lent arrays' ``FmdqPEArray`` parameters: ``AcceleratorGeometry.
    array_args``, the arrays the attention engine also runs on) the layer owns no PE arrays: it
    drives the ``pe`` members (``hw.fmdq.pe_array.lend_signature`` of them) that the owner
    (``dstar.hw.accelerator.Accelerator``) lends it, and has no ``host_y_*`` ports (the owner
    reads and writes ``Y`` through the arrays' own).
    """

    def __init__(self, cfg, *, shared: dict | None = None):
        self._geo = geo = FmdqGeometry(cfg)
        self._shared = shared is not None
        y_row = data.ArrayLayout(signed(geo.y_bits), geo.columns).size
        host_y = {
            "host_y_addr": In(uwidth(geo.y_depth)),
            "host_y_rdata": Out(y_row).array(cfg.n_arrays),
            "host_y_we": In(1),
            "host_y_wdata": In(y_row * cfg.n_arrays),
        }
        if shared is not None:
            host_y = {"pe": Out(lend_signature(shared)).array(cfg.n_arrays)}
        super().__init__({
            "start": In(1),
            "key": In(1),
            "n_tokens": In(uwidth(cfg.max_tokens + 1)),
            "n_k": In(uwidth(cfg.max_k + 1)),
            "n_mt": In(uwidth(geo.n_mt_max + 1)),
            "w_base": In(uwidth(geo.weight_depth)),
            "busy": Out(1),
            "cycles": Out(COUNTER_BITS),
            "stall_load": Out(COUNTER_BITS),
            "count_groups": Out(COUNTER_BITS),
            "count_units": Out(COUNTER_BITS),
            "count_clipped": Out(COUNTER_BITS),
            "count_saturated": Out(COUNTER_BITS),
            "i_sub": In(stream.Signature(sub_pair_layout(geo))),
            "o_state": Out(stream.Signature(sub_word_layout(geo))),
            "host_w_addr": In(uwidth(geo.weight_depth)),
            "host_w_we": In(cfg.n_arrays),
            "host_w_wdata": In(8 * geo.block_cols),
            **host_y,
        })

    @property
    def geometry(self) -> FmdqGeometry:
        return self._geo

    def layouts(self) -> dict:
        """The memory-word and payload layouts a testbench needs (``params.json``
        ``layouts``)."""
        geo = self._geo
        return {"sub_word": sub_word_layout(geo),
                "weight_row": data.ArrayLayout(signed(8), geo.columns),
                "y_row": data.ArrayLayout(signed(geo.y_bits), geo.columns),
                "group_entry": group_entry_layout(geo)}

    def quant_unit(self) -> QuantUnit:
        geo, cfg = self._geo, self._geo.cfg
        return QuantUnit(tokens=geo.tokens, window=geo.window, e_max=cfg.e_max, tau=cfg.tau,
                         diff_bits=geo.diff_bits, channel_bits=geo.channel_bits)

    def elaborate(self, platform):
        geo, cfg = self._geo, self._geo.cfg
        m = Module()
        m.submodules.qu = qu = self.quant_unit()
        arrays = []
        for a in range(0 if self._shared else cfg.n_arrays):
            arr = FmdqPEArray(tokens=geo.tokens, columns=geo.columns, window=geo.window,
                              e_max=cfg.e_max, channel_bits=geo.channel_bits,
                              y_depth=geo.y_depth, y_bits=geo.y_bits, y_stride=geo.n_mt_max,
                              host_writes=True)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)
            y_row = len(self.host_y_rdata[a])
            m.d.comb += [arr.host_y_addr.eq(self.host_y_addr),
                         self.host_y_rdata[a].eq(arr.host_y_rdata),
                         arr.host_y_we.eq(self.host_y_we),
                         arr.host_y_wdata.eq(self.host_y_wdata.word_select(a, y_row))]
        if self._shared:
            arrays = list(self.pe)
        # Two banks of one window's groups: bank ``b`` at entries ``b * bank_depth`` on.
        m.submodules.groups = gmem = Memory(shape=group_entry_layout(geo),
                                            depth=geo.group_depth, init=[])

        running = Signal()
        run = {"key": Signal(), "n_tokens": Signal.like(self.n_tokens),
               "n_k": Signal.like(self.n_k), "n_mt": Signal.like(self.n_mt),
               "w_base": Signal.like(self.w_base)}
        restart = self.start & ~running
        empty = (self.n_tokens == 0) | (self.n_k == 0) | (self.n_mt == 0)
        # The windows that issued a group, in order, pass through the two banks: ``handed``
        # of them are encoded, ``replayed`` have had their last group accepted.
        n_win = uwidth(geo.n_win_max + 1)
        banks = {"handed": Signal(n_win), "replayed": Signal(n_win),
                 "groups": [Signal(uwidth(geo.bank_depth + 1)) for _ in range(2)],
                 "c0": [Signal(geo.channel_bits + 1) for _ in range(2)]}
        enc_idle, drained = Signal(), Signal()
        with m.If(restart):
            m.d.sync += [run[k].eq(getattr(self, k)) for k in run]
            m.d.sync += [running.eq(~empty), self.cycles.eq(0), self.stall_load.eq(0),
                         banks["handed"].eq(0), banks["replayed"].eq(0)]
        with m.Elif(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            with m.If(enc_idle & (banks["replayed"] == banks["handed"]) & drained):
                m.d.sync += running.eq(0)
        m.d.comb += [self.busy.eq(running), qu.clear.eq(restart),
                     self.count_clipped.eq(qu.count_clipped),
                     self.count_saturated.eq(qu.count_saturated)]

        self._encode(m, qu, gmem, run, banks, restart, empty, enc_idle)
        self._replay(m, arrays, gmem, run, banks, restart, drained)
        return m

    def _encode(self, m, qu, gmem, run, banks, restart, empty, enc_idle):
        """The encoder: window after window, the feeder, the new state out and the group
        collector into the bank of the ``handed``-th window; a window's encode starts once the
        previous one's is done and its bank is free (``handed < replayed + 2``)."""
        geo, cfg = self._geo, self._geo.cfg
        T, W = geo.tokens, geo.window
        sub_l = sub_word_layout(geo)
        # ``in_enc``: a window is being encoded; ``waiting``: the next one waits for its bank.
        in_enc, waiting = Signal(), Signal()
        m.d.comb += enc_idle.eq(~in_enc & ~waiting)

        # --- feeder: (window c0, tile, channel k), one ``i_sub`` beat per accepted beat ---
        c0, k = Signal(geo.channel_bits + 1), Signal(geo.channel_bits + 1)
        tile, tok0 = Signal(uwidth(geo.n_tiles_max)), Signal(uwidth(cfg.max_tokens + T))
        f_more = Signal()                       # beats left to take
        r_valid, r_last, r_k = Signal(), Signal(), Signal.like(k)
        r_tile = Signal.like(tile)
        r_win = Signal(uwidth(geo.n_win_max))
        beat, accept = qu.i.payload, Signal()
        # ``D`` and the old state are computed before the beat's register, so the quantization
        # unit's max extraction starts from flip-flops (the Fmax path).
        r_d, r_old = Signal.like(beat.d[0]), Signal(sub_l)
        m.submodules.pending = pend = SyncFIFO(
            width=len(r_tile) + len(r_win) + sub_l.size, depth=4)
        advance = ~r_valid | accept
        # The window's end channel, registered as the window moves (not an adder and a compare
        # on the feeder's path into ``k``: the Fmax path).
        w_end = Signal.like(k)
        last_k, last_tile = k + 1 == w_end, tok0 + T >= run["n_tokens"]
        take = Signal()
        # A skid entry (``k_*``): a beat taken while the beat register cannot advance waits in
        # it, so ``i_sub.ready`` is a register and the quantization unit's ready does not run
        # through the top's ``din`` into the feeder's counters (the Fmax path). The unit sees
        # the same beats in the same cycles.
        k_valid, k_last = Signal(name="k_valid"), Signal(name="k_last")
        k_k = Signal.like(k, name="k_k")
        k_tile, k_win = Signal.like(r_tile, name="k_tile"), Signal.like(r_win, name="k_win")
        k_d, k_old = Signal.like(r_d, name="k_d"), Signal.like(r_old, name="k_old")
        m.d.comb += [
            self.i_sub.ready.eq(in_enc & f_more & ~k_valid),
            take.eq(self.i_sub.valid & self.i_sub.ready),
            qu.i.valid.eq(r_valid & pend.w_rdy),
            accept.eq(qu.i.valid & qu.i.ready),
            beat.channel.eq(r_k), beat.last.eq(r_last),
        ]
        sub = self.i_sub.payload
        n_tok = Signal(range(T + 1))            # the tile's tokens, the rest taken as 0
        m.d.comb += [n_tok.eq(Mux(last_tile, run["n_tokens"] - tok0, T)), beat.d[0].eq(r_d)]
        # What a taken beat registers: its place, ``D`` and the old state.
        b_d, b_old = Signal.like(r_d), Signal.like(r_old)
        for t in range(T):
            s_t = Mux(run["key"], 0, sub.state[t])
            m.d.comb += [b_old[t].eq(s_t), b_d[t].eq(Mux(t < n_tok, sub.target[t] - s_t, 0))]
        beat_in = [(r_last, k_last, last_k), (r_k, k_k, k), (r_tile, k_tile, tile),
                   (r_win, k_win, c0[W.bit_length() - 1:]), (r_d, k_d, b_d), (r_old, k_old, b_old)]
        with m.If(in_enc & advance):
            with m.If(k_valid):
                m.d.sync += [r_valid.eq(1), k_valid.eq(0), *[r.eq(kk) for r, kk, _ in beat_in]]
            with m.Else():
                m.d.sync += [r_valid.eq(take), *[r.eq(b) for r, _, b in beat_in]]
        with m.Elif(take):
            m.d.sync += [k_valid.eq(1), *[kk.eq(b) for _, kk, b in beat_in]]
        with m.If(take):
            m.d.sync += k.eq(k + 1)
            with m.If(last_k):
                m.d.sync += [k.eq(c0), tile.eq(tile + 1), tok0.eq(tok0 + T)]
                with m.If(last_tile):
                    m.d.sync += [tile.eq(0), tok0.eq(0), f_more.eq(0)]
        m.d.comb += [pend.w_en.eq(accept), pend.w_data.eq(Cat(r_tile, r_win, r_old))]

        # --- new state out: Xs' = old + q << p, one update per beat, in beat order ---
        u = qu.u.payload
        p_tile, p_win, p_old = Signal.like(r_tile), Signal.like(r_win), Signal(sub_l)
        m.d.comb += Cat(p_tile, p_win, p_old).eq(pend.r_data)
        fire = Signal()
        m.submodules.tags = tags = SyncFIFO(width=len(p_tile) + len(p_win),
                                            depth=qu.buffers + 1)
        # ``o_state.valid`` does not wait for its ready: ``tags.w_rdy`` cannot fall before
        # ``fire`` (only ``fire`` writes the tags).
        m.d.comb += [self.o_state.valid.eq(qu.u.valid & tags.w_rdy),
                     qu.u.ready.eq(tags.w_rdy & self.o_state.ready),
                     fire.eq(qu.u.valid & qu.u.ready), pend.r_en.eq(fire)]
        for t in range(T):
            m.d.comb += self.o_state.payload[t].eq(p_old[t] + (u.sub[0].q[t] << u.sub[0].shift))
        # A unit issues groups iff one of its sub-channels is not empty or it is a tile's first
        # window (``QuantUnit``'s contract): its tag is queued as its last update leaves.
        live = Signal()
        issues = live | (u.sub[0].width != 0) | (p_win == 0)
        with m.If(fire):
            m.d.sync += live.eq(Mux(u.last, 0, live | (u.sub[0].width != 0)))
        m.d.comb += [tags.w_en.eq(fire & u.last & issues), tags.w_data.eq(Cat(p_tile, p_win))]
        with m.If(restart):
            m.d.sync += live.eq(0)

        # --- the window's end: its bank handed to the replay, the next window's start ---
        n_groups = self._collect(m, qu, gmem, tags, banks, restart)
        enc_done = Signal()
        m.d.comb += enc_done.eq(in_enc & ~f_more & ~r_valid & ~k_valid & ~pend.r_rdy
                                & ~tags.r_rdy)
        issued = n_groups != 0
        handed = banks["handed"] + issued          # after this window's hand-over
        free = handed < banks["replayed"] + 2      # the next window's bank
        more = c0 + W < run["n_k"]
        with m.If(enc_done):
            m.d.sync += [n_groups.eq(0), in_enc.eq(0), c0.eq(c0 + W),
                         w_end.eq(Mux(c0 + 2 * W < run["n_k"], c0 + 2 * W, run["n_k"]))]
            with m.If(issued):
                for b in range(2):
                    with m.If(banks["handed"][0] == b):
                        m.d.sync += [banks["groups"][b].eq(n_groups), banks["c0"][b].eq(c0)]
                m.d.sync += banks["handed"].eq(handed)
            with m.If(more & free):
                m.d.sync += [in_enc.eq(1), k.eq(c0 + W), f_more.eq(1)]
            with m.Elif(more):
                m.d.sync += waiting.eq(1)
        with m.If(waiting & free):
            m.d.sync += [waiting.eq(0), in_enc.eq(1), k.eq(c0), f_more.eq(1)]
        with m.If(restart):
            m.d.sync += [c0.eq(0), k.eq(0), tile.eq(0), tok0.eq(0), f_more.eq(1),
                         w_end.eq(Mux(self.n_k > W, W, self.n_k)),
                         r_valid.eq(0), k_valid.eq(0), in_enc.eq(~empty), waiting.eq(0),
                         n_groups.eq(0)]

    def _collect(self, m, qu, gmem, tags, banks, restart):
        """The window's groups into its bank of the group memory with their tags. Returns the
        window's group count."""
        geo = self._geo
        g_wr = gmem.write_port()
        n_groups = Signal(uwidth(geo.bank_depth + 1))
        o = qu.o.payload
        got = qu.o.valid
        m.d.comb += [qu.o.ready.eq(1), g_wr.en.eq(got),
                     g_wr.addr.eq(Mux(banks["handed"][0], geo.bank_depth, 0) + n_groups),
                     g_wr.data.group.eq(o),
                     g_wr.data.tile.eq(tags.r_data[:len(g_wr.data.tile)]),
                     g_wr.data.window.eq(tags.r_data[len(g_wr.data.tile):]),
                     tags.r_en.eq(got & o.last)]
        with m.If(got):
            m.d.sync += [n_groups.eq(n_groups + 1), self.count_groups.eq(self.count_groups + 1)]
            with m.If(o.last):
                m.d.sync += self.count_units.eq(self.count_units + 1)
        with m.If(restart):
            m.d.sync += [self.count_groups.eq(0), self.count_units.eq(0)]
        return n_groups

    def _replay(self, m, arrays, gmem, run, banks, restart, drained):
        """The replay: the handed windows in order, per column block a *pass*, its weight rows
        loaded into the arrays' window (the loader runs ahead, into the next window) and the
        window's groups replayed from its bank into every array; a bank is free again once its
        window's last group is accepted."""
        geo, cfg = self._geo, self._geo.cfg
        T, W = geo.tokens, geo.window
        # --- loader: pass l_p (block l_mt of the l_win-th window) into bank l_p % 2 ---
        l_p, d_p = Signal(32), Signal(32)
        l_win = Signal.like(banks["handed"])
        l_c0 = Mux(l_win[0], banks["c0"][1], banks["c0"][0])
        l_mt = Signal.like(run["n_mt"])
        l_base = Signal(uwidth(geo.weight_depth + cfg.max_k))
        l_row, l_active = Signal(range(W)), Signal()
        left = Signal.like(l_c0)
        m.d.comb += left.eq(run["n_k"] - l_c0)
        rows = Mux(left >= W, W, left)
        w_valid, w_row, w_bank = Signal(), Signal.like(l_row), Signal()
        w_addr = Signal(uwidth(geo.weight_depth))
        m.d.comb += w_addr.eq(l_base + l_c0 + l_row)
        for a, arr in enumerate(arrays):
            wm = Memory(shape=data.ArrayLayout(signed(8), geo.columns),
                        depth=geo.weight_depth, init=[])
            m.submodules[f"weights_{a}"] = wm
            wr, rd = wm.write_port(), wm.read_port()
            m.d.comb += [wr.en.eq(self.host_w_we[a]), wr.addr.eq(self.host_w_addr),
                         wr.data.eq(self.host_w_wdata.word_select(a, 8 * geo.columns)),
                         rd.addr.eq(w_addr),
                         arr.i_wrow.valid.eq(w_valid), arr.i_wrow.payload.bank.eq(w_bank),
                         arr.i_wrow.payload.row.eq(w_row), arr.i_wrow.payload.w.eq(rd.data)]
        m.d.sync += [w_valid.eq(l_active), w_row.eq(l_row), w_bank.eq(l_p[0])]
        with m.If(l_active):
            m.d.sync += l_row.eq(l_row + 1)
            with m.If(l_row == rows - 1):
                m.d.sync += [l_active.eq(0), l_p.eq(l_p + 1), l_row.eq(0), l_mt.eq(l_mt + 1),
                             l_base.eq(l_base + run["n_k"])]
                with m.If(l_mt + 1 == run["n_mt"]):
                    m.d.sync += [l_mt.eq(0), l_base.eq(run["w_base"]), l_win.eq(l_win + 1)]
        with m.Elif((l_win < banks["handed"]) & (l_p < d_p + 2)):
            m.d.sync += l_active.eq(1)

        # --- replayer: the f_win-th window's groups, block after block, into every array ---
        rd = gmem.read_port()
        f_win = Signal.like(banks["handed"])
        f_groups = Mux(f_win[0], banks["groups"][1], banks["groups"][0])
        a_ptr = Signal.like(f_groups)
        f_mt, f_p = Signal.like(l_mt), Signal(32)
        r_valid, r_p, r_lastp, r_lastw = Signal(), Signal(32), Signal(), Signal()
        r_mt = Signal.like(l_mt)
        # Stage S: the read entry and its fields copied into flip-flops, so the arrays' op (and
        # their ready, which depends on it) starts from registers, not from the block RAM's
        # output (the Fmax path); R (the read port's register) refills while S waits.
        s_valid, s_p, s_lastp, s_lastw = Signal(), Signal(32), Signal(), Signal()
        s_mt = Signal.like(l_mt)
        s_ent = Signal.like(rd.data)
        # S's pass has all its rows written (its number below the loader's ``l_p`` of the
        # cycle before, as a row is written the cycle after the loader passes it), registered
        # from S's next pass (``r_p`` when S advances): the 32-bit comparison is not on the
        # way into the stages' enables (the Fmax path).
        s_ok = Signal()
        ok, accept = Signal(), Signal()
        # The arrays take the group as they would decide it (``must_wait``, ``o_hold``), from
        # stage S and the arrays' issue state, not back through their ready from the op
        # multiplexer an owner puts in front of shared arrays (the Fmax path).
        arr0 = arrays[0]
        wait = must_wait(arr0.o_fresh, issue_gap(m, arr0.o_sprev, s_ent.group.shift, "replay"))
        m.d.comb += [ok.eq(s_valid & s_ok),
                     accept.eq(ok & ~wait & ~(s_ent.group.last & arr0.o_hold))]
        s_adv = ~s_valid | accept
        advance = ~r_valid | s_adv
        m.d.sync += s_ok.eq(Mux(s_adv, r_p < l_p, s_p < l_p))
        with m.If(s_adv):
            m.d.sync += [s_valid.eq(r_valid), s_p.eq(r_p), s_lastp.eq(r_lastp),
                         s_lastw.eq(r_lastw), s_mt.eq(r_mt), s_ent.eq(rd.data)]
        m.d.comb += [rd.addr.eq(Mux(f_win[0], geo.bank_depth, 0) + a_ptr), rd.en.eq(advance)]
        live = f_win < banks["handed"]
        end_pass, end_win = a_ptr + 1 == f_groups, f_mt + 1 == run["n_mt"]
        with m.If(advance):
            m.d.sync += [r_valid.eq(live), r_p.eq(f_p), r_lastp.eq(end_pass),
                         r_lastw.eq(end_pass & end_win), r_mt.eq(f_mt)]
            with m.If(live):
                m.d.sync += a_ptr.eq(a_ptr + 1)
                with m.If(end_pass):
                    m.d.sync += [a_ptr.eq(0), f_p.eq(f_p + 1), f_mt.eq(f_mt + 1)]
                    with m.If(end_win):
                        m.d.sync += [f_mt.eq(0), f_win.eq(f_win + 1)]
        ent = s_ent
        tok0 = Signal(uwidth(cfg.max_tokens + T))
        m.d.comb += tok0.eq(ent.tile * T)
        n_tok = Signal(range(T + 1))
        m.d.comb += n_tok.eq(Mux(run["n_tokens"] - tok0 >= T, T, run["n_tokens"] - tok0))
        for arr in arrays:
            op = arr.i_op.payload
            m.d.comb += [arr.i_op.valid.eq(ok), op.group.eq(ent.group), op.bank.eq(s_p[0]),
                         op.y_addr.eq(tok0 * geo.n_mt_max + s_mt), op.n_tok.eq(n_tok),
                         op.overwrite.eq(run["key"] & (ent.window == 0))]
            if self._shared:            # the attention's fields of the shared arrays' ops
                m.d.comb += [op.y_step.eq(geo.n_mt_max), op.tok_shift.eq(0)]
        u_iss, u_done = Signal(32), Signal(32)
        with m.If(accept):
            with m.If(s_lastp):
                m.d.sync += d_p.eq(d_p + 1)
            with m.If(s_lastw):
                m.d.sync += banks["replayed"].eq(banks["replayed"] + 1)
            with m.If(ent.group.last):
                m.d.sync += u_iss.eq(u_iss + 1)
        with m.If(arrays[0].o_unit_done):
            m.d.sync += u_done.eq(u_done + 1)
        with m.If(s_valid & ~s_ok):
            m.d.sync += self.stall_load.eq(self.stall_load + 1)
        m.d.comb += drained.eq(u_done == u_iss)
        with m.If(restart):
            m.d.sync += [l_p.eq(0), d_p.eq(0), l_win.eq(0), l_mt.eq(0), l_base.eq(self.w_base),
                         l_row.eq(0), l_active.eq(0), a_ptr.eq(0), f_win.eq(0), f_mt.eq(0),
                         f_p.eq(0), r_valid.eq(0), s_valid.eq(0), u_iss.eq(0), u_done.eq(0)]
