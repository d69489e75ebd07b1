"""The accelerator top: the differential linear datapath and the attention engine on shared PE
arrays, driven by a command stream, with data streams in and out.

Ref: dstar-spec.md section 5 (the top level and its command stream); the command set and the
sizes are ``dstar.hw.accelerator_geometry``'s (``AcceleratorGeometry``, ``Opcode``, ``Mem``),
stated in the manifest.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from dstar.config import Config

from .accelerator_geometry import COUNTERS, FMDQ_COUNTERS, AcceleratorGeometry, Mem, Opcode
from .attention import AttentionEngine
from .fmdq.linear import FmdqLinear
from .fmdq.pe_array import FmdqPEArray
from .geometry import COUNTER_BITS, AttentionGeometry
from .linear import LinearLayer
from .pe_array import PEArray

__all__ = ["Accelerator", "AcceleratorGeometry", "Opcode", "Mem", "COUNTERS", "FMDQ_COUNTERS"]


# Command-processor states (plain comparisons, no m.FSM: see hw.softmax on Icarus).
_IDLE, _LOAD, _READ, _START, _RUN, _COUNT = range(6)
#: Depth of the ``dout`` queue of ``READ``: reads are issued only into free entries, so a
#: stalled ``dout`` loses nothing and a ready one takes a word per cycle.
_OUT_DEPTH = 4


class Accelerator(wiring.Component):
    """DSTAR: ``LinearLayer`` and ``AttentionEngine`` on one set of ``n_arrays`` PE arrays
    (``AttentionGeometry(cfg, shared=True).lin``), behind a command processor.

    Members
    -------
    cmd : In(stream.Signature(AcceleratorGeometry(cfg).command))
        Commands (``Opcode``), taken one at a time: ``cmd.ready`` is high only while no
        command is being executed. A command whose opcode is unknown or whose arguments are
        out of range (a memory that cannot be loaded or read, an address range beyond its
        depth, ``count`` 0, ``n_tokens`` outside
        ``1 .. max_tokens``, tiles beyond ``n_kt_max`` / ``n_mt_max``, weights beyond the
        weight memory: ``w_base + n_kt * n_mt * k_tile > depth``, ``slot >= attn_slots``)
        is not executed: it sets ``error`` and counts in ``errors``.
    din : In(stream.Signature(AcceleratorGeometry(cfg).data_bits))
        The words of a ``LOAD``, one per beat (taken only during a ``LOAD``); with ``encoding =
        "fmdq"`` also a ``RUN_LINEAR``'s sub-channel beats (target and old state,
        ``sub_pair_layout``), taken while the run's encode phase wants them.
    dout : Out(stream.Signature(AcceleratorGeometry(cfg).data_bits))
        The words of a ``READ`` or ``READ_COUNTERS``, one per beat; with ``encoding = "fmdq"``
        also a ``RUN_LINEAR``'s new state, a sub-channel per beat. Back-pressure holds them
        (and stalls the run that makes them).
    busy : Out(1)
        A command is being executed.
    done : Out(1)
        One-cycle pulse when a ``RUN_LINEAR`` or ``RUN_ATTENTION`` has finished.
    error : Out(1)
        A command was refused since reset or the last ``ACK_ERROR``.
    key : Out(1)
        The last attention step was an attention key step (SAR: a cache step).

    A run's parameters are captured when its command is taken. Memories keep their contents
    across commands and reset; reset forgets the attention slots' step counters, like the
    engine's reset. Latency: a command is taken in the cycle it is offered while idle; a
    ``LOAD`` takes a beat per cycle; a ``READ`` issues a read per cycle while ``dout`` has room
    (its first word one cycle after the command is taken, plus a cycle for ``dout``'s queue);
    runs take the cycles of ``dstar.sim.cycle_model`` / ``dstar.sim.attention_cycles`` plus two
    (start, done). Results are those of the blocks, exact.

    With ``attention = "sar"`` the engine runs the paper's SAR (``AttentionEngine``'s
    docstring): its memories are ``SC`` and ``RL`` (the score cache, loaded and read like a
    slot's state) instead of ``RES`` (refused, not in ``depths``), ``MASK`` is the host's, a
    ``RUN_ATTENTION`` that is a reuse step reads only ``V`` (and the slot's cache), and ``key``
    shows a cache step.
    """

    def __init__(self, cfg: Config):
        self._cfg = cfg
        self._geo = ageo = AcceleratorGeometry(cfg)
        # The arrays this top owns, lent to one block at a time (their geometry is its).
        self._lin = (FmdqLinear(cfg, shared=ageo.array_args) if ageo.fmdq
                     else LinearLayer(cfg, shared=ageo.arrays))
        self._att = AttentionEngine(cfg, shared=True)
        w = ageo.data_bits
        super().__init__({
            "cmd": In(stream.Signature(ageo.command)),
            "din": In(stream.Signature(w)),
            "dout": Out(stream.Signature(w)),
            "busy": Out(1),
            "done": Out(1),
            "error": Out(1),
            "key": Out(1),
        })

    @property
    def config(self) -> Config:
        return self._cfg

    @property
    def geometry(self) -> AcceleratorGeometry:
        return self._geo

    def layouts(self) -> dict:
        """The command word's and every memory word's layout (``AcceleratorGeometry.layouts``)."""
        return self._geo.layouts()

    @property
    def linear_geometry(self):
        """The linear datapath's geometry (``Geometry``: that of the shared PE arrays; with
        ``encoding = "fmdq"`` ``FmdqGeometry``)."""
        return self._lin.geometry

    @property
    def attention_geometry(self) -> AttentionGeometry:
        return self._att.geometry

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.linear = lin = self._lin
        m.submodules.attention = att = self._att
        geo = self._geo.arrays                      # the v1 arrays' (attention's, shared)
        cl = self._geo.command
        cmd = self.cmd.payload
        # The state shared by the parts: the command processor's state, the captured
        # arguments of the command being executed, the top's own counters.
        st = SimpleNamespace(
            lin=lin, att=att, geo=geo, mode_att=Signal(), state=Signal(range(6)),
            mem=Signal(4), addr=Signal.like(cmd.args.mem.addr),
            left=Signal.like(cmd.args.mem.count),
            l_args=Signal(cl.members["args"].members["linear"]),
            a_args=Signal(cl.members["args"].members["attention"]), is_att=Signal(),
            counters={n: Signal(COUNTER_BITS, name=f"count_{n}") for n in COUNTERS[:3]},
            arrays=[], out_empty=Signal())
        for a in range(cfg.n_arrays):
            if self._geo.fmdq:      # the SIMD-4 arrays, with the attention's options
                arr = FmdqPEArray(**self._geo.array_args)
            else:
                arr = PEArray(geo, host_writes=True)
            m.submodules[f"array_{a}"] = arr
            _share(m, arr, [lin.pe[a], att.pe[a]], st.mode_att, ISSUE_STATE)
            st.arrays.append(arr)
        m.d.comb += [self.busy.eq(st.state != _IDLE), self.key.eq(att.key)]
        self._commands(m, st)
        self._runs(m, st)
        self._loads(m, st)
        self._reads(m, st)
        return m

    def _command_ok(self, m, st) -> Signal:
        """Whether the offered command may be executed (the class docstring's rules)."""
        cfg, geo, depths = self._cfg, st.geo, self._geo.depths
        cmd = self.cmd.payload
        op, ma, la, aa = cmd.op, cmd.args.mem, cmd.args.linear, cmd.args.attention
        ok, in_range = Signal(), Signal()
        with m.Switch(ma.mem):
            for mm in (mm for mm in Mem if mm.name in depths):     # the others are refused
                with m.Case(mm):
                    m.d.comb += in_range.eq((ma.count != 0)
                                            & (ma.addr + ma.count <= depths[mm.name]))
        with m.Switch(op):
            with m.Case(Opcode.LOAD):
                m.d.comb += ok.eq(in_range & _member_of(ma.mem, self._geo.writable))
            with m.Case(Opcode.READ):
                m.d.comb += ok.eq(in_range & _member_of(ma.mem, self._geo.readable))
            with m.Case(Opcode.RUN_LINEAR):
                if self._geo.fmdq:
                    fg = self._geo.linear
                    span = la.n_k * la.n_mt                 # the run's weight words
                    m.d.comb += ok.eq((la.n_tokens >= 1) & (la.n_tokens <= cfg.max_tokens)
                                      & (la.n_k <= cfg.max_k) & (la.n_mt <= fg.n_mt_max)
                                      & (la.w_base + span <= fg.weight_depth))
                else:
                    span = la.n_kt * la.n_mt * cfg.k_tile   # the run's weight words
                    m.d.comb += ok.eq((la.n_tokens >= 1) & (la.n_tokens <= cfg.max_tokens)
                                      & (la.n_kt <= geo.n_kt_max) & (la.n_mt <= geo.n_mt_max)
                                      & (la.w_base + span <= geo.weight_depth))
            with m.Case(Opcode.RUN_ATTENTION):
                m.d.comb += ok.eq((aa.n_tokens >= 1) & (aa.n_tokens <= cfg.max_tokens)
                                  & (aa.slot < cfg.attn_slots))
            with m.Case(Opcode.NOP, Opcode.CLEAR_SLOTS, Opcode.READ_COUNTERS, Opcode.ACK_ERROR):
                m.d.comb += ok.eq(1)
        return ok

    def _commands(self, m, st) -> None:
        """Taking a command: checked, counted, its arguments captured, its state entered."""
        cmd = self.cmd.payload
        op, ma = cmd.op, cmd.args.mem
        ok = self._command_ok(m, st)
        cnt = st.counters
        take = Signal()
        m.d.comb += [self.cmd.ready.eq(st.state == _IDLE),
                     take.eq(self.cmd.valid & self.cmd.ready)]
        with m.If(take):
            m.d.sync += cnt["commands"].eq(cnt["commands"] + 1)
            with m.If(~ok):
                m.d.sync += [self.error.eq(1), cnt["errors"].eq(cnt["errors"] + 1)]
            with m.Else():
                m.d.sync += [st.mem.eq(ma.mem), st.addr.eq(ma.addr), st.left.eq(ma.count)]
                with m.Switch(op):
                    with m.Case(Opcode.LOAD):
                        m.d.sync += st.state.eq(_LOAD)
                    with m.Case(Opcode.READ):
                        m.d.sync += [st.state.eq(_READ), st.mode_att.eq(0)]
                    with m.Case(Opcode.RUN_LINEAR):
                        m.d.sync += [st.state.eq(_START), st.l_args.eq(cmd.args.linear),
                                     st.is_att.eq(0), st.mode_att.eq(0)]
                    with m.Case(Opcode.RUN_ATTENTION):
                        m.d.sync += [st.state.eq(_START), st.a_args.eq(cmd.args.attention),
                                     st.is_att.eq(1), st.mode_att.eq(1)]
                    with m.Case(Opcode.READ_COUNTERS):
                        m.d.sync += [st.state.eq(_COUNT), st.left.eq(len(self._geo.counters)),
                                     st.addr.eq(0)]
                    with m.Case(Opcode.ACK_ERROR):
                        m.d.sync += self.error.eq(0)
        m.d.comb += st.att.clear.eq(take & ok & (op == Opcode.CLEAR_SLOTS))

    def _runs(self, m, st) -> None:
        """A run: its block started from the captured arguments, ``done`` when it is idle."""
        lin, att, la, aa = st.lin, st.att, st.l_args, st.a_args
        start = st.state == _START
        for name in la.shape().members:                  # the linear top's run arguments
            m.d.comb += getattr(lin, name).eq(getattr(la, name))
        m.d.comb += [att.slot.eq(aa.slot), att.n_tokens.eq(aa.n_tokens),
                     att.theta_q.eq(aa.theta_q), att.refresh.eq(aa.refresh),
                     lin.start.eq(start & ~st.is_att), att.start.eq(start & st.is_att)]
        with m.If(start):
            m.d.sync += st.state.eq(_RUN)
        idle = ~Mux(st.is_att, att.busy, lin.busy)
        if self._geo.fmdq:        # and the run's last new state has left through dout
            idle = idle & (st.is_att | st.out_empty)
        with m.If((st.state == _RUN) & idle):
            m.d.sync += st.state.eq(_IDLE)
            m.d.comb += self.done.eq(1)

    def _loads(self, m, st) -> None:
        """``LOAD``: a ``din`` beat a cycle into the memory's host write port (targets
        clipped and counted; the arrays' words split among the arrays)."""
        cfg, lin, att, mem, addr = self._cfg, st.lin, st.att, st.mem, st.addr
        beat = Signal()
        m.d.comb += beat.eq(self.din.valid & (st.state == _LOAD))
        words = self._geo.words
        d = self.din.payload
        t_lay = words[Mem.TARGET.name]
        clipped = Signal(t_lay)
        n_clip = []
        tmax = cfg.target_max
        for i, t in enumerate(data.View(t_lay, d[:t_lay.size])):
            hi, lo = t > tmax, t < -tmax
            m.d.comb += clipped[i].eq(Mux(hi, tmax, Mux(lo, -tmax, t)))
            n_clip.append(hi | lo)
        clip_count = Signal(range(len(n_clip) + 1))
        m.d.comb += clip_count.eq(sum(c.as_unsigned() for c in n_clip))
        c_clip = st.counters["target_clipped"]
        fmdq = self._geo.fmdq
        if fmdq:
            # RUN_LINEAR's sub-channel beats: the target (clipped) in the low bits, the state
            # above it, straight into FmdqLinear's input while it runs.
            run_lin = (st.state == _RUN) & ~st.is_att
            m.d.comb += [self.din.ready.eq((st.state == _LOAD) | (run_lin & lin.i_sub.ready)),
                         lin.i_sub.valid.eq(self.din.valid & run_lin),
                         lin.i_sub.payload.target.eq(clipped),
                         lin.i_sub.payload.state.eq(d[t_lay.size:2 * t_lay.size])]
            clip_beat = (beat & (mem == Mem.TARGET)) | (lin.i_sub.valid & lin.i_sub.ready)
        else:
            m.d.comb += [self.din.ready.eq(st.state == _LOAD),
                         lin.host_target_we.eq(beat & (mem == Mem.TARGET)),
                         lin.host_target_wdata.eq(clipped),
                         lin.host_row_addr.eq(addr),
                         lin.host_state_we.eq(beat & (mem == Mem.STATE)),
                         lin.host_state_wdata.eq(d[:Shape.cast(words["STATE"]).width])]
            clip_beat = beat & (mem == Mem.TARGET)
        with m.If(clip_beat):
            m.d.sync += c_clip.eq(c_clip + clip_count)
        every = Const((1 << cfg.n_arrays) - 1, cfg.n_arrays)

        def word(name):
            return d[:Shape.cast(words[name]).width]

        m.d.comb += [
            lin.host_w_we.eq(Mux(beat & (mem == Mem.WEIGHTS), every, 0)),
            lin.host_w_wdata.eq(word("WEIGHTS")),
            lin.host_w_addr.eq(addr),
            att.host_addr.eq(addr),
            att.host_q_we.eq(beat & (mem == Mem.Q)),
            att.host_q_wdata.eq(word("Q")),
            att.host_k_we.eq(Mux(beat & (mem == Mem.KT), every, 0)),
            att.host_k_wdata.eq(word("KT")),
            att.host_v_we.eq(Mux(beat & (mem == Mem.V), every, 0)),
            att.host_v_wdata.eq(word("V")),
            att.host_ms_we.eq(beat & (mem == Mem.MS)),
            att.host_ms_wdata.eq(word("MS")),
            *([att.host_sc_we.eq(beat & (mem == Mem.SC)), att.host_sc_wdata.eq(word("SC")),
               att.host_rl_we.eq(beat & (mem == Mem.RL)), att.host_rl_wdata.eq(word("RL"))]
              if self._geo.attention.sar else
              [att.host_res_we.eq(beat & (mem == Mem.RES)),
               att.host_res_wdata.eq(word("RES"))]),
            att.host_mask_we.eq(beat & (mem == Mem.MASK)),
            att.host_mask_wdata.eq(word("MASK")),
            att.host_slot_we.eq(beat & (mem == Mem.SLOT)),
            att.host_slot_wdata.eq(word("SLOT")),
        ]
        y_row = Shape.cast(words["Y"]).width // cfg.n_arrays
        y_load = beat & (mem == Mem.Y)
        for a, arr in enumerate(st.arrays):       # a saved Y restored (the arrays' own port)
            m.d.comb += [arr.host_y_we.eq(y_load), arr.host_y_wdata.eq(d.word_select(a, y_row))]
            if not fmdq:                          # (FMDQ's arrays: host_y_addr, in _reads)
                m.d.comb += arr.host_y_waddr.eq(addr)
        with m.If(beat):
            m.d.sync += [addr.eq(addr + 1), st.left.eq(st.left - 1)]
            with m.If(st.left == 1):
                m.d.sync += st.state.eq(_IDLE)

    def _reads(self, m, st) -> None:
        """``READ`` and ``READ_COUNTERS``: words into the ``dout`` queue, a memory read issued
        only into a free entry (reads are one cycle late; the mask's and the slot counter's
        are delayed to match)."""
        lin, att, addr, left = st.lin, st.att, st.addr, st.left
        m.submodules.out_q = out_q = SyncFIFO(width=len(self.dout.payload), depth=_OUT_DEPTH)
        inflight, issue = Signal(), Signal()
        m.d.comb += issue.eq((st.state == _READ) & (left != 0)
                             & (out_q.level + inflight < _OUT_DEPTH))
        y_rd = [arr.host_y_rdata for arr in st.arrays]
        if self._geo.fmdq:
            m.d.comb += [arr.host_y_addr.eq(addr) for arr in st.arrays]
        else:
            m.d.comb += lin.host_y_addr.eq(addr)
            y_rd = [lin.host_y_rdata[a] for a in range(self._cfg.n_arrays)]
        sar = self._geo.attention.sar
        if sar:     # the score cache's row words are read the same cycle (delayed as MASK)
            rl_q = Signal.like(att.host_rl_rdata)
            m.d.comb += [att.host_o_addr.eq(addr), att.host_sc_addr.eq(addr),
                         att.host_rl_addr.eq(addr), att.host_mask_addr.eq(addr),
                         att.host_slot_addr.eq(addr)]
            m.d.sync += rl_q.eq(att.host_rl_rdata)
        else:
            m.d.comb += [att.host_o_addr.eq(addr), att.host_res_addr.eq(addr),
                         att.host_mask_addr.eq(addr), att.host_slot_addr.eq(addr)]
        mask_q = Signal.like(att.host_mask_rdata)
        slot_q = Signal.like(att.host_slot_rdata)
        r_mem = Signal.like(st.mem)
        m.d.sync += [inflight.eq(issue), mask_q.eq(att.host_mask_rdata),
                     slot_q.eq(att.host_slot_rdata), r_mem.eq(st.mem)]
        with m.If(issue):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
        rdata = Signal(len(self.dout.payload))
        with m.Switch(r_mem):
            if not self._geo.fmdq:
                with m.Case(Mem.STATE):
                    m.d.comb += rdata.eq(lin.host_state_rdata)
            with m.Case(Mem.Y):
                m.d.comb += rdata.eq(Cat(*y_rd))
            with m.Case(Mem.O):
                m.d.comb += rdata.eq(att.host_o_rdata.as_unsigned())
            if sar:
                with m.Case(Mem.SC):
                    m.d.comb += rdata.eq(att.host_sc_rdata)
                with m.Case(Mem.RL):
                    m.d.comb += rdata.eq(rl_q)
            else:
                with m.Case(Mem.RES):
                    m.d.comb += rdata.eq(att.host_res_rdata.as_unsigned())
            with m.Case(Mem.MASK):
                m.d.comb += rdata.eq(mask_q)
            with m.Case(Mem.SLOT):
                m.d.comb += rdata.eq(slot_q)

        c = st.counters
        if self._geo.fmdq:
            linear = [lin.cycles, lin.stall_load, lin.count_groups, lin.count_units,
                      lin.count_clipped, lin.count_saturated]
        else:
            linear = [lin.cycles, lin.stall_load, lin.count_low, lin.count_high, lin.count_zero,
                      lin.count_clipped, lin.count_saturated]
        values = [c["commands"], c["errors"], c["target_clipped"], *linear,
                  att.cycles, att.count_qk, att.count_pv, att.key]
        cval = Signal(COUNTER_BITS)
        with m.Switch(addr):
            for i, v in enumerate(values):
                with m.Case(i):
                    m.d.comb += cval.eq(v)
        push_count = Signal()
        m.d.comb += push_count.eq((st.state == _COUNT) & (left != 0) & out_q.w_rdy)
        with m.If(push_count):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1)]
        new_state = Const(0, 1)
        if self._geo.fmdq:        # a RUN_LINEAR's new state, in its beats' order
            new_state = Signal()
            m.d.comb += [st.out_empty.eq(~out_q.r_rdy),
                         lin.o_state.ready.eq(out_q.w_rdy & (st.state == _RUN) & ~st.is_att),
                         new_state.eq(lin.o_state.valid & lin.o_state.ready)]
        m.d.comb += [out_q.w_en.eq(inflight | push_count | new_state),
                     out_q.w_data.eq(Mux(inflight, rdata,
                                         Mux(push_count, cval,
                                             lin.o_state.payload.as_value()
                                             if self._geo.fmdq else 0))),
                     self.dout.valid.eq(out_q.r_rdy), self.dout.payload.eq(out_q.r_data),
                     out_q.r_en.eq(self.dout.ready)]
        with m.If(((st.state == _READ) | (st.state == _COUNT)) & (left == 0) & ~inflight):
            m.d.sync += st.state.eq(_IDLE)


#: The FMDQ arrays' issue state (``FmdqPEArray``: ``o_hold``, ``o_sprev``, ``o_fresh``): every
#: owner sees it unmuxed, so that an owner's acceptance, which decides from it, does not wait
#: on the owner select (it fans out to every op input of the arrays: the routed Fmax path). An
#: owner reads it only with its own group offered, so only while it holds the arrays.
ISSUE_STATE = ("o_hold", "o_sprev", "o_fresh")


def _member_of(value, members) -> "Signal":
    out = Const(0)
    for mm in members:
        out = out | (value == mm)
    return out


def _at(obj, path):
    for p in path:
        obj = obj[p] if isinstance(p, int) else getattr(obj, p)
    return obj


def _share(m, arr, owners, sel, shared=()) -> None:
    """Connect ``arr`` to the owner ``sel`` (an index) of ``owners``, interfaces of
    ``pe_array_signature(..., driver=True)``: the array's inputs come from that owner, its
    outputs reach that owner only (the others see zeros), but for the outputs named in
    ``shared``, which reach every owner as they are. Members the owners do not have (the
    accumulators' host write port) are left to the caller."""
    for path, member, value in arr.signature.flatten(arr):
        v = value.as_value() if isinstance(value, data.View) else value
        if not isinstance(v, Signal) or path[0] not in owners[0].signature.members:
            continue                    # constants (an always-ready stream's ready), own ports
        srcs = [_at(o, path) for o in owners]
        srcs = [s.as_value() if isinstance(s, data.View) else s for s in srcs]
        if member.flow == In:
            with m.Switch(sel):
                for i, s in enumerate(srcs):
                    with m.Case(i):
                        m.d.comb += v.eq(s)
        elif path[0] in shared:
            m.d.comb += [s.eq(v) for s in srcs]
        else:
            for i, s in enumerate(srcs):
                m.d.comb += s.eq(Mux(sel == i, v, 0))
