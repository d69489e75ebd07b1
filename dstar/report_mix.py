"""The measured mix of ``dstar report``: per linear layer type and step phase, what each of the
project's differential datapaths costs against the lean dense INT8 datapath, from a golden run of
a bundled DiT (every linear of every block, every step), and the attention engine's reuse.

Per (layer type, phase) it sums, over the layer-steps of that phase:

* ``int8``: the lean dense INT8 datapath's cycles (``sim.int8_cycles``, exact);
* ``nibble``: v1's compact datapath's cycles (``sim.cycle_model``, exact against the RTL) and the
  element classes ZERO / LOW / HIGH (also the Ditto-like and Cambricon-D-like models' input);
* ``fmdq``: a whole ``FmdqLinear`` run's cycles, its encode phases included
  (``sim.fmdq_cycles.linear_cycles``, exact against the RTL), sub-channels, their width bits and
  the skipped ones.

Phases (``PHASES``): the key step (step 0), then the rest of the run in quarters. A model with
another number of steps takes, at its step ``i`` of ``S``, the phase of the same fraction of the
run: the mix is **transferred** across models, which the report says.

Attention (``sim.bench_attention.run``, the engine's exact cycle model on blocks 0, 3, 5): the
fraction of key blocks kept by the masks and the key and reuse steps' cycles over dense
attention's.

Measured once per configuration and workload and cached as JSON under
``build/report/`` (``measure``); ``--trace`` mixes are not cached.
"""

import hashlib
import json
import os

import numpy as np

from dstar.config import Datapath, Encoding, Workload
from dstar.golden.dit import LINEAR_TYPES
from dstar.paths import build_dir

__all__ = ["PHASES", "phase_of", "measure", "measure_trace", "measure_attention",
           "LAYER_TYPES", "mix_key", "Mix"]

PHASES = ("key", "q1", "q2", "q3", "q4")
LAYER_TYPES = LINEAR_TYPES
#: Bump when what is measured changes (old caches are then ignored).
VERSION = 2


def phase_of(step: int, steps: int) -> str:
    """The phase of step ``step`` of a ``steps``-step run (module docstring)."""
    if step == 0 or steps <= 1:
        return "key"
    return PHASES[1 + min(3, (4 * (step - 1)) // max(1, steps - 1))]


def mix_key(cfg, workload: str, steps: int) -> str:
    """The cache key of a mix: every field it depends on, the other encoding's too (the mix
    measures both encodings whatever ``cfg.encoding`` is)."""
    text = json.dumps([VERSION, cfg.hardware(), cfg.unused(), cfg.run_params(), workload, steps],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _empty():
    return {"int8": 0, "nibble": 0, "fmdq": 0, "elements": 0, "zero": 0, "low": 0, "high": 0,
            "sub_channels": 0, "width_bits": 0, "skipped": 0, "layer_steps": 0}


def _fmdq_cycles(enc, window: int, k: int, m_out: int, geo: dict) -> int:
    """A whole ``FmdqLinear`` run, the encode phases included (``sim.fmdq_cycles.linear_cycles``,
    the RTL's exact count)."""
    from dstar.sim.fmdq_cycles import linear_cycles
    blocks = -(-m_out // (geo["columns"] * geo["n_arrays"]))
    return linear_cycles(enc, window, blocks)["cycles"]


def _bundled_layers(workload: str, steps: int):
    """``(name, xs, w, b)`` of every linear of every block of the bundled DiT's golden run."""
    from dstar.sim.bench import all_layers
    from dstar.sim.traces import linear_inputs
    layers = all_layers(workload=workload)
    for layer in layers:
        xs, w, b = linear_inputs(layer, steps=steps, workload=workload)
        yield layer, xs, w, b


def _trace_layers(trace):
    """``(name, xs, w, b)`` of a ``golden.trace.Trace``'s linears whose type (the name's last
    part) is one of ``LAYER_TYPES``."""
    for name, xs in trace.linear_x.items():
        if name.rsplit(".", 1)[-1] in LAYER_TYPES:
            b = trace.linear_b.get(name)
            w = np.asarray(trace.linear_w[name], np.float64)
            yield name, np.asarray(xs, np.float64), w, (np.zeros(w.shape[0]) if b is None
                                                        else np.asarray(b, np.float64))


def _linears(cfg, layers, count: int, progress) -> dict:
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.encoder import HIGH, LOW, ZERO
    from dstar.golden.hooks import layer_type
    from dstar.sim import cycle_model, int8_cycles
    from dstar.synth.fmdq_efficiency import geometry

    nib = cfg.replace(encoding=Encoding.NIBBLE, datapath=Datapath.DSTAR)
    fm = cfg.replace(encoding=Encoding.FMDQ)
    geo = geometry(fm)
    i8 = cfg.replace(datapath=Datapath.INT8, encoding=Encoding.NIBBLE)
    out = {lt: {p: _empty() for p in PHASES} for lt in LAYER_TYPES}
    for i, (layer, xs, w, b) in enumerate(layers):
        ln, lf = DiffLinear(w, b, nib, layer), DiffLinear(w, b, fm, layer)
        k, m = w.shape[1], w.shape[0]
        lt = layer_type(layer)
        encs = [ln(xs[s], s).enc for s in range(len(xs))]
        v1 = cycle_model.predict_batch(nib, encs, k, m)      # batched: several times faster
        dense = int8_cycles.predict(i8, xs.shape[1], k, m).cycles
        for s, en in enumerate(encs):
            row = out[lt][phase_of(s, len(xs))]
            ef = lf(xs[s], s).enc
            row["int8"] += dense
            row["nibble"] += v1[s].cycles
            row["fmdq"] += _fmdq_cycles(ef, geo["window"], k, m, geo)
            row["elements"] += int(en.cls.size)
            for name, c in (("zero", ZERO), ("low", LOW), ("high", HIGH)):
                row[name] += int(np.count_nonzero(en.cls == c))
            row["sub_channels"] += int(ef.width.size)
            row["width_bits"] += int(ef.width.sum())
            row["skipped"] += int(np.count_nonzero(ef.width == 0))
            row["layer_steps"] += 1
        if progress:
            progress(f"mix: {layer} ({i + 1}/{count})")
    return out


def _attention(cfg, workload: str, steps: int) -> dict:
    from dstar.sim import bench_attention
    rep = bench_attention.run(cfg.replace(workload=workload), steps=steps)
    kinds = rep["kinds"]
    return {"mask_fraction": kinds["reuse"]["mask_fraction"],
            "key_ratio_vs_dense": rep["key_ratio_vs_dense"],
            "reuse_ratio_vs_dense": rep["reuse_ratio_vs_dense"],
            "refresh_attn": rep["refresh_attn"], "theta": rep["theta"],
            "utilization": rep["utilization"]}


def measure(cfg, workload: str = Workload.DIGITS, steps: int = 50, progress=None) -> dict:
    """The mix (module docstring) of ``workload``'s bundled DiT under ``cfg``, cached."""
    from dstar.sim.bench import all_layers
    from dstar.synth.fmdq_efficiency import geometry
    key = mix_key(cfg, workload, steps)
    cache = build_dir("report", f"mix-{workload}-{key}.json")
    if cache.is_file():
        return json.loads(cache.read_text())
    geo = geometry(cfg.replace(encoding=Encoding.FMDQ))
    rep = {"source": f"golden run of the bundled DiT ({workload}), {steps} DDIM steps, every "
                     "linear of every block; attention of blocks 0, 3, 5",
           "workload": workload, "steps": steps, "key": key,
           "config": {"group": cfg.group, "m_tile": cfg.m_tile, "n_arrays": cfg.n_arrays,
                      "token_tile": cfg.token_tile, "sort_window": cfg.sort_window,
                      "tau": cfg.tau, "fmdq_rule": str(cfg.fmdq_rule), "theta": cfg.theta,
                      "refresh_attn": cfg.refresh_attn, "fmdq_geometry": geo},
           "linears": _linears(cfg, _bundled_layers(workload, steps),
                               len(all_layers(workload=workload)), progress),
           "attention": measure_attention(cfg, workload, steps)["attention"]}
    _write(cache, rep)
    return rep


class Mix:
    """Read access to a ``measure`` report: per (layer type, phase) cycle ratios and element
    classes, the attention masks' density and cycle ratios. A phase without layer-steps (a
    short run) takes the whole run's figures of its layer type."""

    def __init__(self, rep: dict):
        self.rep = rep
        lin = rep["linears"]
        self._rows = {}
        for lt, phases in lin.items():
            total = _empty()
            for row in phases.values():
                for k in total:
                    total[k] += row[k]
            for p, row in phases.items():
                self._rows[lt, p] = row if row["layer_steps"] else total

    def ratio(self, design: str, lt: str, phase: str) -> float:
        r = self._rows[lt, phase]
        return r[design] / r["int8"]

    def classes(self, lt: str, phase: str) -> tuple[float, float, float]:
        r = self._rows[lt, phase]
        n = max(1, r["elements"])
        return r["zero"] / n, r["low"] / n, r["high"] / n

    def mean_width(self, lt: str, phase: str) -> float:
        r = self._rows[lt, phase]
        return r["width_bits"] / max(1, r["sub_channels"])

    def mask_fraction(self) -> float:
        return self.rep["attention"]["mask_fraction"]

    def attention_ratio(self, key: bool) -> float:
        a = self.rep["attention"]
        return a["key_ratio_vs_dense"] if key else a["reuse_ratio_vs_dense"]

    def refresh_attn(self) -> int:
        return int(self.rep["attention"]["refresh_attn"])

    def summary(self) -> dict:
        """Per layer type over the whole run: element classes, cycle ratios vs INT8 and FMDQ's
        mean width; the attention figures."""
        out = {}
        for lt in LAYER_TYPES:
            t = _empty()
            for p in PHASES:
                for k in t:
                    t[k] += self.rep["linears"][lt][p][k]
            n = max(1, t["elements"])
            out[lt] = {"zero": t["zero"] / n, "low": t["low"] / n, "high": t["high"] / n,
                       "nibble_speedup_vs_int8": t["int8"] / t["nibble"],
                       "fmdq_speedup_vs_int8": t["int8"] / t["fmdq"],
                       "fmdq_mean_width_bits": t["width_bits"] / max(1, t["sub_channels"]),
                       "fmdq_skipped": t["skipped"] / max(1, t["sub_channels"])}
        return {"per_layer_type": out, "attention": self.rep["attention"]}


def measure_trace(cfg, path, workload: str = Workload.DIGITS, progress=None) -> dict:
    """The mix of a user's trace (``golden.trace``; ``TraceError`` naming what is wrong): its
    linears of the four types; the attention figures of ``workload``'s bundled DiT (cached).
    Not cached."""
    from dstar.golden.trace import TraceError, load_trace
    from dstar.synth.fmdq_efficiency import geometry
    trace = load_trace(path)
    names = [n for n in trace.linear_x if n.rsplit(".", 1)[-1] in LAYER_TYPES]
    if not names:
        raise TraceError(f"trace {str(path)!r}: no linear layer named *.qkv, *.proj, *.fc1 or "
                         "*.fc2")
    base = measure_attention(cfg, workload)
    return {"source": f"trace {path} ({len(names)} linears, {trace.steps} steps); attention "
                      f"from the bundled DiT ({workload})",
            "workload": f"trace:{path}", "steps": trace.steps, "key": None,
            "config": {**base["config"], "fmdq_geometry": geometry(
                cfg.replace(encoding=Encoding.FMDQ))},
            "linears": _linears(cfg, _trace_layers(trace), len(names), progress),
            "attention": base["attention"]}


def measure_attention(cfg, workload: str = Workload.DIGITS, steps: int = 50) -> dict:
    """The attention part of ``measure``, cached on its own."""
    key = mix_key(cfg, workload, steps)
    cache = build_dir("report", f"attention-{workload}-{key}.json")
    if cache.is_file():
        return json.loads(cache.read_text())
    rep = {"config": {"theta": cfg.theta, "refresh_attn": cfg.refresh_attn},
           "attention": _attention(cfg, workload, steps)}
    _write(cache, rep)
    return rep


def _write(cache, rep) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n")
    tmp.replace(cache)
