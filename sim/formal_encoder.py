"""Formal property: the delta encoder's state stays within its width and its codes within range.

``EncoderHarness`` drives a ``DeltaEncoder`` with free commands, free back-pressure and free host
writes and follows one symbolic element (memory word ``A``, lane ``L``, both ``AnyConst``): a
shadow of its target and state (mirroring host writes; a commit's new state is taken from the
encoded output), carried along the two pipeline stages with the commands that read it.
Assumed (the documented contract): targets within ``+-target_max``, host state words within
``+-state_max`` (the reconstruction the host saved), host writes only while no command is in
flight, commands address existing slices. Asserted, for every slice of ``A`` that comes out:

* its group shift is at most ``e_max``, and its code (INT8 by its type) is 0 when the element's
  difference ``D = target - state`` (``state`` 0 on a key step) is inside the dead zone
  ``|D| <= tau`` (the code's value is the bit-exact simulation tests' business: proving it
  here is beyond the solver at this depth);
* on a commit, the new state ``state + (q << e)``, computed wide, lies within ``+-state_max``
  (the state never leaves ``state_bits``);
* a host read of ``A`` returns the shadow (the stored word is that wide sum, not a wrapped one).

Covers: a commit lands exactly on ``+state_max`` and one on ``-state_max`` (the bound is tight).

Mutation (``unbounded_targets``): the target bound is not assumed (targets anywhere in their
``target_bits``); the proof must fail on it (it does, in seconds).

Status: the proof itself stalls at step 6 (over five minutes with yices, memories as arrays
or flattened), so only the mutant is in the tests.
"""

from amaranth import Elaboratable, Module, Mux, ResetSignal, Signal, signed
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover

from dstar.hw.encoder import DeltaEncoder
from dstar.hw.geometry import Geometry

from .formal import reset_first

__all__ = ["EncoderHarness"]


class EncoderHarness(Elaboratable):
    """State width and code range of ``DeltaEncoder(geo)`` (the module docstring)."""

    def __init__(self, geo: Geometry, *, unbounded_targets: bool = False):
        self.geo = geo
        self.unbounded_targets = unbounded_targets

    def elaborate(self, platform):
        geo, cfg = self.geo, self.geo.cfg
        g_size, k = cfg.group, cfg.k_tile
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
        for lane in range(k):
            t, s = dut.host_target_wdata[lane], dut.host_state_wdata[lane]
            if not self.unbounded_targets:
                m.d.comb += Assume(~dut.host_target_we
                                   | ((t <= cfg.target_max) & (t >= -cfg.target_max)))
            m.d.comb += Assume(~dut.host_state_we
                               | ((s <= cfg.state_max) & (s >= -cfg.state_max)))

        # The symbolic element and its shadow (target, state as stored).
        a = Signal(range(geo.row_depth))
        lane = Signal(range(k))
        m.d.comb += [a.eq(AnyConst(len(a))), lane.eq(AnyConst(len(lane)))]
        m.d.comb += Assume((a < geo.row_depth) & (lane < k))
        wide = signed(cfg.state_bits + 3)         # |new| <= 2 * state_max + 127 << e_max
        t_sh = Signal(signed(geo.target_bits))
        s_sh = Signal(signed(cfg.state_bits))
        hit_w = dut.host_addr == a
        with m.If(dut.host_target_we & hit_w):
            m.d.sync += t_sh.eq(dut.host_target_wdata[lane])

        # A commit's new state is known once its slice is in the output register (the cycle
        # after the write): until then the stored word is the pending sum.
        pend = Signal()
        pend_base = Signal(signed(cfg.state_bits))
        grp = dut.o.payload.groups[lane // g_size]
        q = grp.q[lane % g_size]
        e = grp.shift
        new = Signal(wide)
        m.d.comb += new.eq(pend_base + (q << e))
        s_now = Signal(signed(cfg.state_bits))       # the stored word this cycle
        m.d.comb += s_now.eq(Mux(pend, new, s_sh))
        with m.If(pend):
            m.d.sync += s_sh.eq(new)
        with m.If(dut.host_state_we & hit_w):
            m.d.sync += s_sh.eq(dut.host_state_wdata[lane])

        # The pipeline, for slices of A: stage 1 (read), then the output register.
        addr = cmd.meta.token * geo.n_kt_max + cmd.kt
        hit1, key1, com1 = Signal(), Signal(), Signal()
        old1, tgt1 = Signal.like(s_sh), Signal.like(t_sh)
        hit2, com2 = Signal(), Signal()
        old2, tgt2 = Signal.like(s_sh), Signal.like(t_sh)
        m.d.sync += pend.eq(0)
        with m.If(adv):
            m.d.sync += [hit1.eq(dut.i.valid & (addr == a)), key1.eq(cmd.key),
                         com1.eq(cmd.commit), old1.eq(s_now), tgt1.eq(t_sh),
                         hit2.eq(v1 & hit1), com2.eq(com1),
                         old2.eq(Mux(key1, 0, old1)), tgt2.eq(tgt1),
                         pend.eq(v1 & hit1 & com1), pend_base.eq(Mux(key1, 0, old1))]

        # The code of the slice in the output register.
        d = Signal(wide)
        m.d.comb += d.eq(tgt2 - old2)
        with m.If(dut.o.valid & hit2):
            m.d.comb += [Assert(e <= cfg.e_max, "shift beyond e_max"),
                         Assert(~((d <= cfg.tau) & (d >= -cfg.tau)) | (q == 0),
                                "a code inside the dead zone is not 0")]
        with m.If(pend):
            m.d.comb += Assert((new <= cfg.state_max) & (new >= -cfg.state_max),
                               "new state beyond +-state_max")

        # A host read (encoder idle when it is issued) returns the shadow.
        rd, rd_exp = Signal(), Signal.like(s_sh)
        m.d.sync += [rd.eq(~dut.i.valid & adv & hit_w), rd_exp.eq(s_now)]
        with m.If(rd):
            m.d.comb += Assert(dut.host_state_rdata[lane] == rd_exp,
                               "stored state differs from state + (q << e)")

        m.d.comb += [Cover(pend & (new == cfg.state_max), "a commit reaches +state_max"),
                     Cover(pend & (new == -cfg.state_max), "a commit reaches -state_max")]
        return m
