"""The five sampling runs of the main job (``dstar analyze``) on the bundled DiT's default seeds:
FP32, dense W8A8, DSTAR's differential linears, attention reuse alone, and both (``PATHS``, of
``RunPath``; each run's hooks: ``PATH_HOOKS``).

``run_path`` runs one, on one BLAS thread; ``run_paths`` runs several, in this process or in
forked worker processes (the runs are independent; their results are bit for bit those of one
process, on any number of cores).
"""

import concurrent.futures as cf
import multiprocessing as mp
import os
import queue as queue_mod
import time
from collections.abc import Callable
from enum import StrEnum

from threadpoolctl import threadpool_limits

from dstar.config import Attention, Encoding

from .attention import AttentionReuse
from .dit import LINEAR_TYPES, DiT
from .hooks import DStarLinears, W8A8Linears
from .sampler import ddim_sample, initial_noise, sample_labels
from .sar import sar_hooks, sar_stats

__all__ = ["RunPath", "PATHS", "ENCODING_PATHS", "PATH_HOOKS", "MEASURE_BATCH", "path_hooks",
           "run_path", "run_paths", "workers_for"]

#: Batch elements (the first conditional samples) on which the attention-only run measures its
#: error against float attention and dense integer attention: each needs an extra attention.
MEASURE_BATCH = 2


class RunPath(StrEnum):
    """A sampling run of the main job (its hooks: ``PATH_HOOKS``)."""
    #: Float throughout.
    FP32 = "fp32"
    #: Dense W8A8 linears.
    W8A8 = "w8a8"
    #: DSTAR's differential linears of ``Config.encoding`` alone.
    DSTAR_LINEAR = "dstar-linear"
    #: Attention reuse alone (its errors measured on ``MEASURE_BATCH`` elements).
    ATTENTION = "attention"
    #: Both: DSTAR's linears and attention reuse.
    DSTAR = "dstar"
    #: v1's nibble encoding's linears alone, whatever ``Config.encoding`` is.
    NIBBLE_LINEAR = "nibble-linear"
    #: FMDQ's linears alone, whatever ``Config.encoding`` is.
    FMDQ_LINEAR = "fmdq-linear"


#: The runs, in the order two workers take them: the longest first, FP32 beside it.
PATHS = (RunPath.DSTAR, RunPath.FP32, RunPath.DSTAR_LINEAR, RunPath.ATTENTION, RunPath.W8A8)
#: Further runs ``path_hooks`` knows: each encoding's linears alone (``<encoding>-linear``),
#: whatever ``Config.encoding`` is, to show the encodings side by side.
ENCODING_PATHS = tuple(RunPath(f"{e.value}-linear") for e in Encoding)


def _sar(cfg, model, tag: RunPath) -> dict:
    """SAR's hooks (``golden.sar``) of the ``attention`` and ``dstar`` runs."""
    lin = DStarLinears(cfg, LINEAR_TYPES) if tag is RunPath.DSTAR else None
    hooks = sar_hooks(cfg, model, lin, measure=tag is RunPath.ATTENTION,
                      measure_batch=MEASURE_BATCH)
    return {**hooks, "_dstar_linears": lin}


def _encoding_linears(encoding: Encoding) -> Callable[..., dict]:
    return lambda cfg, model: {"linear": DStarLinears(cfg.replace(encoding=encoding),
                                                      LINEAR_TYPES)}


def _attention(cfg, model) -> dict:
    if cfg.attention is Attention.SAR:
        return _sar(cfg, model, RunPath.ATTENTION)
    return {"attention": AttentionReuse(cfg, measure=True, measure_batch=MEASURE_BATCH)}


def _dstar(cfg, model) -> dict:
    if cfg.attention is Attention.SAR:
        return _sar(cfg, model, RunPath.DSTAR)
    return {"linear": DStarLinears(cfg, LINEAR_TYPES),
            "attention": AttentionReuse(cfg, measure=False)}


#: The model hooks of each run, ``hooks(cfg, model)`` (``model`` is read by SAR only).
PATH_HOOKS: dict[RunPath, Callable[..., dict]] = {
    RunPath.FP32: lambda cfg, model: {},
    RunPath.W8A8: lambda cfg, model: {"linear": W8A8Linears()},
    RunPath.DSTAR_LINEAR: lambda cfg, model: {"linear": DStarLinears(cfg, LINEAR_TYPES)},
    RunPath.ATTENTION: _attention,
    RunPath.DSTAR: _dstar,
    RunPath.NIBBLE_LINEAR: _encoding_linears(Encoding.NIBBLE),
    RunPath.FMDQ_LINEAR: _encoding_linears(Encoding.FMDQ),
}


def path_hooks(tag: str, cfg, model: DiT | None = None) -> dict:
    """The model hooks of run ``tag`` (a ``RunPath`` or its value: ``PATH_HOOKS``); with
    ``attention = "sar"`` (``model`` needed) the ``attention`` and ``dstar`` runs are SAR's
    (``golden.sar``)."""
    return PATH_HOOKS[RunPath(tag)](cfg, model)


def run_path(tag: str, cfg, model: DiT, progress=None) -> tuple:
    """One sampling run (``tag`` in ``PATHS``) of ``cfg.samples`` images on ``cfg.seed``. Returns
    ``(samples, seconds, stats)``: ``stats`` is the DSTAR linears' ``OpStats`` or ``FmdqStats``
    (``dstar`` and ``ENCODING_PATHS``; with SAR its ``sar`` attribute holds ``sar_stats``), the
    attention hook's ``stats()`` (``attention``; SAR: ``sar_stats``) or ``None``."""
    tag = RunPath(tag)
    hooks = path_hooks(tag, cfg, model)
    inner = hooks.pop("_dstar_linears", None)
    labels = sample_labels(cfg.samples, model.shape.num_classes)
    noise = initial_noise(cfg.samples, model.shape, cfg.seed)
    t0 = time.perf_counter()
    # One BLAS thread in every process: OpenBLAS's float sums depend on its thread count (on
    # some CPUs), and a run's figures must not depend on the machine's cores or the workers.
    with threadpool_limits(1):
        out = ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale, **hooks,
                          on_step=(lambda i, t: progress(tag, i, cfg.steps)) if progress
                          else None)
    seconds = time.perf_counter() - t0
    if cfg.attention is Attention.SAR and tag in (RunPath.ATTENTION, RunPath.DSTAR):
        stats = sar_stats(hooks)
        if inner is not None:           # dstar: the linears' stats, SAR's as an attribute
            stats, inner.stats.sar = inner.stats, stats
        return out, seconds, stats
    stats = (hooks["linear"].stats if tag is RunPath.DSTAR or tag in ENCODING_PATHS else
             hooks["attention"].stats() if tag is RunPath.ATTENTION else None)
    return out, seconds, stats


def workers_for(workers: int | None) -> int:
    """The worker processes ``run_paths`` uses for ``workers`` (``None``: one per core, at most
    2: the main job's two longest runs take about as long as the other three)."""
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    return max(1, min(int(workers), len(PATHS)))


def run_paths(cfg, model: DiT, progress=None, workers: int | None = None,
              tags=PATHS) -> dict:
    """``run_path`` for each of ``tags``: ``{tag: (samples, seconds, stats)}``, in this process
    (``workers`` 1, or where processes cannot fork) or in forked worker processes, their
    progress forwarded."""
    n = min(workers_for(workers), len(tags))
    if n == 1 or "fork" not in mp.get_all_start_methods():
        return {tag: run_path(tag, cfg, model, progress) for tag in tags}
    # fork: the workers inherit the model and need no importable main module.
    ctx = mp.get_context("fork")
    events = ctx.Queue() if progress else None
    with cf.ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init,
                                initargs=(cfg, model, events)) as pool:
        futures = {tag: pool.submit(_worker_run, tag) for tag in tags}
        pending, left = set(futures.values()), len(tags) * cfg.steps
        while pending or (events is not None and left):
            _, pending = cf.wait(pending, timeout=0.2)
            while events is not None and left:
                try:
                    tag, i = events.get(timeout=0.05 if pending else 1.0)
                except queue_mod.Empty:
                    left = left if pending else 0     # every worker is done: stop waiting
                    break
                left -= 1
                progress(tag, i, cfg.steps)
        return {tag: f.result() for tag, f in futures.items()}


_WORKER: dict = {}


def _worker_init(cfg, model, events):
    _WORKER.update(cfg=cfg, model=model, events=events)


def _worker_run(tag):
    w = _WORKER
    events = w["events"]
    progress = (lambda t, i, n: events.put((t, i))) if events is not None else None
    return run_path(tag, w["cfg"], w["model"], progress)
