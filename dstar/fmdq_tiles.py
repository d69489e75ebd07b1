"""FMDQ's work against its token tile ``T`` and sort window, from one sampling run.

``python -m dstar.fmdq_tiles --workload digits --samples 1`` runs the bundled DiT once with FMDQ
linears (the configuration's rule, tau and lattice, ``token_tile`` as configured) and float
attention, and re-encodes every layer-step's difference ``D = X_int - Xs_int`` at each tile of
``--tiles`` and window of ``--windows``: FMDQ's widths, groups, padding and speed-up over dense
INT8 per setting, per layer type, from the same differences. Only the configured ``T`` runs the
closed loop; the others code the differences that loop produced (open loop: with the lossless
rule at ``tau = 0`` the state is exact but for clipped sub-channels, so the differences hardly
depend on ``T``). Cheaper than one sampling run per setting (``dstar analyze --sweep``), which
measures accuracy too. Prints one JSON object.
"""

import argparse
import json

from dstar.config import Encoding, Workload, load_config
from dstar.golden.dit import LINEAR_TYPES, DiT
from dstar.golden.fmdq import fmdq_encode
from dstar.golden.fmdq_stats import FmdqStats, count_fmdq
from dstar.golden.hooks import DStarLinears, layer_type
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels


def measure(cfg, tiles, windows) -> dict:
    """``{"T=<t> window=<w>": {"all": summary, layer_type: summary}}`` over the run."""
    stats = {(t, w): FmdqStats(LINEAR_TYPES) for t in tiles for w in windows}
    hook: DStarLinears

    def on_result(name, step, res):
        layer = hook.layers[name]
        d = res.target - (layer.xs - res.enc.decode())          # this step's difference
        for t in tiles:
            enc = fmdq_encode(d, t, cfg.e_max, cfg.tau, cfg.fmdq_rule, cfg.fmdq_thr0)
            for w in windows:
                stats[t, w].add_counts(step, layer_type(name), count_fmdq(enc, w))

    hook = DStarLinears(cfg, LINEAR_TYPES, on_result=on_result)
    model = DiT.bundled(cfg.workload)
    ddim_sample(model, sample_labels(cfg.samples, model.shape.num_classes),
                initial_noise(cfg.samples, model.shape, cfg.seed), cfg.steps, cfg.cfg_scale,
                linear=hook)
    out = {}
    for (t, w), st in stats.items():
        out[f"T={t} window={w}"] = {"all": st.summary(st.total()), **{
            lt: st.summary(st.total(layer_type=lt)) for lt in LINEAR_TYPES}}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=[w.value for w in Workload],
                    default=Workload.DIGITS.value)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--tiles", default="8,16,32,64")
    ap.add_argument("--windows", default="16,32,64,128,512")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    a = ap.parse_args(argv)
    over = dict(s.split("=", 1) for s in a.set)
    for k in ("token_tile", "sort_window", "fmdq_thr0", "tau", "lattice_bits", "steps"):
        if k in over:
            over[k] = int(over[k])
    cfg = load_config(workload=a.workload, samples=a.samples, encoding=Encoding.FMDQ, **over)
    tiles = [int(v) for v in a.tiles.split(",")]
    windows = [int(v) for v in a.windows.split(",")]
    res = measure(cfg, tiles, windows)
    print(json.dumps({"workload": a.workload, "samples": a.samples, "steps": cfg.steps,
                      "config": cfg.to_dict(), "points": res}, indent=1))


if __name__ == "__main__":
    main()
