"""The accelerator top with ``encoding = "fmdq"`` (``FmdqLinear`` behind the command stream,
attention on v1's arrays) on Amaranth's simulator, driven from the manifest alone
(``dstar.sim.fmdq_accel_io``): two layers' key steps with their weights side by side, then each
one's delta step from its saved state and ``Y`` restored; every integer as
``golden.fmdq_pe.linear_step``'s, every linear counter as ``sim.fmdq_cycles.linear_cycles``'."""

import numpy as np

from dstar.config import preset
from dstar.golden.fmdq_pe import linear_step
from dstar.hw.accelerator import FMDQ_COUNTERS, Accelerator
from dstar.hw.generate import accelerator_manifest
from dstar.sim.accel_io import counters
from dstar.sim.fmdq_accel_io import FmdqLinearStep
from dstar.sim.fmdq_cycles import linear_cycles
from dstar.sim.pysim_driver import io_adapter, simulate

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
    dut = Accelerator(cfg)
    man = accelerator_manifest(cfg, dut)
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

    simulate(dut, bench)
    assert fails == []
