"""The results page: ``docs/results.md``, generated from the JSON the benchmark commands print.

Every figure the project reports comes from one entry of ``RESULTS``: a ``dstar`` command that
prints JSON (``--json``). ``dstar results --run NAME`` runs it and stores its output, stamped with
the command, the commit and the date, as ``docs/results/NAME.json`` (written atomically);
``dstar results`` renders the page from the stored files with each command's own text formatter,
so that no figure is typed by hand. An entry never run says so on the page, with its command.
"""

import importlib
import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .config import Packing, Workload
from .outputs import write_atomic

__all__ = ["Result", "RESULTS", "ResultsError", "checkout_root", "results_dir", "run", "render",
           "write_page"]


def _formatter(module: str, name: str) -> Callable[[dict], str]:
    """A command's own text formatter ``module.name``, imported when a page is rendered (the
    commands' modules need Amaranth or Yosys, the page does not)."""
    def text(rep: dict) -> str:
        return getattr(importlib.import_module(module), name)(rep)
    return text


_analyze_text = _formatter("dstar.analyze", "format_table")
_sweep_text = _formatter("dstar.analyze", "format_sweep")
_synth_text = _formatter("dstar.synth.tables", "format_table")
_cycles_text = _formatter("dstar.sim.bench", "format_report")
_attention_text = _formatter("dstar.sim.bench_attention", "format_report")
_golden_text = _formatter("dstar.sim.bench_golden", "format_report")
_efficiency_text = _formatter("dstar.synth.efficiency", "format_text")
_run_text = _formatter("dstar.run", "format_summary")
_regress_text = _formatter("dstar.sim.regress", "format_report")
_tests_text = _formatter("dstar.bench_tests", "format_report")
_report_text = _formatter("dstar.report", "format_text")


@dataclass(frozen=True)
class Result:
    """One section of the results page: the command that measures it and its text formatter."""
    title: str
    argv: tuple[str, ...]            # arguments of ``dstar`` (the command prints JSON)
    text: Callable[[dict], str]      # the command's own plain-text formatter of that JSON
    about: str = ""                  # what the figures are, in a sentence or two
    images: tuple[str, ...] = ()     # pictures the command writes (under docs/results/)


#: The blocks of the standard-cell entries: the linear datapath's, and the attention engine's
#: with the accelerator top's own.
_LINEAR_BLOCKS = ("pe_array", "encoder", "dispatcher", "sequencer")
_ATTENTION_BLOCKS = ("softmax", "normalizer", "tile_runner", "softmax_feed", "mask_select",
                     "norm", "sel_recip", "block_list", "attention_controller",
                     "accelerator.command_processor", "accelerator.out_q")


def _sky130_argv(preset: str, blocks: tuple[str, ...], jobs: int, *extra: str) -> tuple:
    """``dstar synth`` of ``blocks`` at ``preset`` on the CMOS estimate and sky130 HD."""
    return ("synth", "--preset", preset, "--target", "cmos", "--target", "sky130",
            *(a for b in blocks for a in ("--block", b)), *extra, "--reuse", "--jobs",
            str(jobs), "--json")


def _fmax_fmdq_argv(what: str, timeout_min: int, seeds: int = 1) -> tuple:
    """``dstar synth --fmax what`` of the ``tiny`` FMDQ configuration, place and route only,
    with the placer seeds ``1 .. seeds`` (two at a time)."""
    many = ("--seeds", str(seeds), "--jobs", "2") if seeds > 1 else ()
    return ("synth", "--preset", "tiny", "--set", "encoding=fmdq", "--target", "none", "--fmax",
            what, "--fmax-timeout", str(timeout_min), *many, "--reuse", "--json")


#: The results page's sections, in page order.
RESULTS: dict[str, Result] = {
    "analyze": Result(
        "Accuracy and element mix on the digit DiT",
        ("analyze", "--json", "--quiet", "--png", "docs/results/samples.png"),
        _analyze_text,
        "FP32 vs dense W8A8 vs DSTAR (differential linears, attention reuse, both) on the "
        "default configuration's sampling run. Sample grid rows: FP32, W8A8, DSTAR.",
        ("samples.png",)),
    "analyze_photos": Result(
        "Accuracy and element mix on the natural-image DiT",
        ("analyze", "--workload", "photos", "--json", "--quiet", "--png",
         "docs/results/samples_photos.png"),
        _analyze_text,
        "The same run on the DiT of natural-image crops (`--workload photos`); its samples are "
        "measured against held-out crops. Sample grid rows: FP32, W8A8, DSTAR.",
        ("samples_photos.png",)),
    "analyze_sweep": Result(
        "Accuracy vs attention work: a sweep of `theta` and `refresh_attn`",
        ("analyze", "--sweep", "theta=0.6,0.8", "--sweep", "refresh_attn=2,3,4", "--json",
         "--quiet", "--plot", "docs/results/sweep.png"),
        _sweep_text,
        "DSTAR (both mechanisms) on the digit DiT's default run at each point of the grid: PSNR "
        "vs FP32 and its gap to dense W8A8 against the fraction of attention blocks computed on "
        "reuse steps. Plot: one point per table row (numbered as in `#`), filled where it meets "
        "the target; lines at the W8A8 PSNR, at W8A8 minus the allowed gap (`TARGET`) and at "
        "the target's block fraction.",
        ("sweep.png",)),
    "synth_tiny": Result(
        "Area per block (`tiny` preset)",
        ("synth", "--preset", "tiny", "--target", "cmos", "--reuse", "--json"),
        _synth_text,
        "YoWASP Yosys per block; the CMOS figure is a transistor-count estimate at 45 nm "
        "(`dstar.synth.flows`; FPGA targets: `dstar synth --target ...`). `--reuse` reads a "
        "block's figures from an earlier run whose script and Verilog are unchanged."),
    "synth_tiny_sky130": Result(
        "Standard-cell area per block (`tiny` preset, v1's `encoding = nibble`): sky130 HD beside "
        "the transistor estimate",
        _sky130_argv("tiny", _LINEAR_BLOCKS, 3),
        _synth_text,
        "v1's linear datapath's blocks of the `tiny` preset and of its lean dense INT8 baseline "
        "mapped onto SkyWater sky130_fd_sc_hd cells (areas from the cells' LEF footprints, "
        "`dstar.synth.liberty`; ABC maps for area, no timing), with the share of flip-flops, "
        "adder cells (XOR/XNOR/majority) and multiplexers, and `vs cmos`: the logic's NAND2 "
        "equivalents over the 45 nm transistor estimate's (`dstar.synth.flows`). SRAM macros "
        "are the estimate scaled by NAND2 area. FMDQ's datapath (the default) on the same cells, "
        "by part, is in the throughput-per-area tables below."),
    "synth_tiny_sky130_attention": Result(
        "Standard-cell area per block (`tiny` preset): the attention engine and the "
        "accelerator top's own blocks on sky130 HD",
        _sky130_argv("tiny", _ATTENTION_BLOCKS, 3, "--no-dense"),
        _synth_text,
        "The same for the attention engine's blocks (its PE arrays are the linear datapath's) "
        "and the accelerator top's own: its command processor and output queue (the top's "
        "other blocks are the kinds above again)."),
    "synth_default_sky130_attention": Result(
        "Standard-cell area per block (`default` preset): the attention engine and the "
        "accelerator top's own blocks on sky130 HD",
        _sky130_argv("default", _ATTENTION_BLOCKS, 1, "--no-dense"),
        _synth_text,
        "The same for the `default` preset's attention engine and the accelerator top's own "
        "blocks. The `default` preset's linear datapath (FMDQ) and its lean INT8 baseline on "
        "sky130 cells, by part, are in the throughput-per-area table below; v1's blocks are "
        "measured at `tiny` (above)."),
    "synth_tiny_osu018": Result(
        "Standard-cell timing (`tiny` preset, v1's `encoding = nibble`): OSU 0.18 um Fmax of the "
        "PE array, the dispatcher and the accelerator top's own logic",
        ("synth", "--preset", "tiny", "--target", "cmos", "--target", "osu018", "--block",
         "pe_array", "--block", "dispatcher", "--block", "accelerator.command_processor",
         "--no-dense", "--reuse", "--jobs", "2", "--json"),
        _synth_text,
        "The blocks mapped onto OSU 0.18 um cells (Debian's characterized Liberty, typical "
        "1.8 V 25 C; ABC maps for delay) and timed by OpenSTA (`dstar.synth.sta`): pre-layout, "
        "no wires, ideal clock, ports at 0 ns, so optimistic; the worst path over all and "
        "register to register, its start and end by RTL name. The accelerator top's own "
        "logic is its command processor (`dstar.v` with the datapath blocks blackboxed). "
        "Totals cover these blocks only."),
    "synth_tiny_osu018_fmdq": Result(
        "Standard-cell timing (`tiny` preset, `encoding = fmdq`): OSU 0.18 um Fmax of the SIMD-4 "
        "PE array and the quantization unit",
        ("synth", "--preset", "tiny", "--set", "encoding=fmdq", "--target", "cmos", "--target",
         "osu018", "--block", "pe_array", "--block", "qu", "--no-dense", "--reuse", "--jobs",
         "1", "--json"),
        _synth_text,
        "The same for FMDQ's datapath (the default): `FmdqLinear`'s SIMD-4 PE array "
        "(`hw/fmdq/pe_array.py`) and its quantization unit (`hw/fmdq/quant_unit.py`), each "
        "synthesized alone onto OSU 0.18 um cells and timed by OpenSTA (pre-layout, optimistic "
        "as above)."),
    "synth_tiny_osu018_top": Result(
        "Standard-cell timing (`tiny` preset): OSU 0.18 um Fmax of the whole accelerator top",
        ("synth", "--preset", "tiny", "--target", "osu018", "--block",
         "accelerator.command_processor", "--no-dense", "--flat-top", "--reuse", "--jobs", "1",
         "--json"),
        _synth_text,
        "The accelerator top (`dstar.v`: the linear datapath, the attention engine and the "
        "command processor on the shared PE arrays) synthesized flat onto OSU 0.18 um cells "
        "and timed by OpenSTA as above: its critical path across the blocks' boundaries, "
        "start and end by RTL name (SRAM macros left out of the netlist, so paths through "
        "them are not timed). The command processor alone is the block row."),
    "fmax_tiny_fmdq": Result(
        "Routed ECP5 Fmax of the FMDQ linear datapath (`tiny` preset, `encoding = fmdq`)",
        _fmax_fmdq_argv("top", 180),
        _synth_text,
        "`FmdqLinear` (`hw/fmdq/linear.py`: quantization unit, group memory, two SIMD-4 PE "
        "arrays, `Y`; the top `dstar generate` writes as `dstar_linear` with `encoding = fmdq`) "
        "synthesized whole for the ECP5 with DSPs and placed and routed by nextpnr-ecp5 out of "
        "context on the LFE5U-85F (`dstar.synth.fmax`): the routed Fmax and the critical path, "
        "its start and end by cell, or, if routing has not finished after 3 hours, nextpnr's "
        "estimate after placement. The accelerator top, which issue 28's 50 MHz target is "
        "for, is the next entry."),
    "fmax_tiny_accelerator": Result(
        "Routed ECP5 Fmax of the accelerator top (`tiny` preset, `encoding = fmdq`)",
        _fmax_fmdq_argv("accelerator", 75, seeds=3),
        _synth_text,
        "The accelerator top (`dstar.v`: FMDQ's linear datapath, the attention engine on the "
        "same SIMD-4 PE arrays and the command processor) synthesized whole for the ECP5 with "
        "DSPs and placed and routed by nextpnr-ecp5 out of context on the LFE5U-85F, as above, "
        "with the placer seeds 1, 2 and 3: the median routed Fmax, the worst and the best, "
        "and each seed's figure and critical path (a seed that has not routed after 75 "
        "minutes: nextpnr's estimate after placement, and no figure). One placement moves "
        "this top's figure by up to 3 MHz either way. Issue 28's target: 50 MHz."),
    "fmax_tiny_fmdq_pe_array": Result(
        "Routed ECP5 Fmax of one FMDQ PE array (`tiny` preset, `encoding = fmdq`)",
        _fmax_fmdq_argv("pe_array", 15),
        _synth_text,
        "The first SIMD-4 PE array of `FmdqLinear` (`hw/fmdq/pe_array.py`) placed and routed "
        "alone, as above: its routed Fmax and critical path."),
    "bench_cycles": Result(
        "Linear-datapath cycles on the bundled DiT",
        ("bench", "cycles", "--json"),
        _cycles_text,
        "Every step of the default 50-step run, all 24 linears, default preset: element mix "
        "(ZERO/LOW/HIGH), the element-level ideal (dense nibble passes over DSTAR's), and per "
        "packing strategy the speedup over the lean dense INT8 datapath of the same peak 8-bit "
        "rate, the fraction of the ideal reached, the PE-lane utilization and the idle lane "
        "cycles by cause (`dstar.sim.cycle_model`)."),
    "bench_cycles_photos": Result(
        "Linear-datapath cycles on the natural-image DiT",
        ("bench", "cycles", "--workload", "photos", "--json"),
        _cycles_text,
        "The same run on the DiT of natural-image crops (`--workload photos`)."),
    "bench_attention": Result(
        "Attention-engine cycles on the bundled DiT",
        ("bench", "attention", "--json"),
        _attention_text,
        "Every step of the default 50-step run, 4 heads of blocks 0, 3 and 5, default preset "
        "(`theta`, `refresh_attn` of the config): mean cycles of key and reuse steps over dense "
        "attention on the same engine (below 1: faster) and the PE lanes' utilization "
        "(`dstar.sim.attention_cycles`)."),
    "efficiency_tiny": Result(
        "Throughput per area vs the lean dense INT8 datapath (`tiny` preset)",
        ("bench", "efficiency", "--preset", "tiny", "--json"),
        _efficiency_text,
        "Cycles of the bundled DiT's whole 50-step run (all 24 linears, the cycle model) and "
        "the areas of the PE arrays and of the whole linear datapath, per strategy: first on "
        "sky130 HD standard cells (SRAM macros scaled from the estimate), then the CMOS "
        "transistor estimate at 45 nm (Yosys) beside it; TPA = throughput per area relative "
        "to the lean `int8` datapath (`dstar.synth.efficiency`). FMDQ's row: `FmdqLinear` "
        "synthesized by parts (`dstar.synth.fmdq_efficiency`), its cycles by the exact model."),
    "efficiency_default": Result(
        "Throughput per area vs the lean dense INT8 datapath (`default` preset): FMDQ",
        ("bench", "efficiency", "--preset", "default", "--strategy", "int8", "--json"),
        _efficiency_text,
        "The same at the `default` preset for FMDQ's datapath (`FmdqLinear` synthesized by "
        "parts) and the lean INT8 baseline only (`--strategy int8`): sky130 HD first, the CMOS "
        "estimate beside. v1's strategies are measured at `tiny` above."),
    "run": Result(
        "A DiT block end to end on the RTL",
        ("run", "--json", "--quiet"),
        _run_text,
        "`dstar run` with its defaults: the default preset's accelerator top (`dstar.v`) on "
        "Verilator, block 0 of the digit DiT (guidance batch of 2 x 256 tokens) over the first "
        "three steps of the default sampling run, every operation checked against the golden "
        "model and the cycle models as it ran; the runs' cycles per operation beside the "
        "models', and the wall time on the machine that ran it (`dstar.run`)."),
    "regress": Result(
        "Constrained-random regression of the accelerator top",
        ("regress", "--seed", "1", "--minutes", "30", "--json", "--quiet"),
        _regress_text,
        "`dstar regress`: random linear and attention steps, refused commands and stream "
        "stalls on the `tiny` preset's `dstar.v` under Verilator, each case checked bit for "
        "bit against the golden model and the cycle models; functional coverage over the "
        "bins of `dstar.sim.coverage` (`dstar.sim.regress`)."),
    "bench_golden": Result(
        "Golden-model speed",
        ("bench", "golden", "--json", "--samples", "2"),
        _golden_text,
        "Sampling steps per second of the NumPy golden model on each run of the main job "
        "(2 samples, the default 50 steps; two worker processes of one BLAS thread each on a "
        "2-core machine) and the five runs' wall time over the FP32 run's, on the machine that "
        "ran it."),
    "report": Result(
        "The paper's evaluation: seven DiTs against an A100 and peer accelerators",
        ("report", "--json", "--quiet", "-o", "docs/results/report"),
        _report_text,
        "`dstar report` on the paper's configuration (32 cores of 64 x 64 SIMD-4 PEs, 1 GHz, "
        "262 INT8 TOPS, HBM2 1.5 TB/s): DSTAR v2 (FMDQ + SAR) against an INT8 systolic array, "
        "Ditto-, Cambricon-D- and EXION-like models and an A100 (calibrated FP16 roofline), at "
        "equal peak INT8 TOPS and at equal PE-array area; the mix is measured on the bundled "
        "DiT with the exact cycle models and transferred to every model. The full report, with "
        "every constant's source: `docs/results/report/report.md`.",
        ("report/speedup.png", "report/energy.png", "report/breakdown_energy.png")),
    "test_time": Result(
        "The default test run's time",
        ("bench", "tests", "--clone", "--json"),
        _tests_text,
        "What CI measures: a fresh clone of the commit, `scripts/setup.sh` in it, then the "
        "README's test command (`python -m pytest`: the default tier on every core, the "
        "15 slowest tests printed); the budget is 25 minutes of pytest wall time on a quiet "
        "2-core machine (`dstar.bench_tests`)."),
}


def _pick(rep: dict, *path):
    for key in path:
        if not isinstance(rep, dict) or key not in rep:
            return None
        rep = rep[key]
    return rep


def _cell(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


#: The analyze and bench-cycles entries of each workload, in the side-by-side column order.
WORKLOAD_ENTRIES = {Workload.DIGITS: ("analyze", "bench_cycles"),
                    Workload.PHOTOS: ("analyze_photos", "bench_cycles_photos")}


def workloads_table(reps: dict[str, dict], cycles: dict[str, dict] | None = None) -> str:
    """The workloads side by side (``{workload: analyze report}``, and ``{workload: bench cycles
    report}`` where measured): element fractions per layer type, the element-level ideal and
    the packings' ratios, the hardware speedup over the lean dense INT8 datapath (cycle model),
    PSNRs vs FP32 and the attention blocks computed."""
    names = list(reps)
    cycles = cycles or {}
    rows = [("| figure | " + " | ".join(names) + " |"), "|---|" + "---|" * len(names)]

    def row(label, fmt, *path, src=reps):
        rows.append(f"| {label} | " + " | ".join(_cell(_pick(src.get(n), *path), fmt)
                                                 for n in names) + " |")

    for t in ("qkv", "proj", "fc1", "fc2"):
        rows.append(f"| {t}: ZERO / LOW / HIGH | " + " | ".join(
            " / ".join(_cell(_pick(reps[n], "per_layer_type", t, f"{c}_fraction"), ".3f")
                       for c in ("zero", "low", "high")) for n in names) + " |")
    row("nibble passes vs W8A8, element-level ideal", ".2f", "ops_ratio_vs_w8a8")
    row("nibble passes vs W8A8, lockstep", ".2f", "lockstep_ops_ratio_vs_w8a8")
    if cycles:
        for p in (Packing.COMPACT, Packing.LOCKSTEP):
            row(f"cycles vs lean dense INT8, {p} datapath (cycle model, default preset)", ".2f",
                "total", "strategies", p, "speedup_vs_dense", src=cycles)
    row("PSNR vs FP32, W8A8 (dB)", ".2f", "w8a8", "psnr_vs_fp32_db")
    row("PSNR vs FP32, DSTAR linears (dB)", ".2f", "dstar_linear_only", "psnr_vs_fp32_db")
    row("PSNR vs FP32, attention reuse (dB)", ".2f", "attention", "psnr_vs_fp32_db")
    row("PSNR vs FP32, DSTAR both (dB)", ".2f", "dstar", "psnr_vs_fp32_db")
    row("attention blocks computed, reuse steps", ".3f", "attention",
        "blocks_computed_fraction_reuse_steps")
    return "\n".join(rows)


def _phases(n_steps: int) -> list[tuple[str, range]]:
    """The key step 0, then the other steps of a run in quarters (as whole steps)."""
    out = [("step 0", range(0, 1))]
    edges = [1 + round(i * (n_steps - 1) / 4) for i in range(5)]
    for a, b in zip(edges, edges[1:], strict=False):
        if b > a:
            out.append((f"steps {a}-{b - 1}", range(a, b)))
    return out


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def temporal_table(reps: dict[str, dict]) -> str:
    """How the temporal statistics differ between workloads (``{workload: analyze report}``):
    the ZERO fraction of each layer type over the phases of the run (the mean of its steps'
    fractions: every step encodes as many elements), and the attention blocks computed on the
    phase's reuse steps."""
    n = max(int(r.get("steps") or 1) for r in reps.values())
    phases = _phases(n)
    rows = ["| figure | workload | " + " | ".join(p for p, _ in phases) + " | all steps |",
            "|---|---|" + "---|" * (len(phases) + 1)]
    for t in ("qkv", "proj", "fc1", "fc2"):
        for w, rep in reps.items():
            by_step = {e["step"]: _pick(e, "per_layer_type", t, "zero_fraction")
                       for e in rep.get("per_step", [])}
            cells = [_mean(by_step.get(s) for s in steps) for _, steps in phases]
            cells.append(_pick(rep, "per_layer_type", t, "zero_fraction"))
            rows.append(f"| {t} ZERO | {w} | " + " | ".join(_cell(v, ".3f") for v in cells)
                        + " |")
    for w, rep in reps.items():
        att = {e["step"]: e for e in _pick(rep, "attention", "per_step") or []}
        cells = [_mean(att[s]["blocks_computed"] for s in steps
                       if s in att and not att[s]["key"]) for _, steps in phases]
        cells.append(_pick(rep, "attention", "blocks_computed_fraction_reuse_steps"))
        rows.append(f"| attention blocks computed, reuse steps | {w} | "
                    + " | ".join(_cell(v, ".3f") for v in cells) + " |")
    return "\n".join(rows)


def _by_workload(have: dict[str, dict], which: int) -> dict[str, dict]:
    return {w: have[e[which]] for w, e in WORKLOAD_ENTRIES.items() if e[which] in have}


def _workloads_summary(have: dict[str, dict]) -> str:
    analyze = _by_workload(have, 0)
    grids = " ".join(f"![{w} samples](results/{RESULTS[e[0]].images[0]})"
                     for w, e in WORKLOAD_ENTRIES.items() if e[0] in have)
    return "\n".join([
        workloads_table(analyze, _by_workload(have, 1)), "",
        "Sample grids (rows: FP32, W8A8, DSTAR; digits left, photos right):", "", grids, "",
        "### Temporal statistics", "",
        "How much of each step's difference is zero, per layer type, as the run goes (`dstar "
        "analyze` `per_step`); the plot shows every step.", "",
        temporal_table(analyze), "", f"![ZERO fraction per step]({TEMPORAL_IMAGE})"])


def _temporal_png(have: dict[str, dict]) -> bytes:
    from .plot_steps import steps_png
    return steps_png(_by_workload(have, 0))


#: Where the page's generated plot of the temporal statistics goes (relative to docs/).
TEMPORAL_IMAGE = "results/temporal.png"


@dataclass(frozen=True)
class Summary:
    """A section that puts several entries' figures side by side, shown before the entries
    when at least ``needs`` of them are measured: ``text`` renders ``{entry: result}``;
    ``images`` maps a file under docs/ to a function of the same dict giving its bytes."""
    title: str
    entries: tuple[str, ...]
    text: Callable[[dict], str]
    needs: tuple[str, ...] = ()
    images: tuple[tuple[str, Callable[[dict], bytes]], ...] = ()


SUMMARIES = (
    Summary("Both workloads side by side",
            tuple(e for pair in WORKLOAD_ENTRIES.values() for e in pair), _workloads_summary,
            needs=tuple(e[0] for e in WORKLOAD_ENTRIES.values()),
            images=((TEMPORAL_IMAGE, _temporal_png),)),
)


class ResultsError(ValueError):
    """The page cannot be rendered or written: not in a dstar checkout, or a stored result
    is damaged (the message names the file and says how to redo it)."""


def checkout_root(start: Path | None = None) -> Path:
    """The dstar checkout holding ``start`` (default: the working directory): the nearest
    folder at or above it with a ``pyproject.toml`` of project ``dstar``. A ``ResultsError``
    otherwise, so that ``dstar results`` never writes another project's ``docs/``."""
    start = Path(start or Path.cwd()).absolute()
    for d in (start, *start.parents):
        try:
            with open(d / "pyproject.toml", "rb") as f:
                name = tomllib.load(f).get("project", {}).get("name")
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if name == "dstar":
            return d
    raise ResultsError(f"{str(start)!r} is not inside a dstar checkout (no pyproject.toml of "
                       "project 'dstar' there or above); run `dstar results` in the checkout "
                       "or name it with --root")


def _stamped(path: Path, name: str) -> dict:
    """The stored file of entry ``name``, checked to be a stamped result."""
    redo = f"re-measure it with `dstar results --run {name}` or delete it"
    try:
        stamped = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(f"{str(path)!r} is not a readable stored result ({e}); {redo}"
                           ) from None
    missing = [k for k in ("command", "commit", "date", "result")
               if not isinstance(stamped, dict) or k not in stamped]
    if missing:
        raise ResultsError(f"{str(path)!r} is not a stored result: it has no "
                           f"{', '.join(map(repr, missing))}; {redo}")
    return stamped


def _formatted(text: Callable[[dict], str], result, path: Path, name: str) -> str:
    """``text(result)``; a ``ResultsError`` naming ``path`` when the stored result does not
    have the shape the formatter reads (an older or foreign report)."""
    try:
        return text(result)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise ResultsError(f"{str(path)!r}: its result does not have the fields this version "
                           f"shows ({type(e).__name__}: {e}); re-measure it with "
                           f"`dstar results --run {name}`") from None


def _measured(d: Path, names) -> dict[str, dict]:
    return {n: _stamped(d / f"{n}.json", n)["result"] for n in names
            if (d / f"{n}.json").is_file()}


def results_dir(root: Path | None = None) -> Path:
    return (Path(root) if root else Path.cwd()) / "docs" / "results"


def _commit(cwd: Path) -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, text=True,
                              capture_output=True, check=True).stdout.strip()
        # The page's own outputs (docs/) do not make the code that measures dirty.
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                ".", ":(exclude)docs"],
                               cwd=cwd, text=True, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty.strip() else "")


def run(name: str, root: Path | None = None) -> Path:
    """Run entry ``name``'s command in ``root`` (default: the working directory) and store its
    stamped JSON; returns the file written."""
    entry = RESULTS[name]
    root = Path(root) if root else Path.cwd()
    commit = _commit(root)           # the code that runs is the code of this moment
    res = subprocess.run([sys.executable, "-m", "dstar.cli", *entry.argv], cwd=root,
                         capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"`dstar {' '.join(entry.argv)}` failed (exit {res.returncode}): "
                           f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ''}")
    stamped = {"command": "dstar " + " ".join(entry.argv), "commit": commit,
               "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
               "result": json.loads(res.stdout)}
    path = results_dir(root) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(stamped, indent=1, sort_keys=True) + "\n")
    return path


def render(root: Path | None = None) -> str:
    """The results page's Markdown, from the stored JSON files."""
    d = results_dir(root)
    out = ["# Results", "",
           "Generated by `dstar results` from the JSON files in `docs/results/`; each section "
           "names the command that measured it and the commit it ran on. Do not edit by hand: "
           "re-run a section with `dstar results --run NAME`, then `dstar results`.", ""]
    for summ in SUMMARIES:
        have = _measured(d, summ.entries)
        if all(n in have for n in summ.needs):
            text = _formatted(summ.text, have, d, summ.title)
            out += [f"## {summ.title}", "", f"From the sections {', '.join(map(repr, have))} "
                    "below.", "", text, ""]
    for name, entry in RESULTS.items():
        out += [f"## {entry.title}", ""]
        if entry.about:
            out += [entry.about, ""]
        path = d / f"{name}.json"
        if not path.is_file():
            out += [f"Not measured yet: `dstar results --run {name}` runs "
                    f"`dstar {' '.join(entry.argv)}`.", ""]
            continue
        stamped = _stamped(path, name)
        text = _formatted(entry.text, stamped["result"], path, name)
        out += [f"`{stamped['command']}` at commit `{stamped['commit']}`, {stamped['date']}:", "",
                "```", text.rstrip(), "```", ""]
        out += [f"![{name}: {img}](results/{img})\n" for img in entry.images if (d / img).is_file()]
    return "\n".join(out)


def write_page(root: Path | None = None) -> Path:
    """Write ``docs/results.md`` and the summaries' generated images (each atomically), all
    rendered first: a damaged stored result (``ResultsError``) leaves every file as it was."""
    docs = (Path(root) if root else Path.cwd()) / "docs"
    page = render(root)
    for summ in SUMMARIES:
        have = _measured(results_dir(root), summ.entries)
        if all(n in have for n in summ.needs):
            for rel, make in summ.images:
                (docs / rel).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(docs / rel, make(have))
    path = docs / "results.md"
    write_atomic(path, page)
    return path
