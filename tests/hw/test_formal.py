"""Bounded model checking (``dstar.sim.formal``) of the blocks on small configurations: each
proof passes to its depth, its cover is reached, and a deliberately broken variant fails.

Tiers: the default run keeps, per property family, a cover and a mutant, plus the quick
proofs (the lockstep dispatcher's and the normalizer's stream stability, the encoder's state
width and code ranges); the long proofs are ``slow`` (still ``formal``). Measured on a loaded
2-core machine (``nice -n 5``, other workers running): see each test's docstring or comment."""

import pytest
from amaranth import Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assume

from dstar.config import Packing, preset
from dstar.hw.attention.fmdq_tile_runner import FmdqTileRunner
from dstar.hw.dispatcher import DISPATCHERS
from dstar.hw.encoder import DeltaEncoder
from dstar.hw.fmdq.geometry import attention_array_args
from dstar.hw.fmdq.sorter import SortNetwork
from dstar.hw.geometry import AttentionGeometry, Geometry
from dstar.hw.softmax import Normalizer, SoftmaxUnit
from dstar.sim.formal import ToolMissing, run
from dstar.sim.formal_accel import (
    CommandProcessor,
    OutQueueHarness,
    ReadOrderHarness,
    RefusalHarness,
)
from dstar.sim.formal_bucket import BucketHarness
from dstar.sim.formal_dispatch import DispatchHarness, dispatcher_contract
from dstar.sim.formal_encoder import EncoderCodeHarness, EncoderWidthHarness
from dstar.sim.formal_fifo import FifoMatchHarness
from dstar.sim.formal_sorter import SorterHarness, SorterPipelineHarness
from dstar.sim.formal_streams import StreamHarness

pytestmark = pytest.mark.formal

#: Proof depth (cycles) of every bmc proof and cover here.
DEPTH = 20

#: k of the proofs by k-induction with invariants needing a cycle or two of history (the
#: command processor's delayed reads, the compact dispatcher's lane queues): a pass holds for
#: every depth.
PROCESSOR_K = 4

def small_cfg(**kw):
    """Two lanes, two groups per slice, 10-bit state, two-entry queues, tiny memories."""
    return preset("tiny").replace(encoding="nibble", group=2, k_tile=4, m_tile=1, n_arrays=2,
                                  max_k=8, max_m=4, max_tokens=4, e_max=2, state_bits=10,
                                  lattice_bits=0, lane_fifo_depth=2, head_dim=4, block_q=2,
                                  block_k=2, attn_slots=1, attn_frac_bits=2, **kw)


def check(harness, name, *, mode="bmc", depth=DEPTH, **kw):
    try:
        return run(harness, name, mode=mode, depth=depth, **kw)
    except ToolMissing as e:
        pytest.skip(str(e))


def _encoder():
    return DeltaEncoder(Geometry(small_cfg()))


def _dispatcher(packing):
    return DISPATCHERS[packing](Geometry(small_cfg(packing=packing)))


def accel_cfg(**kw):
    """The smallest accelerator: one array of one column, one token, one slot; every memory
    one or two words (but Y's 16)."""
    return preset("tiny").replace(encoding="nibble", group=2, k_tile=2, m_tile=1, n_arrays=1,
                                  max_k=2, max_m=1, max_tokens=1, e_max=1, state_bits=9,
                                  lattice_bits=0, lane_fifo_depth=2, head_dim=2, block_q=1,
                                  block_k=2, attn_slots=1, attn_frac_bits=1, **kw)


#: Components with output streams whose stability is proved here, with their input contract.
STREAM_DUTS = {
    "encoder": (_encoder, None),
    "lockstep": (lambda: _dispatcher(Packing.LOCKSTEP), dispatcher_contract),
    "compact": (lambda: _dispatcher(Packing.COMPACT), dispatcher_contract),
    "softmax": (lambda: SoftmaxUnit(small_cfg()), None),
    "normalizer": (lambda: Normalizer(small_cfg()), None),
}


#: Stream proofs in the slow tier (seconds measured: encoder 27, compact 26, softmax 40,
#: accelerator 73; lockstep 5 and normalizer 11 stay in the default run).
SLOW_STREAMS = ("encoder", "compact", "softmax", "accelerator")


def _accelerator():
    return CommandProcessor(accel_cfg())


def _free_finish(m, dut):
    m.d.comb += dut.finish.eq(AnySeq(1))


STREAM_DUTS["accelerator"] = (_accelerator, _free_finish)


def fmdq_attention_cfg():
    """The smallest engine on FMDQ arrays: token tiles of 4, 4 dimensions, one column."""
    return preset("tiny").replace(encoding="fmdq", max_tokens=8, head_dim=4, token_tile=4,
                                  group=4, block_q=4, block_k=4, sort_window=8, m_tile=1,
                                  n_arrays=1, k_tile=4, max_k=8, max_m=2, e_max=2,
                                  state_bits=12, attn_slots=1)


def _fmdq_tile_runner():
    cfg = fmdq_attention_cfg()
    args = attention_array_args(cfg, False)
    return FmdqTileRunner(AttentionGeometry(cfg), **{k: args[k] for k in (
        "tokens", "window", "channel_bits", "y_depth")})


def tile_runner_contract(m, dut):
    """The engine's side: the read ports hold their data while ``rd_en`` is low, and a phase
    starts only while no group is offered."""
    held, q, p = Signal(), Signal.like(dut.q_data), Signal.like(dut.p_data)
    m.d.sync += [held.eq(~dut.rd_en), q.eq(dut.q_data), p.eq(dut.p_data)]
    m.d.comb += [Assume(~held | ((dut.q_data.as_value() == q.as_value())
                                 & (dut.p_data.as_value() == p.as_value()))),
                 Assume(~dut.start | ~dut.o_group.valid)]


STREAM_DUTS["fmdq_tile_runner"] = (_fmdq_tile_runner, tile_runner_contract)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n in SLOW_STREAMS else n for n in STREAM_DUTS])
def test_streams_hold_until_taken(name):
    make, contract = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract), f"streams_{name}")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name", ["encoder", "compact", "accelerator", "fmdq_tile_runner"])
def test_streams_stall_is_reachable(name):
    make, contract = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract), f"streams_{name}", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name, output", [("encoder", "o"), ("compact", "o_token"),
                                          ("accelerator", "dout"),
                                          ("fmdq_tile_runner", "o_group")])
def test_streams_mutant_ignoring_ready_fails(name, output):
    make, contract = STREAM_DUTS[name]
    res = check(StreamHarness(make(), constrain=contract, drop_ready=output),
                f"streams_{name}_mutant")
    assert not res.passed and res.trace is not None, str(res)


# The permutation proofs: lockstep by bmc (51 s, slow); compact by k-induction with the lane
# queue invariant (plain bmc reached step 11 in 85 s at load 8, each step about twice the one
# before).
@pytest.mark.slow
def test_lockstep_dispatcher_passes_every_op_once():
    geo = Geometry(small_cfg(packing=Packing.LOCKSTEP))
    res = check(DispatchHarness(geo, Packing.LOCKSTEP), "dispatch_lockstep")
    assert res.passed, f"{res}\n{res.summary}"


def _compact(**kw):
    geo = Geometry(small_cfg(packing=Packing.COMPACT))
    return DispatchHarness(geo, Packing.COMPACT, invariant=True, **kw)


def test_compact_dispatcher_passes_every_op_once():
    """k-induction (k = 4, yices, at load 8: 4 s; k = 20: 29 s) with
    ``DispatchHarness._lane_invariant``, for every depth (at most 63 slices)."""
    res = check(_compact(), "dispatch_compact", mode="prove", depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_compact_dispatcher_op_is_reachable():
    res = check(_compact(), "dispatch_compact", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_compact_dispatcher_mutant_dropping_lane0_fails():
    res = check(_compact(drop_lane0=True), "dispatch_compact_mutant")
    assert not res.passed and res.trace is not None, str(res)


def test_dispatcher_op_is_reachable():
    geo = Geometry(small_cfg(packing=Packing.LOCKSTEP))
    res = check(DispatchHarness(geo, Packing.LOCKSTEP), "dispatch_lockstep", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_dispatcher_mutant_dropping_lane0_fails():
    geo = Geometry(small_cfg(packing=Packing.LOCKSTEP))
    res = check(DispatchHarness(geo, Packing.LOCKSTEP, drop_lane0=True),
                "dispatch_lockstep_mutant")
    assert not res.passed and res.trace is not None, str(res)


def _sorter(**kw):
    """The FMDQ quantization unit's sort network at window 2: 8 entries in presorted runs of
    4, Batcher's odd-even merges (3 comparator stages, a register after each, as the unit's
    default ``reg_every=1``), 2-bit keys."""
    return SorterPipelineHarness(8, presorted=4, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [SortNetwork.ODD_EVEN, SortNetwork.BITONIC])
def test_sorter_passes_every_entry_once_sorted(kind):
    """k-induction (depth 20, yices, at load 8: odd-even 33 s, bitonic 50 s): every vector
    leaves once, in order, sorted, a permutation of its entries, whatever i.valid and o.ready
    do, for every depth."""
    res = check(_sorter(kind=kind), f"sorter_{kind.value}", mode="prove")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.slow
def test_sorter_single_register_by_counting():
    """The same property by bounded model checking with counters (``SorterHarness``, no
    invariants), on the network with one register (depth 20, yices, 80 s at load 10)."""
    res = check(SorterHarness(8, presorted=4, reg_every=3), "sorter_bmc")
    assert res.passed, f"{res}\n{res.summary}"


def test_sorter_tied_vector_after_stall_is_reachable():
    res = check(_sorter(), "sorter", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("mutant", ["drop_comparator", "drop_ready"])
def test_sorter_mutant_fails(mutant):
    """A network missing a comparator does not sort; one ignoring o.ready loses vectors."""
    res = check(_sorter(**{mutant: True}), f"sorter_mutant_{mutant}", mode="prove")
    assert not res.passed and res.trace is not None, str(res)


#: The bucket stage's configurations: name -> (channels, levels, lanes, FIFO depth). ``small``:
#: 3 channels, so a level's channels still need two groups of 2 lanes, and 2 levels, so a
#: window can skip an empty level; ``wide``: 4 channels, 3 levels; ``lanes4``: the unit's 4
#: lanes, 5 channels (a level needs two groups); ``unit``: 8 channels, 10 levels (the total
#: shifts of ``e_max = 3``), 4 lanes, a FIFO of 3 windows (the unit's ``buffers`` at window 8).
BUCKETS = {"small": (3, 2, 2, 2), "wide": (4, 3, 2, 2), "lanes4": (5, 2, 4, 2),
           "unit": (8, 10, 4, 3)}


def _bucket(name="small", **kw):
    """The quantization unit's bucket ordering stage (``SortNetwork.BUCKET``) at
    ``BUCKETS[name]``."""
    channels, levels, lanes, depth = BUCKETS[name]
    return BucketHarness(channels, levels, lanes=lanes, depth=depth, **kw)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "unit" else n
                                  for n in BUCKETS])
def test_bucket_passes_every_entry_once_in_order(name):
    """k-induction (k = 4, yices) with ``BucketHarness._invariant``, for every depth (traces
    of fewer than 63 windows): each window's entries leave once, in (level, channel) order, in
    groups as full as the order allows, ``last`` on the last, windows in order, every group
    held until taken, whatever i.valid and o.ready do (at load 2 to 4: small 7 s, wide 9 s,
    lanes4 8 s, unit 76 s; at load 3: 2 to 2.5 s, unit 17 s; wide at k = 20: 41 s)."""
    res = check(_bucket(name, invariant=True), f"bucket_{name}_invariant", mode="prove",
                depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name", ["small", "wide"])
def test_bucket_window_with_two_groups_of_a_level_after_stall_is_reachable(name):
    res = check(_bucket(name), f"bucket_{name}", mode="cover", flatten_memories=True)
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.parametrize("name", ["small", "wide"])
@pytest.mark.parametrize("mutant", ["drop_ready", "reverse_levels"])
def test_bucket_mutant_fails(mutant, name):
    """A stage ignoring o.ready loses groups; one picking the highest level first reorders
    (bmc 20, the harness without its invariants: the property itself fails)."""
    res = check(_bucket(name, **{mutant: True}), f"bucket_{name}_mutant_{mutant}",
                flatten_memories=True)
    assert not res.passed and res.trace is not None, str(res)


def encoder_cfg(**kw):
    """The smallest encoder: one group of two lanes per slice, two slices (``row_depth`` 2),
    9-bit state, shifts up to 1, a dead zone of 1."""
    return preset("tiny").replace(encoding="nibble", group=2, k_tile=2, m_tile=1, n_arrays=1,
                                  max_k=2, max_m=1, max_tokens=2, e_max=1, state_bits=9,
                                  lattice_bits=0, tau=1, lane_fifo_depth=2, head_dim=2, block_q=1,
                                  block_k=2, attn_slots=1, attn_frac_bits=1, **kw)


# The code proof states the width invariants too: it runs by default, the width proof alone
# (34 s) is in the slow tier.
@pytest.mark.slow
def test_encoder_state_stays_in_width():
    """k-induction (depth 20): every state word stays within ``+-state_max`` (any targets
    within ``+-target_max``), for every depth."""
    geo = Geometry(encoder_cfg())
    res = check(EncoderWidthHarness(geo), "encoder_width", mode="prove")
    assert res.passed, f"{res}\n{res.summary}"


def test_encoder_codes_stay_in_their_class_range():
    """k-induction (depth 20, yices, 37 s on a loaded machine): the state width invariants,
    and every code leaving the encoder is the spec's (smallest fitting shift, 0 in the dead
    zone, ``D`` rounded at the shift, saturated to INT8 only at ``e_max``), for every depth."""
    res = check(EncoderCodeHarness(Geometry(encoder_cfg())), "encoder_code", mode="prove")
    assert res.passed, f"{res}\n{res.summary}"


def test_encoder_low_high_and_saturated_codes_are_reachable():
    res = check(EncoderCodeHarness(Geometry(encoder_cfg())), "encoder_code", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_encoder_mutant_with_narrow_delta_fails():
    """An encoder whose ``D`` is one bit too narrow wraps: its codes leave their range."""
    res = check(EncoderCodeHarness(Geometry(encoder_cfg()), narrow_delta=True),
                "encoder_code_mutant", mode="prove")
    assert not res.passed and res.trace is not None, str(res)


def test_encoder_commit_reaches_state_max():
    res = check(EncoderWidthHarness(Geometry(encoder_cfg())), "encoder_width", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_encoder_mutant_with_unbounded_targets_fails():
    """Targets beyond ``target_max`` push the state out of its width (the bound matters)."""
    geo = Geometry(encoder_cfg())
    res = check(EncoderWidthHarness(geo, unbounded_targets=True), "encoder_width_mutant",
                mode="prove")
    assert not res.passed and res.trace is not None, str(res)


# The command processor (``CommandProcessor``: the accelerator's own command, load and read
# logic, the datapath reduced to stubs). Its dout stability is in the stream tests above.

def test_accelerator_reads_every_word_once_in_order_at_dout():
    """k-induction (k = 4, yices, at load 8: 3 s; k = 20: 24 s; plain bmc reached step 15
    after 6 min) with the queue side's invariant and the queued words' (the queue a
    ``RegisterFIFO``), for every depth (at most 127 words owed in all): the words taken from
    dout are the words owed, once each, in order, whatever ``dout.ready`` does."""
    res = check(ReadOrderHarness(accel_cfg(), side="dout"), "accel_read_dout", mode="prove",
                depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_reads_every_word_once_in_order():
    """Queue side, k-induction (k = 4, yices, at load 7: 3 s; k = 20: 13 s; plain bmc to
    depth 20 took 351 s) with ``ReadOrderHarness._queue_invariant``, for every depth (at most
    127 words owed in all)."""
    res = check(ReadOrderHarness(accel_cfg(), side="queue"), "accel_read_queue", mode="prove",
                depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


@pytest.mark.slow
def test_accelerator_dout_queue_keeps_every_word_in_order():
    """With the queue-side proof above: READ order at dout through the real ``SyncFIFO``
    (compositionally; the one-piece proof above uses ``RegisterFIFO``). Bmc, depth 20;
    the queue's memory flattened into registers (at load 5 to 8: 28 to 96 s; 146 s as an SMT
    array)."""
    res = check(OutQueueHarness(), "accel_out_queue", flatten_memories=True)
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_dout_queue_after_stall_is_reachable():
    res = check(OutQueueHarness(), "accel_out_queue", mode="cover", flatten_memories=True)
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_dout_queue_mutant_popping_on_stall_fails():
    res = check(OutQueueHarness(drop_ready=True), "accel_out_queue_mutant",
                flatten_memories=True)
    assert not res.passed and res.trace is not None, str(res)


@pytest.mark.parametrize("side", ["dout", "queue"])
def test_accelerator_read_after_stall_is_reachable(side):
    res = check(ReadOrderHarness(accel_cfg(), side=side), f"accel_read_{side}", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_mutant_ignoring_dout_ready_loses_words():
    res = check(ReadOrderHarness(accel_cfg(), drop_ready=True), "accel_read_dout_mutant")
    assert not res.passed and res.trace is not None, str(res)


def test_accelerator_mutant_with_late_reads_queues_wrong_words():
    res = check(ReadOrderHarness(accel_cfg(), side="queue", late_reads=True),
                "accel_read_queue_mutant")
    assert not res.passed and res.trace is not None, str(res)


def test_accelerator_refused_command_changes_nothing():
    """k-induction (k = 4, yices, at load 7: 7 s; k = 20: 40 s): after a refused command the
    two copies' outputs, datapath inputs and state stay equal but for ``error``, ``commands``
    and ``errors`` (and those counters' queued words), for every depth."""
    res = check(RefusalHarness(accel_cfg()), "accel_refusal", mode="prove", depth=PROCESSOR_K)
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_refusal_then_counters_is_reachable():
    res = check(RefusalHarness(accel_cfg()), "accel_refusal", mode="cover")
    assert res.passed, f"{res}\n{res.summary}"


def test_accelerator_mutant_executing_refused_command_fails():
    res = check(RefusalHarness(accel_cfg(), refused_writes=True), "accel_refusal_mutant")
    assert not res.passed and res.trace is not None, str(res)


def test_register_fifo_matches_syncfifo():
    """The refusal proofs' ``RegisterFIFO`` behaves as ``SyncFIFO`` (bmc, depth 20; memories
    flattened: 6 s at load 7, 47 to 97 s as SMT arrays)."""
    res = check(FifoMatchHarness(), "fifo_match", flatten_memories=True)
    assert res.passed, f"{res}\n{res.summary}"


def test_register_fifo_full_is_reachable():
    res = check(FifoMatchHarness(), "fifo_match", mode="cover", flatten_memories=True)
    assert res.passed, f"{res}\n{res.summary}"


def test_register_fifo_mutant_with_stale_head_fails():
    res = check(FifoMatchHarness(stale_head=True), "fifo_match_mutant", flatten_memories=True)
    assert not res.passed and res.trace is not None, str(res)
