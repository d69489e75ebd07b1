"""Area, FPGA resources and Fmax of a dstar configuration, per target and per module: the
versioned JSON report.

Ref: dstar-spec.md section 6 ("Area from Yosys ..., Fmax from nextpnr, per module").

``run`` synthesizes a configuration block by block (``dstar.synth.blocks``: which modules, and
why per block), optionally places and routes some of them for Fmax (``dstar.synth.fmax_runs``),
sums the blocks x instances into per-target totals and writes ``report.json``
(``REPORT_VERSION``); ``dstar.synth.tables.format_table`` prints it. ``dstar synth`` is the
command line.

A target's totals are the sums over blocks x instances. Logic is not optimized across block
boundaries (as in a hierarchical ASIC flow), so totals are slightly above a flat synthesis of
the whole top (``flat_total=True`` runs that for comparison; ``flat_top=True`` synthesizes the
accelerator top ``dstar.v`` flat, which on a timed standard-cell target gives the top's own
critical path across block boundaries). The cmos target keeps memories of
at least ``SRAM_MIN_DEPTH`` words as SRAM macros; ``memories`` lists them with their area.
The attention engine's blocks carry ``part = "attention"``; ``targets`` stays the linear
datapath (what ``area_ratio`` compares with the dense baseline), ``attention.targets`` sums the
engine's modules (its PE arrays left out: they are the linear datapath's). The accelerator
top's blocks (``dstar.v``: both on one set of PE arrays behind the command processor) carry
``part = "accelerator"`` and sum into ``accelerator.targets``: the area of the one top.

Dense baseline (``dense``): the same per-block synthesis of the configuration with
``datapath = "int8"`` (``hw.int8``, the lean dense INT8 datapath: weight-stationary 8x8 MACs at
the same peak 8-bit throughput, the same tiles, weight memories and host ports, no encoder, no
dispatcher); ``area_ratio`` divides DSTAR's totals by the baseline's.
"""

import hashlib
import json
import time
from pathlib import Path

from dstar.config import PRESETS, Config, Datapath
from dstar.paths import build_dir

from . import fmax as _fmax
from .blocks import ACCEL_PREFIX, ATTN_CONTROLLER, COMMAND_PROCESSOR, synth_blocks
from .flows import (
    AREA_TARGETS,
    CMOS_ASSUMPTIONS,
    LIBERTY_TARGETS,
    TARGETS,
    SynthTarget,
    synth_module,
    yosys_version,
)
from .fmax_runs import FMAX_BLOCKS, FMAX_FLOW, run_fmax

__all__ = ["REPORT_VERSION", "ALL_TARGETS", "RATIO_KEYS", "run", "config_hash", "preset_name"]

#: Version of the report's JSON layout; bump on any change of keys or meaning.
REPORT_VERSION = 4
#: The area targets of a full report (``dstar.synth.flows.AREA_TARGETS``).
ALL_TARGETS = AREA_TARGETS
#: Metrics of ``area_ratio`` (DSTAR / dense baseline).
RATIO_KEYS = ("area_um2_45nm", "area_um2_45nm_logic", "area_um2", "area_um2_logic",
              "transistors", "cells", "luts", "ffs", "dsps")

_SUM_KEYS = ("cells", "luts", "carries", "muxes", "ffs", "brams", "lutram", "dsps", "gates",
             "transistors", "transistors_logic", "transistors_sram", "sram_bits",
             "area_um2_45nm", "area_um2_45nm_logic", "area_um2_45nm_sram", "adders", "muxes",
             "other", "area_um2", "area_um2_logic", "area_um2_sram", "nand2_eq_logic")
_ROUNDED = ("area_um2_45nm", "area_um2_45nm_logic", "area_um2_45nm_sram", "area_um2",
            "area_um2_logic", "area_um2_sram")


def config_hash(cfg: Config) -> str:
    """12 hex digits of the SHA-256 of the configuration's hardware fields (``Config.hardware()``,
    sorted JSON): a run field (``steps``, ``theta``, ...) does not change it."""
    blob = json.dumps(cfg.hardware(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def preset_name(cfg: Config) -> str:
    """Name of the preset ``cfg`` equals, else ``"custom"``."""
    for name, p in PRESETS.items():
        if p == cfg:
            return name
    return "custom"


def run(cfg: Config, targets=ALL_TARGETS, fmax=False, *, outdir: Path | None = None,
        jobs: int = 1, flat_total: bool = False, reuse: bool = False,
        dense: bool | None = None, fmax_timeout_min: float | None = None,
        blocks: tuple = (), flat_top: bool = False, fmax_seeds: int = 1) -> dict:
    """Synthesize ``cfg`` for ``targets`` (names of ``dstar.synth.flows.TARGETS``) and return the
    report (see ``REPORT_VERSION``); it is also written to ``<outdir>/report.json``.

    ``targets[t]``: the totals of target ``t`` (``dstar.synth.flows.summarize`` keys, summed over
    the top's blocks x instances; ``fmax_mhz`` on ``FMAX_FLOW`` when ``fmax``). ``modules[kind]``:
    the block kind's ``module``, ``instances``, ``part`` (``linear``, ``attention`` or
    ``accelerator``) and
    per-target counts *per instance*. ``attention`` / ``accelerator``: the engine's totals and
    the accelerator top's (see the module docstring). ``memories``: the SRAM macros of the cmos
    target. ``fmax`` (``True`` for both, or a tuple naming ``"pe_array"``
    and/or ``"top"``): nextpnr results of the PE array block and of the flat top, each nextpnr
    run stopped after ``fmax_timeout_min`` minutes if given, each placed with the seeds ``1 ..
    fmax_seeds`` (the figure: their median, ``dstar.synth.fmax.over_seeds``).
    ``dense`` (default: unless ``cfg`` is itself a dense INT8 datapath): also synthesize, the
    same way, the lean dense INT8 baseline of the same tiles, arrays and peak 8-bit throughput
    (``cfg`` with ``datapath = "int8"``, ``hw.int8``) into ``dense_baseline`` (``config_hash``,
    ``targets``, ``modules``, ``memories``), and ``area_ratio[t][metric]`` = DSTAR / dense
    of the totals (``RATIO_KEYS``), ``area_ratio[t]["modules"][kind]`` per block kind both
    have (per instance).
    ``outdir`` defaults to ``build/synth/<preset>-<config hash>``; ``jobs`` Yosys runs at once;
    ``reuse`` takes a block's statistics from an earlier run in ``outdir`` when its script and
    Verilog are unchanged (``dstar.synth.flows.synth_module``).
    ``blocks``: synthesize only these block kinds (``modules`` names, e.g. ``pe_array``,
    ``accelerator.command_processor``); the report's ``blocks`` lists them, its totals then
    sum those blocks only, and the dense baseline's those it has (none: no baseline).
    ``flat_top``: also synthesize the accelerator top (``dstar.v``) flat for every target,
    into ``<outdir>/<target>/flat_top`` (``reuse`` applies): ``flat_top["top"]`` names it,
    ``flat_top["targets"][t]`` holds its counts, and on a timed target (osu018) its OpenSTA
    paths (``sta``), start and end named by RTL register; ``ValueError`` if the configuration
    has no accelerator top.
    Standard-cell targets (``dstar.synth.flows.LIBERTY_TARGETS``) run beside ``cmos`` add
    ``vs_cmos`` (and ``vs_cmos_attention``, ``vs_cmos_accelerator``, the dense baseline's):
    their logic's NAND2 equivalents over the transistor estimate's, per target, in total and
    per block kind.
    """
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"unknown synthesis target(s) {unknown}; choose from {list(TARGETS)}")
    name = preset_name(cfg)
    fmax = FMAX_BLOCKS if fmax is True else tuple(fmax or ())
    blocks = tuple(blocks)
    if dense is None:
        dense = cfg.datapath not in (Datapath.DENSE, Datapath.INT8)
    outdir = Path(outdir) if outdir else build_dir("synth", f"{name}-{config_hash(cfg)}")
    t0 = time.monotonic()
    skipped: dict = {}
    top, verilog, modules = synth_blocks(cfg, targets, fmax, outdir, jobs, reuse,
                                         skipped=skipped, accelerator=True, only=blocks)
    totals = {t: _total(modules, t) for t in targets}

    report = {
        "report_version": REPORT_VERSION,
        "preset": name,
        "config_hash": config_hash(cfg),
        "config": cfg.hardware(),
        "top": top,
        "yosys_version": yosys_version(),
        "method": "per-block",
        "cmos_assumptions": CMOS_ASSUMPTIONS,
        "targets": totals,
        "modules": modules,
        "memories": _memories(modules),
    }
    if blocks:
        report["blocks"] = list(blocks)
    if any(mod["part"] == "attention" for mod in modules.values()):
        report["attention"] = {"top": man_attention_top(modules),
                               "targets": {t: _total(modules, t, "attention") for t in targets},
                               "pe_arrays": "shared with the linear datapath (counted there)"}
    if ACCEL_PREFIX + COMMAND_PROCESSOR in modules:
        report["accelerator"] = {"top": modules[ACCEL_PREFIX + COMMAND_PROCESSOR]["module"],
                                 "targets": {t: _total(modules, t, "accelerator")
                                             for t in targets}}
    if _vs_cmos(totals, modules):
        report["vs_cmos"] = _vs_cmos(totals, modules)
        for part in ("attention", "accelerator"):
            if part in report:
                report["vs_cmos_" + part] = _vs_cmos(report[part]["targets"], {})
    if dense:
        dcfg = cfg.replace(datapath=Datapath.INT8)
        _, _, dmods = synth_blocks(dcfg, targets, (), outdir / "dense", jobs, reuse,
                                   only=blocks, strict=False)
    if dense and dmods:     # (none if ``blocks`` names none of the baseline's)
        dtot = {t: _total(dmods, t) for t in targets}
        report["dense_baseline"] = {"config_hash": config_hash(dcfg), "datapath": dcfg.datapath,
                                    "targets": dtot, "modules": dmods,
                                    "memories": _memories(dmods)}
        if _vs_cmos(dtot, dmods):
            report["dense_baseline"]["vs_cmos"] = _vs_cmos(dtot, dmods)
        report["area_ratio"] = _ratios(totals, dtot, modules, dmods)
    if flat_total:
        report["flat"] = {t: _strip(synth_module(verilog, top, t, outdir / t / "flat"))
                          for t in targets}
    if flat_top:
        acc = _accelerator_verilog(verilog)
        report["flat_top"] = {"top": acc.stem, "targets": {
            t: _strip(synth_module(acc, acc.stem, t, outdir / t / "flat_top", reuse=reuse))
            for t in targets}}
    if fmax:
        fdir = outdir / "fmax"
        report["nextpnr_version"] = _fmax.nextpnr_version()
        report["fmax"] = run_fmax(fmax, top, {k: m["module"] for k, m in modules.items()},
                                  fdir, outdir / FMAX_FLOW, jobs, reuse, fmax_timeout_min,
                                  skipped, fmax_seeds)
        if FMAX_FLOW in totals and "top" in report["fmax"]:
            totals[FMAX_FLOW]["fmax_mhz"] = report["fmax"]["top"].get("fmax_mhz")
        for kind, f in report["fmax"].items():
            if FMAX_FLOW in modules.get(kind, {}).get("targets", {}):
                modules[kind]["targets"][FMAX_FLOW]["fmax_mhz"] = f.get("fmax_mhz")
    report["seconds"] = round(time.monotonic() - t0, 1)
    (outdir / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report


def _ratios(totals: dict, dense: dict, modules: dict, dmods: dict) -> dict:
    """DSTAR / dense of every ``RATIO_KEYS`` metric both have (dense non-zero), per target, and
    per block kind both tops have (``modules``)."""
    def ratio(a: dict, b: dict) -> dict:
        return {k: round(a[k] / b[k], 3) for k in RATIO_KEYS if a.get(k) and b.get(k)}

    out = {}
    for t, tot in totals.items():
        out[t] = ratio(tot, dense.get(t, {}))
        out[t]["modules"] = {k: ratio(m["targets"][t], dmods[k]["targets"][t])
                             for k, m in modules.items()
                             if t in m["targets"] and t in dmods.get(k, {}).get("targets", {})}
    return out


def man_attention_top(modules: dict) -> str:
    """Name of the attention engine's top (its controller's module)."""
    return modules[ATTN_CONTROLLER]["module"] if ATTN_CONTROLLER in modules else None


def _accelerator_verilog(verilog: Path) -> Path:
    """The accelerator top's Verilog written beside the linear top ``verilog`` (its manifest,
    ``params.json``, names it); ``ValueError`` if there is none."""
    man = json.loads((Path(verilog).parent / "params.json").read_text())
    if "accelerator" not in man:
        raise ValueError("this configuration has no accelerator top (dstar.v) to synthesize "
                         "flat")
    return Path(verilog).parent / man["accelerator"]["verilog"]


def _strip(res: dict) -> dict:
    return {k: v for k, v in res.items() if k not in ("cells_by_type", "memories")}


def _total(modules: dict, target: str, part: str = "linear") -> dict:
    """Sums over the ``part``'s blocks x instances (``None``: every part)."""
    out: dict = {}
    for mod in modules.values():
        res = mod["targets"].get(target)
        if res is None or part not in (None, mod.get("part", "linear")):
            continue
        for k in _SUM_KEYS:
            if k in res:
                out[k] = out.get(k, 0) + res[k] * mod["instances"]
        for k, v in res.get("area_um2_by_kind", {}).items():
            by = out.setdefault("area_um2_by_kind", {})
            by[k] = by.get(k, 0) + v * mod["instances"]
    for k in _ROUNDED:
        if k in out:
            out[k] = round(out[k], 1)
    if "area_um2_by_kind" in out:
        out["area_um2_by_kind"] = {k: round(v, 1) for k, v in out["area_um2_by_kind"].items()}
    return out


def _vs_cmos(totals: dict, modules: dict) -> dict:
    """``{target: {"total": r, "modules": {kind: r}}}``: each standard-cell target's logic over
    the cmos transistor estimate's, in NAND2 equivalents (``nand2_eq_logic``), where both
    targets were run."""
    def ratio(a: dict, b: dict):
        x, y = a.get("nand2_eq_logic"), b.get("nand2_eq_logic")
        return round(x / y, 3) if x and y else None

    out = {}
    for t in LIBERTY_TARGETS:
        if t in totals and SynthTarget.CMOS in totals:
            out[t] = {"total": ratio(totals[t], totals[SynthTarget.CMOS]),
                      "modules": {k: ratio(m["targets"][t], m["targets"][SynthTarget.CMOS])
                                  for k, m in modules.items()
                                  if t in m["targets"] and SynthTarget.CMOS in m["targets"]}}
    return out


def _memories(modules: dict) -> list[dict]:
    out = []
    for kind, mod in modules.items():
        for mem in mod["targets"].get("cmos", {}).get("memories", []):
            out.append({"module": kind, "instances": mod["instances"], **mem})
    return out
