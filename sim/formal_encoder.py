"""Formal property: the delta encoder's state stays within its width and its codes within range.

``EncoderHarness`` drives a ``DeltaEncoder`` with free commands, free back-pressure and free host
writes and follows one symbolic element (memory word ``A``, lane ``L``, both ``AnyConst``)
through the encoder's two pipeline stages. Assumed (the documented contract): targets within
``+-target_max``, host state words within ``+-state_max`` (the reconstruction the host saved),
host writes only while no command is in flight, host and command addresses within the memories.

The proof is an assume-guarantee step (an induction over time, checked by bounded model checking
to the stated depth): the state word a command reads for ``(A, L)`` (the engine's read data,
visible on ``host_state_rdata`` while the command is in stage 1) is *assumed* within
``+-state_max``, and every state word the encoder writes for ``(A, L)`` is *asserted* within
``+-state_max``. Words start at 0 (reset contents) and the host writes only in-range words, so
by induction over the writes every word ever read is in range. What the harness asserts, for
each slice of ``A`` that comes out of the output register:

* its group shift is at most ``e_max``, and its code (INT8 by its type) is 0 when the element's
  difference ``D = target - state`` (``state`` 0 on a key step) is inside the dead zone
  ``|D| <= tau`` (the code's value is the bit-exact simulation tests' business);
* on a commit, the new state ``state + (q << e)``, computed wide from the state that command
  read, lies within ``+-state_max`` (the state never leaves ``state_bits``);
* the word is stored as that wide sum (not a wrapped one): the next read of ``A`` (a command's,
  or the host's while the encoder is idle) returns it, and a read after a host write returns
  the written word (the state memory's read is not transparent: a read issued in the cycle of
  a commit's write returns the word before it, and the harness expects exactly that).

The harness keeps no running shadow of the state (each check uses the read data of the command
it checks), so the solver never chains the rounding arithmetic of several commits; the chain
is the induction above.

Covers: a commit lands exactly on ``+state_max`` and one on ``-state_max`` (the bound is tight).

Mutation (``unbounded_targets``): the target bound is not assumed (targets anywhere in their
``target_bits``); the proof must fail on it.

Status: bounded model checking of ``EncoderHarness`` is still too slow for the tests (on the
smallest encoder of ``tests/hw/test_formal.py``, ``checks=("bound",)`` passes to depth 12 in
about 30 s on a loaded 2-core machine, ``("bound", "code")`` to depth 20 had reached step 13
after 80 s, ``"stored"`` is slower still: the solver re-proves the rounding arithmetic at every
step). The state-width property is proved instead by ``EncoderWidthHarness``: k-induction with
the memories observed directly (about 25 s in the tests). The dead-zone code check has
no proof to depth 20 yet.
"""

from amaranth import Elaboratable, Module, Mux, ResetSignal, Signal, signed
from amaranth.asserts import AnyConst, AnySeq, Initial
from amaranth.hdl import Assert, Assume, Cover

from dstar.hw.encoder import DeltaEncoder
from dstar.hw.geometry import Geometry

from .formal import reset_first

__all__ = ["EncoderHarness", "EncoderWidthHarness"]


class EncoderHarness(Elaboratable):
    """State width and code range of ``DeltaEncoder(geo)`` (the module docstring).

    ``max_commits``: at most that many commits of ``A`` per trace (``None``: any number; each
    commit is checked from the state it read, so one already covers every in-range start);
    ``checks``: which assertions to state, of ``"code"`` (shift and dead zone), ``"bound"``
    (the new state's range) and ``"stored"`` (reads return the stored word)."""

    def __init__(self, geo: Geometry, *, unbounded_targets: bool = False,
                 max_commits: int | None = 1, checks=("code", "bound", "stored")):
        self.geo = geo
        self.checks = set(checks)
        self.unbounded_targets = unbounded_targets
        self.max_commits = max_commits

    def elaborate(self, platform):
        geo, cfg = self.geo, self.geo.cfg
        g_size, k = cfg.group, cfg.k_tile
        smax = cfg.state_max
        m = Module()
        m.submodules.dut = dut = DeltaEncoder(geo)
        reset_first(m)
        for port in (dut.i.valid, dut.o.ready, dut.host_addr, dut.host_target_we,
                     dut.host_state_we, dut.clear):
            m.d.comb += port.eq(AnySeq(len(port)))
        for port in (dut.i.payload, dut.host_target_wdata, dut.host_state_wdata):
            m.d.comb += port.eq(AnySeq(port.shape().size))

        # The contract.
        cmd = dut.i.payload
        m.d.comb += Assume(~dut.i.valid | ((cmd.meta.token < cfg.max_tokens)
                                           & (cmd.kt < geo.n_kt_max)))
        adv = Signal()
        m.d.comb += adv.eq(~dut.o.valid | dut.o.ready)
        v1 = Signal()                       # stage 1 of the encoder holds a command
        with m.If(adv):
            m.d.sync += v1.eq(dut.i.valid)
        busy = dut.i.valid | v1 | dut.o.valid
        m.d.comb += Assume(~(dut.host_target_we | dut.host_state_we) | ~(busy | ResetSignal()))
        m.d.comb += Assume(dut.host_addr < geo.row_depth)
        for lane in range(k):
            t, s = dut.host_target_wdata[lane], dut.host_state_wdata[lane]
            if not self.unbounded_targets:
                m.d.comb += Assume(~dut.host_target_we
                                   | ((t <= cfg.target_max) & (t >= -cfg.target_max)))
            m.d.comb += Assume(~dut.host_state_we | ((s <= smax) & (s >= -smax)))

        # The symbolic element and the target stored there (only the host writes targets).
        a = Signal(range(geo.row_depth))
        lane = Signal(range(k))
        m.d.comb += [a.eq(AnyConst(len(a))), lane.eq(AnyConst(len(lane)))]
        m.d.comb += Assume((a < geo.row_depth) & (lane < k))
        wide = signed(cfg.state_bits + 3)         # |new| <= 2 * state_max + 127 << e_max
        t_sh = Signal(signed(geo.target_bits))
        hit_w = dut.host_addr == a
        with m.If(dut.host_target_we & hit_w):
            m.d.sync += t_sh.eq(dut.host_target_wdata[lane])

        # The pipeline, for slices of A: stage 1 (the memories read), then the output register.
        addr = cmd.meta.token * geo.n_kt_max + cmd.kt
        hit1, key1, com1 = Signal(), Signal(), Signal()
        tgt1 = Signal.like(t_sh)
        hit2, com2 = Signal(), Signal()
        old2, tgt2 = Signal(signed(cfg.state_bits)), Signal.like(t_sh)
        rd1 = Signal(signed(cfg.state_bits))      # the state word stage 1 read for (A, L)
        m.d.comb += rd1.eq(dut.host_state_rdata[lane])
        # The induction hypothesis: every word read is in range.
        with m.If(hit1):
            m.d.comb += Assume((rd1 <= smax) & (rd1 >= -smax))
        pend = Signal()                           # the output register holds A's commit
        with m.If(adv):
            m.d.sync += [hit1.eq(dut.i.valid & (addr == a)), key1.eq(cmd.key),
                         com1.eq(cmd.commit), tgt1.eq(t_sh),
                         hit2.eq(hit1), com2.eq(com1),
                         old2.eq(Mux(key1, 0, rd1)), tgt2.eq(tgt1)]
        m.d.sync += pend.eq(adv & hit1 & com1)
        if self.max_commits is not None:
            n_com = Signal(range(self.max_commits + 1))
            with m.If(pend):
                m.d.sync += n_com.eq(n_com + 1)
            m.d.comb += Assume(~(adv & hit1 & com1) | (n_com + pend < self.max_commits))

        # The code of the slice in the output register, and its new state.
        grp = dut.o.payload.groups[lane // g_size]
        q = grp.q[lane % g_size]
        e = grp.shift
        new = Signal(wide)
        m.d.comb += new.eq(old2 + (q << e))
        d = Signal(wide)
        m.d.comb += d.eq(tgt2 - old2)
        with m.If(dut.o.valid & hit2 & ("code" in self.checks)):
            m.d.comb += [Assert(e <= cfg.e_max, "shift beyond e_max"),
                         Assert(~((d <= cfg.tau) & (d >= -cfg.tau)) | (q == 0),
                                "a code inside the dead zone is not 0")]
        with m.If(pend & ("bound" in self.checks)):
            m.d.comb += Assert((new <= smax) & (new >= -smax), "new state beyond +-state_max")

        # The word stored at (A, L), once known: the last host write or commit (the commit's
        # word is known the cycle after its write, from the output register).
        known = Signal()
        stored = Signal(signed(cfg.state_bits))
        now = Signal(signed(cfg.state_bits))      # the stored word this cycle
        m.d.comb += now.eq(Mux(pend, new, stored))
        with m.If(pend):
            m.d.sync += [stored.eq(new), known.eq(1)]
        with m.If(dut.host_state_we & hit_w):
            m.d.sync += [stored.eq(dut.host_state_wdata[lane]), known.eq(1)]
        # A command's read: issued in the cycle it is accepted, checked in stage 1.
        exp1, kn1 = Signal.like(stored), Signal()
        with m.If(adv):
            m.d.sync += [exp1.eq(now), kn1.eq(known | pend)]
        stored_ck = "stored" in self.checks
        with m.If(hit1 & kn1 & stored_ck):
            m.d.comb += Assert(rd1 == exp1, "a command read a state other than the stored one")
        # A host read (encoder idle when it is issued) returns the stored word.
        rd, rd_exp, rd_kn = Signal(), Signal.like(stored), Signal()
        m.d.sync += [rd.eq(~dut.i.valid & adv & hit_w), rd_exp.eq(now), rd_kn.eq(known | pend)]
        with m.If(rd & rd_kn & stored_ck):
            m.d.comb += Assert(rd1 == rd_exp, "the host read a state other than the stored one")

        m.d.comb += [Cover(pend & (new == smax), "a commit reaches +state_max"),
                     Cover(pend & (new == -smax), "a commit reaches -state_max")]
        return m


class EncoderWidthHarness(Elaboratable):
    """The state-width invariant of ``DeltaEncoder(geo)``, by k-induction (``mode="prove"``).

    The harness elaborates the encoder itself to reach its two memories: it adds a same-cycle
    read port per word (``geo.row_depth`` of them: keep the configuration's memories tiny) and
    watches the encoder's own read ports' data (the words stage 1 works on). Inputs are free
    within the contract of ``EncoderHarness`` (targets within ``+-target_max``, host state
    words within ``+-state_max``, host writes only while idle, addresses in range). Asserted in
    every cycle, for every lane:

    * every target word within ``+-target_max`` and every state word within ``+-state_max``
      (the state never leaves ``state_bits``: no commit writes a word beyond it);
    * the words the read ports hold (the targets and states of the slice in stage 1) within
      the same bounds.

    The memories' initial contents are assumed within these bounds (they are zeros in the
    design, but the solver's model of a memory's initial contents is free).

    These invariants are inductive: from any state satisfying them, whatever the inputs, the
    next state does (a commit's ``state + (q << e)`` from an in-range state and target lies
    within ``+-state_max``), so the ``prove`` pass (base case to ``depth``, induction step of
    ``depth`` cycles from any state) holds at every depth, not only the base case's.

    Covers: a commit writes ``+state_max`` and one ``-state_max`` (the bound is tight).

    Mutation (``unbounded_targets``): the target bound is neither assumed nor asserted (targets
    anywhere in their ``target_bits``); the state invariant must fail.
    """

    def __init__(self, geo: Geometry, *, unbounded_targets: bool = False):
        self.geo = geo
        self.unbounded_targets = unbounded_targets

    def elaborate(self, platform):
        geo, cfg = self.geo, self.geo.cfg
        smax, tmax = cfg.state_max, cfg.target_max
        m = Module()
        dut = DeltaEncoder(geo)
        dut._MustUse__silence = True
        body = dut.elaborate(platform)
        m.submodules.dut = body
        reset_first(m)
        tmem, smem = body.submodules.target, body.submodules.state
        for port in (dut.i.valid, dut.o.ready, dut.host_addr, dut.host_target_we,
                     dut.host_state_we, dut.clear):
            m.d.comb += port.eq(AnySeq(len(port)))
        for port in (dut.i.payload, dut.host_target_wdata, dut.host_state_wdata):
            m.d.comb += port.eq(AnySeq(port.shape().size))
        cmd = dut.i.payload
        m.d.comb += Assume(~dut.i.valid | ((cmd.meta.token < cfg.max_tokens)
                                           & (cmd.kt < geo.n_kt_max)))
        busy = Signal()
        v1 = Signal()
        m.d.comb += busy.eq(dut.i.valid | v1 | dut.o.valid)
        with m.If(~dut.o.valid | dut.o.ready):
            m.d.sync += v1.eq(dut.i.valid)
        m.d.comb += [Assume(~(dut.host_target_we | dut.host_state_we) | ~busy),
                     Assume(dut.host_addr < geo.row_depth)]
        for lane in range(cfg.k_tile):
            t, s = dut.host_target_wdata[lane], dut.host_state_wdata[lane]
            if not self.unbounded_targets:
                m.d.comb += Assume(~dut.host_target_we | ((t <= tmax) & (t >= -tmax)))
            m.d.comb += Assume(~dut.host_state_we | ((s <= smax) & (s >= -smax)))

        def in_range(word, bound, what):
            for lane in range(cfg.k_tile):
                x = word[lane]
                ok = (x <= bound) & (x >= -bound)
                # The first cycle's words are the memories' initial contents (zeros in the
                # design; the solver's model leaves them free): assumed, then asserted.
                with m.If(Initial()):
                    m.d.comb += Assume(ok)
                with m.Else():
                    m.d.comb += Assert(ok, what)

        # The target memory's invariant (by contract; the mutant has none).
        tgt = not self.unbounded_targets
        for addr in range(geo.row_depth):
            t_rd = tmem.read_port(domain="comb")
            s_rd = smem.read_port(domain="comb")
            m.d.comb += [t_rd.addr.eq(addr), s_rd.addr.eq(addr)]
            if tgt:
                in_range(t_rd.data, tmax, f"target word {addr} beyond +-target_max")
            in_range(s_rd.data, smax, f"state word {addr} beyond +-state_max")
        if tgt:
            in_range(tmem.read_ports[0].data, tmax, "target read beyond +-target_max")
        in_range(smem.read_ports[0].data, smax, "state read beyond +-state_max")
        # Reachable: a commit (a state write while the host writes none) at either end of the
        # range (the bound is tight).
        wr = smem.write_ports[0]
        commit = wr.en & ~dut.host_state_we
        m.d.comb += [Cover(commit & (wr.data[0] == smax), "a commit writes +state_max"),
                     Cover(commit & (wr.data[0] == -smax), "a commit writes -state_max")]
        return m
