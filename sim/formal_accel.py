"""Formal properties of the accelerator top's command stream (``hw.accelerator``).

``ReadOrderHarness``: ``READ`` loses, duplicates and reorders no word, whatever ``dout.ready``
does. Commands are free but executable (``NOP``, ``LOAD`` of a loadable and readable memory,
``READ``, ``READ_COUNTERS``: no run changes the memories behind the harness's back); ``din`` and
``dout.ready`` are free. The harness follows one symbolic word (memory ``M``, address ``A``,
``AnyConst``) through ``LOAD`` (the beat written there) and one symbolic ``dout`` position
``X`` (``AnyConst``): counting the words every taken ``READ`` / ``READ_COUNTERS`` owes, the
position ``X`` belongs to one read of one address; when that is ``(M, A)`` after a ``LOAD``
wrote it, the ``X``-th word taken from ``dout`` must be the loaded beat (zero-extended to the
memory's word). A lost or repeated word shifts every later position, so some choice of ``X``
catches it. Also asserted: no more words come out than were asked for.

``RefusalHarness``: a refused command changes no memory and no counter but ``errors`` (and
``commands``, which counts every command). Two copies of the accelerator get the same free
command, ``din`` and ``dout.ready`` streams, except that one command, refused by the rules of
the ``Accelerator`` docstring (restated here, independently of its ``_command_ok``), reaches
copy ``a`` only: copy ``b`` sees an idle cycle instead. From then on both must behave alike:
same ``busy``, ``cmd.ready``, ``din.ready``, ``done`` and ``dout`` (every word but the
``commands`` and ``errors`` words of a ``READ_COUNTERS``, where ``a`` is one ahead of ``b``).

Mutations: ``ReadOrderHarness(drop_ready=True)`` (the accelerator sees ``dout.ready`` high
while the consumer stalls: words lost); ``RefusalHarness(refused_writes=True)`` (copy ``a``
executes the refused command anyway, as a one-word ``LOAD`` of the state memory's last word:
what a ``LOAD`` running over the end would write first).

Status: both harnesses elaborate, but neither proof has finished to depth 20 yet (the whole
accelerator is slow for the SMT solver: ``ReadOrderHarness`` was still at step 9 after eight
minutes); they are not in the tests.
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Shape, Signal
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover

from dstar.hw.accelerator import COUNTERS, Accelerator, Mem, Opcode, memory_depths, memory_words

from .formal import reset_first

__all__ = ["ReadOrderHarness", "RefusalHarness", "command_valid"]

#: Memories that can be both loaded and read back.
_ROUND_TRIP = (Mem.STATE, Mem.Y, Mem.RES, Mem.MASK, Mem.SLOT)
_WRITABLE = (Mem.TARGET, Mem.STATE, Mem.WEIGHTS, Mem.Y, Mem.Q, Mem.KT, Mem.V, Mem.MS,
             Mem.RES, Mem.MASK, Mem.SLOT)
_READABLE = (Mem.STATE, Mem.Y, Mem.O, Mem.RES, Mem.MASK, Mem.SLOT)
_COUNT_BITS = 7


def _any_of(value, members):
    return Cat(*[value == int(x) for x in members]).any()


def _in_range(cfg, ma):
    depths = memory_depths(cfg)
    fits = [(ma.mem == int(mm)) & (ma.addr + ma.count <= depths[mm.name]) for mm in Mem]
    return (ma.count != 0) & Cat(*fits).any()


def command_valid(dut: Accelerator, payload) -> Signal:
    """Whether a command is executable by the ``Accelerator`` docstring's rules, restated."""
    cfg = dut.config
    geo = dut.linear_geometry
    op, ma, la, aa = payload.op, payload.args.mem, payload.args.linear, payload.args.attention
    span = la.n_kt * la.n_mt * cfg.k_tile
    linear = ((la.n_tokens >= 1) & (la.n_tokens <= cfg.max_tokens) & (la.n_kt <= geo.n_kt_max)
              & (la.n_mt <= geo.n_mt_max) & (la.w_base + span <= geo.weight_depth))
    attention = (aa.n_tokens >= 1) & (aa.n_tokens <= cfg.max_tokens) & (aa.slot < cfg.attn_slots)
    return Mux(op == Opcode.LOAD, _in_range(cfg, ma) & _any_of(ma.mem, _WRITABLE),
           Mux(op == Opcode.READ, _in_range(cfg, ma) & _any_of(ma.mem, _READABLE),
           Mux(op == Opcode.RUN_LINEAR, linear,
           Mux(op == Opcode.RUN_ATTENTION, attention,
               _any_of(op, (Opcode.NOP, Opcode.CLEAR_SLOTS, Opcode.READ_COUNTERS,
                            Opcode.ACK_ERROR))))))


def _word_mask(cfg, mem):
    """All-ones over the word of memory ``mem`` (a ``Value``), in a beat."""
    words = memory_words(cfg)
    out = Const(0)
    for mm in _ROUND_TRIP:
        width = Shape.cast(words[mm.name]).width
        out = Mux(mem == int(mm), (1 << width) - 1, out)
    return out


class ReadOrderHarness(Elaboratable):
    """``READ`` words come out once each, in order (the module docstring)."""

    def __init__(self, cfg, *, drop_ready: bool = False):
        self.cfg = cfg
        self.drop_ready = drop_ready

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.submodules.dut = dut = Accelerator(cfg)
        reset_first(m)
        cmd, din, dout = dut.cmd, dut.din, dut.dout
        width = len(dout.payload)
        ready = Signal()
        m.d.comb += [cmd.valid.eq(AnySeq(1)), cmd.payload.eq(AnySeq(cmd.payload.shape().size)),
                     din.valid.eq(AnySeq(1)), din.payload.eq(AnySeq(width)),
                     ready.eq(AnySeq(1)), dout.ready.eq(1 if self.drop_ready else ready)]
        p = cmd.payload
        ma = p.args.mem
        m.d.comb += Assume(~cmd.valid | (
            (p.op == Opcode.NOP) | (p.op == Opcode.READ_COUNTERS)
            | (((p.op == Opcode.LOAD) | (p.op == Opcode.READ)) & _any_of(ma.mem, _ROUND_TRIP)
               & _in_range(cfg, ma))))

        mem = Signal(4)
        addr = Signal.like(ma.addr)
        x = Signal(_COUNT_BITS)
        m.d.comb += [mem.eq(AnyConst(4)), addr.eq(AnyConst(len(addr))),
                     x.eq(AnyConst(_COUNT_BITS))]
        m.d.comb += Assume(_any_of(mem, _ROUND_TRIP))

        # The symbolic word: what the last LOAD beat to (M, A) wrote.
        l_mem, l_addr = Signal(4), Signal.like(addr)
        word, known = Signal(width), Signal()
        take = cmd.valid & cmd.ready
        with m.If(take & (p.op == Opcode.LOAD)):
            m.d.sync += [l_mem.eq(ma.mem), l_addr.eq(ma.addr)]
        with m.If(din.valid & din.ready):
            m.d.sync += l_addr.eq(l_addr + 1)
            with m.If((l_mem == mem) & (l_addr == addr)):
                m.d.sync += [word.eq(din.payload & _word_mask(cfg, mem)), known.eq(1)]

        # Words owed on dout, and which read owes position X.
        owed = Signal(_COUNT_BITS)
        out = Signal(_COUNT_BITS)
        expect, armed = Signal(width), Signal()
        count = Mux(p.op == Opcode.READ, ma.count, Mux(p.op == Opcode.READ_COUNTERS,
                                                       len(COUNTERS), 0))
        with m.If(take):
            m.d.sync += owed.eq(owed + count)
            covers = (p.op == Opcode.READ) & (owed <= x) & (x < owed + count)
            # X is the word of (M, A) in this read: its value is the one loaded (if any).
            with m.If(covers & (ma.mem == mem) & (ma.addr + (x - owed) == addr) & known):
                m.d.sync += [expect.eq(word), armed.eq(1)]
        taken = dout.valid & ready
        m.d.sync += out.eq(out + taken)
        m.d.comb += Assert(~taken | (out < owed), "a word nobody asked for")
        with m.If(taken & armed & (out == x)):
            m.d.comb += Assert(dout.payload == expect, "word lost, repeated or moved")
        stalled = Signal()
        m.d.sync += stalled.eq(stalled | (dout.valid & ~ready))
        m.d.comb += Cover(taken & armed & (out == x) & stalled & (x > 0),
                          "a loaded word read back at position X > 0 after a stall")
        return m


class RefusalHarness(Elaboratable):
    """A refused command changes nothing but the error flag and counters (the module
    docstring)."""

    def __init__(self, cfg, *, refused_writes: bool = False):
        self.cfg = cfg
        self.refused_writes = refused_writes

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.submodules.a = a = Accelerator(cfg)
        m.submodules.b = b = Accelerator(cfg)
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
            last = memory_depths(cfg)[Mem.STATE.name] - 1
            with m.If(now):
                ma = a.cmd.payload.args.mem
                m.d.comb += [a.cmd.payload.op.eq(Opcode.LOAD), ma.mem.eq(Mem.STATE),
                             ma.addr.eq(last), ma.count.eq(1)]
        # Only commands after the refusal may read the counters (at most one burst).
        counters_taken = Signal()
        rc = valid & a.cmd.ready & (payload.op == Opcode.READ_COUNTERS)
        m.d.comb += Assume(~rc | (after & ~counters_taken))
        # The position of the burst's commands/errors words in dout, counted in a's words.
        owed, out, burst = Signal(_COUNT_BITS), Signal(_COUNT_BITS), Signal(_COUNT_BITS)
        take_a = valid & a.cmd.ready & ok
        count = Mux(payload.op == Opcode.READ, payload.args.mem.count,
                    Mux(payload.op == Opcode.READ_COUNTERS, len(COUNTERS), 0))
        with m.If(take_a):
            m.d.sync += owed.eq(owed + count)
            with m.If(payload.op == Opcode.READ_COUNTERS):
                m.d.sync += [burst.eq(owed), counters_taken.eq(1)]
        m.d.sync += out.eq(out + (a.dout.valid & ready))
        idx = out - burst
        counter_word = counters_taken & (out >= burst) & (
            (idx == COUNTERS.index("commands")) | (idx == COUNTERS.index("errors")))
        with m.If(after):
            m.d.comb += [
                Assert(a.busy == b.busy, "busy differs after a refusal"),
                Assert(a.cmd.ready == b.cmd.ready, "cmd.ready differs after a refusal"),
                Assert(a.din.ready == b.din.ready, "din.ready differs after a refusal"),
                Assert(a.done == b.done, "done differs after a refusal"),
                Assert(a.dout.valid == b.dout.valid, "dout.valid differs after a refusal"),
            ]
            with m.If(a.dout.valid & ~counter_word):
                m.d.comb += Assert(a.dout.payload == b.dout.payload,
                                   "a word differs after a refusal")
            with m.If(a.dout.valid & counter_word):
                m.d.comb += Assert(a.dout.payload == b.dout.payload + 1,
                                   "commands/errors not one ahead after a refusal")
        # Reachable: a refusal, then its counters read back.
        m.d.comb += Cover(after & a.error & ~b.error & a.dout.valid & ready & counter_word,
                          "refused, then the errors counter read")
        return m
