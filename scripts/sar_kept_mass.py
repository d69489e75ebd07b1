"""How much of each query row's attention a SAR static mask keeps, on the FP32 trajectory of the
evaluation's first samples (the evaluation seed, not the calibration's).

    python scripts/sar_kept_mass.py WORKLOAD SAMPLES THETAS MASKS.npz > OUT.json

Per theta and step range: the mean, the 5th and 1st percentiles and the minimum over every
(batch element, head, query row, layer) call of the row's float softmax probability inside the
mask. A cache step's softmax is normalized over the kept keys only, so the rest of the row's
mass is moved onto them (no residual carries it, unlike v1)."""

import json
import math
import sys

import numpy as np

from dstar.config import Config
from dstar.golden.attention import expand_mask
from dstar.golden.dit import DiT
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels
from dstar.golden.sar import MaskError, load_masks

RANGES = ((0, 10), (10, 25), (25, 40), (40, 50), (0, 50))


def kept_mass(workload: str, samples: int, thetas, masks_path) -> dict:
    cfg = Config(workload=workload, samples=samples)
    model = DiT.bundled(cfg.workload)
    ms = load_masks(masks_path)
    names, n = model.attention_names(), model.shape.tokens
    ms.check(len(names), model.shape.heads, n, cfg.block_q, cfg.block_k)
    el = {th: dict(zip(names, expand_mask(ms.at(th), n, n, cfg.block_q, cfg.block_k),
                       strict=True)) for th in thetas}
    rec = {th: [] for th in thetas}

    def attn(name, q, k, v, step):
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        z = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        for th in thetas:
            rec[th].append((step, (p * el[th][name]).sum(axis=-1).ravel().astype(np.float32)))
        return p @ v

    labels = sample_labels(cfg.samples, model.shape.num_classes)
    noise = initial_noise(cfg.samples, model.shape, cfg.seed)
    ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale, attention=attn)
    out = {}
    for th in thetas:
        out[str(th)] = {}
        for lo, hi in RANGES:
            x = np.concatenate([kept for s, kept in rec[th] if lo <= s < hi])
            out[str(th)][f"{lo}-{hi}"] = {
                "mean": round(float(x.mean()), 4), "p5": round(float(np.percentile(x, 5)), 4),
                "p1": round(float(np.percentile(x, 1)), 4), "min": round(float(x.min()), 4)}
    return {"workload": workload, "samples": samples, "steps": cfg.steps, "masks": str(masks_path),
            "kept_mass": out}


def main(argv) -> int:
    if len(argv) != 4:
        print("usage: sar_kept_mass.py WORKLOAD SAMPLES THETAS MASKS.npz", file=sys.stderr)
        return 2
    try:
        thetas = [float(t) for t in argv[2].split(",")]
        rep = kept_mass(argv[0], int(argv[1]), thetas, argv[3])
    except (ValueError, MaskError, OSError) as e:
        print(f"sar_kept_mass.py: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
