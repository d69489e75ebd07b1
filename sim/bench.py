"""Benchmark of the linear datapath on the bundled DiT: cycles, PE-lane utilization and the cycle
ratio versus the same layer run densely (every element HIGH, no skipping) on the same hardware.

``python -m sim.bench [--preset default] [--steps 20] [--blocks 3] [--layers mlp.fc1 ...]
[--packing compact lockstep] [--every N] [--lane-rotation R] [--rtl N]``

For every chosen layer and sampling step it encodes the step with the golden model
(``DiffLinear``, tau from the config) and predicts cycles with the exact cycle model; ``--rtl N``
also runs the first ``N`` delta steps of the first layer on the Amaranth simulator (one column
block, all tokens) and checks the measured cycles against the model. Figures:

* element mix (ZERO / LOW / HIGH) and ``ideal`` = dense nibble passes / element passes;
* per strategy: cycles, ``x dense`` (dense cycles / cycles), the fraction of ``ideal`` reached,
  lane utilization (useful lane cycles / all lane cycles) and the named idle lane cycles.
"""

import argparse
import time

import numpy as np

from dstar.config import load_config
from golden.difflinear import DiffLinear, encode_step
from golden.encoder import HIGH, Encoded
from golden.quant import exact_matmul
from sim.cycle_model import predict
from sim.pysim_driver import run_layer_pysim
from sim.traces import linear_inputs

__all__ = ["dense_encoding", "main"]


def dense_encoding(enc: Encoded) -> Encoded:
    """The same step with every element HIGH (what a dense INT8 pass costs on these lanes)."""
    return Encoded(q=enc.q, cls=np.full_like(enc.cls, HIGH), shift=enc.shift,
                   clipped=enc.clipped, saturated=enc.saturated, group=enc.group)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m sim.bench")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--config")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--blocks", type=int, nargs="+", default=[3])
    ap.add_argument("--layers", nargs="+", default=["mlp.fc1", "mlp.fc2", "attn.qkv",
                                                   "attn.proj"])
    ap.add_argument("--packing", nargs="+", default=["compact", "lockstep"])
    ap.add_argument("--rtl", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="model every N-th step only")
    ap.add_argument("--lane-rotation", type=int, nargs="+", default=[0],
                    help="compact strategy's lane rotation(s) R (0: the default, see "
                         "hw.geometry); several compare them on the same steps")
    args = ap.parse_args(argv)
    base = load_config(args.config, args.preset)
    # Strategies: (label, packing, lane rotation).
    strategies = []
    for p in args.packing:
        if p == "compact":
            strategies += [(f"compact/R{r}" if len(args.lane_rotation) > 1 else "compact",
                            p, r) for r in args.lane_rotation]
        else:
            strategies.append((p, p, 0))
    tot = {label: {"cycles": 0, "useful": 0, "lanes": 0} for label, _, _ in strategies}
    tot_dense = tot_ideal_num = tot_ideal_den = 0
    first = True
    for blk in args.blocks:
        for name in args.layers:
            layer = f"blocks.{blk}.{name}"
            xs, w, b = linear_inputs(layer, steps=args.steps)
            dl = DiffLinear(w, b, base)
            k, m = w.shape[1], w.shape[0]
            dense = None
            encs = []
            for s, x in enumerate(xs):
                r = dl(x, s)
                encs.append((r.enc, r.target))
            for s, (enc, _) in enumerate(encs):
                if s % args.every:
                    continue
                t0 = time.time()
                if dense is None:
                    dense = predict(base, dense_encoding(enc), k, m).cycles
                f = np.bincount(enc.cls.ravel(), minlength=3) / enc.cls.size
                passes = enc.cls.size * f[1] + 2 * enc.cls.size * f[2]
                ideal = 2 * enc.cls.size / passes
                tot_dense += dense
                tot_ideal_num += 2 * enc.cls.size
                tot_ideal_den += passes
                line = [f"{layer} step {s:2d} mix {f[0]:.2f}/{f[1]:.2f}/{f[2]:.2f} "
                        f"ideal x{ideal:.2f} dense {dense}"]
                for label, p, rot in strategies:
                    rep = predict(base.replace(packing=p), enc, k, m, lane_rotation=rot)
                    sp = dense / rep.cycles
                    tot[label]["cycles"] += rep.cycles
                    tot[label]["useful"] += rep.useful
                    tot[label]["lanes"] += rep.lanes * rep.cycles
                    idle = " ".join(f"{a}={v}" for a, v in rep.account.items() if v)
                    line.append(f"  {label:10s} {rep.cycles:7d} cycles x{sp:.2f} "
                                f"({sp / ideal:.0%} of ideal) util {rep.utilization:.2f} "
                                f"idle lane-cycles: {idle}")
                print("\n".join(line) + f"  [{time.time() - t0:.1f}s]", flush=True)
            if first and args.rtl:
                first = False
                cols = base.m_tile * base.n_arrays
                w_q = dl.w_q[:, :cols]
                for label, p, rot in strategies:
                    cfg = base.replace(packing=p)
                    steps = [(encs[0][1], True)] + [(encs[s][1], False)
                                                   for s in range(1, args.rtl + 1)]
                    t0 = time.time()
                    outs = run_layer_pysim(cfg, w_q, steps, lane_rotation=rot)
                    xs_g = np.zeros_like(steps[0][0])
                    y_g = np.zeros((xs_g.shape[0], cols), dtype=np.int64)
                    for s, ((target, key), out) in enumerate(zip(steps, outs, strict=True)):
                        if key:
                            xs_g, y_g = np.zeros_like(xs_g), np.zeros_like(y_g)
                        enc_s, xs_g = encode_step(target, xs_g, cfg)
                        y_g = y_g + exact_matmul(enc_s.decode(), w_q)
                        model = predict(cfg, enc_s, k, cols, lane_rotation=rot).counters()
                        exact = (np.array_equal(out.y, y_g) and np.array_equal(out.state, xs_g))
                        print(f"RTL {layer}[:, :{cols}] {label} step {s}: measured "
                              f"{out.counters['cycles']} cycles, model {model['cycles']} "
                              f"({'equal' if model == out.counters else 'DIFFERENT'}), "
                              f"Y and state {'bit-exact' if exact else 'DIFFERENT'}",
                              flush=True)
                    print(f"  ({time.time() - t0:.0f}s of Amaranth simulation)")
    print("== totals over the modelled layer-steps ==")
    ideal = tot_ideal_num / tot_ideal_den
    print(f"ideal x{ideal:.2f}, dense {tot_dense} cycles")
    for label, t in tot.items():
        sp = tot_dense / t["cycles"]
        print(f"{label:10s} {t['cycles']} cycles x{sp:.2f} ({sp / ideal:.0%} of ideal), "
              f"utilization {t['useful'] / t['lanes']:.2f}")


if __name__ == "__main__":
    main()
