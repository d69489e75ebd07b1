"""Benchmark of the golden model: DDIM sampling speed of the bundled DiT, FP32 and with DSTAR's
linear layers (``dstar.golden.hooks.DStarLinears``, the invariant checked every step).

``dstar bench golden [--preset P] [--steps N] [--samples N] [--json]`` runs ``run`` and prints
``format_report``.
"""

import time

from dstar.golden.dit import DiT
from dstar.golden.hooks import DStarLinears
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels

__all__ = ["run", "format_report"]


def run(cfg) -> dict:
    """Sample ``cfg.samples`` images over ``cfg.steps`` DDIM steps twice, FP32 then DSTAR;
    returns ``bench``, ``steps``, ``samples``, ``fp32_steps_per_second``,
    ``dstar_steps_per_second`` and ``dstar_seconds``."""
    model = DiT.bundled()
    labels = sample_labels(cfg.samples)
    noise = initial_noise(cfg.samples, model.shape, cfg.seed)
    t0 = time.perf_counter()
    ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale)
    t1 = time.perf_counter()
    ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale, linear=DStarLinears(cfg))
    t2 = time.perf_counter()
    return {"bench": "golden", "steps": cfg.steps, "samples": cfg.samples,
            "fp32_steps_per_second": cfg.steps / (t1 - t0),
            "dstar_steps_per_second": cfg.steps / (t2 - t1),
            "dstar_seconds": t2 - t1}


def format_report(rep: dict) -> str:
    """``run``'s figures as one line."""
    return (f"golden model, {rep['samples']} samples x {rep['steps']} DDIM steps: FP32 "
            f"{rep['fp32_steps_per_second']:.2f} steps/s, DSTAR (invariant checked every step) "
            f"{rep['dstar_steps_per_second']:.2f} steps/s")
