"""The accelerator top with ``attention = "sar"`` on Amaranth's simulator, driven through its
command and data streams from the manifest (``dstar.sim.accel_io``): the score cache's memories
(``SC``, ``RL``) in ``LOAD`` / ``READ`` instead of the residual cache (``RES`` refused), the host
mask loaded, a cache step and V-only reuse steps bit-exact against ``dstar.golden.sar`` with the
cycle model's counters, a slot saved, overwritten by another head and restored."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.hw.accelerator import Accelerator, AcceleratorGeometry, Mem
from dstar.hw.generate import manifest
from dstar.sim.accel_io import AttentionStep, command, counters, load, send
from dstar.sim.attention_cycles import predict
from dstar.sim.pysim_driver import io_adapter, simulate
from tests.hw.cases.attention import random_step
from tests.hw.test_attention_sar import golden_steps, sparse_mask


def sar_cfg(encoding):
    return preset("tiny").replace(encoding=encoding, attention="sar", head_dim=16)


def test_memories_of_the_command_stream():
    """No simulation: SAR's ``SC`` and ``RL`` are loadable and readable, ``RES`` is gone; v1
    keeps ``RES`` and has no score cache."""
    sar, v1 = (AcceleratorGeometry(sar_cfg("fmdq").replace(**kw))
               for kw in ({}, {"attention": "residual"}))
    assert {Mem.SC, Mem.RL} <= set(sar.writable) & set(sar.readable)
    assert Mem.RES not in sar.writable + sar.readable and "RES" not in sar.depths
    assert sar.depths["SC"] == sar.attention.sc_depth * sar.attention.p_banks
    assert Mem.RES in v1.writable and "SC" not in v1.depths


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["fmdq", "nibble"])
def test_cache_and_reuse_steps_and_a_saved_slot(encoding):
    """Slot 0, N = 27, a sparse host mask, refresh 3: a cache step, a reuse step (V only
    loaded), the slot saved (SLOT, MASK, SC, RL), another head's cache step in it after its
    counter was cleared, the slot restored, its second reuse step; O bit-exact, counters
    equal to the model; a LOAD of RES is refused."""
    cfg = sar_cfg(encoding)
    rng = np.random.default_rng(41)
    n, refresh = 27, 3
    mask = sparse_mask(rng, n, cfg)
    steps = [random_step(rng, n, cfg.head_dim, 2.0, sink=4) for _ in range(3)]
    gold = golden_steps(cfg, steps, mask, refresh)
    other_mask = np.ones_like(mask)
    other = random_step(rng, n, cfg.head_dim, 2.0)
    (_, o_other, _, _), = golden_steps(cfg, [other], other_mask, refresh)
    dut = Accelerator(cfg)
    man = manifest(dut)
    got = {}

    async def bench(ctx):
        io = io_adapter(ctx, dut)
        step = AttentionStep(man, n)

        async def go(st, cache, msk=None):
            q, k, v, m, sh = st
            if not cache:
                q = k = m = sh = None
            o, _, _, c = await step.run(io, q, k, v, m, sh, slot=0, theta_q=1 << 16,
                                        refresh=refresh, read_state=False, mask=msk)
            return o, c
        got["s0"] = await go(steps[0], True, mask)
        got["s1"] = await go(steps[1], False)
        saved = await step.save_slot(io, 0)
        await load(io, man, "SLOT", {0: step.slot_word(False, 0)})     # a fresh head
        got["other"] = await go(other, True, other_mask)
        await step.restore_slot(io, saved)
        got["s2"] = await go(steps[2], False)
        # LOAD of RES (no memory on SAR: the manifest does not list it, so packed by hand).
        lay = {f["name"]: f for f in man["layouts"]["command"]["fields"]}
        mem_f = lay["args.mem.mem"]
        await send(io, "cmd", [command(man, "LOAD", mem="MASK", addr=0, count=1)
                               & ~(((1 << mem_f["width"]) - 1) << mem_f["offset"])
                               | int(Mem.RES) << mem_f["offset"]])
        await io[2]()
        got["errors"] = (await counters(io, man))["errors"]

    simulate(dut, bench)
    for key, s, msk, o_want, cache in (("s0", n, mask, gold[0][1], True),
                                       ("s1", n, mask, gold[1][1], False),
                                       ("other", n, other_mask, o_other, True),
                                       ("s2", n, mask, gold[2][1], False)):
        o, c = got[key]
        want = predict(cfg, s, msk, cache, 1 << 16)
        assert np.array_equal(o, o_want), f"{key}: O differs in {(o != o_want).sum()} elements"
        assert c["attention_key"] == cache, key
        assert (c["attention_qk_tiles"], c["attention_pv_tiles"]) == (want.count_qk,
                                                                      want.count_pv), key
        assert c["attention_cycles"] == want.cycles, key
    assert got["errors"] == 1
