"""The accelerator top with ``encoding = "fmdq"`` (``FmdqLinear`` and the attention engine on
the same SIMD-4 arrays, behind the command stream) on Amaranth's simulator, driven from the
manifest alone (``dstar.sim.fmdq_accel_io``, ``dstar.sim.accel_io``): two layers' key steps
with their weights side by side, an attention key step and a reuse step on the same arrays
(which overwrite the accumulators), then each layer's delta step from its saved state and ``Y``
restored; every integer as ``golden.fmdq_pe.linear_step``'s and ``golden.attention``'s, every
counter as ``sim.fmdq_cycles.linear_cycles``' and ``sim.attention_cycles.predict``'s."""

import numpy as np

from dstar.config import preset
from dstar.golden.fmdq_pe import linear_step
from dstar.hw.accelerator import FMDQ_COUNTERS, Accelerator
from dstar.hw.generate import manifest
from dstar.sim.accel_io import AttentionStep, counters
from dstar.sim.attention_cycles import predict
from dstar.sim.fmdq_accel_io import FmdqLinearStep
from dstar.sim.fmdq_cycles import linear_cycles
from dstar.sim.pysim_driver import io_adapter, simulate
from tests.hw.cases.attention import int_calls, random_step

#: The manifest's linear counters and ``linear_cycles``' names for them.
NAMES = {"linear_cycles": "cycles", "linear_stall_load": "stall_load",
         "linear_groups": "count_groups", "linear_units": "count_units",
         "linear_clipped": "count_clipped", "linear_saturated": "count_saturated"}


def test_two_layers_save_and_restore():
    cfg = preset("tiny").replace(encoding="fmdq", head_dim=16)
    rng = np.random.default_rng(5)
    layers = []
    for n, k, m in ((20, 40, 12), (9, 64, 8)):
        w = rng.integers(-128, 128, size=(k, m))
        t0 = rng.integers(-2000, 2000, size=(n, k)) * (rng.random((n, k)) < 0.7)
        t1 = np.clip(t0 + rng.integers(-40, 40, size=(n, k)), -cfg.target_max, cfg.target_max)
        layers.append((w, [t0, t1]))
    n_att = 27                                  # ragged blocks, a partial token tile
    calls, exp = int_calls(cfg, [random_step(rng, n_att, cfg.head_dim, 2.0, sink=4)
                                 for _ in range(2)], 0.5, 2)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    dut = Accelerator(cfg)
    man = manifest(dut)
    assert man["counters"] == list(FMDQ_COUNTERS)
    fails = []

    async def bench(ctx):
        io = io_adapter(ctx, dut)
        saved, base = {}, 0
        for s in range(2):
            for i, (w, ts) in enumerate(layers):
                n, k = ts[s].shape
                step = FmdqLinearStep(man, k, w.shape[1], n)
                if s == 0:
                    saved[i] = {"base": base, "xs": None, "y": None}
                    base += step.weight_span
                sv = saved[i]
                y, xs = await step.run(io, ts[s], key=s == 0, w_q=w if s == 0 else None,
                                       w_base=sv["base"], state=sv["xs"], y=sv["y"])
                got = await counters(io, man)
                want = linear_step(ts[s], sv["xs"], sv["y"], w, key=s == 0,
                                   token_tile=cfg.token_tile, window=cfg.sort_window,
                                   e_max=cfg.e_max, tau=cfg.tau)
                model = linear_cycles(want.enc, cfg.sort_window, step.img.n_mt)
                if not np.array_equal(y, want.y) or not np.array_equal(xs, want.xs):
                    fails.append(f"layer {i} step {s}: not bit-exact")
                if any(got[c] != model[v] for c, v in NAMES.items()):
                    fails.append(f"layer {i} step {s}: {got} != {model}")
                sv["xs"], sv["y"] = xs, y
            if s == 0:                          # attention on the arrays between the steps
                att = AttentionStep(man, n_att)
                for c, e in zip(calls, exp, strict=True):
                    o, r, mask, got = await att.run(io, *(c[k] for k in ("q", "k", "v", "m",
                                                                         "sh")),
                                                    slot=0, theta_q=c["theta_q"],
                                                    refresh=c["refresh"])
                    model = predict(cfg, n_att, e["mask"], e["key"], c["theta_q"],
                                    e["picks"]).counters()
                    if not (np.array_equal(o, e["o"]) and np.array_equal(r, e["r"])
                            and np.array_equal(mask, e["mask"])):
                        fails.append(f"attention key={e['key']}: not bit-exact")
                    if (got["attention_cycles"], got["attention_qk_tiles"],
                            got["attention_pv_tiles"]) != tuple(model.values()):
                        fails.append(f"attention key={e['key']}: {got} != {model}")

    simulate(dut, bench)
    assert fails == []
