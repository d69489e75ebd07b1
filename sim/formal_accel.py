"""Formal properties of the accelerator top's command stream (``hw.accelerator``).

The whole ``Accelerator`` is too big for the SMT solver at depth 20 (a ``READ`` round trip
was at step 9 after eight minutes), so the properties are proved on ``CommandProcessor``:
the accelerator's own command, load, read and run-sequencing logic (its ``_commands``,
``_loads``, ``_reads``, ``_runs``, unchanged) with ``LinearLayer``, ``AttentionEngine`` and
the PE arrays abstracted into stubs (see its docstring: the readable memories with the blocks'
documented host-read latencies, runs of any length, no datapath). Proved on the stubs, the
properties hold for the accelerator as far as the blocks keep their host-port contracts.
dout stability: ``formal_streams.StreamHarness(CommandProcessor(cfg))`` (``finish`` free).

``ReadOrderHarness``: ``READ`` loses, duplicates and reorders no word, whatever ``dout.ready``
does. Commands are free (refused ones too) but for runs; ``din``, ``dout.ready`` and the
stubs' ``finish`` are free; the readable memories hold free constant words (``rom_bits``
wide, 1 by default: enough to tell any two positions apart, not to check a word's every bit,
which the simulation tests do). Following one symbolic ``dout`` position ``X``
(``AnyConst``): counting the words every executed ``READ`` / ``READ_COUNTERS`` owes, ``X``
belongs to one read of one address; when that is a ``READ``'s, the ``X``-th word taken from
``dout`` must be that memory word (zero-extended). A lost or repeated word shifts every later
position, so some choice of ``X`` and of the contents catches it. Also asserted: no more words
come out than were asked for.

``RefusalHarness``: a refused command changes no memory and no counter but ``errors`` (and
``commands``, which counts every command). Two copies get the same free command, ``din``,
``dout.ready`` and ``finish`` streams and the same memory contents, except that one command,
refused by the rules of the ``Accelerator`` docstring (restated here, independently of its
``_command_ok``), reaches copy ``a`` only: copy ``b`` sees an idle cycle instead. From then on
(the refusal's cycle included) every input of the datapath stubs is the same in both (no
memory write, no run, no slot clearing), and both behave alike: same ``busy``, ``cmd.ready``,
``din.ready``, ``done`` and ``dout`` (every word but the ``commands`` and ``errors`` words of
a ``READ_COUNTERS``, where ``a`` is one ahead of ``b``). Proved by k-induction: the harness
also asserts the two copies' state equal (but those two counters, the flag and their queued
words), which makes the property inductive.

Mutations: ``ReadOrderHarness(drop_ready=True)`` (the processor sees ``dout.ready`` high while
the consumer stalls: words lost); ``RefusalHarness(refused_writes=True)`` (copy ``a``
executes the refused command anyway, as a one-word ``LOAD`` of the state memory's last word:
what a ``LOAD`` running over the end would write first). Both fail within seconds.

``ReadOrderHarness(side="queue")`` checks the same order where the processor pushes words into
its ``dout`` queue (an ``amaranth.lib.fifo.SyncFIFO``, trusted to keep its order), and that it
never pushes into a full queue (so a stalled ``dout`` cannot make it drop a word); its mutant
``late_reads`` (the attention stub answers a cycle late) fails within seconds.

Status (smallest accelerator of ``tests/hw/test_formal.py``, loaded 2-core machine, yices):
the stream proof passes at depth 20 in 73 s (slow tier). ``ReadOrderHarness`` and
``RefusalHarness`` pass by k-induction with their invariants (``invariant``; k = 4, seconds;
docs/design/formal.md has the figures), ``READ`` order both at the queue side and at ``dout``
(there with the queue a ``RegisterFIFO``); plain bmc of them did not reach depth 20 but at
the queue side (351 s). ``OutQueueHarness`` (the ``dout`` queue, the real ``SyncFIFO`` as the
accelerator wires it, hands out every word pushed, once and in order, whatever ``dout.ready``
does, given that no word is pushed into a full queue: what the queue side proves) passes bmc
to depth 20 (slow tier). All covers and mutants are in the default tests.
"""

from types import SimpleNamespace
from unittest import mock

from amaranth import Cat, Const, Elaboratable, Module, Mux, Shape, Signal, Value
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory

from dstar.hw import accelerator as acc
from dstar.hw.accelerator import (
    _OUT_DEPTH,
    COUNTERS,
    Accelerator,
    AcceleratorGeometry,
    Mem,
    Opcode,
)
from dstar.hw.geometry import COUNTER_BITS, uwidth

from .formal import reset_first
from .formal_fifo import RegisterFIFO

__all__ = ["CommandProcessor", "OutQueueHarness", "ReadOrderHarness", "RefusalHarness",
           "command_valid", "drive_free"]


class _Stub(wiring.Component):
    """A datapath block reduced to its host memories: the signature of ``real`` (a
    ``LinearLayer``, ``FmdqLinear`` or ``AttentionEngine``, never elaborated), outputs 0 unless
    modelled. ``mems``: ``(name, width, depth, waddr, we, wdata, raddr, rdata, comb)`` by
    member name (``comb``: the read shows the word in the same cycle, else one cycle after the
    address); a write is taken only while idle. ``busy`` rises on ``start`` and falls in a
    cycle with ``finish`` high (a run of any length); every counter output counts the starts.
    ``FmdqLinear``'s run streams are free within its contract (``_streams``; ``free``: the
    free bits they take)."""

    def __init__(self, real, finish, mems, y_reads=(), rom=None, late=False, free=None):
        self._late = late
        self._finish = finish
        self._free = free
        self._mems = mems
        self._y_reads = y_reads
        self._rom = rom
        real._MustUse__silence = True
        super().__init__(real.signature)
        #: The runs started (every counter output shows it): a register harnesses can name.
        self.starts = Signal(COUNTER_BITS)

    def elaborate(self, platform):
        m = Module()
        finish = self._finish
        if "o_state" in self.signature.members:
            finish = self._streams(m)
        with m.If(self.start & ~self.busy):
            m.d.sync += self.busy.eq(1)
        with m.Elif(self.busy & finish):
            m.d.sync += self.busy.eq(0)
        starts = self.starts
        with m.If(self.start & ~self.busy):
            m.d.sync += starts.eq(starts + 1)
        for name, member in self.signature.members.items():
            if not member.is_signature and not member.dimensions and name != "busy" \
                    and member.flow == wiring.Out \
                    and len(Value.cast(getattr(self, name))) == COUNTER_BITS:
                m.d.comb += getattr(self, name).eq(starts)
        for name, width, depth, waddr, we, wdata, raddr, rdata, comb in self._mems:
            if self._rom is not None:           # fixed free contents, writes ignored
                word = _rom_read(self._rom[name], raddr)
                if comb:
                    m.d.comb += rdata.eq(word)
                elif self._late:                # the mutant: a cycle late
                    late = Signal.like(rdata)
                    m.d.sync += [late.eq(word), rdata.eq(late)]
                else:
                    m.d.sync += rdata.eq(word)
                continue
            mem = Memory(shape=width, depth=depth, init=[])
            m.submodules[name] = mem
            wr = mem.write_port()
            rd = mem.read_port(domain="comb") if comb else mem.read_port(transparent_for=())
            m.d.comb += [wr.en.eq(we & ~self.busy), wr.addr.eq(waddr), wr.data.eq(wdata),
                         rd.addr.eq(raddr)]
            if rdata is not None:
                m.d.comb += rdata.eq(rd.data)
        for y_addr, y_rdata, array in self._y_reads:
            m.d.comb += [array.host_y_addr.eq(y_addr), y_rdata.eq(array.host_y_rdata)]
        return m


    def _streams(self, m):
        """``FmdqLinear``'s run streams, free (``self._free``: ``i_sub.ready``, an offer on
        ``o_state``, its payload): ``i_sub`` taken in any cycles of a run, new-state beats
        offered in any cycles of a run and held until taken; the run ends (``busy`` falls)
        only with no beat offered, as ``FmdqLinear``'s does after its last new state. Returns
        the cycles in which a run may end."""
        free, out = self._free, self.o_state
        ending = Signal()
        m.d.comb += [ending.eq(self._finish & ~out.valid),
                     self.i_sub.ready.eq(self.busy & free[0])]
        with m.If(~out.valid | out.ready):
            m.d.sync += [out.valid.eq(self.busy & ~ending & free[1]),
                         out.payload.eq(free[2:])]
        return ending


def _rom_read(words, addr):
    out = words[0]
    for i, w in enumerate(words[1:], 1):
        out = Mux(addr == i, w, out)
    return out


class _ArrayStub(Elaboratable):
    """A PE array reduced to its accumulator memory (``y_depth`` words): written through
    ``host_y_we`` / ``host_y_waddr`` / ``host_y_wdata``, read one cycle after ``host_y_addr``
    (``PEArray``'s host ports; ``one_addr``: ``FmdqPEArray``'s, written at ``host_y_addr``)."""

    def __init__(self, width, depth, abits, rom=None, one_addr=False):
        self.width, self.depth, self._rom = width, depth, rom
        self._one_addr = one_addr
        self.host_y_we = Signal()
        self.host_y_waddr = Signal(abits)
        self.host_y_wdata = Signal(width)
        self.host_y_addr = Signal(abits)
        self.host_y_rdata = Signal(width)

    def elaborate(self, platform):
        m = Module()
        if self._rom is not None:
            m.d.sync += self.host_y_rdata.eq(_rom_read(self._rom, self.host_y_addr))
            return m
        m.submodules.y = mem = Memory(shape=self.width, depth=self.depth, init=[])
        wr, rd = mem.write_port(), mem.read_port(transparent_for=())
        waddr = self.host_y_addr if self._one_addr else self.host_y_waddr
        m.d.comb += [wr.en.eq(self.host_y_we), wr.addr.eq(waddr),
                     wr.data.eq(self.host_y_wdata), rd.addr.eq(self.host_y_addr),
                     self.host_y_rdata.eq(rd.data)]
        return m


class CommandProcessor(Accelerator):
    """``Accelerator(cfg)``'s command processor (its own ``_commands``, ``_runs``, ``_loads``
    and ``_reads``, unchanged) with the datapath abstracted: ``LinearLayer``,
    ``AttentionEngine`` and the PE arrays are replaced by stubs keeping only the memories a
    ``READ`` can return (STATE, Y, O, RES, MASK, SLOT: same depths and word widths, written
    through the same host ports, read with the blocks' documented host-read latencies: one
    cycle, MASK and SLOT in the same cycle), while runs take any number of cycles (``busy``
    falls when the free ``finish`` is high) and every counter of a block counts its runs.
    The write-only memories (TARGET, WEIGHTS, Q, KT, V, MS) are not modelled: what reaches
    their host ports is visible on the stubs' inputs. With ``rom`` the readable memories hold
    free constant words instead (``self.rom``; writes are ignored). What is proved on it holds
    for the accelerator as far as the blocks keep their documented host-port contracts (their own
    tests' business); runs, the PE-array sharing and the blocks' results are not covered.

    ``elaborate`` restates ``Accelerator.elaborate``'s shared state (the ``st`` namespace):
    keep the two in step."""

    def __init__(self, cfg, finish=None, *, rom: bool = False, rom_bits: int | None = None,
                 late_reads: bool = False, free=None):
        super().__init__(cfg)
        self.finish = Signal() if finish is None else finish
        geo = self._lin.geometry
        fmdq = self.geometry.fmdq
        words = {k: Shape.cast(v).width for k, v in self.geometry.words.items()}
        depths = self.geometry.depths
        real_lin, real_att = self._lin, self._att
        y_bits = words[Mem.Y.name] // cfg.n_arrays
        #: ``encoding = "fmdq"``: the free bits of ``FmdqLinear``'s run streams (``_Stub``'s
        #: ``_streams``), driven by the harness like ``finish`` (``drive_free``).
        self.free = None
        if fmdq:
            width = 2 + len(real_lin.o_state.payload.as_value())
            self.free = Signal(width, name="free") if free is None else free
        # The readable memories a READ returns from the stubs (FMDQ: no STATE, it streams).
        held = tuple(mm for mm in (Mem.STATE, Mem.O, Mem.RES, Mem.MASK, Mem.SLOT)
                     if depths.get(mm.name, 0) > 0)

        def contents(name, width):
            width = width if rom_bits is None else min(width, rom_bits)
            return [Signal(width, name=f"rom_{name}_{i}") for i in range(depths[name])]

        roms = None
        if rom:
            roms = {mm.name.lower(): contents(mm.name, words[mm.name]) for mm in held}
            y_roms = [contents(Mem.Y.name, y_bits) for _ in range(cfg.n_arrays)]
        self.arrays = [_ArrayStub(y_bits, geo.y_depth, uwidth(geo.y_depth),
                                  rom=y_roms[a] if rom else None, one_addr=fmdq)
                       for a in range(cfg.n_arrays)]
        #: With ``rom``: the readable memories' words (free, constant), by ``Mem``, as
        #: ``READ`` sends them (Y: every array's word, side by side); else ``None``.
        self.rom = None
        if rom:
            self.rom = {mm: roms[mm.name.lower()] for mm in held}
            self.rom[Mem.Y] = [Cat(*(Cat(y[i], Const(0, y_bits - len(y[i]))) for y in y_roms))
                               for i in range(geo.y_depth)]
            self._rom_words = [w for ws in (*roms.values(), *y_roms) for w in ws]
        lin = _Stub(real_lin, self.finish, [], rom=roms, free=self.free)
        att = _Stub(real_att, self.finish, [], rom=roms, late=late_reads)
        if not fmdq:        # FMDQ's state streams; its Y is read from the arrays directly
            lin._mems = [("state", words[Mem.STATE.name], depths[Mem.STATE.name],
                          lin.host_row_addr, lin.host_state_we, lin.host_state_wdata,
                          lin.host_row_addr, lin.host_state_rdata, False)]
            lin._y_reads = [(lin.host_y_addr, lin.host_y_rdata[a], arr)
                            for a, arr in enumerate(self.arrays)]
        att._mems = [
            ("o", words[Mem.O.name], depths[Mem.O.name], 0, 0, 0,
             att.host_o_addr, att.host_o_rdata, False),
            ("res", words[Mem.RES.name], depths[Mem.RES.name], att.host_addr,
             att.host_res_we, att.host_res_wdata, att.host_res_addr, att.host_res_rdata, False),
            ("mask", words[Mem.MASK.name], depths[Mem.MASK.name], att.host_addr,
             att.host_mask_we, att.host_mask_wdata, att.host_mask_addr, att.host_mask_rdata,
             True),
            ("slot", words[Mem.SLOT.name], depths[Mem.SLOT.name], att.host_addr,
             att.host_slot_we, att.host_slot_wdata, att.host_slot_addr, att.host_slot_rdata,
             True)]
        self._lin_geo = geo
        self._lin, self._att = lin, att

    @property
    def linear_geometry(self):
        return self._lin_geo

    @property
    def stubs(self):
        """The datapath stubs: ``(linear, attention, arrays)``."""
        return self._lin, self._att, self.arrays

    def elaborate(self, platform):
        m = Module()
        m.submodules.linear = lin = self._lin
        m.submodules.attention = att = self._att
        for a, arr in enumerate(self.arrays):
            m.submodules[f"array_{a}"] = arr
        geo = self._lin_geo
        cl = self.geometry.command
        cmd = self.cmd.payload
        st = SimpleNamespace(
            lin=lin, att=att, geo=geo, mode_att=Signal(), state=Signal(range(6)),
            mem=Signal(4), addr=Signal.like(cmd.args.mem.addr),
            left=Signal.like(cmd.args.mem.count),
            l_args=Signal(cl.members["args"].members["linear"]),
            a_args=Signal(cl.members["args"].members["attention"]), is_att=Signal(),
            counters={n: Signal(COUNTER_BITS, name=f"count_{n}") for n in COUNTERS[:3]},
            arrays=self.arrays, out_empty=Signal())
        m.d.comb += [self.busy.eq(st.state != acc._IDLE), self.key.eq(att.key)]
        if self.rom is not None:
            for w in self._rom_words:
                m.d.comb += w.eq(AnyConst(len(w)))
        self._commands(m, st)
        self._runs(m, st)
        self._loads(m, st)
        self._reads(m, st)
        #: For harnesses: the processor's state (``st``) and its ``dout`` queue.
        self.state, self.out_q = st, m.submodules.out_q
        return m

#: Memories that can be both loaded and read back.
_ROUND_TRIP = (Mem.STATE, Mem.Y, Mem.RES, Mem.MASK, Mem.SLOT)
_WRITABLE = (Mem.TARGET, Mem.STATE, Mem.WEIGHTS, Mem.Y, Mem.Q, Mem.KT, Mem.V, Mem.MS,
             Mem.RES, Mem.MASK, Mem.SLOT)
_READABLE = (Mem.STATE, Mem.Y, Mem.O, Mem.RES, Mem.MASK, Mem.SLOT)
_COUNT_BITS = 7


def drive_free(m, dut: "CommandProcessor") -> None:
    """Drive ``dut``'s free stub inputs (``finish``; with ``encoding = "fmdq"`` also ``free``,
    the linear run's streams) from ``AnySeq``: runs of any length, streams of any pattern."""
    m.d.comb += dut.finish.eq(AnySeq(1))
    if dut.free is not None:
        m.d.comb += dut.free.eq(AnySeq(len(dut.free)))


def _any_of(value, members):
    return Cat(*[value == x for x in members]).any()


def _in_range(cfg, ma):
    depths = AcceleratorGeometry(cfg).depths
    # A memory the configuration lacks (SAR's SC and RL in v1, RES in SAR) never fits.
    fits = [(ma.mem == mm) & (ma.addr + ma.count <= depths[mm.name]) for mm in Mem
            if mm.name in depths]
    return (ma.count != 0) & Cat(*fits).any()


def command_valid(dut: Accelerator, payload) -> Signal:
    """Whether a command is executable by the ``Accelerator`` docstring's rules, restated."""
    cfg = dut.config
    geo = dut.linear_geometry
    op, ma, la, aa = payload.op, payload.args.mem, payload.args.linear, payload.args.attention
    tokens = (la.n_tokens >= 1) & (la.n_tokens <= cfg.max_tokens)
    if dut.geometry.fmdq:       # K in channels, the run's n_mt blocks of K weight rows
        linear = (tokens & (la.n_k <= cfg.max_k) & (la.n_mt <= geo.n_mt_max)
                  & (la.w_base + la.n_k * la.n_mt <= geo.weight_depth))
    else:
        span = la.n_kt * la.n_mt * cfg.k_tile
        linear = (tokens & (la.n_kt <= geo.n_kt_max) & (la.n_mt <= geo.n_mt_max)
                  & (la.w_base + span <= geo.weight_depth))
    attention = (aa.n_tokens >= 1) & (aa.n_tokens <= cfg.max_tokens) & (aa.slot < cfg.attn_slots)
    return Mux(op == Opcode.LOAD, _in_range(cfg, ma) & _any_of(ma.mem, _WRITABLE),
           Mux(op == Opcode.READ, _in_range(cfg, ma) & _any_of(ma.mem, _READABLE),
           Mux(op == Opcode.RUN_LINEAR, linear,
           Mux(op == Opcode.RUN_ATTENTION, attention,
               _any_of(op, (Opcode.NOP, Opcode.CLEAR_SLOTS, Opcode.READ_COUNTERS,
                            Opcode.ACK_ERROR))))))


def _stub_inputs(dut: "CommandProcessor"):
    """Every input of ``dut``'s datapath stubs, as values."""
    lin, att, arrays = dut.stubs
    out = []
    for stub in (lin, att):
        for _path, member, value in stub.signature.flatten(stub):
            if member.flow == wiring.In:
                out.append(Value.cast(value))
    for arr in arrays:
        out += [arr.host_y_we, arr.host_y_waddr, arr.host_y_wdata, arr.host_y_addr]
    return out


def _word_mask(cfg, mem):
    """All-ones over the word of memory ``mem`` (a ``Value``), in a beat."""
    words = AcceleratorGeometry(cfg).words
    out = Const(0)
    for mm in _ROUND_TRIP:
        width = Shape.cast(words[mm.name]).width
        out = Mux(Value.cast(mem) == int(mm), (1 << width) - 1, out)
    return out


class ReadOrderHarness(Elaboratable):
    """``READ`` words come out once each, in order, whatever ``dout.ready`` does (the module
    docstring), on ``CommandProcessor(cfg, rom=True)``: the readable memories hold free
    constant words, so the ``X``-th word taken from ``dout`` must be the word of the read
    that owes position ``X``.

    ``side``: ``"dout"`` (the words taken from ``dout``) or ``"queue"`` (the words pushed into
    the ``dout`` queue; see the module docstring); ``ops``: if given, the only opcodes offered;
    ``rom_bits``: the width of the memories' free words; ``invariant``: also assert what
    makes the property inductive, so that ``mode="prove"`` proves it for every depth
    (``_queue_invariant``, on the processor's state, so the harness elaborates it itself; on
    the ``dout`` side the queue is then a ``RegisterFIFO`` and the invariant also says which
    word each queue entry holds). Mutants: ``drop_ready`` (the processor sees ``dout.ready``
    high while the consumer stalls), ``late_reads`` (see ``CommandProcessor``)."""

    def __init__(self, cfg, *, drop_ready: bool = False, ops=None, rom_bits: int | None = 1,
                 invariant: bool = True, side: str = "dout", late_reads: bool = False):
        if side not in ("dout", "queue"):
            raise ValueError(f"side must be dout or queue, got {side!r}")
        self.invariant = invariant
        self.side = side
        self.late_reads = late_reads
        self.cfg = cfg
        self.drop_ready = drop_ready
        self.ops = ops
        self.rom_bits = rom_bits

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        dut = CommandProcessor(cfg, rom=True, rom_bits=self.rom_bits,
                               late_reads=self.late_reads)
        dut._MustUse__silence = True
        if self.side == "dout" and self.invariant:
            # The dout queue as a RegisterFIFO, so that the invariant can name its words.
            with mock.patch.object(acc, "SyncFIFO", RegisterFIFO):
                m.submodules.dut = dut.elaborate(platform)
        else:
            m.submodules.dut = dut.elaborate(platform)    # now: its state, for the invariant
        reset_first(m)
        cmd, din, dout = dut.cmd, dut.din, dut.dout
        width = len(dout.payload)
        ready = Signal()
        m.d.comb += [cmd.valid.eq(AnySeq(1)), cmd.payload.eq(AnySeq(cmd.payload.shape().size)),
                     din.valid.eq(AnySeq(1)), din.payload.eq(AnySeq(width)),
                     ready.eq(AnySeq(1)), dout.ready.eq(1 if self.drop_ready else ready)]
        drive_free(m, dut)
        p = cmd.payload
        ma = p.args.mem
        # No runs (the stubs' runs would not change what a READ returns anyway).
        m.d.comb += Assume(~cmd.valid | ~_any_of(p.op, (Opcode.RUN_LINEAR,
                                                       Opcode.RUN_ATTENTION)))
        if self.ops is not None:
            m.d.comb += Assume(~cmd.valid | _any_of(p.op, self.ops))
        x = Signal(_COUNT_BITS)
        m.d.comb += x.eq(AnyConst(_COUNT_BITS))

        # Words owed on dout (by the executed READs and READ_COUNTERS), and the word owed at
        # position X.
        owed = Signal(_COUNT_BITS)
        out = Signal(_COUNT_BITS)
        expect, armed = Signal(width), Signal()
        take = cmd.valid & cmd.ready
        ok = command_valid(dut, p)
        n_counters = len(dut.geometry.counters)
        count = Mux(~ok, 0, Mux(p.op == Opcode.READ, ma.count,
                                Mux(p.op == Opcode.READ_COUNTERS, n_counters, 0)))
        # At most 2**_COUNT_BITS - 1 words owed in all (the position counters never wrap; a
        # bound on words, not on cycles: within 20 cycles it restricts nothing).
        m.d.comb += Assume(~take | (owed + count < 2 ** _COUNT_BITS))
        with m.If(take):
            m.d.sync += owed.eq(owed + count)
            with m.If(ok & (p.op == Opcode.READ) & (owed <= x) & (x < owed + count)):
                m.d.sync += [expect.eq(_rom_word(dut, ma.mem, ma.addr + (x - owed))),
                             armed.eq(1)]
        if self.side == "queue":
            # The words the processor pushes into its dout queue (an amaranth.lib.fifo
            # SyncFIFO, trusted to keep its order), never into a full one.
            q = dut.out_q
            pushed = Signal(_COUNT_BITS)
            push = q.w_en
            m.d.sync += pushed.eq(pushed + push)
            m.d.comb += [Assert(~push | q.w_rdy, "a word pushed into a full queue"),
                         Assert(~push | (pushed < owed), "a word nobody asked for")]
            with m.If(push & armed & (pushed == x)):
                m.d.comb += Assert(q.w_data == expect, "word lost, repeated or moved")
            if self.invariant:
                self._queue_invariant(m, dut, owed, pushed, x, expect, armed)
            stalled = Signal()
            m.d.sync += stalled.eq(stalled | (dout.valid & ~ready))
            m.d.comb += Cover(push & armed & (pushed == x) & stalled & (x > 0),
                              "a word queued at position X > 0 after a stall")
            return m
        taken = dout.valid & ready
        m.d.sync += out.eq(out + taken)
        m.d.comb += Assert(~taken | (out < owed), "a word nobody asked for")
        if self.invariant:
            # The queue side's invariant, the words pushed being those taken and those
            # queued; and the queue holds them in order: word X, once queued, is the one owed.
            q = dut.out_q
            pushed = Signal(_COUNT_BITS + 1)
            m.d.comb += [pushed.eq(out + q.level),
                         Assert(q.consistent(), "queue pointers and level disagree")]
            self._queue_invariant(m, dut, owed, pushed, x, expect, armed)
            for k, word in enumerate(q.words):
                off = Mux(q.consume <= k, k - q.consume, k + q.depth - q.consume)
                with m.If(armed & (off < q.level) & (out + off == x)):
                    m.d.comb += Assert(word == expect, "a queued word X not the one owed")
        with m.If(taken & armed & (out == x)):
            m.d.comb += Assert(dout.payload == expect, "word lost, repeated or moved")
        stalled = Signal()
        m.d.sync += stalled.eq(stalled | (dout.valid & ~ready))
        m.d.comb += Cover(taken & armed & (out == x) & stalled & (x > 0),
                          "a word read back at position X > 0 after a stall")
        return m


    @staticmethod
    def _queue_invariant(m, dut, owed, pushed, x, expect, armed):
        """What makes the queue side inductive (``mode="prove"``): no run is under way; a
        ``READ`` under way stays within its memory (``addr + left <= depth``); every
        word owed is pushed, being read (``inflight``: the read issued last cycle, pushed
        now) or still to be issued (``left`` of a ``READ`` / ``READ_COUNTERS``); and while
        the followed word ``X`` is owed by a ``READ`` but not yet pushed, that ``READ`` is the
        one being executed and ``X`` is the word of the address that the read of ``X`` gets:
        ``addr - inflight + (X - pushed)`` (modulo the address register's width)."""
        st, q = dut.state, dut.out_q
        reading = st.state == acc._READ
        inflight = q.w_en & reading
        left = Mux(reading | (st.state == acc._COUNT), st.left, 0)
        total = Signal(_COUNT_BITS + 2)
        depths = dut.geometry.depths
        fits = Cat(*[(st.mem == mm) & (st.addr + st.left <= depths[mm.name])
                     for mm in _READABLE if depths.get(mm.name, 0) > 0]).any()
        m.d.comb += [
            total.eq(pushed + inflight + left),
            Assert((st.state != acc._START) & (st.state != acc._RUN), "a run under way"),
            Assert(~reading | fits, "a READ under way beyond its memory"),
            Assert(total == owed, "words owed differ from words on their way"),
        ]
        with m.If(armed & (pushed <= x)):
            # (the address register wraps after the last word of the memory's range)
            addr = (st.addr - inflight + (x - pushed))[:len(st.addr)]
            m.d.comb += [Assert(reading & (x < owed), "word X owed by no READ under way"),
                         Assert(expect == _rom_word(dut, st.mem, addr),
                                "word X not the one the READ under way will read")]


class OutQueueHarness(Elaboratable):
    """The accelerator's ``dout`` queue (``SyncFIFO(width, _OUT_DEPTH)``, its read side wired
    to ``dout`` as in ``Accelerator._reads``: ``valid = r_rdy``, ``payload = r_data``,
    ``r_en = ready``) hands out every pushed word once, in push order, whatever ``dout.ready``
    does, provided no word is pushed into a full queue (what ``ReadOrderHarness(side="queue")``
    proves of the processor). With the queue-side proof this gives ``READ`` order at ``dout``
    (the whole processor's ``dout``-side proof does not finish). Following one symbolic push
    position ``X``: the ``X``-th word taken must be the ``X``-th pushed; no more words are
    taken than pushed. ``width``: the word width (a symbolic word of any width tells positions
    apart; the data path is a plain memory). Mutant ``drop_ready``: the queue pops while the
    consumer stalls."""

    def __init__(self, width: int = 2, *, depth: int = _OUT_DEPTH, drop_ready: bool = False):
        self.width, self.depth, self.drop_ready = width, depth, drop_ready

    def elaborate(self, platform):
        m = Module()
        m.submodules.q = q = SyncFIFO(width=self.width, depth=self.depth)
        reset_first(m)
        push, ready = Signal(), Signal()
        m.d.comb += [push.eq(AnySeq(1)), ready.eq(AnySeq(1)), q.w_data.eq(AnySeq(self.width)),
                     q.w_en.eq(push), q.r_en.eq(1 if self.drop_ready else ready)]
        m.d.comb += Assume(~push | q.w_rdy)           # never into a full queue (proved)
        x = Signal(_COUNT_BITS)
        m.d.comb += x.eq(AnyConst(_COUNT_BITS))
        pushed, taken_n = Signal(_COUNT_BITS), Signal(_COUNT_BITS)
        expect, armed = Signal(self.width), Signal()
        m.d.sync += pushed.eq(pushed + push)
        with m.If(push & (pushed == x)):
            m.d.sync += [expect.eq(q.w_data), armed.eq(1)]
        taken = q.r_rdy & ready                       # dout.valid & dout.ready
        m.d.sync += taken_n.eq(taken_n + taken)
        m.d.comb += Assert(~taken | (taken_n < pushed), "a word nobody pushed")
        with m.If(taken & (taken_n == x)):
            m.d.comb += [Assert(armed, "word X taken before it was pushed"),
                         Assert(q.r_data == expect, "word lost, repeated or moved")]
        stalled = Signal()
        m.d.sync += stalled.eq(stalled | (q.r_rdy & ~ready))
        m.d.comb += Cover(taken & (taken_n == x) & stalled & (x > 1) & (q.level > 1),
                          "word X > 1 taken after a stall from a queue holding two")
        return m


def _rom_word(dut, mem, addr):
    """The word ``READ`` owes for ``(mem, addr)`` of ``dut.rom``, zero-extended."""
    out = Const(0)
    for mm, words in dut.rom.items():
        out = Mux(Value.cast(mem) == int(mm), _rom_read(words, addr), out)
    return out


def _processor_registers(dut: "CommandProcessor"):
    """The registers of an elaborated ``dut`` that hold state for more than a cycle and must
    be equal in two copies after a refusal: the command processor's own (but the ``commands``
    and ``errors`` counters and the ``error`` flag), its ``dout`` queue's pointers and level,
    the stubs' run state. (The rest are a cycle's delay of these, or of the queue's words.)"""
    st, q = dut.state, dut.out_q
    lin, att, _ = dut.stubs
    regs = [st.mode_att, st.state, st.mem, st.addr, st.left, st.l_args.as_value(),
            st.a_args.as_value(), st.is_att, st.counters["target_clipped"],
            q.level, q.produce, q.consume, lin.busy, att.busy, lin.starts, att.starts]
    if dut.geometry.fmdq:
        regs += [lin.o_state.valid, lin.o_state.payload.as_value()]
    return regs


def _plus(word, one):
    """``word`` with ``one`` (0 or 1) added to its low ``COUNTER_BITS`` bits, wrapping as a
    counter does (a counter word one ahead)."""
    n = min(COUNTER_BITS, len(word))
    return Cat((word[:n] + one)[:n], word[n:])


class RefusalHarness(Elaboratable):
    """A refused command changes nothing but the error flag and the ``commands`` and ``errors``
    counters (the module docstring), on two ``CommandProcessor(cfg, rom=True,
    rom_bits=rom_bits)``, proved by k-induction (``mode="prove"``: for every depth).

    Besides the outputs, it asserts what makes the property inductive: before the refusal the
    two copies' registers (``_processor_registers``), counters, flag and queued words are
    equal; from it on they are equal but for ``commands`` and ``errors`` (``a``'s one ahead),
    ``error`` (``a``'s set if ``b``'s is) and the queued counter words of those two (one
    ahead). For that the ``dout`` queue is a ``RegisterFIFO`` (``SyncFIFO``'s logic with
    nameable words, ``FifoMatchHarness``), and a flag per queue entry follows whether the word
    written there was ``commands`` or ``errors`` of a ``READ_COUNTERS`` after the refusal.
    ``READ_COUNTERS`` may come any number of times, before and after the refusal.

    ``refused_writes``: the mutant (see the module docstring)."""

    def __init__(self, cfg, *, refused_writes: bool = False, rom_bits: int | None = 1):
        self.cfg = cfg
        self.refused_writes = refused_writes
        self.rom_bits = rom_bits

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        # The same free run lengths and streams in both copies.
        finish = Signal()
        a = CommandProcessor(cfg, finish, rom=True, rom_bits=self.rom_bits)
        b = CommandProcessor(cfg, finish, rom=True, rom_bits=self.rom_bits, free=a.free)
        drive_free(m, a)
        with mock.patch.object(acc, "SyncFIFO", RegisterFIFO):
            for name, dut in (("a", a), ("b", b)):
                dut._MustUse__silence = True
                m.submodules[name] = dut.elaborate(platform)   # now: their state, to name
        # The same memory contents in both copies.
        for wa, wb in zip(a._rom_words, b._rom_words, strict=True):
            m.d.comb += Assume(wa == wb)
        reset_first(m)
        width = len(a.dout.payload)
        valid, payload = Signal(), Signal(a.cmd.payload.shape())
        din_valid, din, ready = Signal(), Signal(width), Signal()
        m.d.comb += [valid.eq(AnySeq(1)), payload.eq(AnySeq(payload.shape().size)),
                     din_valid.eq(AnySeq(1)), din.eq(AnySeq(width)), ready.eq(AnySeq(1))]
        ok = Signal()
        m.d.comb += ok.eq(command_valid(a, payload))
        # The refused command: the first one taken that the rules refuse.
        after = Signal()
        now = valid & a.cmd.ready & ~ok & ~after
        m.d.sync += after.eq(after | now)
        for dut in (a, b):
            m.d.comb += [dut.cmd.payload.eq(payload), dut.din.valid.eq(din_valid),
                         dut.din.payload.eq(din), dut.dout.ready.eq(ready)]
        m.d.comb += [a.cmd.valid.eq(valid), b.cmd.valid.eq(valid & ~now)]
        if self.refused_writes:
            # The mutant: copy a executes the refused command as a one-word LOAD of the state
            # memory's last word (what a LOAD running over the end would write first).
            # (FMDQ has no state memory: Y's last word.)
            depths = AcceleratorGeometry(cfg).depths
            mem = Mem.STATE if depths[Mem.STATE.name] else Mem.Y
            with m.If(now):
                ma = a.cmd.payload.args.mem
                m.d.comb += [a.cmd.payload.op.eq(Opcode.LOAD), ma.mem.eq(mem),
                             ma.addr.eq(depths[mem.name] - 1), ma.count.eq(1)]
        # Which queue entries hold a commands or errors word read after the refusal (a's one
        # ahead): the word a READ_COUNTERS pushes is the counter at the processor's address.
        sa, qa, qb = a.state, a.out_q, b.out_q
        counters = a.geometry.counters
        ahead = Signal(qa.depth)
        counter_push = (sa.state == acc._COUNT) & (sa.left != 0)
        pick = (sa.addr == counters.index("commands")) | (sa.addr == counters.index("errors"))
        with m.If(qa.w_en & qa.w_rdy):
            m.d.sync += ahead.bit_select(qa.produce, 1).eq(after & counter_push & pick)
        head_ahead = ahead.bit_select(qa.consume, 1)
        # The invariant: the two copies' state.
        sb = b.state
        for ra, rb in zip(_processor_registers(a), _processor_registers(b), strict=True):
            m.d.comb += Assert(ra == rb, "a register differs")
        for i, (wa, wb) in enumerate(zip(qa.words, qb.words, strict=True)):
            m.d.comb += Assert(wa == _plus(wb, ahead[i]), "a queued word differs")
        c_a, c_b = sa.counters, sb.counters
        one = after.as_unsigned()
        m.d.comb += [
            Assert(c_a["commands"] == (c_b["commands"] + one)[:COUNTER_BITS],
                   "commands not one ahead after a refusal, or differs before"),
            Assert(c_a["errors"] == (c_b["errors"] + one)[:COUNTER_BITS],
                   "errors not one ahead after a refusal, or differs before"),
            Assert(Mux(after, a.error | ~b.error, a.error == b.error),
                   "error flag cleared by a refusal"),
            Assert(after | (ahead == 0), "a counter word ahead before the refusal"),
        ]
        # The property: the same outputs (but a counter word ahead), the same datapath inputs.
        m.d.comb += [
            Assert(a.busy == b.busy, "busy differs after a refusal"),
            Assert(a.cmd.ready == b.cmd.ready, "cmd.ready differs after a refusal"),
            Assert(a.din.ready == b.din.ready, "din.ready differs after a refusal"),
            Assert(a.done == b.done, "done differs after a refusal"),
            Assert(a.dout.valid == b.dout.valid, "dout.valid differs after a refusal"),
        ]
        with m.If(a.dout.valid):
            m.d.comb += Assert(a.dout.payload == _plus(b.dout.payload, head_ahead),
                               "a word differs after a refusal")
        # The datapath sees the same from the refused command on: no write of any memory, no
        # run, no slot clearing (every input of every stub, the refusal's cycle too).
        for ia, ib in zip(_stub_inputs(a), _stub_inputs(b), strict=True):
            m.d.comb += Assert(ia == ib, "the datapath sees a refused command")
        # Reachable: a refusal, then its errors counter read back, one ahead.
        m.d.comb += Cover(after & a.error & ~b.error & a.dout.valid & ready & head_ahead
                          & (a.dout.payload != b.dout.payload))
        return m
