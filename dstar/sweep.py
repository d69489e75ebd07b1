"""``dstar sweep``: ``dstar report``'s models over a grid of configurations, on a Dask cluster.

A point of the grid is a configuration (the fields of ``CONFIG_AXES``: tolerance ``tau``, token
tile ``token_tile``, refresh intervals ``refresh_linear`` and ``refresh_attn``, ...) on a
machine (``report_machine.Machine``'s fields, with ``array`` for its PE array ``ROWSxCOLS`` and
``hbm_tbs`` for the HBM bandwidth). Per point (``evaluate_point``):

* latency and energy per image of DSTAR v2 (``report.OURS``) and of the INT8 systolic array on
  each model (``report_cost.run_model``: the report's roofline), with the mix measured on the
  bundled DiT under the point's configuration (``report_mix.measure``, cached under
  ``build/report``, shared with ``dstar report``); the point's figures are geomeans over the
  models;
* the machine's PE-array area in DSTAR v2's PEs: its MACs times the FMDQ PE array's area per
  MAC at the configuration's tile (``AREA_PARTS`` of ``synth.fmdq_efficiency``; 45 nm CMOS
  flow, since the estimate is fitted to it), estimated without synthesis
  (``estimate``) or, with ``synth``, synthesized with Yosys (``areas``, cached);
* with ``accuracy``: PSNR vs FP32 of the configuration's final samples with FMDQ linears
  (``analyze.run_sweep``: an FP32, a dense W8A8 and the configuration's golden run, at the
  configuration's ``steps``, ``samples`` and ``seed``).

The work of one configuration (``measure_config``: mix, area, accuracy) is one Dask task that its
points depend on; each point is a task of its own. The cluster is a ``LocalCluster`` of
``workers`` single-threaded processes, or the one at ``scheduler`` (whose workers need dstar
installed: the tasks are this module's functions); its workers use their own build folder (a
local cluster's inherit ``--build-dir``).

Outputs in the sweep folder (``run``): ``rows.jsonl``, one JSON row per point, appended as each
point ends (a row is one ``write`` of a whole line; a partial last line, from a kill during the
write, is dropped when the file is read again); ``sweep.json``, the grid's rows in grid order with
the Pareto front (``pareto``), and ``pareto.png`` (``sweep_plot``), both written whole at the
end. A point that fails is a row with ``status = "failed"`` and its error; the others are kept.
Run again on the same folder, a sweep evaluates only the points without an ``ok`` row (a row's
``key`` covers everything its figures depend on: the point's configuration, machine, models,
workload, mix steps and options), so an interrupted sweep resumes where it stopped and failed
points are tried again."""

import itertools
import json
import math
import os
import re
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SweepError", "CONFIG_AXES", "MACHINE_AXES", "AXES", "MAX_POINTS", "FILES",
           "parse_grid", "grid_points", "point_parts", "measure_config", "evaluate_point",
           "read_rows", "append_row", "pareto", "run", "format_text", "Progress",
           "local_cluster"]


class SweepError(ValueError):
    """Bad input of ``dstar sweep``: one line naming the value."""


def _config_axes() -> tuple[str, ...]:
    from .analyze import SWEEP_FIELDS
    return tuple(f for f in SWEEP_FIELDS if f != "encoding")     # DSTAR v2 is FMDQ's


def _machine_fields() -> tuple[str, ...]:
    from dataclasses import fields

    from .report_machine import Machine
    return tuple(f.name for f in fields(Machine))


#: Configuration fields a grid may vary: ``analyze``'s sweepable fields but ``encoding``.
CONFIG_AXES = _config_axes()
#: Machine axes: ``array`` (``ROWSxCOLS`` or ``N`` for ``NxN``) and every ``Machine`` field.
MACHINE_AXES = ("array",) + _machine_fields()
AXES = CONFIG_AXES + MACHINE_AXES
#: The most points one sweep runs (each is at least a roofline over every model).
MAX_POINTS = 10_000
#: The FMDQ datapath's parts counted as the PE array's area: logic and weight window, the Y
#: memories left out (they scale with the tokens held, not with the MACs).
AREA_PARTS = ("pe_logic", "weight_window")
ROWS, SUMMARY, PLOT = "rows.jsonl", "sweep.json", "pareto.png"
FILES = (ROWS, SUMMARY, PLOT)
#: Bump when what a row holds changes (rows of another version are evaluated again).
VERSION = 1


# -- the grid ------------------------------------------------------------------------------------

def _value(cfg, axis: str, text: str):
    """``text`` parsed and checked as a value of ``axis`` (``SweepError`` naming it)."""
    from .config import ConfigError, Encoding
    from .report_machine import ReportError, parse_machine
    where = f"--grid {axis}={text!r}"
    if axis == "array":
        m = re.fullmatch(r"(\d+)(?:x(\d+))?", text)
        if not m:
            raise SweepError(f"{where}: expected ROWSxCOLS (e.g. 64x64) or N")
        rows, cols = m[1], m[2] or m[1]
        items = [f"rows={rows}", f"cols={cols}"]
    elif axis in MACHINE_AXES:
        items = [f"{axis}={text}"]
    if axis in MACHINE_AXES:
        try:
            mach = parse_machine(items)
        except ReportError as e:
            raise SweepError(f"{where}: {str(e).split(': ', 1)[-1]}") from None
        return f"{mach.rows}x{mach.cols}" if axis == "array" else getattr(mach, axis)
    import typing

    from .config import Config
    kind = typing.get_type_hints(Config)[axis]
    try:
        v = kind(text) if kind in (int, float) else text
    except ValueError:
        raise SweepError(f"{where}: expected {'an integer' if kind is int else 'a number'}") \
            from None
    try:
        cfg.replace(**{axis: v})
        cfg.replace(encoding=Encoding.FMDQ, **{axis: v})
    except ConfigError as e:
        raise SweepError(f"{where}: {e}") from None
    return v


def parse_grid(cfg, specs) -> dict:
    """``["tau=0,1", "array=32x32,64x64"]`` -> ``{"tau": [0, 1], "array": ["32x32", "64x64"]}``,
    every value checked against ``cfg`` (``SweepError``: one line naming the bad axis or value);
    at most ``MAX_POINTS`` points."""
    grid: dict = {}
    for spec in specs or ():
        axis, sep, text = spec.partition("=")
        axis = axis.strip().replace("-", "_")
        if not sep or not axis or not text.strip():
            raise SweepError(f"--grid expects AXIS=V1,V2,..., got {spec!r}")
        if axis not in AXES:
            raise SweepError(f"--grid: no axis {axis!r} (axes: {', '.join(AXES)})")
        if axis in grid:
            raise SweepError(f"--grid: {axis!r} given twice")
        values = [v.strip() for v in text.split(",")]
        if "" in values:
            raise SweepError(f"--grid {axis}: an empty value in {text!r}")
        parsed = [_value(cfg, axis, v) for v in values]
        if len({repr(v) for v in parsed}) < len(parsed):
            raise SweepError(f"--grid {axis}: a value given twice in {text!r}")
        grid[axis] = parsed
    both = [a for a in ("rows", "cols") if a in grid]
    if "array" in grid and both:
        raise SweepError(f"--grid: array sets rows and cols; it cannot be swept with {both[0]}")
    n = math.prod(len(v) for v in grid.values())
    if n > MAX_POINTS:
        sizes = " x ".join(f"{len(v)} {a}" for a, v in grid.items())
        raise SweepError(f"--grid: {n} points ({sizes}) are more than the {MAX_POINTS} one "
                         "sweep runs")
    return grid


def point_parts(cfg, point: dict, machine=()) -> tuple:
    """``(config, Machine)`` of a grid point: ``cfg`` with the point's configuration axes, the
    machine of ``machine`` (``KEY=VALUE`` items) with its machine axes."""
    from .report_machine import parse_machine
    over = {a: v for a, v in point.items() if a in CONFIG_AXES}
    items = list(machine)
    for a, v in point.items():
        if a == "array":
            rows, cols = v.split("x")
            items += [f"rows={rows}", f"cols={cols}"]
        elif a in MACHINE_AXES:
            items.append(f"{a}={v}")
    return cfg.replace(**over), parse_machine(items)


def grid_points(cfg, grid: dict, machine=()) -> list[dict]:
    """The cartesian product of ``grid`` as point dicts (axis -> value, in grid order), each
    point's configuration checked whole (``SweepError`` names a point no configuration holds,
    or one whose memories cannot hold the bundled DiT's heads, which the mix measures)."""
    from dstar.golden.dit import load_weights

    from .config import ConfigError, Encoding
    points = [dict(zip(grid, vals, strict=True)) for vals in itertools.product(*grid.values())]
    shape = load_weights(workload=cfg.workload)[0]
    n, dh = shape.tokens, shape.hidden // shape.heads
    for pt in points:
        try:
            c, _ = point_parts(cfg, pt, machine)
            c.replace(encoding=Encoding.FMDQ)
        except ConfigError as e:
            raise SweepError(f"--grid: the point {_name(pt)}: {e}") from None
        if c.max_tokens < n or c.head_dim != dh:      # report_mix's attention would fail
            raise SweepError(f"the point {_name(pt)}: the mix runs the bundled DiT's attention "
                             f"heads (N={n}, Dh={dh}), which need max_tokens >= {n} and "
                             f"head_dim = {dh}; got max_tokens={c.max_tokens}, "
                             f"head_dim={c.head_dim}")
    return points


def _name(point: dict) -> str:
    return " ".join(f"{a}={v}" for a, v in point.items()) or "(the base configuration)"


def _digest(obj) -> str:
    import hashlib
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _config_key(cfg, opts: dict) -> str:
    return _digest([VERSION, cfg.hardware(), cfg.run_params(), opts["workload"],
                    opts["mix_steps"], opts["synth"], opts["accuracy"]])


# -- the work of a configuration and of a point ---------------------------------------------------

def pe_area_per_mac(cfg, synth: bool = False) -> dict:
    """The FMDQ PE array's area per 8-bit MAC of peak throughput at ``cfg``'s tile (um^2,
    ``AREA_PARTS``, CMOS flow): ``{"um2_per_mac", "source"}``; synthesized with ``synth``
    (Yosys, minutes; cached by ``synth.fmdq_efficiency.areas``), else estimated."""
    from dstar.synth import fmdq_efficiency as fe
    parts = fe.areas(cfg)["parts_um2"] if synth else fe.estimate(cfg)
    geo = fe.geometry(fe.fmdq_config(cfg))
    return {"um2_per_mac": sum(parts[k] for k in AREA_PARTS) / (geo["macs"] * geo["n_arrays"]),
            "source": ("synthesized (synth.fmdq_efficiency.areas, CMOS flow)" if synth else
                       "estimated (synth.fmdq_efficiency.estimate, CMOS flow)")}


def _accuracy(cfg) -> dict:
    """PSNR vs FP32 (and vs dense W8A8's) of ``cfg``'s golden run with FMDQ linears."""
    from .analyze import run_sweep
    from .config import Encoding
    rep = run_sweep(cfg.replace(encoding=Encoding.FMDQ), {})
    p = rep["points"][0]
    return {"psnr_vs_fp32_db": p["psnr_vs_fp32_db"],
            "psnr_gap_vs_w8a8_db": p["psnr_gap_vs_w8a8_db"],
            "worst_sample_gap_vs_w8a8_db": p["worst_sample_gap_vs_w8a8_db"],
            "w8a8_psnr_vs_fp32_db": rep["w8a8"]["psnr_vs_fp32_db"],
            "steps": cfg.steps, "samples": cfg.samples, "attention": str(cfg.attention)}


def measure_config(cfg, workload: str, mix_steps: int, synth: bool, accuracy: bool) -> dict:
    """The work of one configuration, shared by its points (a Dask task): ``mix`` (the
    ``report_mix.measure`` report), ``area`` (``pe_area_per_mac``) and, with ``accuracy``,
    ``accuracy`` (``_accuracy``; else None). One BLAS thread."""
    from threadpoolctl import threadpool_limits

    from .config import Encoding
    from .report_mix import measure
    # The mix's cache key is the configuration's hardware() and run_params(): with FMDQ's
    # encoding it covers FMDQ's fields (token_tile, sort_window, ...), which nibble's omits.
    fm = cfg.replace(encoding=Encoding.FMDQ)
    with threadpool_limits(1):
        mix = measure(fm, workload, mix_steps)
        _check_mix(mix, fm)
        return {"mix": mix, "area": pe_area_per_mac(cfg, synth),
                "accuracy": _accuracy(cfg) if accuracy else None}


def _check_mix(mix: dict, cfg) -> None:
    """Refuse a mix measured under other settings than ``cfg``'s (a stale cache)."""
    got = mix["config"]
    for k, v in got.items():
        if k != "fmdq_geometry" and str(getattr(cfg, k)) != str(v):
            raise RuntimeError(f"the mix cached as {mix.get('key')} was measured with {k} = "
                               f"{v}, not {getattr(cfg, k)}; remove it from build/report")


def _geomean(vals) -> float:
    vals = list(vals)
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def evaluate_point(point: dict, work: dict, machine, shapes) -> dict:
    """A point's row (a Dask task): per model of ``shapes`` DSTAR v2's latency and energy per
    image and its ratios to the INT8 systolic array's on ``machine`` with ``work``'s mix
    (``measure_config``), their geomeans, the PE-array area (mm^2) and the accuracy."""
    from .report import OURS
    from .report_cost import run_model
    from .report_mix import Mix
    mix = Mix(work["mix"])
    models = {}
    for s in shapes:
        ours, base = run_model(s, OURS, mix, machine), run_model(s, "int8_sa", mix, machine)
        models[s.name] = {"latency_s": ours["latency_s"], "energy_j": ours["energy_j"],
                          "speedup_vs_int8_sa": base["latency_s"] / ours["latency_s"],
                          "energy_saving_vs_int8_sa": base["energy_j"] / ours["energy_j"]}
    acc = work.get("accuracy")
    psnr = acc["psnr_vs_fp32_db"] if acc else None
    return {"point": point, "status": "ok",
            "latency_s": _geomean(m["latency_s"] for m in models.values()),
            "energy_j": _geomean(m["energy_j"] for m in models.values()),
            "speedup_vs_int8_sa": _geomean(m["speedup_vs_int8_sa"] for m in models.values()),
            "energy_saving_vs_int8_sa": _geomean(m["energy_saving_vs_int8_sa"]
                                                 for m in models.values()),
            "area_mm2": machine.macs_per_cycle * work["area"]["um2_per_mac"] / 1e6,
            "area_source": work["area"]["source"],
            "psnr_vs_fp32_db": psnr if psnr is None or math.isfinite(psnr) else None,
            "accuracy": acc, "models": models, "machine": machine.to_dict(),
            "mix": {"source": work["mix"]["source"], "key": work["mix"].get("key")}}


# -- the rows file ------------------------------------------------------------------------------

def read_rows(path) -> dict:
    """``{key: row}`` of a rows file, the last row of each key; a last line without its newline
    (a row cut by a kill) is cut off the file, so that the next row starts a line of its own.
    A line that is not a JSON row is refused (``SweepError``: not dstar's file)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SweepError(f"rows file {str(path)!r}: {e.strerror or e}") from None
    whole = data[:data.rfind(b"\n") + 1]
    if len(whole) < len(data):
        os.truncate(path, len(whole))
    out = {}
    for n, line in enumerate(whole.decode(errors="replace").splitlines(), start=1):
        try:
            row = json.loads(line)
            out[row["key"]] = row
        except (json.JSONDecodeError, KeyError, TypeError):
            raise SweepError(f"rows file {str(path)!r}: line {n} is not a sweep row; give "
                             "another folder (-o) or remove the file") from None
    return out


def _plain(v):
    """``v`` with every non-finite float as None (JSON has no NaN or infinity)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def append_row(path, row: dict) -> None:
    """Append ``row`` (non-finite numbers as null) as one line, in one ``write`` (then
    ``fsync``): a row is in the file whole or, cut by a kill, dropped by ``read_rows``."""
    from .outputs import OutputError
    line = (json.dumps(_plain(row), sort_keys=True, allow_nan=False) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            if os.write(fd, line) != len(line):
                raise OSError(f"short write to {path}")
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise OutputError(f"cannot write {str(path)!r}: {e.strerror or e}") from None


# -- the Pareto front ---------------------------------------------------------------------------

def _objectives(row: dict, accuracy: bool) -> tuple:
    """Smaller is better: area, latency, energy and, with ``accuracy``, minus the PSNR (a
    PSNR of None is a run identical to FP32: the best)."""
    out = (row["area_mm2"], row["latency_s"], row["energy_j"])
    if accuracy:
        p = row.get("psnr_vs_fp32_db")
        out += (-math.inf if p is None else -p,)
    return out


def pareto(rows: list, accuracy: bool) -> list[int]:
    """Indices of the ``ok`` rows of ``rows`` that no other ``ok`` row dominates (as good in
    every objective of ``_objectives`` and better in one)."""
    objs = {i: _objectives(r, accuracy) for i, r in enumerate(rows) if r["status"] == "ok"}

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b
    return [i for i, o in objs.items() if not any(dominates(p, o) for p in objs.values())]


# -- progress -----------------------------------------------------------------------------------

class Progress:
    """A progress bar on ``out`` (a text stream; None: silent): points done of ``total``, the
    failed ones, the time; redrawn in place on a terminal, a line per point elsewhere. A failed
    point gets a line of its own with its error."""

    WIDTH = 30

    def __init__(self, total: int, done: int, out=None):
        self.total, self.done, self.failed, self.out = total, done, 0, out
        self.t0 = time.monotonic()
        self.tty = bool(out is not None and getattr(out, "isatty", lambda: False)())

    def line(self) -> str:
        filled = self.WIDTH * self.done // max(1, self.total)
        return (f"sweep [{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} "
                f"points, {self.failed} failed, {time.monotonic() - self.t0:.0f} s")

    def begin(self, rows_path) -> None:
        """Say how many points an earlier run finished and how many are left."""
        if self.done:
            self._say(f"sweep: {self.done} of {self.total} points already in {rows_path}; "
                      f"{self.total - self.done} to evaluate", True)

    def update(self, row: dict) -> None:
        self.done += 1
        if row["status"] != "ok":
            self.failed += 1
            self._say(f"sweep: point {_name(row['point'])} failed: {row['error']}", True)
        self._say(self.line(), self.done == self.total)

    def _say(self, text: str, end: bool) -> None:
        if self.out is None:
            return
        if self.tty:
            self.out.write(f"\r\x1b[K{text}" + ("\n" if end else ""))
        else:
            self.out.write(text + "\n")
        self.out.flush()


# -- the sweep ----------------------------------------------------------------------------------

@contextmanager
def _client(scheduler: str | None, workers: int | None):
    """A Dask client of the cluster at ``scheduler``, or of a new ``LocalCluster`` of
    ``workers`` single-threaded worker processes (None: one per core)."""
    from distributed import Client
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as e:
            raise SweepError(f"--scheduler {scheduler!r}: cannot connect ({e})") from None
        with client:
            yield client
        return
    with local_cluster(workers) as cluster, Client(cluster) as client:
        yield client


def local_cluster(workers: int | None):
    """A ``LocalCluster`` of ``workers`` single-threaded worker processes (None: one per core)
    on this machine's loopback, without a dashboard (its HTTP routes on a free port)."""
    import logging

    from distributed import LocalCluster
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                        host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR,
                        scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})


def _failed(point: dict, fut) -> dict:
    if fut.cancelled():
        return {"point": point, "status": "failed", "error": "cancelled"}
    e = fut.exception()
    return {"point": point, "status": "failed", "error": f"{type(e).__name__}: {e}"}


def _evaluate_all(client, jobs, opts, shapes, rows_path, bar, measure, run_id) -> None:
    """Submit ``jobs`` (``(key, point, config, machine)``): a ``measure`` task per
    configuration, an ``evaluate_point`` task per point; append each point's row as it ends."""
    from distributed import as_completed
    configs, futs = {}, {}
    for key, point, cfg, machine in jobs:
        ck = _config_key(cfg, opts)
        if ck not in configs:
            configs[ck] = client.submit(measure, cfg, opts["workload"], opts["mix_steps"],
                                        opts["synth"], opts["accuracy"],
                                        key=f"dstar-sweep-config-{ck}-{run_id}")
        fut = client.submit(evaluate_point, point, configs[ck], machine, shapes,
                            key=f"dstar-sweep-point-{key}-{run_id}")
        futs[fut] = (key, point)
    for fut in as_completed(list(futs)):
        key, point = futs[fut]
        row = fut.result() if fut.status == "finished" else _failed(point, fut)
        row.update(key=key, run=run_id, version=VERSION,
                   finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        append_row(rows_path, row)
        bar.update(row)
        fut.release()


def run(cfg, grid: dict, folder, *, models=None, machine=(), mix_steps: int = 50,
        scheduler: str | None = None, workers: int | None = None, synth: bool = False,
        accuracy: bool = False, progress=sys.stderr, measure=measure_config) -> dict:
    """The sweep (module docstring) of ``grid`` (``parse_grid``) over ``cfg`` and the machine
    of ``machine`` (``KEY=VALUE`` items) in ``folder`` (created; held against a second sweep).
    ``models``: model names (default: the paper's seven); ``measure``: the configuration task
    (``measure_config``'s signature). Returns the summary (``sweep.json``'s content)."""
    from .outputs import locked_dir, write_atomic
    from .report import PAPER_SEVEN, resolve_models
    from .report_machine import ReportError, parse_machine
    from .sweep_plot import pareto_png
    if mix_steps < 2:
        raise SweepError(f"--mix-steps {mix_steps}: the mix needs at least 2 steps (a reuse "
                         "step of attention besides the key step)")
    try:
        parse_machine(machine)
        shapes = resolve_models(list(models or PAPER_SEVEN))
    except ReportError as e:
        raise SweepError(str(e)) from None
    points = grid_points(cfg, grid, machine)
    opts = {"models": [s.name for s in shapes], "workload": str(cfg.workload),
            "mix_steps": mix_steps, "synth": synth, "accuracy": accuracy}
    jobs = []
    for pt in points:
        c, m = point_parts(cfg, pt, machine)
        jobs.append((_digest([VERSION, c.hardware(), c.run_params(), m.to_dict(), opts]), pt,
                     c, m))
    with locked_dir(folder, "sweep folder") as where:
        rows_path = where / ROWS
        rows = read_rows(rows_path)
        todo = [j for j in jobs if rows.get(j[0], {}).get("status") != "ok"]
        bar = Progress(len(jobs), len(jobs) - len(todo), progress)
        bar.begin(rows_path)
        run_id = uuid.uuid4().hex[:12]
        if todo:
            with _client(scheduler, workers) as client:
                _evaluate_all(client, todo, opts, shapes, rows_path, bar, measure, run_id)
            rows = read_rows(rows_path)
        ordered = [rows[j[0]] for j in jobs]
        summary = {"sweep": "dstar sweep", "grid": grid, "config": cfg.to_dict(),
                   "machine": parse_machine(machine).to_dict(), **opts,
                   "resumed": len(jobs) - len(todo), "run": run_id,
                   "failed": sum(r["status"] != "ok" for r in ordered),
                   "pareto": pareto(ordered, accuracy), "points": ordered,
                   "folder": str(where)}
        write_atomic(where / SUMMARY, json.dumps(summary, indent=1, sort_keys=True) + "\n")
        write_atomic(where / PLOT, pareto_png(summary))
    return summary


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_text(summary: dict) -> str:
    """A line per point (``*``: on the Pareto front), the failed points and the files."""
    axes = list(summary["grid"])
    front = set(summary["pareto"])
    out = [f"dstar sweep: {len(summary['points'])} points ({summary['resumed']} from an earlier "
           f"run), {summary['failed']} failed; DSTAR v2 on {', '.join(summary['models'])} "
           f"(geomean), mix of {summary['workload']} over {summary['mix_steps']} steps",
           "   # " + "".join(f"{a:>14s}" for a in axes)
           + f"{'area mm2':>11s}{'latency ms':>12s}{'energy mJ':>11s}{'x INT8':>8s}"
           + f"{'PSNR dB':>9s}"]
    for i, r in enumerate(summary["points"]):
        lead = f"{'*' if i in front else ' '}{i + 1:3d} " + "".join(
            f"{str(r['point'][a]):>14s}" for a in axes)
        if r["status"] != "ok":
            out.append(f"{lead}  failed: {r['error']}")
            continue
        out.append(lead + f"{r['area_mm2']:11.2f}{r['latency_s'] * 1e3:12.3f}"
                   f"{r['energy_j'] * 1e3:11.3f}{r['speedup_vs_int8_sa']:8.2f}"
                   f"{_fmt(r['psnr_vs_fp32_db'], '9.2f'):>9s}")
    out.append(f"*: on the Pareto front (area, latency, energy"
               f"{', accuracy' if summary['accuracy'] else ''}); rows in "
               f"{Path(summary['folder']) / ROWS}, summary {SUMMARY} and plot {PLOT} beside")
    return "\n".join(out)
