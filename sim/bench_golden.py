"""Benchmark of the golden model: DDIM sampling speed of the bundled DiT on each of the main
job's five runs (``dstar.golden.runs.PATHS``: FP32, dense W8A8, DSTAR's linears with the invariant
checked every step, attention reuse with its errors measured, both), run as ``dstar analyze``
runs them (in worker processes where the machine has two cores), and the whole job's wall time
over its FP32 run's.

``dstar bench golden [--preset P] [--steps N] [--samples N] [--json]`` runs ``run`` and prints
``format_report``.
"""

import time

from dstar.golden.dit import DiT
from dstar.golden.runs import PATHS, RunPath, run_paths, workers_for

__all__ = ["LABELS", "run", "format_report"]

#: The runs' names for people, in report order.
LABELS = {RunPath.FP32: "FP32", RunPath.W8A8: "W8A8", RunPath.DSTAR_LINEAR: "DSTAR linears",
          RunPath.ATTENTION: "attention reuse", RunPath.DSTAR: "both"}


def run(cfg, workers: int | None = None) -> dict:
    """Sample ``cfg.samples`` images over ``cfg.steps`` DDIM steps on each run. Returns
    ``bench``, ``steps``, ``samples``, ``workers``, ``paths`` (per run of ``LABELS``: ``seconds``
    and ``steps_per_second``), ``seconds`` (the five runs' wall time), ``ratio_to_fp32`` (that
    over the FP32 run's), and as before ``fp32_steps_per_second``, ``dstar_steps_per_second``
    and ``dstar_seconds`` (DSTAR's linears)."""
    model = DiT.bundled(cfg.workload)
    t0 = time.perf_counter()
    runs = run_paths(cfg, model, workers=workers)
    total = time.perf_counter() - t0
    paths = {tag: {"seconds": runs[tag][1], "steps_per_second": cfg.steps / runs[tag][1]}
             for tag in LABELS if tag in PATHS}
    return {"bench": "golden", "workload": str(cfg.workload), "steps": cfg.steps,
            "samples": cfg.samples,
            "workers": workers_for(workers), "paths": paths, "seconds": total,
            "ratio_to_fp32": total / paths[RunPath.FP32]["seconds"],
            "fp32_steps_per_second": paths[RunPath.FP32]["steps_per_second"],
            "dstar_steps_per_second": paths[RunPath.DSTAR_LINEAR]["steps_per_second"],
            "dstar_seconds": paths[RunPath.DSTAR_LINEAR]["seconds"]}


def format_report(rep: dict) -> str:
    """``run``'s figures: one line per run, then the whole job against FP32."""
    head = f"golden model, {rep['samples']} samples x {rep['steps']} DDIM steps"
    if "paths" not in rep:               # a report from before the per-run figures
        return (f"{head}: FP32 {rep['fp32_steps_per_second']:.2f} steps/s, DSTAR linears "
                f"(invariant checked every step) {rep['dstar_steps_per_second']:.2f} steps/s")
    lines = [f"{head}, {rep['workers']} worker process(es):"]
    for tag, label in LABELS.items():
        p = rep["paths"][tag]
        lines.append(f"  {label:<16}{p['steps_per_second']:>8.2f} steps/s {p['seconds']:>9.1f} s")
    lines.append(f"  all five runs {rep['seconds']:.1f} s wall, {rep['ratio_to_fp32']:.2f}x the "
                 "FP32 run")
    return "\n".join(lines)
