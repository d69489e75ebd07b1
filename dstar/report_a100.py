"""The A100 baseline of ``dstar report``: an FP16 roofline per operation,
``max(2 MACs / (eta x 312 TFLOPS), bytes / 1.555 TB/s)`` (FP16 weights and activations, every
operation every step as Diffusers runs it, both CFG branches), with one efficiency ``eta``
calibrated against the measured step times of ``report_energy.A100`` (PixArt-alpha 1024^2 and
Latte-1 on an A100-PCIe-40GB, eval-anchors.md 3.1): each model's ``eta`` is the one its measured
time implies, and the model's is their geometric mean; the calibration error is the largest
relative difference between a calibration model's predicted and measured step time.

Energy: the board power times the time, at 250 W (PCIe-40GB TDP, DSTAR's figure) and 400 W
(SXM4 TDP); a measured SDXL run averaged 0.97 x TDP (eval-anchors 3.1).
"""

import math

from dstar.golden.dit_models import CALIBRATION_MODELS, MODELS, operations

from .report_energy import A100

__all__ = ["step_time", "calibrate", "run_a100"]


def step_time(shape, eta: float) -> float:
    """Seconds of one sampling step of ``shape`` on the A100 at efficiency ``eta``."""
    peak = A100["fp16_tflops"].value * 1e12 * eta
    bw = A100["hbm_tbs"].value * 1e12
    b = shape.branches
    t = 0.0
    for op in operations(shape):
        flops = 2 * b * op.m * op.k * op.n * op.count
        if op.kind == "linear":
            by = 2 * (op.k * op.n * op.count + b * op.count * op.m * (op.k + op.n))
        else:
            by = 2 * b * op.count * (op.m * op.k + op.k * op.n + op.m * op.n)
        t += max(flops / peak, by / bw)
    return t


def _eta_for(shape, seconds: float) -> float:
    lo, hi = 1e-4, 1.0
    for _ in range(60):                         # step_time falls as eta grows
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if step_time(shape, mid) > seconds else (lo, mid)
    return math.sqrt(lo * hi)


def calibrate() -> dict:
    """``{"eta", "per_model": {name: {"measured_s", "eta", "predicted_s"}}, "max_error"}``."""
    per = {}
    for name in CALIBRATION_MODELS:
        meas = A100[f"step_{name}"].value
        per[name] = {"measured_s": meas, "eta": _eta_for(MODELS[name], meas),
                     "source": A100[f"step_{name}"].source}
    eta = math.exp(sum(math.log(p["eta"]) for p in per.values()) / len(per))
    for name, p in per.items():
        p["predicted_s"] = step_time(MODELS[name], eta)
    err = max(abs(p["predicted_s"] / p["measured_s"] - 1) for p in per.values())
    return {"eta": eta, "per_model": per, "max_error": err}


def run_a100(shape, eta: float) -> dict:
    """The whole run's latency and its energy at both powers."""
    lat = shape.steps * step_time(shape, eta)
    return {"latency_s": lat, "energy_j": lat * A100["power_pcie_w"].value,
            "energy_400w_j": lat * A100["power_sxm_w"].value}
