"""Formal property: ``FmdqLinear``'s new state stays within ``+-state_max``, by k-induction.

``StateWidthHarness`` drives the real ``FmdqLinear`` (every input free in every cycle: run
parameters, ``start``, beats, back-pressure, host writes) and assumes what the golden model
keeps invariant: every ``i_sub`` beat's targets within ``+-target_max`` and old states within
``+-state_max``. Asserted: every new state offered on ``o_state`` within ``+-state_max``.

Why it holds: a beat's difference ``D = target - old`` (0 for a padding token, ``old`` 0 on a
key step) reaches the quantization unit, whose code ``q`` at shift ``p <= e_max`` is
``(D + 2**(p-1)) >> p`` saturated to INT8 (0 in the dead zone). Rounding half up puts ``q << p``
in ``[0, D + 2**(e_max-1)]`` for ``D >= 0`` and in ``[D - 2**(e_max-1), 0]`` for ``D < 0``
(saturation only moves it towards 0), so ``old + (q << p)`` lies between ``old`` and
``target +- 2**(e_max-1)``: within ``+-state_max`` since ``target_max = state_max -
2**(e_max-1)``. This holds for *any* shift up to ``e_max``, so the proof needs no fact about
the shift decision but its range.

The induction needs every register that holds a beat's old state or difference named, with
its invariant (asserted in every cycle, so that the proof is k-inductive):

* the state path's pending FIFO (``linear.py``'s ``pending``, the old states of the beats in
  the unit's front end) is a ``RegisterFIFO`` (``SyncFIFO``'s logic with its words in
  registers; ``FifoMatchHarness`` proves the two alike), its pointers consistent and its level
  the number of valid front-end stages;
* the feeder's register (``r_old``, and its ``D``, which is the unit's input beat), its skid
  entry (``k_old``, ``k_d``: a beat taken while the unit stalls) and the unit's three
  front-end stages (``QuantUnit._front``: ``D`` in stages 1 and 2, the shift in
  stages 2 and 3, the codes in stage 3), each paired with its FIFO word in order (the head
  word with the oldest valid stage): a valid one holds ``|old| <= state_max`` and ``D = 0`` or
  ``|old + D| <= target_max``, a shift at most ``e_max`` and, in stage 3, ``|old + (q << p)|
  <= state_max``.

The unit's front-end registers have no names of their own (tuple assignments), so the harness
elaborates the unit itself and records the unnamed signals ``_front`` creates, in order
(``v1, d1, x1, last1, v2, d2, x2, last2, v3, x3, last3``); a changed ``_front`` is a
``LookupError`` naming what was found. The rest of the layer (bucket stage, group memory,
replay, PE arrays) is the real RTL too: it only decides when beats move.

Cover: a new state beyond ``+-target_max`` (the rounding margin used: the bound is tight).

Mutations: ``wide_targets`` assumes targets up to ``target_max + 64`` (the input contract
broken); ``wrapping`` makes the unit's quantizer wrap to 8 bits instead of saturating (a real
RTL mutation). The proof must fail on each.
"""

from contextlib import ExitStack
from unittest import mock

from amaranth import Array, Elaboratable, Module, Mux, Signal, Value, signed
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data, wiring

import dstar.hw.fmdq.linear as linear_mod
import dstar.hw.fmdq.quant_unit as qu_mod
from dstar.hw.fmdq.linear import FmdqLinear, sub_word_layout
from dstar.hw.fmdq.quant_unit import QuantUnit

from .formal import reset_first, unnamed_signals
from .formal_fifo import RegisterFIFO
from .formal_sorter import _driven

__all__ = ["FRONT_NAMES", "StateWidthHarness", "wrapping_quantize"]

#: The unnamed signals ``QuantUnit._front`` creates, in order.
FRONT_NAMES = ("v1", "d1", "x1", "last1", "v2", "d2", "x2", "last2", "v3", "x3", "last3")


def wrapping_quantize(self, m, d, p, half, name):
    """The mutant of ``QuantUnit._quantize``: ``(d + half) >> p`` wrapped to 8 bits instead of
    saturated."""
    r = Signal(signed(self.diff_bits + 1), name=f"{name}_rs")
    q = Signal(signed(8), name=name)
    m.d.comb += [r.eq((d + half) >> p), q.eq(r[:8])]
    return q


def _elaborate_recording_front(qu: QuantUnit, platform, quantize=None):
    """``qu`` elaborated now; returns its body and its front-end stage signals by
    ``FRONT_NAMES`` (recorded as ``_front`` creates them without a name)."""
    real_front = QuantUnit._front
    front = {}

    def recording_front(self, m, fadv):
        with unnamed_signals(qu_mod, FRONT_NAMES, "QuantUnit._front") as found:
            out = real_front(self, m, fadv)
        front.update(found)
        return out

    qu._MustUse__silence = True
    with ExitStack() as patches:
        patches.enter_context(mock.patch.object(QuantUnit, "_front", recording_front))
        if quantize is not None:
            patches.enter_context(mock.patch.object(QuantUnit, "_quantize", quantize))
        body = qu.elaborate(platform)
    return body, front


class _NarrowFIFO(RegisterFIFO):
    """A ``RegisterFIFO`` that keeps one bit less of each word (its top bit, the last token's
    old state's sign, written as 0)."""

    def elaborate(self, platform):
        outer = self.w_data
        self.w_data = Signal(self.width, name="w_data_narrow")
        m = super().elaborate(platform)
        m.d.comb += self.w_data.eq(outer[:-1])
        self.w_data = outer
        return m


def _narrow_fifo(state_bits_total: int):
    """The mutant's FIFO factory: ``_NarrowFIFO`` when the words hold old states (at least
    ``state_bits_total`` bits), else a ``RegisterFIFO``: the pending FIFO one bit narrower."""

    def make(*, width, depth):
        cls = _NarrowFIFO if width >= state_bits_total else RegisterFIFO
        return cls(width=width, depth=depth)
    return make


class StateWidthHarness(Elaboratable):
    """Every new state of ``FmdqLinear(cfg)`` within ``+-state_max`` (the module docstring);
    run with ``mode="prove"``."""

    def __init__(self, cfg, *, invariants: bool = True, wide_targets: bool = False,
                 wrapping: bool = False, narrow: bool = False):
        self.cfg, self.invariants = cfg, invariants
        self.wide_targets, self.wrapping, self.narrow = wide_targets, wrapping, narrow

    def elaborate(self, platform):
        cfg = self.cfg
        smax, tmax = cfg.state_max, cfg.target_max
        m = Module()
        dut = FmdqLinear(cfg)
        dut._MustUse__silence = True
        front = {}
        real_qu = FmdqLinear.quant_unit

        def quant_unit(lin):
            qu = real_qu(lin)
            body, sigs = _elaborate_recording_front(
                qu, platform, wrapping_quantize if self.wrapping else None)
            front.update(sigs, qu=qu)
            qu.elaborate = lambda platform: body      # already elaborated
            return qu

        fifo = _narrow_fifo(sub_word_layout(dut.geometry).size) if self.narrow else RegisterFIFO
        with mock.patch.object(linear_mod, "SyncFIFO", fifo), \
                mock.patch.object(FmdqLinear, "quant_unit", quant_unit):
            body = dut.elaborate(platform)
        m.submodules.dut = body
        reset_first(m)
        for _, member, value in dut.signature.flatten(dut):
            v = Value.cast(value)
            if member.flow == wiring.In and isinstance(v, Signal):
                m.d.comb += v.eq(AnySeq(len(v)))

        T = dut.geometry.tokens
        sub_l = sub_word_layout(dut.geometry)

        def within(v, bound):
            return (v <= bound) & (v >= -bound)

        def pair_ok(old, d):
            """A beat's old state and difference as the feeder makes them."""
            return within(old, smax) & ((d == 0) | within(old + d, tmax))

        # The input contract (on every cycle's payload, taken or not).
        t_in = tmax + (64 if self.wide_targets else 0)
        p = dut.i_sub.payload
        for t in range(T):
            m.d.comb += [Assume(within(p.target[t], t_in)), Assume(within(p.state[t], smax))]

        # The property: every new state offered.
        qu = front["qu"]
        for t in range(T):
            with m.If(dut.o_state.valid):
                m.d.comb += Assert(within(dut.o_state.payload[t], smax),
                                   "a new state beyond state_max")

        u = qu.u.payload.sub[0]
        m.d.comb += [
            Cover(dut.o_state.valid & ((dut.o_state.payload[0] > tmax)
                                       | (dut.o_state.payload[0] < -tmax)),
                  "a new state beyond target_max"),
            Cover(dut.o_state.valid & u.saturated, "a new state from a saturated code")]
        if not self.invariants:
            return m

        # The invariants. The pending FIFO's words: (tile, window, old states), the old states
        # in the top bits; its head word is the oldest valid front-end stage's.
        pend = body.submodules.pending
        v1, v2, v3 = front["v1"], front["v2"], front["v3"]
        d1, d2, x2, x3 = front["d1"], front["d2"], front["x2"], front["x3"]
        words = Array(w[-sub_l.size:] for w in pend.words)
        m.d.comb += [Assert(pend.consistent(), "pending FIFO pointers inconsistent"),
                     Assert(pend.level == v1 + v2 + v3,
                            "pending FIFO level is not the front end's beats")]

        def word(ahead, stage):
            at = Signal(range(pend.depth), name=f"pend_at_stage{stage}")
            s = pend.consume + ahead
            m.d.comb += at.eq(Mux(s >= pend.depth, s - pend.depth, s))
            return words[at]

        def old_of(w, t):
            return w[t * sub_l.elem_shape.width:(t + 1) * sub_l.elem_shape.width] \
                .as_signed()

        # Ahead of each stage in the FIFO: the valid stages after it.
        w3, w2, w1 = word(0, 3), word(v3, 2), word(v3 + v2, 1)
        r_old = _driven(body, "r_old")
        k_valid, k_old, k_d = (_driven(body, n) for n in ("k_valid", "k_old", "k_d"))
        k_d = data.View(qu.i.payload.d[0].shape(), k_d)      # the element view of its D
        e_max = cfg.e_max
        for t in range(T):
            with m.If(qu.i.valid):                    # the feeder's register (the unit's input)
                m.d.comb += Assert(pair_ok(old_of(r_old, t), qu.i.payload.d[0][t]),
                                   "feeder register: old state or target out of range")
            with m.If(k_valid):                       # the feeder's skid entry
                m.d.comb += Assert(pair_ok(old_of(k_old, t), k_d[t]),
                                   "feeder skid entry: old state or target out of range")
            with m.If(v1):
                m.d.comb += Assert(pair_ok(old_of(w1, t), d1[0][t]),
                                   "stage 1: old state or target out of range")
            with m.If(v2):
                m.d.comb += Assert(pair_ok(old_of(w2, t), d2[0][t]),
                                   "stage 2: old state or target out of range")
            with m.If(v3):
                m.d.comb += Assert(within(old_of(w3, t) + (x3[0].q[t] << x3[0].p), smax),
                                   "stage 3: new state beyond state_max")
        with m.If(v2):
            m.d.comb += Assert(x2[0].p <= e_max, "stage 2: shift beyond e_max")
        with m.If(v3):
            m.d.comb += Assert(x3[0].p <= e_max, "stage 3: shift beyond e_max")
        return m
