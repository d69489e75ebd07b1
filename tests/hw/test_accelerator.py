"""The accelerator top (``dstar.hw.accelerator.Accelerator``) on Amaranth's simulator, driven
through its command and data streams from the manifest alone (``dstar.sim.accel_io``): linear
steps and attention steps on the same PE arrays, bit-exact against the golden model with the
cycle models' counters; targets clipped by the top; refused commands; ``dout`` back-pressure."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import manifest
from dstar.sim.accel_io import LinearStep, command, counters, read, receive, send
from dstar.sim.pysim_driver import io_adapter, simulate
from dstar.sim.tb_accelerator import run_case
from tests.hw.cases.accelerator import interleaved
from tests.hw.cases.linear import expected_steps
from tests.hw.fixtures import random_weights


@pytest.fixture(scope="module")
def cfg():
    """The tiny preset with Dh = 16 (half the lane work per attention tile)."""
    return preset("tiny", encoding="nibble").replace(head_dim=16)


def run_bench(cfg, body):
    """Simulate a fresh accelerator with the testbench ``body(io, man)``; returns its result."""
    dut = Accelerator(cfg)
    man = manifest(dut)
    out = {}

    async def bench(ctx):
        out["r"] = await body(io_adapter(ctx, dut), man)

    simulate(dut, bench)
    return out["r"]


def test_layers_and_attention_share_the_arrays_and_save_their_state(cfg):
    """Two layers' key steps, an attention key and reuse step on the same arrays (which
    overwrite the accumulators), then each layer's delta step from its saved state and Y:
    every integer as the golden model's, every counter as the cycle models'."""
    case = interleaved(cfg, np.random.default_rng(21))

    async def body(io, man):
        return await run_case(io, man, case)

    assert run_bench(cfg, body) == []


def test_a_case_with_a_wrong_expectation_fails(cfg):
    """The case runner compares: one value off in the expected Y is reported."""
    case = interleaved(cfg, np.random.default_rng(21), n=2, ms=(8,), n_att=16)
    case["s0_y_out"] = case["s0_y_out"].copy()
    case["s0_y_out"][0, 0] += 1

    async def body(io, man):
        return await run_case(io, man, case)

    fails = run_bench(cfg, body)
    assert fails == ["step 0: Y differs in 1 values"]


def test_the_top_clips_targets_and_counts_them(cfg):
    """Targets beyond +-target_max are clipped as they are loaded: the step is the golden
    step of the clipped targets, and ``target_clipped`` counts the elements clipped."""
    rng = np.random.default_rng(22)
    n, k, m = 4, 32, 8
    w = random_weights(rng, k, m)
    top = (1 << (cfg.state_bits - 1)) - 1          # the widest value a target word holds
    t = rng.integers(-top, top + 1, size=(n, k))
    t[0, :4] = [top, -top, cfg.target_max + 1, -cfg.target_max - 1]
    clipped = np.clip(t, -cfg.target_max, cfg.target_max)
    (xs, y_want, _), = expected_steps(cfg, w, [(clipped, True)])

    async def body(io, man):
        y, s = await LinearStep(man, k, m, n).run(io, t, key=True, w_q=w)
        return y, s, await counters(io, man)

    y, s, cnt = run_bench(cfg, body)
    assert np.array_equal(s, xs) and np.array_equal(y, y_want)
    assert cnt["target_clipped"] == int((np.abs(t) > cfg.target_max).sum()) > 0


def test_refused_commands_set_error_count_and_are_not_executed(cfg):
    async def body(io, man):
        _, get, tick = io
        depth = man["memories"]["Q"]["depth"]
        depth_s = man["memories"]["STATE"]["depth"]
        bad = [
            command(man, "NOP") | (15 << 0),                                 # unknown opcode
            command(man, "LOAD", mem="Q", addr=depth - 1, count=2),          # past the end
            command(man, "LOAD", mem="Q", addr=0, count=0),                  # empty
            command(man, "LOAD", mem="O", addr=0, count=1),                  # read only
            command(man, "READ", mem="WEIGHTS", addr=0, count=1),            # write only
            command(man, "READ", mem="STATE", addr=depth_s - 1, count=2),    # past the end
            command(man, "RUN_LINEAR", n_tokens=0, n_kt=1, n_mt=1),
            command(man, "RUN_LINEAR", n_tokens=cfg.max_tokens + 1, n_kt=1, n_mt=1),
            command(man, "RUN_LINEAR", n_tokens=1, n_kt=1, n_mt=1,          # weights past
                    w_base=man["memories"]["WEIGHTS"]["depth"] - cfg.k_tile + 1),   # the end
            command(man, "RUN_ATTENTION", slot=cfg.attn_slots - 1, n_tokens=0),
            command(man, "NOP") | (12 << 0),                                 # unknown opcode
        ]
        flags = []
        for word in bad:
            await send(io, "cmd", [word])
            await tick()
            flags.append((get("error"), get("busy")))
        # A refused LOAD takes no data: din stays not ready.
        ready_after = get("din__ready")
        first = await counters(io, man)
        await send(io, "cmd", [command(man, "ACK_ERROR")])
        await tick()
        cleared = get("error")
        # The engine still works: one word written and read back.
        await send(io, "cmd", [command(man, "LOAD", mem="STATE", addr=3, count=1)])
        await send(io, "din", [0x1234])
        back = await read(io, man, "STATE", [3])
        return flags, ready_after, first, cleared, back, await counters(io, man)

    flags, ready_after, first, cleared, back, last = run_bench(cfg, body)
    assert flags == [(1, 0)] * 11 and ready_after == 0
    assert first["errors"] == 11 and first["commands"] == 12      # READ_COUNTERS included
    assert first["linear_cycles"] == 0 and first["attention_cycles"] == 0
    assert cleared == 0 and last["errors"] == 11
    assert back == {3: 0x1234}


def test_reads_lose_no_word_under_back_pressure(cfg):
    """``dout`` held not ready in irregular cycles: every word arrives once, in address
    order."""
    rng = np.random.default_rng(23)
    words = {a: int(w) for a, w in enumerate(rng.integers(0, 1 << 30, size=40))}

    async def body(io, man):
        await send(io, "cmd", [command(man, "LOAD", mem="STATE", addr=0, count=len(words))])
        await send(io, "din", [words[a] for a in range(len(words))])
        pattern = rng.random(4000) < 0.6
        await send(io, "cmd", [command(man, "READ", mem="STATE", addr=0, count=len(words))])
        return await receive(io, "dout", len(words), stall=lambda i: bool(pattern[i]))

    assert run_bench(cfg, body) == [words[a] for a in range(len(words))]



def test_a_slot_saved_and_restored_resumes_its_reuse_steps(cfg):
    """Head A's key step in slot 0, head B's key step in the same slot (after A's residual,
    mask and step counter were read out and the counter cleared: ``SLOT`` valid 0 makes the
    next step a key step), then A's state loaded back: A's reuse step is the golden reuse step
    of A, as if B had never run."""
    from dstar.sim.accel_io import AttentionStep, load
    from tests.hw.cases.attention import int_calls, random_step

    rng = np.random.default_rng(24)
    n = 32
    steps_a = [random_step(rng, n, cfg.head_dim, sink=4) for _ in range(2)]
    steps_b = [random_step(rng, n, cfg.head_dim, sink=4)]
    calls_a, exp_a = int_calls(cfg, steps_a, theta=0.5, refresh=2)
    calls_b, exp_b = int_calls(cfg, steps_b, theta=0.5, refresh=2)

    async def body(io, man):
        step = AttentionStep(man, n)

        async def go(c):
            return await step.run(io, *(c[k] for k in ("q", "k", "v", "m", "sh")), slot=0,
                                  theta_q=c["theta_q"], refresh=c["refresh"])
        out = [await go(calls_a[0])]
        saved = await step.save_slot(io, 0)
        await load(io, man, "SLOT", {0: step.slot_word(False, 0)})     # B: a fresh head
        out.append(await go(calls_b[0]))
        await step.restore_slot(io, saved)
        out.append(await go(calls_a[1]))
        await load(io, man, "SLOT", {0: step.slot_word(False, 0)})
        out.append(await go(calls_a[1]))
        return out

    (o_a0, *_, c0), (o_b, *_, c1), (o_a1, r_a1, mask_a1, c2), (_, _, _, c3) = run_bench(cfg, body)
    assert np.array_equal(o_a0, exp_a[0]["o"]) and c0["attention_key"] == 1
    assert np.array_equal(o_b, exp_b[0]["o"]) and c1["attention_key"] == 1
    assert c2["attention_key"] == 0 and np.array_equal(o_a1, exp_a[1]["o"])
    assert np.array_equal(r_a1, exp_a[1]["r"]) and np.array_equal(mask_a1, exp_a[1]["mask"])
    assert c3["attention_key"] == 1 and c3["errors"] == 0
