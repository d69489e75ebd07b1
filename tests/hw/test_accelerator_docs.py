"""The accelerator top driven as an integrator would, from its manifest and the rules of
docs/design/accelerator.md ("Driving the top") alone: beats and counters, ``error`` that does
not block and one ``ACK_ERROR``, ``done`` for runs only, the empty ``RUN_LINEAR``, ``theta_q``
out of its range, ``key``, what ``RUN_ATTENTION`` needs loaded, and the cycle table, with the
outputs compared to the golden model."""

import numpy as np

from dstar.config import preset
from dstar.golden.attention import attention_head, quantize_per_head, quantize_per_token
from dstar.golden.softmax import logit_multiplier
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import accelerator_manifest
from dstar.sim.accel_io import AttentionStep, command, receive, send
from dstar.sim.pysim_driver import io_adapter, simulate

N = 8


def _head(cfg, seed=0):
    """INT8 Q, K, V and the rows' logit multipliers of a random head of ``N`` rows."""
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal((N, cfg.head_dim)) for _ in range(3))
    (q_i, s_q), (k_i, s_k), (v_i, _) = quantize_per_token(q), quantize_per_head(k), \
        quantize_per_head(v)
    m, sh = logit_multiplier(s_q * s_k / np.sqrt(cfg.head_dim), cfg.attn_frac_bits)
    return q_i, k_i, v_i, m, sh


async def _watch(io, cycles):
    """``done`` and ``error`` in each of the next ``cycles`` cycles."""
    _, get, tick = io
    seen = []
    for _ in range(cycles):
        seen.append((get("done"), get("error")))
        await tick()
    return seen


def test_the_top_behaves_as_its_manifest_and_the_docs_say():
    cfg = preset("tiny")
    dut = Accelerator(cfg)
    man = accelerator_manifest(cfg, dut)
    names = man["counters"]
    out = {}

    async def counters(io):
        await send(io, "cmd", [command(man, "READ_COUNTERS")])
        beats = await receive(io, "dout", len(names))      # one counter per beat, in order
        assert all(0 <= b < 1 << man["counter_bits"] for b in beats)
        return dict(zip(names, beats, strict=True))

    async def body(io, man):
        # Two refusals; error stays up, does not block a LOAD and a READ; one ACK_ERROR clears.
        for bad in (command(man, "RUN_LINEAR", n_tokens=0, n_kt=1, n_mt=1),
                    command(man, "RUN_ATTENTION", slot=0, n_tokens=0)):
            await send(io, "cmd", [bad])
            out.setdefault("refused", []).append(await _watch(io, 3))
        await send(io, "cmd", [command(man, "LOAD", mem="STATE", addr=5, count=1)])
        await send(io, "din", [0x1234])
        out["load_done"] = await _watch(io, 3)             # no done for LOAD
        await send(io, "cmd", [command(man, "READ", mem="STATE", addr=5, count=1)])
        out["read_back"] = await receive(io, "dout", 1)
        out["before_ack"] = await counters(io)
        await send(io, "cmd", [command(man, "ACK_ERROR")])
        out["after_ack"] = await _watch(io, 2)
        # The empty RUN_LINEAR: accepted, done two cycles after it is taken, counters 0.
        await send(io, "cmd", [command(man, "RUN_LINEAR", n_tokens=1, n_kt=0, n_mt=1)])
        out["empty_run"] = await _watch(io, 4)
        out["after_empty"] = await counters(io)
        # A key step at theta_q = 65536 and the reuse step after it (refresh 2) of slot 1,
        # then a key step with theta_q = 0 (accepted) on slot 2.
        step = AttentionStep(man, N)
        q, k, v, m, sh = _head(cfg)
        out["key"] = await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        out["key_port"] = io[1]("key")
        out["reuse"] = await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        out["reuse_port"] = io[1]("key")
        out["theta0"] = await step.run(io, q, k, v, m, sh, slot=2, theta_q=0, refresh=2)
        return out

    async def bench(ctx):
        await body(io_adapter(ctx, dut), man)

    simulate(dut, bench)
    # error rises the cycle after a refused command is taken and stays; no done for a refusal
    assert out["refused"][0] == [(0, 1)] * 3 and out["refused"][1] == [(0, 1)] * 3
    assert out["load_done"] == [(0, 1)] * 3 and out["read_back"] == [0x1234]
    c = out["before_ack"]
    assert c["errors"] == 2 and c["commands"] == 5       # this READ_COUNTERS included
    assert out["after_ack"][-1] == (0, 0)                # one ACK_ERROR for both
    assert out["empty_run"] == [(0, 0), (1, 0), (0, 0), (0, 0)]
    c = out["after_empty"]
    assert all(c[n] == 0 for n in names if n.startswith("linear_"))
    assert c["errors"] == 2                              # ACK_ERROR does not clear the count
    # The key step's output is the full attention; the docs' cycle table (tiny, N = 8).
    want = attention_head(*_head(cfg), block_q=cfg.block_q, block_k=cfg.block_k,
                          frac_bits=cfg.attn_frac_bits, group=cfg.group, e_max=cfg.e_max)[0]
    o, _, mask, cnt = out["key"]
    np.testing.assert_array_equal(o, want)
    assert mask.all() and out["key_port"] == 1 and cnt["attention_key"] == 1
    assert (cnt["attention_cycles"], cnt["attention_qk_tiles"], cnt["attention_pv_tiles"]) == (
        815, 1, 1)
    o, _, _, cnt = out["reuse"]
    np.testing.assert_array_equal(o, want)               # unchanged inputs: the same output
    assert out["reuse_port"] == 0 and cnt["attention_key"] == 0
    assert cnt["attention_cycles"] == 493 and cnt["errors"] == 2
    _, _, mask, cnt = out["theta0"]
    assert cnt["errors"] == 2 and mask.any(axis=1).all()     # theta_q 0 is accepted
