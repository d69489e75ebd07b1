"""The results page: ``docs/results.md``, generated from the JSON the benchmark commands print.

Every figure the project reports comes from one entry of ``RESULTS``: a ``dstar`` command that
prints JSON (``--json``). ``dstar results --run NAME`` runs it and stores its output, stamped with
the command, the commit and the date, as ``docs/results/NAME.json`` (written atomically);
``dstar results`` renders the page from the stored files with each command's own text formatter,
so that no figure is typed by hand. An entry never run says so on the page, with its command.
"""

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .outputs import write_atomic

__all__ = ["Result", "RESULTS", "results_dir", "run", "render", "write_page"]


def _analyze_text(rep: dict) -> str:
    from dstar.analyze import format_table
    return format_table(rep)


def _synth_text(rep: dict) -> str:
    from dstar.synth.report import format_table
    return format_table(rep)


def _golden_text(rep: dict) -> str:
    return (f"golden model, {rep['samples']} samples x {rep['steps']} DDIM steps: FP32 "
            f"{rep['fp32_steps_per_second']:.2f} steps/s, DSTAR linears (invariant checked every "
            f"step) {rep['dstar_steps_per_second']:.2f} steps/s")


def _efficiency_text(rep: dict) -> str:
    from dstar.synth.efficiency import format_text
    return format_text(rep)


@dataclass(frozen=True)
class Result:
    """One section of the results page: the command that measures it and its text formatter."""
    title: str
    argv: tuple[str, ...]            # arguments of ``dstar`` (the command prints JSON)
    text: Callable[[dict], str]      # the command's own plain-text formatter of that JSON
    about: str = ""                  # what the figures are, in a sentence or two
    images: tuple[str, ...] = ()     # pictures the command writes (under docs/results/)


#: The results page's sections, in page order.
RESULTS: dict[str, Result] = {
    "analyze": Result(
        "Accuracy and element mix on the bundled DiT",
        ("analyze", "--json", "--quiet", "--png", "docs/results/samples.png"),
        _analyze_text,
        "FP32 vs dense W8A8 vs DSTAR (differential linears, attention reuse, both) on the "
        "default configuration's sampling run. Sample grid rows: FP32, W8A8, DSTAR.",
        ("samples.png",)),
    "synth_tiny": Result(
        "Area per block (`tiny` preset)",
        ("synth", "--preset", "tiny", "--json"),
        _synth_text,
        "YoWASP Yosys per block and target; the CMOS figure is a transistor-count estimate at "
        "45 nm (`dstar.synth.flows`)."),
    "efficiency_tiny": Result(
        "Throughput per area vs the lean dense INT8 datapath (`tiny` preset)",
        ("bench", "efficiency", "--preset", "tiny", "--json"),
        _efficiency_text,
        "Cycles of the bundled DiT's whole 50-step run (all 24 linears, the cycle model) and "
        "CMOS areas at 45 nm (Yosys estimate) of the PE arrays and of the whole linear "
        "datapath, per strategy; TPA = throughput per area relative to the lean `int8` "
        "datapath (`dstar.synth.efficiency`)."),
    "bench_golden": Result(
        "Golden-model speed",
        ("bench", "golden", "--json", "--samples", "2"),
        _golden_text,
        "Sampling steps per second of the NumPy golden model (2 samples, the default 50 steps) "
        "on the machine that ran it."),
}


def results_dir(root: Path | None = None) -> Path:
    return (Path(root) if root else Path.cwd()) / "docs" / "results"


def _commit(cwd: Path) -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=cwd, text=True, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty.strip() else "")


def run(name: str, root: Path | None = None) -> Path:
    """Run entry ``name``'s command in ``root`` (default: the working directory) and store its
    stamped JSON; returns the file written."""
    entry = RESULTS[name]
    root = Path(root) if root else Path.cwd()
    res = subprocess.run([sys.executable, "-m", "dstar.cli", *entry.argv], cwd=root,
                         capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"`dstar {' '.join(entry.argv)}` failed (exit {res.returncode}): "
                           f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ''}")
    stamped = {"command": "dstar " + " ".join(entry.argv), "commit": _commit(root),
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
    for name, entry in RESULTS.items():
        out += [f"## {entry.title}", ""]
        if entry.about:
            out += [entry.about, ""]
        path = d / f"{name}.json"
        if not path.is_file():
            out += [f"Not measured yet: `dstar results --run {name}` runs "
                    f"`dstar {' '.join(entry.argv)}`.", ""]
            continue
        stamped = json.loads(path.read_text())
        out += [f"`{stamped['command']}` at commit `{stamped['commit']}`, {stamped['date']}:", "",
                "```", entry.text(stamped["result"]).rstrip(), "```", ""]
        out += [f"![{name}: {img}](results/{img})\n" for img in entry.images if (d / img).is_file()]
    return "\n".join(out)


def write_page(root: Path | None = None) -> Path:
    path = (Path(root) if root else Path.cwd()) / "docs" / "results.md"
    write_atomic(path, render(root))
    return path
