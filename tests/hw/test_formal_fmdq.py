"""Bounded model checking of the FMDQ datapath (``encoding = "fmdq"``, the default) on small
configurations, as ``tests/hw/test_formal.py`` does for v1's blocks: the stream rule on every
output stream of the quantization unit, of ``FmdqLinear`` and of the FMDQ accelerator's
command processor (its ``dout``, which also carries a ``RUN_LINEAR``'s new state), the
accelerator's ``READ`` order and refusals, the quantization unit's codes and ``FmdqLinear``'s
state width; each with a cover and a mutant that must fail. The bucket ordering stage's
permutation proof and the tile runner's streams are in ``test_formal.py``. Bmc to depth 20 or
k-induction (every depth); seconds measured on a loaded 2-core machine in each test's
comment."""

from unittest import mock

import pytest
from amaranth import Cat, Signal
from amaranth.hdl import Assert, Cover

from dstar.config import preset
from dstar.hw.accelerator import Opcode
from dstar.hw.fmdq.linear import FmdqLinear
from dstar.hw.fmdq.quant_unit import QuantUnit
from dstar.sim.formal_accel import (
    CommandProcessor,
    ReadOrderHarness,
    RefusalHarness,
    command_valid,
    drive_free,
)
from dstar.sim.formal_fmdq_state import StateWidthHarness
from dstar.sim.formal_streams import StreamHarness

from .test_formal import PROCESSOR_K, check, fmdq_attention_cfg

pytestmark = pytest.mark.formal


def linear_cfg():
    """The smallest FMDQ linear layer: token tiles of 2, windows of 4 channels, one column."""
    return preset("tiny").replace(encoding="fmdq", max_tokens=4, token_tile=2, group=4,
                                  sort_window=4, m_tile=1, n_arrays=1, k_tile=4, max_k=4,
                                  max_m=1, e_max=2, state_bits=9, lattice_bits=0, head_dim=4,
                                  block_q=2, block_k=4, attn_slots=1)


def _quant_unit():
    return QuantUnit(tokens=2, window=4, e_max=2, tau=0, diff_bits=8, channel_bits=3)


def _linear_run_beats(m, dut):
    """The stubs free (``drive_free``), and a cover: a ``RUN_LINEAR``'s new-state beat held
    on a stalled ``dout``, then taken, while the run lasts."""
    drive_free(m, dut)
    p, out = dut.cmd.payload, dut.dout
    run, stalled = Signal(), Signal()
    with m.If(dut.cmd.valid & dut.cmd.ready):
        m.d.sync += [run.eq((p.op == Opcode.RUN_LINEAR) & command_valid(dut, p)),
                     stalled.eq(0)]
    with m.Elif(run & dut.busy & out.valid & ~out.ready):
        m.d.sync += stalled.eq(1)
    m.d.comb += Cover(run & dut.busy & stalled & out.valid & out.ready)


#: Components with output streams, their input contract, and the outputs their mutants drop.
STREAM_DUTS = {
    "quant_unit": (_quant_unit, None, ("o", "u")),         # bmc 10 s
    "linear": (lambda: FmdqLinear(linear_cfg()), None, ("o_state",)),      # bmc 12 s
    "accelerator": (lambda: CommandProcessor(fmdq_attention_cfg()), _linear_run_beats,
                    ("dout",)),                            # bmc 14 s
}


@pytest.mark.parametrize("name", STREAM_DUTS)
def test_fmdq_streams_hold_until_taken(name):
    make, contract, _ = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract), f"fmdq_streams_{name}")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name", STREAM_DUTS)
def test_fmdq_streams_stall_is_reachable(name):
    """Each output stalled, then taken; for the accelerator also a linear run's new-state
    beat (``_linear_run_beats``)."""
    make, contract, _ = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract), f"fmdq_streams_{name}",
                mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name, output", [(n, o) for n, (_, _, outs) in STREAM_DUTS.items()
                                          for o in outs])
def test_fmdq_streams_mutant_ignoring_ready_fails(name, output):
    make, contract, _ = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract, drop_ready=output),
                f"fmdq_streams_{name}_{output}_mutant")
    assert not res.passed and res.trace is not None, str(res)


# The FMDQ command processor's READ order (queue side; the dout queue's own order is
# test_formal's OutQueueHarness proof) and refusals.
def test_fmdq_accelerator_reads_every_word_once_in_order():
    """Queue side, k-induction (k = 4, yices, at load 7: 7 s; k = 20: 22 s; plain bmc did
    not finish depth 20: step 18 after 7 min), for every depth (at most 127 words owed)."""
    res = check(ReadOrderHarness(fmdq_attention_cfg(), side="queue"), "fmdq_accel_read_queue",
                mode="prove", depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_accelerator_reads_every_word_once_in_order_at_dout():
    """As test_formal's v1 proof at dout: k-induction (k = 4, at load 8: 5 s; k = 20: 57 s)."""
    res = check(ReadOrderHarness(fmdq_attention_cfg(), side="dout"), "fmdq_accel_read_dout",
                mode="prove", depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("side", ["dout", "queue"])
def test_fmdq_accelerator_read_after_stall_is_reachable(side):
    res = check(ReadOrderHarness(fmdq_attention_cfg(), side=side), f"fmdq_accel_read_{side}",
                mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_accelerator_mutant_with_late_reads_queues_wrong_words():
    res = check(ReadOrderHarness(fmdq_attention_cfg(), side="queue", late_reads=True),
                "fmdq_accel_read_queue_mutant")       # 3 s
    assert not res.passed and res.trace is not None, str(res)


def test_fmdq_accelerator_mutant_ignoring_dout_ready_loses_words():
    res = check(ReadOrderHarness(fmdq_attention_cfg(), drop_ready=True),
                "fmdq_accel_read_dout_mutant")        # 3 s
    assert not res.passed and res.trace is not None, str(res)


@pytest.mark.slow
def test_fmdq_accelerator_refused_command_changes_nothing():
    """k-induction (k = 4, yices, at load 7: 20 s; k = 20: 235 s): as test_formal's v1 proof,
    a linear run's new-state beats on dout included, for every depth."""
    res = check(RefusalHarness(fmdq_attention_cfg()), "fmdq_accel_refusal", mode="prove",
                depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_accelerator_refusal_then_counters_is_reachable():
    res = check(RefusalHarness(fmdq_attention_cfg()), "fmdq_accel_refusal", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"      # 6 s


def test_fmdq_accelerator_mutant_executing_refused_command_fails():
    res = check(RefusalHarness(fmdq_attention_cfg(), refused_writes=True),
                "fmdq_accel_refusal_mutant")
    assert not res.passed and res.trace is not None, str(res)


# The encoder's part of issue 27 for FMDQ: every code the quantization unit offers lies in its
# class's range, and FmdqLinear's new state stays within +-state_max for targets within
# +-target_max and states within +-state_max (the golden model's invariants;
# dstar.sim.formal_fmdq_state).
def _codes_quant_unit():
    """Differences wider than ``e_max`` shifts can hold, so saturation is reachable."""
    return QuantUnit(tokens=2, window=4, e_max=2, tau=1, diff_bits=12, channel_bits=3)


def _codes_in_class(m, dut):
    """On every offered update: ``shift <= e_max``, a width of 0, 2, 4, 6 or 8 bits, and every
    code within its signed width (0 at width 0)."""
    u, e_max = dut.u.payload.sub[0], dut.e_max
    fits = [(u.width == 0) & Cat(*(q == 0 for q in u.q)).all()]
    for w in (2, 4, 6, 8):
        lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
        fits.append((u.width == w) & Cat(*((q >= lo) & (q <= hi) for q in u.q)).all())
    with m.If(dut.u.valid):
        m.d.comb += [Assert(u.shift <= e_max, "shift beyond e_max"),
                     Assert(Cat(*fits).any(), "a code outside its width's range")]
    m.d.comb += Cover(dut.u.valid & (u.width == 8) & u.saturated)


def test_fmdq_codes_stay_in_their_class():
    """bmc 20 over any inputs and back-pressure (seconds)."""
    res = check(StreamHarness(_codes_quant_unit(), constrain=_codes_in_class), "fmdq_codes")
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_saturated_width_8_update_is_reachable():
    res = check(StreamHarness(_codes_quant_unit(), constrain=_codes_in_class), "fmdq_codes",
                mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_codes_mutant_width_one_bit_short_fails():
    """The width decided from the extremes one bit short (an off-by-one in the width's bit
    tests): a code outside its width. (A quantizer wrapping instead of saturating keeps every
    code within width 8, which the width takes from the unsaturated extremes: the state-width
    proof catches that one, ``test_fmdq_state_mutant_fails``.)"""
    real = QuantUnit._shifted

    def short_width(self, m, d, p, half, name):
        r = real(self, m, d, p, half, name)
        return r >> 1 if name.startswith(("rmax", "rmin")) else r

    with mock.patch.object(QuantUnit, "_shifted", short_width):
        res = check(StreamHarness(_codes_quant_unit(), constrain=_codes_in_class),
                    "fmdq_codes_mutant")
    assert not res.passed and res.trace is not None, str(res)


def state_cfg():
    """``linear_cfg`` with a 10-bit state: differences up to ``delta_max = 1020`` exceed what
    shift ``e_max = 2`` fits in INT8 (509), so the saturating path is in the proof (at 9 bits
    it is unreachable)."""
    return linear_cfg().replace(state_bits=10)


def test_fmdq_state_stays_within_its_width():
    """k-induction (k = 4, yices, 7 to 32 s at load 3 to 6; k = 20: 248 s; plain bmc of the
    property alone reached depth 17 only) with ``StateWidthHarness``'s invariants on every
    register holding a beat's old state or difference, for every depth: any run parameters,
    beats and back-pressure."""
    res = check(StateWidthHarness(state_cfg()), "fmdq_state", mode="prove", depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_fmdq_state_beyond_target_max_and_saturated_are_reachable():
    res = check(StateWidthHarness(state_cfg()), "fmdq_state_cover", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"         # 6 to 22 s


@pytest.mark.parametrize("mutant", ["wide_targets", "narrow", "wrapping"])
def test_fmdq_state_mutant_fails(mutant):
    """Targets up to ``target_max + 64`` (the input contract broken), the pending FIFO of old
    states one bit narrower, the quantizer wrapping instead of saturating: each pushes a new
    state beyond ``state_max`` (bmc 20, each 9 to 23 s)."""
    res = check(StateWidthHarness(state_cfg(), **{mutant: True}), f"fmdq_state_{mutant}")
    assert not res.passed and res.trace is not None, str(res)
