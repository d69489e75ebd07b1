"""Benchmark of the attention-reuse controller on the bundled DiT: cycles of key and reuse steps
of real heads, and the ratio to dense attention on the same engine.

``dstar bench attention [--preset default] [--steps N] [--take N] [--layers 0 3 5]
[--heads 0 1 2 3] [--theta 0.9] [--refresh-attn 2] [--rtl N] [--json]`` runs ``run`` and prints
``format_report`` (or the report as JSON).

For every chosen layer and head it quantizes the head's Q, K, V of each of the first ``take``
steps of a ``steps``-step DDIM run (one sample, label 3, no guidance) as
``golden.attention.AttentionReuse`` does and runs the golden key / reuse steps (the slot's mask
and residual carried over, ``refresh`` from the options): ``golden.host.HeadSteps``. It predicts
the engine's cycles with the exact model ``dstar.sim.attention_cycles``. ``--rtl N`` also runs
the first ``N`` steps of the first layer/head on the Amaranth simulator and checks cycles and
outputs against the model and the golden model (slow: about 1 k cycles per second). Figures per
step kind: mean cycles, QK^T and PV tiles, and ``vs dense`` = cycles / dense cycles (dense: one
pass over every tile); over all measured steps (by default every step of the config's run) the
same ratio and the PE lanes' utilization.
"""

import time

import numpy as np

from dstar.config import ConfigError, Workload
from dstar.golden.attention import theta_fixed
from dstar.golden.dit import bundled_weights_path, float_attention, load_weights
from dstar.golden.host import HeadSteps
from dstar.outputs import check_work_dir
from dstar.sim.attention_cycles import dense_cycles, predict
from dstar.sim.traces import cache_path, read_cache, sample_first_steps, write_cache

__all__ = ["attention_inputs", "HeadSteps", "run", "format_report"]


def attention_inputs(layer: int = 0, steps: int = 20, take: int = 3, label: int = 3,
                     seed: int = 0, workload: str = Workload.DIGITS):
    """Float ``q, k, v`` of the attention of DiT block ``layer`` at the first ``take`` steps of a
    ``steps``-step DDIM run (one sample of ``label``, no guidance): three arrays
    ``(take, H, N, Dh)`` (float32, before the 1/sqrt(Dh) scale), of ``workload``'s bundled
    DiT. Cached under ``build/traces/``
    keyed by the weights file's size and modification time."""
    st = bundled_weights_path(workload).stat()
    cache = cache_path(f"attn{layer}", steps, take, label, seed, st, workload)
    hit = read_cache(cache, "q", "k", "v")
    if hit is not None:
        return hit
    check_work_dir(cache.parent, "trace cache folder")      # before minutes of sampling
    shape, weights = load_weights(workload=workload)
    name = f"blocks.{layer}.attn"
    rec = []

    def attn(n, q, k, v, step):
        if n == name:
            rec.append((q[0].copy(), k[0].copy(), v[0].copy()))
        return float_attention(n, q, k, v, step)

    sample_first_steps(shape, weights, steps, take, label, seed, attention=attn)
    q, k, v = (np.stack([r[i] for r in rec]).astype(np.float32) for i in range(3))
    write_cache(cache, q=q, k=k, v=v)
    return q, k, v


def _rtl_check(cfg, steps, theta, refresh):
    """Run steps on the Amaranth simulator; returns measured counters per step, raising on a
    mismatch with the golden output or the model."""

    from dstar.hw.attention import AttentionEngine
    from dstar.hw.generate import manifest
    from dstar.sim.pysim_driver import simulate
    from dstar.sim.tb_attention import HeadImage, run_head

    dut = AttentionEngine(cfg)
    img = HeadImage(manifest(dut), steps[0]["q"].shape[0])
    outs = []

    async def bench(ctx):
        io = (lambda n, v: ctx.set(getattr(dut, n), v),
              lambda n: int(ctx.get(getattr(dut, n))), ctx.tick)
        for s in steps:
            outs.append(await run_head(io, img, s["q"], s["k"], s["v"], s["m"], s["sh"],
                                       theta_q=theta_fixed(theta), refresh=refresh,
                                       read_res=False))

    simulate(dut, bench)
    for i, (s, o) in enumerate(zip(steps, outs, strict=True)):
        want = predict(cfg, s["q"].shape[0], s["mask"], s["key"], theta_fixed(theta),
                       s["picks"])
        if not np.array_equal(o.o, s["o"]) or o.counters != want.counters():
            raise AssertionError(f"RTL step {i}: output or counters differ "
                                 f"({o.counters} vs {want.counters()})")
    return [o.counters for o in outs]


def run(cfg, *, steps: int | None = None, take: int | None = None, layers=(0, 3, 5),
        heads=(0, 1, 2, 3), rtl: int = 0, name: str = "default") -> dict:
    """The engine's cycles of key and reuse steps (``cfg.theta``, ``cfg.refresh_attn``) for
    ``heads`` of the attention of DiT blocks ``layers``, steps ``0 .. take - 1`` of a
    ``steps``-step run (default: the config's ``steps``, all of them), against dense attention
    on the same engine; with ``rtl`` also the first ``rtl`` steps of the first layer and head on
    the Amaranth simulator (an ``AssertionError`` on a mismatch). Returns the report
    (``format_report``): ratios are cycles over dense attention's (below 1: faster), per step
    kind and over the measured steps (``run_ratio_vs_dense``), ``utilization`` = PE-lane busy
    cycles / cycles over the measured steps. ``name`` labels the configuration. Raises
    ``ConfigError`` if the DiT's heads do not fit ``cfg``."""
    theta, refresh = cfg.theta, cfg.refresh_attn
    steps = steps or cfg.steps
    take = min(take or steps, steps)
    tq = theta_fixed(theta)
    rows = {True: [], False: []}
    first = None
    t0 = time.time()
    for layer in layers:
        q, k, v = attention_inputs(layer, steps, take, workload=cfg.workload)
        n = q.shape[2]
        if n > cfg.max_tokens or q.shape[3] != cfg.head_dim:
            raise ConfigError(f"the DiT's heads (N={n}, Dh={q.shape[3]}) do not fit max_tokens="
                              f"{cfg.max_tokens}, head_dim={cfg.head_dim}")
        dense = dense_cycles(cfg, n)
        for h in heads:
            hs = HeadSteps(cfg)
            head_steps = [hs.step(q[s, h], k[s, h], v[s, h]) for s in range(q.shape[0])]
            if first is None:
                first = head_steps
            for s in head_steps:
                c = predict(cfg, n, s["mask"], s["key"], tq, s["picks"])
                rows[s["key"]].append((c.cycles, c.count_qk, c.count_pv, c.busy,
                                       float(s["mask"].mean())))
    nqb = -(-n // cfg.block_q)
    kinds = {}
    for kind, label in ((True, "key"), (False, "reuse")):
        r = np.array(rows[kind], dtype=np.float64).reshape(-1, 5)
        kinds[label] = {"count": len(r),
                        "mean_cycles": float(r[:, 0].mean()) if len(r) else None,
                        "qk_tiles": float(r[:, 1].mean()) if len(r) else None,
                        "pv_tiles": float(r[:, 2].mean()) if len(r) else None,
                        "mask_fraction": float(r[:, 4].mean()) if len(r) else None,
                        "ratio_vs_dense": float(r[:, 0].mean() / dense) if len(r) else None}
    every = np.array(rows[True] + rows[False], dtype=np.float64)
    rep = {"bench": "attention", "preset": name, "workload": str(cfg.workload), "tokens": n,
           "head_dim": cfg.head_dim,
           "block_q": cfg.block_q, "block_k": cfg.block_k,
           "tiles": nqb * -(-n // cfg.block_k), "lanes": cfg.group, "m_tile": cfg.m_tile,
           "n_arrays": cfg.n_arrays, "softmax_lanes": cfg.softmax_keys_per_cycle,
           "theta": theta, "refresh_attn": refresh,
           "layers": list(layers), "heads": list(heads), "run_steps": steps,
           "measured_steps": take, "dense_cycles": dense, "kinds": kinds,
           "key_ratio_vs_dense": kinds["key"]["ratio_vs_dense"],
           "reuse_ratio_vs_dense": kinds["reuse"]["ratio_vs_dense"],
           "run_ratio_vs_dense": float(every[:, 0].mean() / dense),
           "utilization": float(every[:, 3].sum() / every[:, 0].sum()),
           "model_seconds": round(time.time() - t0, 1)}
    if rtl:
        t1 = time.time()
        got = _rtl_check(cfg, first[:rtl], theta, refresh)
        rep["rtl"] = {"steps": len(got), "cycles": [g["cycles"] for g in got],
                      "model_equal": True, "bit_exact": True,
                      "seconds": round(time.time() - t1, 1)}
    return rep


def format_report(rep: dict) -> str:
    """``run``'s report as text."""
    run_of = ("every step" if rep["measured_steps"] == rep["run_steps"]
              else f"steps 0..{rep['measured_steps'] - 1}")
    out = [f"attention engine, preset {rep['preset']}: N={rep['tokens']}, Dh={rep['head_dim']}, "
           f"{rep['block_q']}x{rep['block_k']} blocks ({rep['tiles']} tiles), G={rep['lanes']} "
           f"lanes x {rep['m_tile']} x {rep['n_arrays']} arrays, softmax "
           f"{rep.get('softmax_lanes', 1)} keys/cycle; theta={rep['theta']}, "
           f"refresh_attn={rep['refresh_attn']}; layers {rep['layers']}, heads {rep['heads']}, "
           f"{run_of} of a {rep['run_steps']}-step run",
           f"dense attention (every tile once): {rep['dense_cycles']} cycles",
           f"{'step':>6} {'count':>5} {'cycles':>9} {'QK tiles':>8} {'PV tiles':>8} "
           f"{'mask':>6} {'vs dense':>8}"]
    for label, k in rep["kinds"].items():
        if k["count"]:
            out.append(f"{label:>6} {k['count']:>5} {k['mean_cycles']:>9.0f} "
                       f"{k['qk_tiles']:>8.1f} {k['pv_tiles']:>8.1f} {k['mask_fraction']:>6.3f} "
                       f"{k['ratio_vs_dense']:>7.3f}x")
    count = sum(k["count"] for k in rep["kinds"].values())
    out.append(f"{'all':>6} {count:>5} {rep['run_ratio_vs_dense'] * rep['dense_cycles']:>9.0f} "
               f"{'':>8} {'':>8} {'':>6} {rep['run_ratio_vs_dense']:>7.3f}x")
    out.append(f"PE-lane utilization {rep['utilization']:.3f} (golden + cycle model: "
               f"{rep['model_seconds']:.1f} s)")
    if "rtl" in rep:
        r = rep["rtl"]
        out.append(f"RTL (Amaranth simulator), layer {rep['layers'][0]} head {rep['heads'][0]}, "
                   f"{r['steps']} steps: cycles {r['cycles']} == model, outputs bit-exact "
                   f"({r['seconds']:.0f} s)")
    return "\n".join(out)
