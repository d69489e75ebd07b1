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
step). Both properties are proved instead by k-induction with the memories observed directly:
``EncoderWidthHarness`` (the state width, 34 s) and ``EncoderCodeHarness`` (the width invariants
and every code against the spec's shift, dead-zone and rounding rule, 37 s; yices, depth 20,
on a 2-core machine at load 6), both inductive, so they hold at every depth.
"""

from amaranth import Cat, Elaboratable, Module, Mux, ResetSignal, Signal, signed
from amaranth.asserts import AnyConst, AnySeq, Initial
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data

from dstar.hw.encoder import DeltaEncoder
from dstar.hw.geometry import Geometry
from dstar.hw.layouts import slice_cmd_layout

from .formal import reset_first

__all__ = ["EncoderCodeHarness", "EncoderHarness", "EncoderWidthHarness"]


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
        return self._invariants(platform)[0]

    def _invariants(self, platform, dut_geo: Geometry | None = None):
        """The harness above: ``(m, dut, body)`` (``body``: the encoder's elaborated module,
        built on ``dut_geo`` if given, else on ``geo``)."""
        geo, cfg = self.geo, self.geo.cfg
        smax, tmax = cfg.state_max, cfg.target_max
        m = Module()
        dut = DeltaEncoder(dut_geo or geo)
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
        return m, dut, body


def _driven(body: Module, name: str):
    """The signal named ``name`` that ``body`` (an elaborated ``Module``) drives."""
    found = [s for s in body._driving.keys() if s.name == name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} signals named {name!r} in the encoder")
    return found[0]


class _NarrowDelta(Geometry):
    """The mutant's geometry: the encoder's difference ``D`` one bit narrower than
    ``delta_max`` needs (it wraps for the largest ``|target - state|``)."""

    @property
    def delta_bits(self) -> int:
        return super().delta_bits - 1


class EncoderCodeHarness(EncoderWidthHarness):
    """The code ranges of ``DeltaEncoder(geo)``, by k-induction (``mode="prove"``).

    Everything ``EncoderWidthHarness`` states (the inputs' contract and the memories' range
    invariants, which make the words stage 2 encodes in range in every cycle), and, for every
    slice the output register holds and every lane of it, with ``D = target - state`` (state
    0 on a key step) computed wide by the harness from the words stage 2 encoded, ``e`` the
    lane's group shift and ``r(e) = (D + 2**(e-1)) >> e`` (spec rounding):

    * ``e <= e_max``, and ``e`` is the smallest shift at which every ``r`` of the group fits
      INT8, or ``e_max`` when none does (spec section 3's shift rule; ``e_tol`` only counts);
    * ZERO class: the code is 0 when ``|D| <= tau`` (the dead zone);
    * otherwise the code is ``r(e)`` when it fits INT8 (exact rounding: ``|D - (q << e)| <=
      2**(e-1)``), and ``r(e)`` saturated to ``[-128, 127]`` when it does not, which happens
      only at ``e = e_max``. So every code lies in its class's range: ZERO 0, LOW
      ``[-8, 7]``, HIGH ``[-128, 127]``, with no wrap of ``D`` or of the rounding on the way.

    The harness's shadow of ``D`` is loaded with the output register (same enable), so the
    property is inductive together with the memories' invariants: the ``prove`` pass holds
    at every depth.

    Covers: a slice with a LOW and a HIGH code leaves; one whose group saturates.

    Mutation (``narrow_delta``): the encoder is built with ``D`` one bit narrower than
    ``delta_max`` needs (``geo.delta_bits - 1``): its ``D`` wraps for large
    ``|target - state|`` and the code proof must fail.
    """

    def __init__(self, geo: Geometry, *, narrow_delta: bool = False):
        super().__init__(geo)
        self.narrow_delta = narrow_delta

    def elaborate(self, platform):
        geo, cfg = self.geo, self.geo.cfg
        dut_geo = _NarrowDelta(cfg) if self.narrow_delta else None
        m, dut, body = self._invariants(platform, dut_geo)
        tmem, smem = body.submodules.target, body.submodules.state
        t_data, s_data = tmem.read_ports[0].data, smem.read_ports[0].data
        cmd1 = data.View(slice_cmd_layout(geo), _driven(body, "cmd1"))
        adv = ~dut.o.valid | dut.o.ready
        wide = signed(cfg.state_bits + 3)         # |D| <= delta_max < 2 * state_max + 1
        g_size = cfg.group
        ds = []
        for k in range(cfg.k_tile):
            d_now = Signal(wide, name=f"d_now_{k}")
            d2 = Signal(wide, name=f"d_out_{k}")  # D of the slice in the output register
            m.d.comb += d_now.eq(t_data[k] - Mux(cmd1.key, 0, s_data[k]))
            with m.If(adv):
                m.d.sync += d2.eq(d_now)
            ds.append(d2)

        def rnd(d, e):
            return (d + ((1 << (e - 1)) if e else 0)) >> e

        def fits(x):
            return (x <= 127) & (x >= -128)

        any_low, any_high, any_sat = [], [], []
        for j in range(geo.slice_groups):
            grp = dut.o.payload.groups[j]
            e = grp.shift
            lanes = range(j * g_size, (j + 1) * g_size)
            fit = [Cat(*[fits(rnd(ds[k], x)) for k in lanes]).all()
                   for x in range(cfg.e_max + 1)]
            spec_e = cfg.e_max
            for x in reversed(range(cfg.e_max + 1)):
                spec_e = Mux(fit[x], x, spec_e)
            with m.If(dut.o.valid):
                m.d.comb += [Assert(e <= cfg.e_max, f"group {j}: shift beyond e_max"),
                             Assert(e == spec_e, f"group {j}: not the smallest fitting shift")]
            any_sat.append(dut.o.valid & ~fit[cfg.e_max])
            for lane, k in enumerate(lanes):
                q, d = grp.q[lane], ds[k]
                r = Signal(wide, name=f"r_out_{k}")
                sel = rnd(d, cfg.e_max)
                for x in reversed(range(cfg.e_max)):
                    sel = Mux(e == x, rnd(d, x), sel)
                m.d.comb += r.eq(sel)
                dead = (d <= cfg.tau) & (d >= -cfg.tau)
                with m.If(dut.o.valid):
                    with m.If(dead):
                        m.d.comb += Assert(q == 0, f"lane {k}: a dead-zone code is not 0")
                    with m.Elif(fits(r)):
                        m.d.comb += Assert(q == r, f"lane {k}: code is not D rounded at e")
                    with m.Else():
                        m.d.comb += [
                            Assert(e == cfg.e_max, f"lane {k}: saturated below e_max"),
                            Assert(q == Mux(r > 0, 127, -128), f"lane {k}: bad saturation")]
                any_low.append(dut.o.valid & (q != 0) & (q <= 7) & (q >= -8))
                any_high.append(dut.o.valid & ((q > 7) | (q < -8)))
        m.d.comb += [Cover(Cat(*any_low).any() & Cat(*any_high).any(),
                           "a slice with a LOW and a HIGH code leaves"),
                     Cover(Cat(*any_sat).any(), "a saturated group leaves")]
        return m
