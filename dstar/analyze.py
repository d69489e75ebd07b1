"""``dstar analyze``: one sampling run of a bundled DiT (``--workload``) three ways (FP32, dense
W8A8, DSTAR) on the same seeds, or the differential-linear analysis of a user trace.

Both encodings of the differential linears are reported side by side whatever
``Config.encoding`` is: v1's element mix (``nibble``) and FMDQ's widths, groups and speed-up
over INT8 (``fmdq``, spec 7.2), the second from one more run of that encoding's linears alone.

The result is one JSON-able dict; ``format_table`` renders it for people. PSNR compares final
samples with the FP32 samples (peak-to-peak 2, images in [-1, 1]); the ops ratios are W8A8 nibble
passes over DSTAR's on the linear layers (element-level ideal, and the ``lockstep`` packing).
"""

import math
import time
from collections.abc import Callable
from enum import StrEnum

import numpy as np

from dstar.config import Attention, ConfigError, Encoding
from dstar.golden.attention import AttentionReuse
from dstar.golden.dit import LINEAR_TYPES, DiT
from dstar.golden.fmdq_stats import FmdqStats
from dstar.golden.hooks import DStarLinears, W8A8Linears, layer_type
from dstar.golden.image_stats import psnr
from dstar.golden.runs import MEASURE_BATCH, PATHS, RunPath, run_paths, workers_for
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels
from dstar.golden.sar import masks_for, sar_hooks
from dstar.golden.stats import OpStats
from dstar.golden.workloads import WORKLOADS, denoising_psnr, sample_quality

__all__ = ["psnr", "run_bundled", "format_table", "run_sweep", "format_sweep", "SWEEP_FIELDS",
           "SWEEP_MODES", "LinearsMode", "AttentionMode", "LINEAR_HOOKS"]


def _dstar_block(stats: OpStats) -> dict:
    tot = OpStats.summary(stats.total())
    per_type = {t: OpStats.summary(stats.total(layer_type=t)) for t in stats.types}
    per_step = []
    for s in sorted(stats.counts):
        sm = OpStats.summary(stats.total(step=s))
        by_type = {t: _rounded(OpStats.summary(stats.total(step=s, layer_type=t)), _CLASSES)
                   for t in stats.types}
        per_step.append({"step": s, **_rounded(sm, _CLASSES + (
            "mean_passes", "ops_ratio_vs_w8a8", "lockstep_ops_ratio_vs_w8a8")),
            "per_layer_type": by_type})
    return tot, per_type, per_step


_CLASSES = ("zero_fraction", "low_fraction", "high_fraction")


def fmdq_block(stats: FmdqStats) -> dict:
    """FMDQ's figures of a run: the whole run's counts and ``FmdqStats.summary`` (``all``), per
    layer type (``per_layer_type``) and the run's key step apart from the others
    (``key_step``, ``delta_steps``: the first step codes whole activations)."""
    first = min(stats.counts, default=0)
    delta = [s for s in sorted(stats.counts) if s != first]

    def fig(c):
        return {**c, **_rounded(FmdqStats.summary(c), FmdqStats.summary(c).keys())}

    sum_delta = {f: sum(stats.total(step=s)[f] for s in delta) for f in stats.FIELDS}
    return {"all": fig(stats.total()),
            "per_layer_type": {t: fig(stats.total(layer_type=t)) for t in stats.types},
            "key_step": fig(stats.total(step=first)) if stats.counts else None,
            "delta_steps": fig(sum_delta) if delta else None}


def _fmdq_settings(cfg) -> dict:
    """FMDQ's settings, as an ``fmdq`` section of a report states them."""
    return {"token_tile": cfg.token_tile, "sort_window": cfg.sort_window,
            "rule": str(cfg.fmdq_rule), "thr0": cfg.fmdq_thr0, "tau": cfg.tau,
            "lattice": str(cfg.fmdq_lattice), "lattice_bits": cfg.lattice_bits}


def _fmdq_report(cfg, stats: FmdqStats, out, fp32, w8a8) -> dict:
    """The ``fmdq`` section of a report: its settings, ``fmdq_block`` and the accuracy of the
    FMDQ linears alone (``out``: their samples) vs FP32 and vs W8A8, pooled and per sample."""
    gap = np.nan_to_num(sample_psnrs(w8a8, fp32) - sample_psnrs(out, fp32), nan=0.0)
    db = psnr(out, fp32)
    return {**_fmdq_settings(cfg), "linears_psnr_vs_fp32_db": db,
            "psnr_gap_vs_w8a8_db": psnr(w8a8, fp32) - db,
            "worst_sample_gap_vs_w8a8_db": float(gap.max()),
            "meets_target": bool(db >= psnr(w8a8, fp32)
                                 and gap.max() <= TARGET_FMDQ_SAMPLE_GAP_DB),
            **fmdq_block(stats)}


def _sar_report(cfg, runs: dict, fp32, w8a8) -> dict | None:
    """SAR's section of a bundled report (``attention = "sar"``): the masks' provenance, the
    attention work vs dense per step kind and over the run (the ``dstar`` run's, both
    mechanisms on), the Q and K projections skipped, the score cache, and the accuracy of
    attention alone and of both vs FP32 and vs W8A8, per sample."""
    if cfg.attention is not Attention.SAR:
        return None
    alone, d = runs[RunPath.ATTENTION][2], runs[RunPath.DSTAR][2].sar
    both = runs[RunPath.DSTAR][0]
    w8_each, both_each = sample_psnrs(w8a8, fp32), sample_psnrs(both, fp32)
    gap = np.nan_to_num(w8_each - both_each, nan=0.0)
    w8_db, both_db = psnr(w8a8, fp32), psnr(both, fp32)
    return {
        "theta": cfg.theta, "refresh_attn": cfg.refresh_attn, "masks": d["masks"],
        "kept_fraction": d["kept_fraction"],
        "attention_work_vs_dense": {"cache_steps": d["work_vs_dense_cache_steps"],
                                    "reuse_steps": d["work_vs_dense_reuse_steps"],
                                    "run": d["work_vs_dense"], "qk_run": d["qk_work_vs_dense"],
                                    "pv_run": d["pv_work_vs_dense"]},
        "linear_qk_skipped": d["linears"], "linear_qk_skipped_attention_alone": alone["linears"],
        "score_cache": d["score_cache"],
        "attention_alone_psnr_vs_fp32_db": psnr(runs[RunPath.ATTENTION][0], fp32),
        "attention_alone_rel_err_vs_float": alone["err_vs_float"],
        "both_psnr_vs_fp32_db": both_db, "w8a8_psnr_vs_fp32_db": w8_db,
        "psnr_gap_vs_w8a8_db": w8_db - both_db,
        "per_sample": [{"both_psnr_vs_fp32_db": float(b), "w8a8_psnr_vs_fp32_db": float(w),
                        "gap_vs_w8a8_db": float(g)}
                       for b, w, g in zip(both_each, w8_each, gap, strict=True)],
        "worst_sample_gap_vs_w8a8_db": float(gap.max()),
        "meets_target": bool(w8_db - both_db <= TARGET_PSNR_GAP_DB
                             and gap.max() <= TARGET_SAMPLE_GAP_DB
                             and d["work_vs_dense"] <= TARGET_SAR_WORK),
        "per_step": [{"step": s, **v} for s, v in d["per_step"].items()],
    }


def _sar_lines(rep: dict) -> list[str]:
    """SAR's section of ``format_table``."""
    s = rep.get("sar")
    if not s:
        return []
    w, m, c = s["attention_work_vs_dense"], s["masks"], s["score_cache"]
    lin = s["linear_qk_skipped"]
    return ["", f"SAR (spec 7.3; theta={s['theta']}, refresh_attn={s['refresh_attn']}; masks "
            f"{m.get('source')}: {m.get('workload')}, {m.get('samples')} calibration samples, "
            f"seed {m.get('seed')}, {m.get('steps')} steps): {s['kept_fraction']:.3f} of the "
            "blocks kept",
            f"attention work vs dense: cache steps {_fmt(w['cache_steps'])}, reuse steps "
            f"{_fmt(w['reuse_steps'])}, the run {_fmt(w['run'])} (QK^T {_fmt(w['qk_run'])}, "
            f"PV {_fmt(w['pv_run'])})",
            "Q and K projections skipped on reuse steps: "
            f"{lin['skipped_fraction_of_linear_macs']:.3f} of the linear MACs"
            + (f", {_fmt(lin['skipped_fraction_of_linear_passes'])} of DSTAR's nibble-pass work "
               f"({_fmt(lin.get('net_saved_fraction_of_linear_passes'))} net of the Q and K "
               "columns' estimated catch-up at cache steps)"
               if lin.get("skipped_fraction_of_linear_passes") is not None else ""),
            f"score cache: {c['bytes_per_layer_max']} bytes for the largest layer, "
            f"{c['bytes_all_layers']} for all layers (per batch element)",
            f"PSNR vs FP32 (dB): SAR alone {_fmt(s['attention_alone_psnr_vs_fp32_db'], 2)}, "
            f"both {_fmt(s['both_psnr_vs_fp32_db'], 2)}, W8A8 "
            f"{_fmt(s['w8a8_psnr_vs_fp32_db'], 2)}: gap {_fmt(s['psnr_gap_vs_w8a8_db'], 2)}, "
            f"worst sample {_fmt(s['worst_sample_gap_vs_w8a8_db'], 2)} under its W8A8: "
            + ("meets" if s["meets_target"] else "misses") + f" the target (gap <= "
            f"{TARGET_PSNR_GAP_DB}, no sample > {TARGET_SAMPLE_GAP_DB} dB under, work <= "
            f"{TARGET_SAR_WORK})",
            "per sample gap vs W8A8 (dB): " + " ".join(f"{p['gap_vs_w8a8_db']:.2f}"
                                                       for p in s["per_sample"])]


def _rounded(summary: dict, keys) -> dict:
    return {k: summary[k] if summary[k] is None else round(summary[k], 6) for k in keys}


def run_bundled(cfg, model: DiT | None = None, quality: bool = False, progress=None,
                workers: int | None = None) -> tuple[dict, dict]:
    """Run the analysis on the bundled DiT of ``cfg.workload`` (or ``model``). Returns
    ``(report, samples)`` where ``samples`` maps ``fp32``/``w8a8``/``dstar`` to final images
    ``(samples, 1, H, W)``; with ``quality`` the report holds the workload's quality figures of
    each (``dstar.golden.workloads``: class accuracy of digits, image statistics of photos).

    The five runs (``PATHS``) are independent: with ``workers`` > 1 (default: 2 where the machine
    has 2 cores or more) they run in that many worker processes of one BLAS thread each, the
    figures bit for bit those of one process; ``timing`` in the report gives each run's wall
    time, the whole job's and its ratio to the FP32 run's."""
    model = model or DiT.bundled(cfg.workload)
    if cfg.attention is Attention.SAR:
        masks_for(cfg, model.shape)        # a bad mask file is refused before any run
    labels = sample_labels(cfg.samples, model.shape.num_classes)
    t0 = time.perf_counter()
    fmdq = cfg.encoding is Encoding.FMDQ
    # the other encoding's linears
    other = RunPath.NIBBLE_LINEAR if fmdq else RunPath.FMDQ_LINEAR
    runs = run_paths(cfg, model, progress, workers, tags=(RunPath.DSTAR, other) + PATHS[1:])
    total = time.perf_counter() - t0
    timing = {tag: runs[tag][1] for tag in PATHS}
    fp32, w8a8, dstar_lin, attn, dstar = (runs[t][0] for t in (
        RunPath.FP32, RunPath.W8A8, RunPath.DSTAR_LINEAR, RunPath.ATTENTION, RunPath.DSTAR))
    # v1's element mix from a nibble run, FMDQ's figures from an FMDQ run, whichever is the
    # configured encoding (that one with attention reuse, as before FMDQ existed).
    tot, per_type, per_step = _dstar_block(runs[other if fmdq else "dstar"][2])
    fmdq_rep = _fmdq_report(cfg.replace(encoding=Encoding.FMDQ),
                            runs[RunPath.DSTAR if fmdq else other][2],
                            dstar_lin if fmdq else runs[other][0], fp32, w8a8)
    v1_lin = runs[other][0] if fmdq else dstar_lin
    ast = runs[RunPath.ATTENTION][2]
    samples = {"fp32": fp32, "w8a8": w8a8, "dstar": dstar}
    report = {
        "workload": WORKLOADS[cfg.workload].title, "workload_name": str(cfg.workload),
        "steps": cfg.steps, "tokens": model.shape.tokens, "samples": cfg.samples,
        "rows_per_linear": cfg.samples * model.shape.tokens * (2 if cfg.cfg_scale > 1 else 1),
        "config": cfg.to_dict(),
        "fp32": {"seconds": round(timing[RunPath.FP32], 3)},
        "w8a8": {"psnr_vs_fp32_db": psnr(w8a8, fp32), "mean_passes": 2.0,
                 "seconds": round(timing[RunPath.W8A8], 3)},
        "dstar": {"psnr_vs_fp32_db": psnr(dstar, fp32), **tot,
                  "seconds": round(timing[RunPath.DSTAR], 3),
                  "steps_per_second": cfg.steps / timing[RunPath.DSTAR]},
        "dstar_linear_only": {"psnr_vs_fp32_db": psnr(dstar_lin, fp32),
                              "seconds": round(timing[RunPath.DSTAR_LINEAR], 3)},
        "encoding": str(cfg.encoding),
        "nibble_linear_only": {"psnr_vs_fp32_db": psnr(v1_lin, fp32),
                               "worst_sample_gap_vs_w8a8_db": float(np.nan_to_num(
                                   sample_psnrs(w8a8, fp32) - sample_psnrs(v1_lin, fp32),
                                   nan=0.0).max())},
        "fmdq": {**fmdq_rep, "seconds": round(runs[RunPath.DSTAR if fmdq else other][1], 3)},
        "attention": {
            "psnr_vs_fp32_db": psnr(attn, fp32),
            "seconds": round(timing[RunPath.ATTENTION], 3),
            "blocks_computed_fraction": ast["blocks_computed_fraction"],
            "blocks_computed_fraction_reuse_steps": ast["blocks_computed_fraction_reuse"],
            "pv_blocks_fraction": ast["pv_blocks_fraction"],
            "output_rel_err_vs_float": ast["err_vs_float"],
            "output_rel_err_vs_float_reuse_steps": ast["err_vs_float_reuse"],
            "dense_int_rel_err_vs_float": ast["err_dense_int"],
            "errors_measured_on_batch_elements": min(MEASURE_BATCH, 2 * cfg.samples),
            "per_step": [{"step": s, **v} for s, v in ast["per_step"].items()],
        },
        "sar": _sar_report(cfg, runs, fp32, w8a8),
        "timing": {"workers": workers_for(workers), "seconds": round(total, 3),
                   "ratio_to_fp32": round(total / timing[RunPath.FP32], 3)},
        "ops_ratio_vs_w8a8": tot["ops_ratio_vs_w8a8"],
        "lockstep_ops_ratio_vs_w8a8": tot["lockstep_ops_ratio_vs_w8a8"],
        "per_layer_type": per_type,
        "per_step": per_step,
    }
    if quality:
        report["quality"] = {k: sample_quality(cfg.workload, v, labels)
                             for k, v in samples.items()}
        report["denoising"] = denoising_psnr(model, cfg.workload)
    return report, samples


#: Config fields ``run_sweep`` may vary: the accuracy/work knobs of both mechanisms, and the
#: encoding with FMDQ's own.
SWEEP_FIELDS = ("theta", "refresh_attn", "refresh_linear", "tau", "lattice_bits", "refine_max",
                "refine_at", "block_q", "block_k", "encoding", "token_tile", "sort_window",
                "fmdq_rule", "fmdq_thr0", "fmdq_lattice")


class LinearsMode(StrEnum):
    """The linears of a sweep point (``--sweep linears=...``; hooks: ``LINEAR_HOOKS``)."""
    #: DSTAR's differential linears of the point's encoding (the default).
    DSTAR = "dstar"
    #: Dense W8A8.
    W8A8 = "w8a8"
    #: Float.
    FLOAT = "float"


class AttentionMode(StrEnum):
    """The attention of a sweep point (``--sweep attention=...``)."""
    #: Attention reuse (SAR's with ``attention = "sar"``; the default).
    DSTAR = "dstar"
    #: Float.
    FLOAT = "float"


#: Which mechanism a sweep point runs where (to separate their effects): each mode field's
#: choices.
SWEEP_MODES: dict[str, type[StrEnum]] = {"linears": LinearsMode, "attention": AttentionMode}
#: The linear hook of each ``LinearsMode`` for a point's config (None: float).
LINEAR_HOOKS: dict[LinearsMode, Callable] = {
    LinearsMode.DSTAR: lambda cfg: DStarLinears(cfg, LINEAR_TYPES),
    LinearsMode.W8A8: lambda cfg: W8A8Linears(),
    LinearsMode.FLOAT: lambda cfg: None,
}
#: The most points one sweep runs: each is a whole sampling run (seconds to minutes), so a
#: larger grid is a mistake, not a job.
MAX_SWEEP_POINTS = 1000

#: The accuracy target of both mechanisms together: final-sample PSNR (over all samples) within
#: ``TARGET_PSNR_GAP_DB`` of dense W8A8, no sample more than ``TARGET_SAMPLE_GAP_DB`` under its
#: own W8A8 PSNR, while computing at most ``TARGET_REUSE_BLOCKS`` of the attention blocks on
#: reuse steps.
TARGET_PSNR_GAP_DB, TARGET_SAMPLE_GAP_DB, TARGET_REUSE_BLOCKS = 0.5, 2.0, 0.5
#: SAR's work target (issue 29): attention work over the run at most this fraction of dense.
TARGET_SAR_WORK = 0.5
#: FMDQ's accuracy target (issue 28), its linears alone: final-sample PSNR vs FP32 at or above
#: dense W8A8's, no sample more than ``TARGET_FMDQ_SAMPLE_GAP_DB`` under its own W8A8 PSNR.
TARGET_FMDQ_SAMPLE_GAP_DB = 1.0


def sample_psnrs(a, b) -> np.ndarray:
    """PSNR in dB of each sample of ``a`` against the same sample of ``b`` (``(S, ...)``)."""
    return np.array([psnr(x, y) for x, y in zip(a, b, strict=True)])


def sweep_points(cfg, grid: dict) -> list[dict]:
    """The cartesian product of ``grid`` (field -> values) as a list of override dicts, each
    validated by building its config (``ConfigError`` names the bad field and value)."""
    import itertools

    for f, vals in grid.items():
        if f not in SWEEP_FIELDS and f not in SWEEP_MODES:
            raise ConfigError(f"cannot sweep {f!r}; sweepable: "
                             f"{', '.join(SWEEP_FIELDS + tuple(SWEEP_MODES))}")
        if not vals:
            raise ConfigError(f"sweep of {f!r} has no values")
        for v in vals if f in SWEEP_MODES else ():
            if v not in {m.value for m in SWEEP_MODES[f]}:
                raise ConfigError(f"{f} must be one of {', '.join(SWEEP_MODES[f])}, got {v!r}")
    n = math.prod(len(v) for v in grid.values())
    if n > MAX_SWEEP_POINTS:      # refused before a million configs are even built
        raise ConfigError(f"{n} points ({' x '.join(f'{len(v)} {f}' for f, v in grid.items())}) "
                          f"are more than the {MAX_SWEEP_POINTS} one sweep runs (each point is "
                          "a sampling run); sweep fewer values")
    points = [dict(zip(grid, vals, strict=True)) for vals in itertools.product(*grid.values())]
    for pt in points:
        cfg.replace(**_cfg_part(pt))
    return points


def _cfg_part(point: dict) -> dict:
    return {k: v for k, v in point.items() if k not in SWEEP_MODES}


def _sweep_run(cfg, model, masks, pt, progress=None):
    """One run of a sweep: ``pt`` a point (``run_sweep``), or ``RunPath.FP32`` / ``W8A8``. Returns
    ``(samples, info)``: ``info`` the point's work figures (picklable: worker processes)."""
    labels = sample_labels(cfg.samples, model.shape.num_classes)
    noise = initial_noise(cfg.samples, model.shape, cfg.seed)
    tag = pt if isinstance(pt, str) else " ".join(f"{k}={v}" for k, v in pt.items())
    t0 = time.perf_counter()

    def run(**hooks):
        return ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale, **hooks,
                           on_step=(lambda i, t: progress(tag, i, cfg.steps)) if progress
                           else None)

    if isinstance(pt, str):
        return run(**({"linear": W8A8Linears()} if pt == RunPath.W8A8 else {})), {}
    c = cfg.replace(**_cfg_part(pt))
    lin = LinearsMode(pt.get("linears", LinearsMode.DSTAR))
    att = AttentionMode(pt.get("attention", AttentionMode.DSTAR))
    linear = LINEAR_HOOKS[lin](c)
    dl = linear if lin is LinearsMode.DSTAR else None
    sar = att is AttentionMode.DSTAR and c.attention is Attention.SAR
    at = AttentionReuse(c, measure=False) if att is AttentionMode.DSTAR and not sar else None
    hooks = {"linear": linear, "attention": at}
    if sar:         # the paper's SAR (golden.sar): masks at the point's theta
        hooks = sar_hooks(c, model, hooks["linear"], masks)
        at = hooks["attention"]
    out = run(**{k: v for k, v in hooks.items() if v is not None})
    fmdq = dl is not None and c.encoding is Encoding.FMDQ
    return out, {
        "ast": at.stats() if at else {"blocks_computed_fraction": 1.0,
                                      "blocks_computed_fraction_reuse": None},
        "sar": sar, "dl": dl is not None, "at": at is not None, "encoding": str(c.encoding),
        "qk_skip": hooks["linear"].stats() if sar else None,
        "ops_ratio": (OpStats.summary(dl.stats.total())["ops_ratio_vs_w8a8"]
                      if dl is not None and not fmdq else None),
        "fmdq": fmdq_block(dl.stats) if fmdq else None,
        "seconds": round(time.perf_counter() - t0, 3)}


def _sweep_runs(cfg, model, masks, jobs, progress, workers: int) -> list:
    """``_sweep_run`` of each of ``jobs``, in order: here, or in ``workers`` forked processes
    (independent runs; the same figures, no progress dots)."""
    import multiprocessing as mp
    if workers <= 1 or len(jobs) == 1 or "fork" not in mp.get_all_start_methods():
        return [_sweep_run(cfg, model, masks, pt, progress) for pt in jobs]
    import concurrent.futures as cf

    from threadpoolctl import threadpool_limits
    _SWEEP.update(cfg=cfg, model=model, masks=masks)
    with threadpool_limits(1), cf.ProcessPoolExecutor(
            min(workers, len(jobs)), mp_context=mp.get_context("fork")) as pool:
        return list(pool.map(_sweep_job, jobs))


_SWEEP: dict = {}


def _sweep_job(pt):
    return _sweep_run(_SWEEP["cfg"], _SWEEP["model"], _SWEEP["masks"], pt)


def run_sweep(cfg, grid: dict, model: DiT | None = None, progress=None,
              workers: int = 1) -> dict:
    """The accuracy/work trade-off of DSTAR (both mechanisms on) over a grid of config
    overrides (``grid``: field -> list of values, fields from ``SWEEP_FIELDS``, plus the modes
    of ``SWEEP_MODES`` to run one mechanism alone): one FP32 and one dense W8A8 run, then one
    run per point, all on the same seeds (``workers`` > 1: that many forked processes). Per
    point: PSNR
    vs FP32 and its gap to W8A8, the fraction of attention blocks computed (all steps and
    reuse steps), the linear layers' element-level nibble-pass ratio vs W8A8 (v1) or
    ``fmdq_block`` (FMDQ: widths, groups, speed-up over INT8), whether the point meets the
    target (``TARGET_*``) and the linears' target (``meets_linear_target``: PSNR at or above
    W8A8's, no sample more than ``TARGET_FMDQ_SAMPLE_GAP_DB`` under its own). SAR points
    (``attention = "sar"``) add the attention work over the run vs dense, the Q and K
    projections skipped and the per-sample gaps; their work target is ``TARGET_SAR_WORK``."""
    points = sweep_points(cfg, grid)
    model = model or DiT.bundled(cfg.workload)
    masks = (masks_for(cfg, model.shape) if any(cfg.replace(**_cfg_part(p)).attention
                                                 is Attention.SAR for p in points) else None)
    done = _sweep_runs(cfg, model, masks, [RunPath.FP32, RunPath.W8A8, *points], progress,
                       workers)
    fp32, w8a8 = done[0][0], done[1][0]
    w8a8_db, w8a8_each = psnr(w8a8, fp32), sample_psnrs(w8a8, fp32)
    rows = []
    for pt, (out, info) in zip(points, done[2:], strict=True):
        ast, sar = info["ast"], info["sar"]
        db = psnr(out, fp32)
        # inf - inf (a sample both runs reproduce exactly) is no gap.
        each = np.nan_to_num(w8a8_each - sample_psnrs(out, fp32), nan=0.0)
        worst = float(each.max())
        reuse = ast["blocks_computed_fraction_reuse"]
        rows.append({
            **pt, "psnr_vs_fp32_db": db, "psnr_gap_vs_w8a8_db": w8a8_db - db,
            "worst_sample_gap_vs_w8a8_db": worst,
            "blocks_computed_fraction": ast["blocks_computed_fraction"],
            "blocks_computed_fraction_reuse_steps": reuse,
            "encoding": info["encoding"],
            **({"attention_kind": "sar", "attention_work_vs_dense": ast["work_vs_dense"],
                "qk_skipped_fraction_of_linear_macs":
                    info["qk_skip"]["skipped_fraction_of_linear_macs"],
                "per_sample_gap_vs_w8a8_db": [round(float(g), 3) for g in each]} if sar else {}),
            "ops_ratio_vs_w8a8": info["ops_ratio"],
            "fmdq": info["fmdq"],
            # FMDQ's target (issue 28) is for the linears (meaningful with attention=float).
            "meets_linear_target": bool(info["dl"] and db >= w8a8_db
                                        and worst <= TARGET_FMDQ_SAMPLE_GAP_DB),
            # The target is for DSTAR as a whole: both mechanisms on.
            "meets_target": bool(info["dl"] and info["at"]
                                 and w8a8_db - db <= TARGET_PSNR_GAP_DB
                                 and worst <= TARGET_SAMPLE_GAP_DB
                                 and ((ast["work_vs_dense"] <= TARGET_SAR_WORK) if sar else
                                      (reuse if reuse is not None else 1.0)
                                      <= TARGET_REUSE_BLOCKS)),
            "seconds": info["seconds"]})
    return {"workload": f"{WORKLOADS[cfg.workload].title} (sweep)", "steps": cfg.steps,
            "samples": cfg.samples,
            "config": cfg.to_dict(), "grid": {k: list(v) for k, v in grid.items()},
            "w8a8": {"psnr_vs_fp32_db": w8a8_db},
            "target": {"psnr_gap_vs_w8a8_db": TARGET_PSNR_GAP_DB,
                       "worst_sample_gap_vs_w8a8_db": TARGET_SAMPLE_GAP_DB,
                       "blocks_computed_fraction_reuse_steps": TARGET_REUSE_BLOCKS,
                       "attention_work_vs_dense": TARGET_SAR_WORK,
                       "linear_worst_sample_gap_vs_w8a8_db": TARGET_FMDQ_SAMPLE_GAP_DB},
            "points": rows}


def format_sweep(rep: dict) -> str:
    """A human-readable rendering of a ``run_sweep`` report."""
    fields = list(rep["grid"])
    lines = [f"sweep on the bundled DiT: {rep['samples']} samples x {rep['steps']} steps, "
             f"W8A8 PSNR vs FP32 {rep['w8a8']['psnr_vs_fp32_db']:.2f} dB; target: gap <= "
             f"{rep['target']['psnr_gap_vs_w8a8_db']} dB (no sample over "
             f"{rep['target'].get('worst_sample_gap_vs_w8a8_db', '-')} dB) at <= "
             f"{rep['target']['blocks_computed_fraction_reuse_steps']:.0%} blocks on reuse "
             "steps", ""]
    fm = any(r.get("fmdq") for r in rep["points"])
    lines.append(f"{'#':>3}" + "".join(f"{f:>15}" for f in fields)
                 + f"{'PSNR dB':>9}{'gap dB':>8}{'worst':>7}{'blocks':>8}{'reuse':>8}"
                 + f"{'lin x':>7}" + (f"{'bits':>6}{'pad':>6}{'skip':>6}" if fm else "")
                 + "  target  linears")
    for i, r in enumerate(rep["points"], start=1):      # "#": the point's label on --plot
        reuse = r["blocks_computed_fraction_reuse_steps"]
        fq = (r.get("fmdq") or {}).get("all")
        ratio = fq["speedup_vs_int8"] if fq else r["ops_ratio_vs_w8a8"]
        lines.append(f"{i:>3}" + "".join(f"{r[f]!s:>15}" for f in fields)
                     + f"{r['psnr_vs_fp32_db']:>9.2f}{r['psnr_gap_vs_w8a8_db']:>8.2f}"
                     + f"{r.get('worst_sample_gap_vs_w8a8_db', float('nan')):>7.2f}"
                     + f"{r['blocks_computed_fraction']:>8.3f}"
                     + (f"{reuse:>8.3f}" if reuse is not None else f"{'-':>8}")
                     + (f"{ratio:>7.2f}" if ratio else f"{'-':>7}")
                     + ((f"{fq['mean_width_bits']:>6.2f}{fq['padding_fraction']:>6.3f}"
                         f"{fq['skipped_fraction']:>6.3f}" if fq else f"{'-':>6}" * 3)
                        if fm else "")
                     + ("  meets " if r["meets_target"] else "  -     ")
                     + ("  meets" if r.get("meets_linear_target") else "  -"))
    if any(r.get("attention_kind") == "sar" for r in rep["points"]):
        lines.append("SAR points (attention = sar): blocks = attention work over the run vs "
                     "dense, reuse = on reuse steps (PV only); their work target: <= "
                     f"{rep['target'].get('attention_work_vs_dense', TARGET_SAR_WORK)}x dense "
                     "over the run")
    if fm:
        lines.append("lin x: v1's element-level nibble passes vs W8A8, or FMDQ's SIMD-4 groups "
                     "vs dense INT8's; bits: FMDQ's average width (skipped = 0 bits); pad: empty "
                     "lanes of the groups; linears: PSNR >= W8A8, no sample "
                     f"> {TARGET_FMDQ_SAMPLE_GAP_DB} dB under its own")
    return "\n".join(lines)


def _fmt(v, digits=3, suffix=""):
    """A figure for people: ``None`` (a ratio over no work) is "no work"; NaN (a ratio of
    overflowed or zero energies) is "undefined"; infinity (no error at all) is "exact"."""
    if v is None:
        return "no work"
    if isinstance(v, float) and math.isnan(v):
        return "undefined"
    if isinstance(v, float) and math.isinf(v):
        return "exact"
    if isinstance(v, float):
        return f"{v:.{digits}f}{suffix}"
    return str(v)


def _quality_lines(rep: dict) -> list[str]:
    d = rep.get("denoising")
    out = [] if d is None else [
        f"FP32 model's one-step denoising of {d['images']} real images at t={d['t']}: PSNR "
        f"{d['denoised_psnr_db']:.2f} dB (the noisy input: {d['noisy_psnr_db']:.2f} dB)"]
    q = rep.get("quality")
    if q is None and "class_accuracy" in rep:        # reports before the photos workload
        q = {k: {"class_accuracy": v} for k, v in rep["class_accuracy"].items()}
    if not q:
        return out
    if all("class_accuracy" in v for v in q.values()):
        return out + ["class accuracy of samples (kNN on real digits): "
                      + "  ".join(f"{k} {v['class_accuracy']:.2f}" for k, v in q.items())]
    out.append("samples vs held-out crops (W1 of per-image mean / std, power spectrum RMS dB):")
    out += [f"  {k:6s} {v['mean_w1']:.3f} / {v['std_w1']:.3f} / {v['spectrum_db']:.2f} dB"
            for k, v in q.items()]
    return out


def _fmdq_lines(rep: dict) -> list[str]:
    """The FMDQ section of ``format_table`` (reports with an ``fmdq`` section)."""
    f = rep.get("fmdq")
    if not f:
        return []
    what = ("linears alone, float attention" if "linears_psnr_vs_fp32_db" in f
            else "the trace's linears, teacher-forced")
    out = ["", f"FMDQ (spec 7.2; {what}): T={f['token_tile']} "
           f"sort_window={f['sort_window']} rule={f['rule']}"
           + (f" thr0={f['thr0']}" if f["rule"] == "magnitude" else "") + f" tau={f['tau']}"
           + (f" lattice={f['lattice']}" if "lattice" in f else ""),
           f"{'layer':<8}{'bits':>6}{'skipped':>9}{'INT2':>7}{'INT4':>7}{'INT6':>7}{'INT8':>7}"
           f"{'groups':>8}{'x INT8':>8}{'padding':>9}{'clipped':>9}"]
    rows = {**f["per_layer_type"], "all": f["all"], "key step": f["key_step"],
            "others": f["delta_steps"]}
    for name, s in rows.items():
        if s is None:
            continue
        out.append(f"{name:<8}{s['mean_width_bits']:>6.2f}{s['skipped_fraction']:>9.3f}"
                   + "".join(f"{s[f'width_{w}_fraction']:>7.3f}" for w in (2, 4, 6, 8))
                   + f"{s['groups_per_tile_channel']:>8.3f}"
                   + f"{_fmt(s['speedup_vs_int8'], 2):>8}{s['padding_fraction']:>9.3f}"
                   + f"{s['clipped_fraction']:>9.4f}")
    if "linears_psnr_vs_fp32_db" not in f:         # a trace's: no sampling run, no PSNR
        out.append("bits: average width per sub-channel (skipped = 0); groups: SIMD-4 PE "
                   "cycles per dense INT8 cycle; x INT8: the speed-up; padding: empty lanes")
        return out
    w8 = rep["w8a8"]["psnr_vs_fp32_db"]
    v1 = rep.get("nibble_linear_only", {})
    out.append(f"linears alone vs FP32 (PSNR, dB): W8A8 {_fmt(w8, 2)}   v1 (nibble) "
               f"{_fmt(v1.get('psnr_vs_fp32_db'), 2)} (worst sample "
               f"{_fmt(v1.get('worst_sample_gap_vs_w8a8_db'), 2)} dB under its W8A8)   FMDQ "
               f"{_fmt(f['linears_psnr_vs_fp32_db'], 2)} (worst sample "
               f"{_fmt(f['worst_sample_gap_vs_w8a8_db'], 2)} dB under its W8A8): "
               + ("meets" if f["meets_target"] else "misses") + " the target (PSNR >= W8A8, "
               f"no sample > {TARGET_FMDQ_SAMPLE_GAP_DB} dB under)")
    out.append("bits: average width per sub-channel (skipped = 0); groups: SIMD-4 PE cycles per "
               "dense INT8 cycle; x INT8: the speed-up; padding: empty lanes of the groups")
    return out


def _reuse(fraction) -> str:
    return "no reuse steps" if fraction is None else f"{fraction:.3f} on reuse steps"


def format_table(rep: dict) -> str:
    """A human-readable rendering of an analysis report."""
    tokens = rep["tokens"] if rep["tokens"] is not None else "per layer"
    lines = [f"workload: {rep['workload']}",
             f"steps {rep['steps']}, tokens {tokens}"
             + (f", samples {rep['samples']}" if "samples" in rep else "")]
    c = rep.get("config", {})
    if c:
        lines.append(f"config: G={c['group']} e_max={c['e_max']} tau={c['tau']} "
                     f"refresh_linear={c['refresh_linear']} state_bits={c['state_bits']} "
                     f"lattice_bits={c['lattice_bits']}"
                     + (f" refine_max={c['refine_max']} refine_at={c['refine_at']}"
                        if c.get("refine_max") else ""))
    lines.append("")
    hdr = f"{'layer':<8}{'ZERO':>8}{'LOW':>8}{'HIGH':>8}{'low-bit':>9}{'passes':>8}" \
          f"{'ideal x':>9}{'lockstep x':>11}{'clipped':>9}"
    lines.append(hdr)
    rows = dict(rep["per_layer_type"])
    rows["all"] = rep["dstar"]
    for name, s in rows.items():
        lines.append(f"{name:<8}{s['zero_fraction']:>8.3f}{s['low_fraction']:>8.3f}"
                     f"{s['high_fraction']:>8.3f}{s['low_bit_fraction']:>9.3f}"
                     f"{s['mean_passes']:>8.3f}{_fmt(s['ops_ratio_vs_w8a8'], 2):>9}"
                     f"{_fmt(s['lockstep_ops_ratio_vs_w8a8'], 2):>11}"
                     f"{s['clipped_group_fraction']:>9.4f}")
    lines.append("")
    if "fp32" in rep:
        lines.append("accuracy vs FP32 samples (PSNR, dB):  W8A8 "
                     f"{_fmt(rep['w8a8']['psnr_vs_fp32_db'], 2)}   DSTAR linears "
                     f"{_fmt(rep['dstar_linear_only']['psnr_vs_fp32_db'], 2)}   attention reuse "
                     f"{_fmt(rep['attention']['psnr_vs_fp32_db'], 2)}   DSTAR (both) "
                     f"{_fmt(rep['dstar']['psnr_vs_fp32_db'], 2)}")
        a = rep["attention"]
        lines.append(f"attention (theta={c['theta']}, refresh_attn={c['refresh_attn']}): "
                     f"blocks computed {a['blocks_computed_fraction']:.3f} of all "
                     f"({_reuse(a['blocks_computed_fraction_reuse_steps'])}), "
                     f"output error vs float {a['output_rel_err_vs_float']:.4f} "
                     "(dense integer attention "
                     + (_fmt(a["dense_int_rel_err_vs_float"], 4)
                        if a["dense_int_rel_err_vs_float"] is not None else "not measured")
                     + f"; on "
                     f"{a.get('errors_measured_on_batch_elements', 'all')} batch elements)")
    if "linear_output_sqnr_db" in rep.get("dstar", {}):
        w, d = rep["w8a8"], rep["dstar"]
        lines.append("teacher-forced, each layer on the recorded float inputs (no drift), SQNR "
                     f"dB: linear outputs without bias (weight quantization included) W8A8 "
                     f"{_fmt(w['linear_output_sqnr_db'], 2)}  DSTAR "
                     f"{_fmt(d['linear_output_sqnr_db'], 2)}; activations W8A8 "
                     f"{_fmt(w['activation_sqnr_db'], 2)}  DSTAR "
                     f"{_fmt(d['activation_sqnr_db'], 2)}")
        if "rows_per_layer" in rep:
            lines.append("rows per linear, by layer: " + ", ".join(
                f"{name} {n}" for name, n in rep["rows_per_layer"].items()))
        if rep.get("batch"):
            lines.append(f"rows per linear: {rep['rows_per_linear']} = batch {rep['batch']}"
                         + (f" ({rep['batch'] // 2} conditional + {rep['batch'] // 2} "
                            "unconditional)" if rep.get("cfg_halves") else "")
                         + f" x {rep['tokens']} tokens")
        if "attention" in rep:
            a = rep["attention"]
            lines.append(f"attention (teacher-forced, {a['layers']} layers, theta="
                         f"{c.get('theta')}, refresh_attn={c.get('refresh_attn')}): blocks "
                         f"computed {_fmt(a['blocks_computed_fraction'])} of all "
                         f"({_reuse(a['blocks_computed_fraction_reuse_steps'])}), output "
                         f"error vs float {_fmt(a['output_rel_err_vs_float'], 4)} (dense "
                         f"integer attention {_fmt(a['dense_int_rel_err_vs_float'], 4)})")
        for line in rep.get("hardware_fit", []):
            lines.append(f"does not fit the configured hardware: {line}")
    lines += _sar_lines(rep)
    lines += _fmdq_lines(rep)
    lines += _quality_lines(rep)
    lines.append("nibble passes vs dense W8A8: element-level "
                 f"{_fmt(rep['ops_ratio_vs_w8a8'], 2, 'x')}, lockstep "
                 f"{_fmt(rep['lockstep_ops_ratio_vs_w8a8'], 2, 'x')}")
    return "\n".join(lines)


def layer_types_of(names) -> list[str]:
    seen = []
    for n in names:
        t = layer_type(n)
        if t not in seen:
            seen.append(t)
    return seen


def _sqnr(signal_energy: float, noise_energy: float) -> float:
    """NaN (undefined) when an energy overflowed or there is no signal; infinity when there
    is no error."""
    if not (math.isfinite(signal_energy) and math.isfinite(noise_energy)) or signal_energy == 0:
        return float("nan")
    return float("inf") if noise_energy == 0 else 10.0 * math.log10(signal_energy / noise_energy)


def hardware_fit(cfg, trace) -> list[str]:
    """What of ``trace`` the configured hardware could not run (``max_k``, ``max_m``,
    ``max_tokens``, ``head_dim``), one line each; empty if everything fits."""
    out = []
    for name, x in trace.linear_x.items():
        m, k = trace.linear_w[name].shape
        tokens = trace.linear_tokens.get(name, x.shape[1])
        for what, v, lim in (("K", k, cfg.max_k), ("M", m, cfg.max_m),
                             ("tokens", tokens, cfg.max_tokens)):
            if v > lim:
                field = {"K": "max_k", "M": "max_m", "tokens": "max_tokens"}[what]
                out.append(f"{name}: {what}={v} > {field}={lim}")
    for name, (q, _, _) in trace.attn.items():
        if q.shape[-1] != cfg.head_dim:
            out.append(f"{name}: Dh={q.shape[-1]} != head_dim={cfg.head_dim}")
        if q.shape[-2] > cfg.max_tokens:
            out.append(f"{name}: N={q.shape[-2]} > max_tokens={cfg.max_tokens}")
    return out


def _trace_attention(cfg, trace, progress=None) -> dict | None:
    """Teacher-forced attention reuse on the trace's recorded Q/K/V: every layer's steps in
    order through ``AttentionReuse`` (``theta``, ``refresh_attn``, ``block_q/k`` of ``cfg``)."""
    if not trace.attn:
        return None
    hook = AttentionReuse(cfg, measure=True)
    for i, (name, (q, k, v)) in enumerate(trace.attn.items()):
        if progress:
            progress("attention", i, len(trace.attn))
        for s in range(trace.steps):
            hook(name, np.asarray(q[s], np.float64), np.asarray(k[s], np.float64),
                 np.asarray(v[s], np.float64), s)
    st = hook.stats()
    return {"layers": len(trace.attn),
            "blocks_computed_fraction": st["blocks_computed_fraction"],
            "blocks_computed_fraction_reuse_steps": st["blocks_computed_fraction_reuse"],
            "pv_blocks_fraction": st["pv_blocks_fraction"],
            "output_rel_err_vs_float": st["err_vs_float"],
            "output_rel_err_vs_float_reuse_steps": st["err_vs_float_reuse"],
            "dense_int_rel_err_vs_float": st["err_dense_int"],
            "per_step": [{"step": s, **v} for s, v in st["per_step"].items()]}


def _trace_linears(cfg, trace, stats, e, progress):
    """Every linear layer of ``trace`` through DSTAR and W8A8: op counts into ``stats``, error
    energies into ``e`` (``None``: counts only, no W8A8)."""
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.quant import quantize_weights, to_lattice, token_lattice, w8a8_linear
    for i, (name, xs) in enumerate(trace.linear_x.items()):
        if progress:
            progress("linears", i, len(trace.linear_x))
        w, b = trace.linear_w[name], trace.linear_b[name]
        layer = DiffLinear(w, b, cfg, name)
        w_q, s_w = quantize_weights(w)
        w64 = np.asarray(w, np.float64).T
        for s in range(trace.steps):
            x = np.asarray(xs[s], dtype=np.float64)
            res = layer(x, s)
            stats.add_counts(s, layer_type(name), res.counts)
            if e is None:
                continue
            ref = x @ w64
            e["signal"] += float((ref ** 2).sum())
            e["dstar"] += float(((res.y - ref - (0.0 if b is None else b)) ** 2).sum())
            e["w8a8"] += float(((w8a8_linear(x, w_q, s_w) - ref) ** 2).sum())
            e["act"] += float((x ** 2).sum())
            e["act_dstar"] += float(((layer.xs * layer.d[:, None] - x) ** 2).sum())
            d = token_lattice(x)
            e["act_w8a8"] += float(((np.clip(to_lattice(x, d), -127, 127) * d[:, None] - x)
                                    ** 2).sum())


def run_trace(cfg, trace, source: str = "trace", progress=None) -> dict:
    """Teacher-forced analysis of a trace (``dstar.golden.trace.Trace``): every linear layer
    runs DSTAR and W8A8 on the recorded inputs, compared with float (``linear_*_sqnr_db``: the
    layer outputs without their bias, so weight quantization is part of the error; the
    reconstructed activations alone: ``activation_sqnr_db``); recorded attention runs
    DSTAR's reuse (``attention``). Drift is invisible here: every step starts from the
    recorded float inputs. ``progress(phase, i, n)`` is called per layer. The linears run
    ``cfg.encoding``; ``dstar`` holds v1's element mix whatever the encoding (with FMDQ from a
    nibble pass of its own) and, with FMDQ, ``fmdq`` its figures (``fmdq_block``). When the layers'
    row counts differ, ``rows_per_linear``, ``tokens`` and ``batch`` are None and
    ``rows_per_layer`` lists them."""
    from dstar.golden.difflinear import ENCODINGS
    from dstar.golden.trace import TraceError
    types = layer_types_of(trace.linear_x)
    fmdq = cfg.encoding is Encoding.FMDQ
    stats = ENCODINGS[cfg.encoding].stats(types)
    e = dict.fromkeys(("signal", "dstar", "w8a8", "act", "act_dstar", "act_w8a8"), 0.0)
    for name, w in trace.linear_w.items():        # refused before any work
        if w.shape[1] % cfg.group:
            raise TraceError(f"{source}: layer {name!r}: K={w.shape[1]} is not a multiple of "
                             f"group={cfg.group}")
    with np.errstate(over="ignore", invalid="ignore"):   # overflowed energies: "undefined"
        _trace_linears(cfg, trace, stats, e, progress)
        # v1's element mix beside FMDQ's figures, as the bundled report has it: a nibble pass
        # of its own (counts only).
        v1_stats = OpStats(types) if fmdq else stats
        if fmdq:
            _trace_linears(cfg.replace(encoding=Encoding.NIBBLE), trace, v1_stats, None,
                           progress)
    tot, per_type, per_step = _dstar_block(v1_stats)
    rows_of = {name: int(x.shape[1]) for name, x in trace.linear_x.items()}
    first = next(iter(trace.linear_x))
    rows, tokens = rows_of[first], trace.linear_tokens.get(first)
    if len(set(rows_of.values())) > 1:     # layers of their own row counts: no one figure
        rows = tokens = None
    rep = {
        "workload": source, "steps": trace.steps, "rows_per_linear": rows,
        "tokens": tokens if tokens is not None else rows,
        "batch": rows // tokens if tokens else None, "cfg_halves": trace.cfg_halves,
        **({} if rows is not None else {"rows_per_layer": rows_of}),
        "layers": len(trace.linear_x), "config": cfg.to_dict(),
        "hardware_fit": hardware_fit(cfg, trace),
        "w8a8": {"linear_output_sqnr_db": _sqnr(e["signal"], e["w8a8"]),
                 "activation_sqnr_db": _sqnr(e["act"], e["act_w8a8"]),
                 "psnr_vs_fp32_db": None, "mean_passes": 2.0},
        "dstar": {"linear_output_sqnr_db": _sqnr(e["signal"], e["dstar"]),
                  "activation_sqnr_db": _sqnr(e["act"], e["act_dstar"]),
                  "psnr_vs_fp32_db": None, **tot},
        "ops_ratio_vs_w8a8": tot["ops_ratio_vs_w8a8"],
        "lockstep_ops_ratio_vs_w8a8": tot["lockstep_ops_ratio_vs_w8a8"],
        "per_layer_type": per_type, "per_step": per_step, "encoding": str(cfg.encoding),
        **({"fmdq": {**_fmdq_settings(cfg), **fmdq_block(stats)}} if fmdq else {}),
    }
    attention = _trace_attention(cfg, trace, progress)
    if attention is not None:
        rep["attention"] = attention
    return rep


def export_trace(cfg, path, model: DiT | None = None, layers=None, attention=True):
    """Record the bundled model's (``cfg.workload``) FP32 sampling run (``cfg.samples``,
    ``cfg.steps``) as a trace; returns the file written (``dstar.golden.trace.save_trace``:
    ``.npz`` appended)."""
    from dstar.golden.dit import float_attention, float_linear
    from dstar.golden.trace import TraceRecorder, save_trace
    model = model or DiT.bundled(cfg.workload)
    rec = TraceRecorder(float_linear, float_attention, layers, attention)
    ddim_sample(model, sample_labels(cfg.samples, model.shape.num_classes),
                initial_noise(cfg.samples, model.shape, cfg.seed), cfg.steps, cfg.cfg_scale,
                linear=rec.linear, attention=rec.attention, on_step=rec.on_step)
    tr = rec.trace()
    tr.linear_tokens = dict.fromkeys(tr.linear_x, model.shape.tokens)
    tr.cfg_halves = cfg.cfg_scale > 1.0
    return save_trace(path, tr)
