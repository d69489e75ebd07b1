"""The accelerator designs ``dstar report`` compares, each a model of its mechanism on the same
machine (``report_machine.Machine``: equal peak INT8 throughput, memory and scratchpad).

Per linear operation and step a design gives its **work** ``w`` (its PE-array cycles as a
fraction of dense INT8's on the same array), its compute energy per dense MAC (pJ, 45 nm), and
whether it keeps a differential state (``X_{t-1}``, ``Y_{t-1}`` in DRAM); per attention operation
its work, the fraction of scores that pass the softmax, and its reuse cache's traffic.

* ``int8_sa`` — an INT8 systolic array with group quantization (the paper's INT8-SA): dense every
  step, ``w = 1``.
* ``nibble`` — our v1: element classes ZERO/LOW/HIGH on nibble lanes, the compact dispatcher;
  ``w`` from the exact cycle model (``sim.cycle_model``) on the bundled DiT; v1's attention
  reuse (the residual of the blocks outside the mask cached on key steps), its cycles from the
  attention engine's exact model.
* ``fmdq`` — our v2 (the paper's design): FMDQ on SIMD-4 2b x 8b PEs, ``w`` from the exact
  array model (``sim.fmdq_cycles``) on the bundled DiT; SAR (``sar_model``): the paper's
  mechanism with the **measured** mask density of v1's masks (the golden SAR is not in yet).
* ``ditto_like`` — Ditto (HPCA'25; peers.md 2.1): per element zero / 4-bit / 8-bit temporal
  differences on A4W8 PEs, at the element-level ideal (every lane busy: in its favour), with
  Defo (per layer and step, the faster of differential and dense execution); dense attention.
* ``cambricon_d_like`` — Cambricon-D (ISCA'24; peers.md 2.1): INT3 inlier differences on
  low-bit lanes with at most 4 of 64 outliers on full-precision lanes per group (the rest
  clipped), no zero skipping; here an inlier costs one nibble pass and an outlier two, the
  outlier fraction the measured HIGH fraction capped at 4/64; the first step dense; dense
  attention.
* ``exion_like`` — EXION (HPCA'25; peers.md 2.1): FFN-Reuse (a dense FFN iteration every
  ``EXION_FFN_INTERVAL`` steps; on the others ``EXION_FFN_SKIP`` of fc1's outputs and fc2's
  inputs skipped, its lowest published reduction [V2]) and eager attention prediction (keeps the
  measured mask density, plus ``EXION_PREDICT`` of dense ``Q K^T`` for the prediction, ours);
  no differential state; its sparsity mask in DRAM.
"""

from dataclasses import dataclass
from enum import StrEnum

from .report_energy import value

__all__ = ["DESIGNS", "Design", "DesignName", "AttentionKind", "EXION_FFN_INTERVAL",
           "EXION_FFN_SKIP", "EXION_PREDICT", "CAMBRICON_OUTLIERS", "linear_work",
           "attention_work"]

#: EXION: one dense FFN iteration in this many steps (ours: the paper's N is not in our notes).
EXION_FFN_INTERVAL = 5
#: EXION: FFN operations skipped on sparse iterations: 52.47 %, the low end of its 52.47-85.41 %
#: [V2] (a DiT characterization finds 12.4 %: eval-anchors 2, in EXION's favour).
EXION_FFN_SKIP = 0.5247
#: EXION: eager prediction's cost, a fraction of dense ``Q K^T`` (ours: low-bit log-domain).
EXION_PREDICT = 0.25
#: Cambricon-D: outlier lanes per group of 64 (peers.md 2.1 [V]).
CAMBRICON_OUTLIERS = 4 / 64


class DesignName(StrEnum):
    """A design ``dstar report`` compares (module docstring; ``DESIGNS``)."""
    FMDQ = "fmdq"
    NIBBLE = "nibble"
    INT8_SA = "int8_sa"
    DITTO_LIKE = "ditto_like"
    CAMBRICON_D_LIKE = "cambricon_d_like"
    EXION_LIKE = "exion_like"


class AttentionKind(StrEnum):
    """How a design computes attention (``attention_work``)."""
    #: Every score, every step.
    DENSE = "dense"
    #: v1's reuse: the residual of the blocks outside the mask, cached on key steps.
    V1 = "v1"
    #: SAR: the cache steps' probabilities, reused on the others.
    SAR = "sar"
    #: EXION's eager prediction of the mask.
    EXION = "exion"


@dataclass(frozen=True)
class Design:
    name: DesignName
    title: str
    differential: bool
    attention: AttentionKind
    how: str


DESIGNS: dict[DesignName, Design] = {d.name: d for d in (
    Design(DesignName.FMDQ, "DSTAR v2 (FMDQ + SAR), ours", True, AttentionKind.SAR,
           "FMDQ cycles from sim.fmdq_cycles on the bundled DiT; SAR modelled with the measured "
           "mask density"),
    Design(DesignName.NIBBLE, "DSTAR v1 (nibble lanes + residual reuse), ours", True,
           AttentionKind.V1,
           "compact dispatcher cycles from sim.cycle_model; attention from "
           "sim.attention_cycles"),
    Design(DesignName.INT8_SA, "INT8 systolic array", False, AttentionKind.DENSE,
           "dense W8A8 every step"),
    Design(DesignName.DITTO_LIKE, "Ditto-like", True, AttentionKind.DENSE,
           "zero/4b/8b element classes (our v1 mix) at the element-level ideal, Defo"),
    Design(DesignName.CAMBRICON_D_LIKE, "Cambricon-D-like", True, AttentionKind.DENSE,
           "INT3 inliers (one nibble pass), <= 4/64 outliers (two), no zero skip"),
    Design(DesignName.EXION_LIKE, "EXION-like", False, AttentionKind.EXION,
           f"FFN-Reuse (skip {EXION_FFN_SKIP:.0%} of FFN ops, dense every "
           f"{EXION_FFN_INTERVAL} steps), eager attention prediction"),
)}


def linear_work(design: str, lt: str, phase: str, mix, *, first: bool, ffn_dense: bool,
                dense: bool = False) -> tuple[float, float, bool]:
    """``(w, pJ per dense MAC at 45 nm, keeps state)`` of one linear of layer type ``lt`` at step
    ``phase`` (``dense``: Ditto's Defo fallback)."""
    mac, nib = value("mac_int8"), value("nibble_pass")
    diff = DESIGNS[design].differential and lt != "adaln"
    if lt == "adaln" or design == DesignName.INT8_SA or dense:
        return 1.0, value("simd4_cycle") if design == DesignName.FMDQ else mac, False
    if design == DesignName.EXION_LIKE:
        if lt in ("fc1", "fc2") and not ffn_dense:
            return 1 - EXION_FFN_SKIP, (1 - EXION_FFN_SKIP) * mac, False
        return 1.0, mac, False
    if design == DesignName.FMDQ:
        w = mix.ratio("fmdq", lt, phase)
        return w, w * value("simd4_cycle"), diff
    zero, low, high = mix.classes(lt, phase)
    passes = low + 2 * high
    if design == DesignName.NIBBLE:
        return mix.ratio("nibble", lt, phase), passes * nib, diff
    if design == DesignName.DITTO_LIKE:
        return passes / 2, passes * nib, diff
    if design == DesignName.CAMBRICON_D_LIKE:
        if first:
            return 1.0, mac, diff
        p = 1 + min(high, CAMBRICON_OUTLIERS)
        return p / 2, p * nib, diff
    raise KeyError(design)


def attention_work(design: str, kind: str, key: bool, mix) -> tuple[float, float]:
    """``(w, fraction of scores through the softmax)`` of a ``qk`` or ``pv`` operation on an
    attention key (cache) step or a reuse step."""
    att = DESIGNS[design].attention
    d = mix.mask_fraction()
    if att is AttentionKind.DENSE:
        return 1.0, 1.0
    if att is AttentionKind.EXION:
        return (d + EXION_PREDICT if kind == "qk" else d), d
    if att is AttentionKind.V1:
        r = mix.attention_ratio(key)
        return r, 1.0 if key else d
    if att is AttentionKind.SAR:
        if kind == "qk":
            return (d, d) if key else (0.0, 0.0)
        return d, d if key else 0.0
    raise KeyError(att)
