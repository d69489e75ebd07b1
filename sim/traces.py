"""Inputs of the linear layers of a bundled DiT over a DDIM sampling run (real activations).

Runs the NumPy DiT (``dstar.golden.dit``, ``dstar.golden.sampler``) with a workload's shipped
weights (``dstar.golden.workloads``), DDIM eta = 0 without guidance, one sample of class ``label``,
and records the input rows (256 tokens) of every linear layer of the blocks at every step.
Results are cached under ``build/traces/`` keyed by the weights file's size and modification
time (the file may still be updated by a training run).
"""

import zipfile
from pathlib import Path

import numpy as np

from dstar.config import Workload
from dstar.golden.dit import DiT, bundled_weights_path, float_linear, load_weights
from dstar.golden.sampler import ddim_sample, initial_noise
from dstar.outputs import OutputError, atomic_file, check_work_dir
from dstar.paths import build_dir

__all__ = ["linear_inputs", "cache_path", "read_cache", "write_cache", "sample_first_steps"]



def cache_path(stem: str, steps: int, take: int, label: int, seed: int, st,
               workload: str = Workload.DIGITS) -> Path:
    """The ``build/traces/`` file of a capture of the first ``take`` steps of a ``steps``-step
    run of ``workload``'s DiT, keyed by ``st`` (the weights file's ``os.stat``: its size and
    modification time)."""
    return build_dir("traces") / (
        f"{workload}_{stem}_{steps}_{take}_{label}_{seed}_{st.st_size}_{int(st.st_mtime)}.npz")


class _Enough(Exception):
    pass


def sample_first_steps(shape, weights, steps: int, take: int, label: int, seed: int, **hooks):
    """One DDIM run (eta = 0, no guidance) of ``steps`` steps of one sample of class ``label``
    from noise ``seed``, with ``dstar.golden.dit``'s hooks (``linear=``, ``attention=``: step last),
    stopped at the first hook call of step ``take``: the hooks see steps ``< take`` only."""
    def stopping(hook):
        def call(*args):
            if args[-1] >= take:
                raise _Enough
            return hook(*args)
        return call

    try:
        ddim_sample(DiT(shape, weights), [label], initial_noise(1, shape, seed), steps,
                    cfg_scale=1.0, **{k: stopping(h) for k, h in hooks.items()})
    except _Enough:
        pass


def linear_inputs(layer: str = "blocks.0.mlp.fc1", steps: int = 20, label: int = 3,
                  seed: int = 0, take: int | None = None,
                  workload: str = Workload.DIGITS):
    """``(xs, w, b)``: ``xs`` float64 ``(take or steps, N, K)`` inputs of ``layer`` at the first
    ``take`` steps (all by default) of a ``steps``-step run of ``workload``'s bundled DiT, ``w``
    ``(M, K)`` and ``b`` ``(M,)`` its float weights."""
    take = steps if take is None else min(take, steps)
    st = bundled_weights_path(workload).stat()
    shape, weights = load_weights(workload=workload)
    w, b = weights[f"{layer}.weight"], weights[f"{layer}.bias"]
    cache = cache_path(layer, steps, take, label, seed, st, workload)
    hit = read_cache(cache, "xs")
    if hit is not None:
        return hit[0], w, b
    # Before minutes of sampling: a cache folder no file can be written in fails in one line.
    check_work_dir(cache.parent, "trace cache folder")
    # One sampling run records every linear layer of the blocks (and caches each).
    rec: dict[str, list] = {}

    def recorder(name, x, w_, b_, step):
        if name.startswith("blocks."):
            rec.setdefault(name, []).append(np.asarray(x, dtype=np.float64).copy())
        return float_linear(name, x, w_, b_, step)

    sample_first_steps(shape, weights, steps, take, label, seed, linear=recorder)
    for name, xs_l in rec.items():
        write_cache(cache_path(name, steps, take, label, seed, st, workload), xs=np.stack(xs_l))
    return np.stack(rec[layer]), w, b


def read_cache(path: Path, *keys: str) -> tuple | None:
    """The arrays ``keys`` of the cache file ``path``, or None when there is none or it is
    unreadable (truncated by an older dstar, damaged on disk): the caller computes and writes
    it again instead of failing on every later run."""
    if not path.is_file():
        return None
    try:
        with np.load(path) as z:
            return tuple(z[k] for k in keys)
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        return None


def write_cache(path: Path, **arrays) -> None:
    """Write a cache file whole or not at all (a temporary file, then a rename): Ctrl-C or a
    full disk while writing leaves no truncated file, and the error names the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"trace cache folder {str(path.parent)!r}: {e.strerror or e}"
                          ) from None
    with atomic_file(path) as f:
        np.savez(f, **arrays)
