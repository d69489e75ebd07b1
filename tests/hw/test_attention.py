"""AttentionEngine on Amaranth's simulator against ``dstar.golden.attention``: a real head of the
bundled DiT over a key step and two reuse steps (also against the ``AttentionReuse`` hook),
random heads with ragged blocks, theta = 1, single-block masks, one-block sequences, all-equal
and extreme logits, the slots' refresh policy, the probabilities' group format (groups of
different and clamped exponents, short last groups, ``e_max = 0`` and other group sizes);
outputs, residual cache and masks bit-exact, and every step's cycles and tile counts equal to
``dstar.sim.attention_cycles``."""

import numpy as np
import pytest

from dstar.config import ConfigError, preset
from dstar.golden.attention import AttentionReuse
from dstar.hw.attention import AttentionEngine, AttentionGeometry
from dstar.hw.generate import manifest
from dstar.sim.attention_cycles import dense_cycles, predict
from dstar.sim.pysim_driver import simulate
from dstar.sim.tb_attention import HeadImage, run_head
from tests.hw.cases.attention import (
    all_equal_step,
    extreme_step,
    group_shifts,
    head_calls,
    int_calls,
    random_step,
    theta1_step,
)


def run_calls(cfg, calls):
    """Run ``calls`` (dicts: q, k, v, m, sh, slot, theta_q, refresh, optional ``clear``) in
    order on one simulated engine; returns their ``HeadOutcome``s."""
    dut = AttentionEngine(cfg)
    man = manifest(dut)
    outs = []

    async def bench(ctx):
        io = (lambda n, v: ctx.set(getattr(dut, n), v),
              lambda n: int(ctx.get(getattr(dut, n))), ctx.tick)
        for c in calls:
            if c.get("clear"):
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
            img = HeadImage(man, np.asarray(c["q"]).shape[0])
            outs.append(await run_head(io, img, c["q"], c["k"], c["v"], c["m"], c["sh"],
                                       slot=c["slot"], theta_q=c["theta_q"],
                                       refresh=c["refresh"]))

    simulate(dut, bench)
    return outs


def check(cfg, calls, expected):
    """Simulate and compare every call with its expected golden step (``HeadSteps.step``
    dicts): key, O, R, mask, and the cycle model's counters."""
    outs = run_calls(cfg, calls)
    for i, (c, e, o) in enumerate(zip(calls, expected, outs, strict=True)):
        n = e["o"].shape[0]
        want = predict(cfg, n, e["mask"], e["key"], c["theta_q"], e["picks"]).counters()
        assert o.key == e["key"], f"call {i}: key"
        assert np.array_equal(o.o, e["o"]), f"call {i}: O differs in {(o.o != e['o']).sum()}"
        assert np.array_equal(o.res, e["r"]), f"call {i}: residual differs"
        assert np.array_equal(o.mask, e["mask"]), f"call {i}: mask {o.mask} != {e['mask']}"
        assert o.counters == want, f"call {i}: counters {o.counters} != model {want}"
    return outs


@pytest.fixture(scope="module")
def small_cfg():
    """The tiny preset with Dh = 16: half the lane work per tile, for the synthetic cases."""
    return preset("tiny").replace(head_dim=16)


def test_real_head_key_and_two_reuse_steps(tiny_cfg, real_head):
    """The first 32 tokens of a real head (the tiny preset's max_tokens): key step, two reuse
    steps; the golden side is cross-checked against the ``AttentionReuse`` hook itself."""
    cfg, n, theta = tiny_cfg, tiny_cfg.max_tokens, 0.5
    steps = [tuple(a[:n] for a in s) for s in real_head]
    calls, exp = head_calls(cfg, steps, theta, 3)
    assert [e["key"] for e in exp] == [True, False, False]
    hook = AttentionReuse(cfg.replace(theta=theta, refresh_attn=3), measure=False)
    for s, (q, k, v) in enumerate(steps):
        out = hook("blocks.0.attn", q[None, None], k[None, None], v[None, None], s)
        mine = (exp[s]["o"] * (exp[s]["s_v"] / 256.0)).astype(np.float32)
        assert np.array_equal(out[0, 0], mine)
    assert not exp[0]["mask"].all()             # a sparse mask at this theta
    check(cfg, calls, exp)


def test_random_ragged_key_and_reuse(small_cfg):
    """N = 27 (ragged query and key blocks), theta 0.5: key and reuse step."""
    rng = np.random.default_rng(5)
    steps = [random_step(rng, 27, small_cfg.head_dim, 2.0, sink=4) for _ in range(2)]
    calls, exp = int_calls(small_cfg, steps, 0.5, 2)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    check(small_cfg, calls, exp)


def test_edge_cases(small_cfg):
    """One simulation over several slots: theta = 1 with zero-mass blocks, single-block masks,
    a one-block sequence, all-equal logits (ties: the lower block first), extreme logits
    (+-127 everywhere) and a single token."""
    cfg, dh = small_cfg, small_cfg.head_dim
    rng = np.random.default_rng(9)
    calls, exp = [], []

    def add(steps, theta, refresh, slot):
        c, e = int_calls(cfg, steps, theta, refresh, slot)
        calls.extend(c)
        exp.extend(e)

    # theta = 1: key 0 dominates every row, the other block has zero mass, yet is computed.
    dominant = theta1_step(rng, dh)
    add([dominant], 1.0, 0, 0)
    # Single-block masks: the same head at theta 0.5 (block 0 holds all the mass).
    add([dominant], 0.5, 0, 1)
    # One-block sequence (N <= Bq, Bk), random.
    add([random_step(rng, 9, dh)] * 1 + [random_step(rng, 9, dh)], 0.9, 0, 2)
    # All-equal logits: K = 0; two equal-mass blocks, theta 0.5 selects block 0 only.
    add([all_equal_step(rng, dh)], 0.5, 0, 3)
    calls[-1]["clear"] = True
    # Extreme logits: +-127 everywhere (|S| = Dh * 127**2), V = -127 / 127.
    add([extreme_step(rng, dh)], 0.8, 0, 0)
    # A single token.
    add([random_step(rng, 1, dh)], 0.9, 0, 1)
    assert exp[0]["mask"].all() and exp[1]["mask"].tolist() == [[True, False], [True, False]]
    assert exp[4]["mask"].tolist() == [[True, False], [True, False]]
    check(cfg, calls, exp)


def test_slot_refresh_policy(small_cfg):
    """Two slots interleaved with refresh 2 (each slot counts its own calls), then refresh 0
    (only the first call is a key step); ``clear`` restarts every slot."""
    cfg, dh = small_cfg, small_cfg.head_dim
    rng = np.random.default_rng(3)
    s0 = [random_step(rng, 5, dh) for _ in range(3)]
    s1 = [random_step(rng, 5, dh) for _ in range(3)]
    c0, e0 = int_calls(cfg, s0, 0.9, 2, 0)
    c1, e1 = int_calls(cfg, s1, 0.9, 2, 1)
    calls = [c0[0], c1[0], c0[1], c1[1], c0[2], c1[2]]
    exp = [e0[0], e1[0], e0[1], e1[1], e0[2], e1[2]]
    c2, e2 = int_calls(cfg, s0, 0.9, 0, 0)
    c2[0]["clear"] = True
    check(cfg, calls + c2, exp + e2)
    assert [e["key"] for e in exp + e2] == [True, True, False, False, True, True,
                                            True, False, False]


def test_config_errors():
    with pytest.raises(ConfigError, match="head_dim"):
        preset("tiny", encoding="nibble").replace(head_dim=0)
    with pytest.raises(ConfigError, match="head_dim=24"):
        AttentionGeometry(preset("tiny", encoding="nibble").replace(head_dim=24))
    with pytest.raises(ConfigError, match="block_k=8"):
        AttentionGeometry(preset("default").replace(block_k=8))
    with pytest.raises(ConfigError, match="head_dim=64 must be <= k_tile"):
        AttentionGeometry(preset("tiny", encoding="nibble").replace(head_dim=64))
    # PV weights up to 255 << e_max: three groups of them overflow a lane's partial sum
    # (sized for 128 << e_max per group), and too wide a PV sum overflows acc_bits.
    with pytest.raises(ConfigError, match="PV partial sum"):
        AttentionGeometry(preset("tiny", encoding="nibble").replace(k_tile=48, block_k=48))
    with pytest.raises(ConfigError, match="max_tokens=32 with e_max=10: the attention's PV "
                       "sums .* overflow the 30-bit accumulators"):
        AttentionGeometry(preset("tiny", encoding="nibble").replace(e_max=10))


@pytest.mark.slow
def test_default_preset_builds():
    from amaranth.back import rtlil
    rtlil.convert(AttentionEngine(preset("default")))


def test_cycle_model_counts_tiles(tiny_cfg):
    """Dense attention costs what a reuse step with every block costs; a key step costs more
    than dense (its second, masked pass), a sparse reuse step less."""
    cfg = tiny_cfg
    full = np.ones((2, 2), dtype=bool)
    sparse = np.array([[True, False], [False, True]])
    d = dense_cycles(cfg, 32)
    assert predict(cfg, 32, full, False, 65536).cycles == d
    assert predict(cfg, 32, sparse, True, 58982).cycles > d
    r = predict(cfg, 32, sparse, False, 58982)
    assert r.cycles < d and (r.count_qk, r.count_pv) == (2, 2)
    with pytest.raises(ValueError, match="at least one"):
        predict(cfg, 32, np.zeros((2, 2), dtype=bool), False, 58982)


@pytest.mark.slow
def test_real_head_64_tokens(real_head):
    """A real head, 64 tokens (4 x 4 tiles), theta 0.9, refresh 3, on a widened tiny preset."""
    cfg = preset("tiny").replace(max_tokens=64)
    steps = [tuple(a[:64] for a in s) for s in real_head]
    calls, exp = head_calls(cfg, steps, 0.9, 3)
    check(cfg, calls, exp)


def test_group_format_spread(small_cfg):
    """Logits scaled large (spread over many octaves): groups of different exponents, some
    clamped at ``e_max``; N = 17 (a last group of one key); key and reuse step."""
    cfg = small_cfg
    rng = np.random.default_rng(21)
    steps = [random_step(rng, 17, cfg.head_dim, 4.0) for _ in range(2)]
    shifts = group_shifts(cfg, *steps[0][:2], *steps[0][3:])
    assert {0, cfg.e_max} <= set(shifts.ravel().tolist()) and len(np.unique(shifts)) >= 5
    calls, exp = int_calls(cfg, steps, 0.9, 2)
    check(cfg, calls, exp)


@pytest.mark.parametrize("group,e_max", [(16, 0), (8, 3)])
def test_other_formats(small_cfg, group, e_max):
    """One exponent per row (``e_max = 0``) and groups of 8 keys with ``e_max = 3``: N = 29,
    key and reuse step."""
    cfg = small_cfg.replace(group=group, e_max=e_max)
    rng = np.random.default_rng(group + e_max)
    steps = [random_step(rng, 29, cfg.head_dim, 4.0) for _ in range(2)]
    kinds = len(np.unique(group_shifts(cfg, *steps[0][:2], *steps[0][3:])))
    assert kinds == 1 if e_max == 0 else kinds >= 3
    calls, exp = int_calls(cfg, steps, 0.7, 2)
    check(cfg, calls, exp)


@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_wide_softmax_key_and_reuse(small_cfg, lanes):
    """The softmax unit at P keys per beat (``softmax_lanes``): the feeder's beats, P words,
    block sums and row-max blocks; N = 27 (ragged blocks, a last beat with idle lanes), a key
    step whose mask gains a row maximum's block beyond the mass rule, one where it does not,
    and a reuse step."""
    cfg = small_cfg.replace(softmax_lanes=lanes)
    rng = np.random.default_rng(40 + lanes)
    steps = [random_step(rng, 27, cfg.head_dim, 2.0) for _ in range(2)]
    calls, exp = int_calls(cfg, steps, 0.5, 2)
    d = theta1_step(rng, cfg.head_dim)
    c2, e2 = int_calls(cfg, [d], 0.5, 0, 1)
    added = [(e["mask"].sum(axis=-1) > e["picks"]).any() for e in (exp[0], e2[0])]
    assert added == [True, False]
    check(cfg, calls + c2, exp + e2)
