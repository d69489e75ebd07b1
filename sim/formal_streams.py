"""Formal property: a component's ``lib.stream`` outputs keep their offer until it is taken.

``StreamHarness(dut)`` drives every input of ``dut`` from ``AnySeq`` (free in every cycle) and
checks, for every output stream that has a ``ready``, the stream rule of ``amaranth.lib.stream``:
``valid & ~ready`` in cycle ``t`` implies ``valid`` in ``t + 1`` with the same ``payload``. The
input streams are assumed to obey the same rule (what the component may rely on); a component
whose contract asks more of its inputs gets those assumptions from ``constrain``.

Covers: each checked output is stalled and then taken (the property is not vacuous).

Mutation (``drop_ready``): the component sees that output's ``ready`` tied high while the
checker's consumer stays free, i.e. a design that ignores back-pressure on that output; the proof
must fail on it.
"""

from amaranth import Elaboratable, Module, Signal, Value
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import stream, wiring

from .formal import reset_first

__all__ = ["streams_of", "StreamHarness"]


def streams_of(dut: wiring.Component):
    """``(label, interface, is_output)`` of every ``lib.stream`` member of ``dut`` with a
    ``ready`` (always-ready streams cannot be stalled), arrays flattened."""
    found = []
    for name, member in dut.signature.members.items():
        if not member.is_signature or not isinstance(member.signature, stream.Signature):
            continue
        if member.signature.always_ready:
            continue
        obj = getattr(dut, name)
        items = [(name, obj)]
        if member.dimensions:
            items = [(f"{name}_{i}", o) for i, o in enumerate(obj)]
        found += [(label, o, member.flow == wiring.Out) for label, o in items]
    return found


class StreamHarness(Elaboratable):
    """Stream stability of every output stream of ``dut`` (see the module docstring).

    ``constant``: names of inputs held at one free value for the whole run (settings the
    component samples or needs held); ``constrain(m, dut)``: extra assumptions on the free
    inputs (the component's documented input contract); ``drop_ready``: the label of an output
    whose ``ready`` the component does not see (the mutant)."""

    def __init__(self, dut: wiring.Component, *, constant=(), constrain=None,
                 drop_ready: str | None = None):
        self.dut = dut
        self.constant = tuple(constant)
        self.constrain = constrain
        self.drop_ready = drop_ready
        labels = [label for label, _, out in streams_of(dut) if out]
        if drop_ready is not None and drop_ready not in labels:
            raise ValueError(f"{drop_ready!r} is not an output stream of {type(dut).__name__} "
                             f"({', '.join(labels)})")

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        reset_first(m)
        found = streams_of(dut)
        mutated = [s.ready for label, s, out in found if out and label == self.drop_ready]
        # Every input of the component is free in every cycle (but a mutated ready).
        for path, member, value in dut.signature.flatten(dut):
            v = Value.cast(value)
            if member.flow == wiring.In and isinstance(v, Signal) \
                    and not any(v is r for r in mutated):
                free = AnyConst if path[0] in self.constant else AnySeq
                m.d.comb += v.eq(free(len(v)))
        for label, s, is_out in found:
            stalled = Signal(name=f"{label}_stalled")
            held = Signal.like(s.payload, name=f"{label}_held")
            ready = s.ready
            if is_out and label == self.drop_ready:
                ready = Signal(name=f"{label}_consumer_ready")
                m.d.comb += [ready.eq(AnySeq(1)), s.ready.eq(1)]
            m.d.sync += [stalled.eq(s.valid & ~ready), held.eq(s.payload)]
            check = Assert if is_out else Assume
            with m.If(stalled):
                m.d.comb += check(s.valid & (Value.cast(s.payload) == Value.cast(held)),
                                  f"{label}: offer withdrawn or changed while stalled")
            if is_out:
                m.d.comb += Cover(stalled & s.valid & ready, f"{label}: stalled, then taken")
        if self.constrain is not None:
            self.constrain(m, dut)
        return m
