"""Area, FPGA resources and Fmax of a dstar configuration, per target and per module.

Ref: dstar-spec.md section 6 ("Area from Yosys ..., Fmax from nextpnr, per module").

Method (per-block synthesis): the configuration's Verilog comes from ``dstar.hw.generate.generate``.
Amaranth writes one Verilog module per instance, named by its path (``dstar_linear.encoder``,
``dstar_linear.array_1.psum_3``, ...). Each direct child of the top is a *block*; blocks whose
names differ only in a trailing ``_<n>`` are instances of one block kind (``array_0``,
``array_1`` -> ``pe_array``). For every target, ``dstar.synth.flows.synth_module`` synthesizes:

* the first instance of each block kind, flattened (its own children included), counted once
  per instance. Later instances differ only in outputs Amaranth pruned because the top leaves
  them unconnected (e.g. ``o_pass_done`` of arrays 1..), so the count is an upper bound by those
  few gates;
* the top with every block blackboxed: the ``sequencer`` (layer sequencer, weight loader, host
  muxing, counters) plus the memories the top owns (weights).

A target's totals are the sums over blocks x instances. Logic is not optimized across block
boundaries (as in a hierarchical ASIC flow), so totals are slightly above a flat synthesis of
the whole top (``flat_total=True`` runs that for comparison). The cmos target keeps memories of
at least ``SRAM_MIN_DEPTH`` words as SRAM macros; ``memories`` lists them with their area.

Fmax (``fmax=True``): nextpnr-ecp5 out of context on the ECP5 netlists with DSPs
(``FMAX_FLOW``) of the PE array block alone and of the whole top (``dstar.synth.fmax``): without
MULT18X18D the ``tiny`` top (about 94k LUT4) does not fit the LFE5U-85F's 84k LUT4. The whole
top is synthesized by the ``ecp5_dsp_top`` flow: ``synth_ecp5 -noflatten`` up to LUT mapping
(so Yosys's ``share`` pass, which ran for more than 13 minutes on the flattened ``tiny`` top,
works on one block at a time), then ``flatten`` and LUT mapping of the whole design, so nextpnr
and its timing see one flat netlist. Each figure says what it is (``status``, ``dstar.synth.fmax``):
routed, only placed (routing did not finish within ``fmax_timeout_min``: nextpnr's placement
estimate) or does not fit: a top whose PE arrays alone need more MULT18X18D than the device has
(the ``default`` preset: 2 x 128 > 156 on the LFE5U-85F) is not synthesized for nextpnr at all,
and the report gives that reason instead of a figure.
The figures are for the configuration as given: with ``weight_store = "registers"`` (the
default, smallest on an ASIC) the lanes' weight-row multiplexers congest the routing of the
``default`` PE array and the ``tiny`` top; ``weight_store = "lane_ram"`` is the FPGA form that
routes (figures in README.md), and the table says so next to an unrouted figure.

Attention engine: the configuration's ``dstar_attention.v`` (``hw.attention``, written beside the
linear top unless the configuration is the dense baseline) is split the same way: its
``softmax`` and ``normalizer`` blocks, and ``attention_controller`` (the engine's top with every
block blackboxed: the block schedule, slot counters, mask memory, residual cache, Q/K^T/V/P and
output memories). Its PE arrays are left out: the accelerator runs attention on the linear
datapath's arrays (spec section 5), so they are counted once, in the linear part. These modules
carry ``part = "attention"``; ``targets`` stays the linear datapath (what ``area_ratio`` compares
with the dense baseline), ``attention.targets`` sums the engine's modules and
``accelerator.targets`` is the sum of both.

Dense baseline (``dense``): the same per-block synthesis of the configuration with
``datapath = "dense"`` (``hw.dense``: 8-bit x 8-bit lanes at the same peak 8-bit throughput, the
same tiles, weight memories and host ports, no encoder, no dispatcher); ``area_ratio`` divides
DSTAR's totals by the baseline's.
"""

import hashlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dstar.config import PRESETS, Config, Datapath
from dstar.paths import build_dir

from . import fmax as _fmax
from .flows import (
    AREA_TARGETS,
    CMOS_ASSUMPTIONS,
    TARGETS,
    synth_module,
    verilog_modules,
    yosys_version,
)

__all__ = ["REPORT_VERSION", "ALL_TARGETS", "BLOCK_KINDS", "run", "format_table",
           "config_hash", "preset_name", "generate_verilog", "blocks", "main"]

#: Version of the report's JSON layout; bump on any change of keys or meaning.
REPORT_VERSION = 3
ALL_TARGETS = AREA_TARGETS

#: Report names of the block kinds (instance name without ``_<n>`` -> kind).
BLOCK_KINDS = {"array": "pe_array", "encoder": "encoder", "dispatcher": "dispatcher",
               "softmax": "softmax", "normalizer": "normalizer"}
SEQUENCER = "sequencer"
#: The attention engine's top with its blocks blackboxed.
ATTN_CONTROLLER = "attention_controller"
#: What ``fmax=True`` places and routes.
FMAX_BLOCKS = ("pe_array", "top")
#: Blocks of the linear datapath that nextpnr can place and route alone (``fmax`` may name
#: them; the sequencer holds the others as black boxes, so it cannot).
FMAX_KINDS = ("pe_array", "encoder", "dispatcher")


def fmax_selection(arg: str | None) -> tuple:
    """What a ``--fmax`` argument places and routes: ``all`` the PE array and the top,
    ``blocks`` each block of ``FMAX_KINDS`` alone, else the one it names (None: nothing)."""
    if arg is None:
        return ()
    return {"all": FMAX_BLOCKS, "blocks": FMAX_KINDS}.get(arg, (arg,))


#: ``--fmax`` choices.
FMAX_CHOICES = ("all", "blocks", *FMAX_KINDS, "top")
#: The flow of the whole top for nextpnr: hierarchical ECP5 synthesis, flattened after the
#: coarse passes (``dstar.synth.flows``), since a flat synth_ecp5 of the top stalls in ``share``.
TOP_FLOW = "ecp5_dsp_top"
#: The flow of the blocks placed and routed for Fmax.
FMAX_FLOW = "ecp5_dsp"
#: Metrics of ``area_ratio`` (DSTAR / dense baseline).
RATIO_KEYS = ("area_um2_45nm", "area_um2_45nm_logic", "transistors", "cells", "luts", "ffs",
              "dsps")

_SUM_KEYS = ("cells", "luts", "carries", "muxes", "ffs", "brams", "lutram", "dsps", "gates",
             "transistors", "transistors_logic", "transistors_sram", "sram_bits",
             "area_um2_45nm", "area_um2_45nm_logic", "area_um2_45nm_sram")


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


def describe(config: dict) -> str:
    """``config`` (``Config.to_dict()``) as the nearest preset and the fields that differ, e.g.
    ``tiny, weight_store=lane_ram``."""
    def diff(p):
        return {k: v for k, v in config.items() if p.to_dict().get(k) != v}

    name, p = min(PRESETS.items(), key=lambda kv: len(diff(kv[1])))
    return ", ".join([name] + [f"{k}={v}" for k, v in diff(p).items()])


def generate_verilog(cfg: Config, outdir: Path) -> tuple[Path, dict]:
    """Write the configuration's Verilog and ``params.json`` into ``outdir``; files whose
    content is unchanged are left alone (their age lets ``reuse`` trust earlier results)."""
    import shutil

    from dstar.hw.generate import generate
    outdir = Path(outdir)
    fresh = outdir.with_name(outdir.name + ".new")
    man = generate(cfg, fresh)
    outdir.mkdir(parents=True, exist_ok=True)
    for f in sorted(fresh.iterdir()):
        old = outdir / f.name
        if not old.exists() or old.read_bytes() != f.read_bytes():
            f.replace(old)
    shutil.rmtree(fresh)
    return outdir / man["verilog"], man


def _children(verilog: Path, top: str) -> tuple[list[str], dict[str, list[str]]]:
    """The top's direct children and the same grouped by block kind."""
    kids = [m for m in verilog_modules(verilog)
            if m.startswith(top + ".") and "." not in m[len(top) + 1:]]
    groups: dict[str, list[str]] = {}
    for mod in kids:
        inst = mod[len(top) + 1:]
        base = re.sub(r"_\d+$", "", inst)
        groups.setdefault(BLOCK_KINDS.get(base, base), []).append(mod)
    return kids, groups


def blocks(verilog: Path, top: str, attention: Path | None = None) -> list[dict]:
    """The top's direct children grouped by kind: ``[{"kind", "module", "instances"}]`` (the
    first instance's module is the one synthesized), plus the blackboxed top (``sequencer``);
    with ``attention`` (the engine's Verilog) its blocks except the PE arrays and its
    blackboxed top (``attention_controller``), each with ``part = "attention"``."""
    kids, groups = _children(verilog, top)
    out = [{"kind": kind, "module": sorted(mods, key=_natural)[0], "instances": len(mods)}
           for kind, mods in groups.items()]
    out.append({"kind": SEQUENCER, "module": top, "instances": 1, "blackbox": tuple(kids)})
    if attention is not None:
        atop = Path(attention).stem
        akids, agroups = _children(attention, atop)
        for kind, mods in agroups.items():
            if kind != "pe_array":      # shared with the linear datapath: counted there
                out.append({"kind": kind, "module": sorted(mods, key=_natural)[0],
                            "instances": len(mods), "verilog": attention, "part": "attention"})
        out.append({"kind": ATTN_CONTROLLER, "module": atop, "instances": 1,
                    "blackbox": tuple(akids), "verilog": attention, "part": "attention"})
    return out


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def run(cfg: Config, targets=ALL_TARGETS, fmax=False, *, outdir: Path | None = None,
        jobs: int = 1, flat_total: bool = False, reuse: bool = False,
        dense: bool | None = None, fmax_timeout_min: float | None = None) -> dict:
    """Synthesize ``cfg`` for ``targets`` (names of ``dstar.synth.flows.TARGETS``) and return the
    report (see ``REPORT_VERSION``); it is also written to ``<outdir>/report.json``.

    ``targets[t]``: the totals of target ``t`` (``dstar.synth.flows.summarize`` keys, summed over
    the top's blocks x instances; ``fmax_mhz`` on ``FMAX_FLOW`` when ``fmax``). ``modules[kind]``:
    the block kind's ``module``, ``instances``, ``part`` (``linear`` or ``attention``) and
    per-target counts *per instance*. ``attention`` / ``accelerator``: the engine's totals and
    the sum of both parts (see the module docstring). ``memories``: the SRAM macros of the cmos
    target. ``fmax`` (``True`` for both, or a tuple naming ``"pe_array"``
    and/or ``"top"``): nextpnr results of the PE array block and of the flat top, each nextpnr
    run stopped after ``fmax_timeout_min`` minutes if given.
    ``dense`` (default: unless ``cfg`` is itself the dense baseline): also synthesize, the same
    way, the dense INT8 baseline of the same tiles, arrays and peak 8-bit throughput
    (``cfg`` with ``datapath = "dense"``, ``hw.dense``) into ``dense_baseline`` (``config_hash``,
    ``targets``, ``modules``, ``memories``), and ``area_ratio[t][metric]`` = DSTAR / dense
    of the totals (``RATIO_KEYS``), ``area_ratio[t]["modules"][kind]`` per block kind both
    have (per instance).
    ``outdir`` defaults to ``build/synth/<preset>-<config hash>``; ``jobs`` Yosys runs at once;
    ``reuse`` takes a block's statistics from an earlier run in ``outdir`` when its script and
    Verilog are unchanged (``dstar.synth.flows.synth_module``).
    """
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"unknown synthesis target(s) {unknown}; choose from {list(TARGETS)}")
    name = preset_name(cfg)
    fmax = FMAX_BLOCKS if fmax is True else tuple(fmax or ())
    dense = cfg.datapath != Datapath.DENSE if dense is None else dense
    outdir = Path(outdir) if outdir else build_dir("synth", f"{name}-{config_hash(cfg)}")
    t0 = time.monotonic()
    skipped: dict = {}
    top, verilog, modules = _synth_blocks(cfg, targets, fmax, outdir, jobs, reuse,
                                                  skipped=skipped)
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
    if any(mod["part"] == "attention" for mod in modules.values()):
        report["attention"] = {"top": man_attention_top(modules),
                               "targets": {t: _total(modules, t, "attention") for t in targets},
                               "pe_arrays": "shared with the linear datapath (counted there)"}
        report["accelerator"] = {"targets": {t: _total(modules, t, None) for t in targets}}
    if dense:
        dcfg = cfg.replace(datapath=Datapath.DENSE)
        _, _, dmods = _synth_blocks(dcfg, targets, (), outdir / "dense", jobs, reuse)
        dtot = {t: _total(dmods, t) for t in targets}
        report["dense_baseline"] = {"config_hash": config_hash(dcfg), "datapath": dcfg.datapath,
                                    "targets": dtot, "modules": dmods,
                                    "memories": _memories(dmods)}
        report["area_ratio"] = _ratios(totals, dtot, modules, dmods)
    if flat_total:
        report["flat"] = {t: _strip(synth_module(verilog, top, t, outdir / t / "flat"))
                          for t in targets}
    if fmax:
        fdir = outdir / "fmax"
        report["nextpnr_version"] = _fmax.nextpnr_version()
        report["fmax"] = _run_fmax(fmax, top, {k: m["module"] for k, m in modules.items()},
                                   fdir, outdir / FMAX_FLOW, jobs, reuse, fmax_timeout_min,
                                   skipped)
        if FMAX_FLOW in totals and "top" in report["fmax"]:
            totals[FMAX_FLOW]["fmax_mhz"] = report["fmax"]["top"].get("fmax_mhz")
        for kind, f in report["fmax"].items():
            if FMAX_FLOW in modules.get(kind, {}).get("targets", {}):
                modules[kind]["targets"][FMAX_FLOW]["fmax_mhz"] = f.get("fmax_mhz")
    report["seconds"] = round(time.monotonic() - t0, 1)
    (outdir / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report


def _synth_blocks(cfg: Config, targets: tuple, fmax: tuple, outdir: Path, jobs: int,
                  reuse: bool, skipped: dict | None = None):
    """Generate ``cfg`` into ``<outdir>/rtl`` and synthesize its blocks for ``targets`` (and
    the netlists ``fmax`` needs); returns ``(top, verilog, modules)``. The
    whole top is synthesized for nextpnr only if its PE arrays fit the device's MULT18X18D;
    otherwise ``skipped["top"]`` says why."""
    verilog, man = generate_verilog(cfg, outdir / "rtl")
    top = man["top"]
    att = man.get("attention")
    blks = blocks(verilog, top, verilog.parent / att["verilog"] if att else None)

    def placed_alone(b):
        return b["kind"] in fmax and b["kind"] in FMAX_KINDS and b.get("part") is None

    jobs_list = []
    for t in targets:
        for b in blks:
            jobs_list.append((t, b, t == FMAX_FLOW and placed_alone(b)))
    if FMAX_FLOW not in targets:
        # The netlists to place, and the PE array's MULT18X18D count for the top's fit check.
        jobs_list += [(FMAX_FLOW, b, placed_alone(b)) for b in blks if placed_alone(b)
                      or (b["kind"] == "pe_array" and "top" in fmax)]

    fdir = outdir / "fmax"

    def work(job):
        t, b, net = job
        s = time.monotonic()
        res = synth_module(b.get("verilog", verilog), b["module"], t,
                           fdir if b["kind"] == "top" else outdir / t,
                           blackbox=b.get("blackbox", ()), netlist=net, reuse=reuse)
        res["seconds"] = round(time.monotonic() - s, 1)
        return job, res

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(work, jobs_list))
    if "top" in fmax:       # the whole top for nextpnr, if its PE arrays fit the device
        pe = next(((b, r) for (t, b, _), r in results if t == FMAX_FLOW and b["kind"] ==
                   "pe_array"), None)
        cap = _fmax.CAPACITY.get(_fmax.DEVICE["device"], {}).get("MULT18X18D")
        need = pe[1].get("dsps", 0) * pe[0]["instances"] if pe else 0
        if cap and need > cap:
            skipped["top"] = (f"its {pe[0]['instances']} PE arrays alone need {need} "
                              f"MULT18X18D > {cap} on LFE5U-{_fmax.DEVICE['device'][:-1]}F")
        else:
            work((TOP_FLOW, {"kind": "top", "module": top}, True))

    modules: dict = {b["kind"]: {"module": b["module"], "instances": b["instances"],
                                 "part": b.get("part", "linear"), "targets": {}}
                     for b in blks}
    for (t, b, _), res in results:
        if t in targets:
            modules[b["kind"]]["targets"][t] = res
    return top, verilog, modules


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
    return modules[ATTN_CONTROLLER]["module"]


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
    for k in ("area_um2_45nm", "area_um2_45nm_logic", "area_um2_45nm_sram"):
        if k in out:
            out[k] = round(out[k], 1)
    return out


def _memories(modules: dict) -> list[dict]:
    out = []
    for kind, mod in modules.items():
        for mem in mod["targets"].get("cmos", {}).get("memories", []):
            out.append({"module": kind, "instances": mod["instances"], **mem})
    return out


def _run_fmax(which, top: str, kinds: dict, fdir: Path, netdir: Path,
              jobs: int, reuse: bool, timeout_min: float | None = None,
              skipped: dict | None = None) -> dict:
    """nextpnr on the netlists (``FMAX_FLOW``, per-block run) of the blocks ``which`` names
    (``kinds``: block kind -> module) and on the whole top (``TOP_FLOW``, flattened), unless
    ``skipped`` gives the reason it cannot fit."""
    skipped = skipped or {}
    runs = {k: netdir / f"{kinds[k]}.{FMAX_FLOW}.json" for k in FMAX_KINDS
            if k in which and k in kinds}
    if "top" in which:
        runs["top"] = fdir / f"{top}.{TOP_FLOW}.json"
    out = {k: {"status": "does not fit", "fmax_mhz": None, "placed_estimate_mhz": None,
               "reason": why, "device": _fmax.DEVICE} for k, why in skipped.items()}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {k: pool.submit(_fmax.place_and_route, net, fdir, reuse=reuse,
                               timeout_min=timeout_min)
                for k, net in runs.items() if k not in skipped}
        out.update({k: f.result() for k, f in futs.items()})
    order = (*FMAX_KINDS, "top")
    return {k: out[k] for k in sorted(out, key=order.index)}


# ----- text output -----

_COLS = {
    "cmos": ("cells", "ffs", "transistors", "area_um2_45nm"),
    "ice40": ("luts", "carries", "ffs", "brams"),
    "ecp5": ("luts", "carries", "ffs", "brams", "lutram"),
    "ecp5_dsp": ("luts", "carries", "ffs", "brams", "dsps"),
    "xc7": ("luts", "carries", "ffs", "brams", "lutram"),
}


def format_table(report: dict) -> str:
    """Plain-text tables: totals per target, then each block kind per target (per instance
    and x instances), the SRAM macros, and Fmax with the critical path."""
    label = describe(report["config"]) if "config" in report else report["preset"]
    lines = [f"dstar synth: {label} (config {report['config_hash']}), "
             f"top {report['top']}, Yosys {report['yosys_version']}, "
             f"report v{report['report_version']}"]
    head = ["target", "cells", "luts", "carries", "ffs", "brams", "dsps", "transistors",
            "area mm^2", "fmax MHz"]
    rows = []
    for t, tot in report["targets"].items():
        area = tot.get("area_um2_45nm")
        rows.append([t, tot.get("cells"), tot.get("luts"), tot.get("carries"), tot.get("ffs"),
                     tot.get("brams"), tot.get("dsps"), tot.get("transistors"),
                     f"{area / 1e6:.3f}" if area is not None else None, tot.get("fmax_mhz")])
    lines += ["", "Totals of the linear datapath (sum over blocks x instances; cmos area at 45 nm "
              "incl. SRAM):"]
    lines += _grid(head, rows)
    for part, title in (("attention", "Attention engine (without the PE arrays it shares):"),
                        ("accelerator", "Accelerator (linear datapath + attention engine):")):
        if report.get(part):
            prow = []
            for t, tot in report[part]["targets"].items():
                area = tot.get("area_um2_45nm")
                prow.append([t, tot.get("cells"), tot.get("luts"), tot.get("carries"),
                             tot.get("ffs"), tot.get("brams"), tot.get("dsps"),
                             tot.get("transistors"),
                             f"{area / 1e6:.3f}" if area is not None else None, None])
            lines += ["", title] + _grid(head, prow)

    if report.get("dense_baseline"):
        lines += ["", "DSTAR vs the dense INT8 baseline (same tiles and arrays, equal peak 8-bit "
                  "throughput; ratio = DSTAR / dense):"]
        lines += _grid(["target", "metric", "DSTAR", "dense", "ratio", "pe_array ratio"],
                       _ratio_rows(report))
    lines += ["", "Per module (per instance; 'xN': instances):"]
    mhead = ["module", "target"] + ["cells", "luts", "ffs", "brams", "transistors", "area mm^2"]
    mrows = []
    for kind, mod in report["modules"].items():
        for t, res in mod["targets"].items():
            area = res.get("area_um2_45nm")
            label = f"{kind} x{mod['instances']}"
            if mod.get("part", "linear") != "linear":
                label = f"{mod['part']}: {label}"
            mrows.append([label, t, res.get("cells"), res.get("luts"),
                          res.get("ffs"), res.get("brams"), res.get("transistors"),
                          f"{area / 1e6:.3f}" if area is not None else None])
    lines += _grid(mhead, mrows)

    if report.get("memories"):
        lines += ["", "SRAM macros (cmos; area = bits x copies x bit cell / efficiency):"]
        lines += _grid(["module", "memory", "depth", "width", "R/W ports", "area mm^2"],
                       [[f"{m['module']} x{m['instances']}", m["name"], m["depth"], m["width"],
                         f"{m['read_ports']}/{m['write_ports']}",
                         f"{m['area_um2_45nm'] / 1e6:.4f}"] for m in report["memories"]])
    if report.get("fmax"):
        lines += ["", f"Fmax (nextpnr-ecp5 {report.get('nextpnr_version')}, out of context, "
                  f"{FMAX_FLOW} netlists):"]
        for what, f in report["fmax"].items():
            cp = f.get("critical_path") or {}
            d = f["device"]
            status = f.get("status", "routed")
            if status == "routed":
                fig = f"{f['fmax_mhz']} MHz routed"
            elif status == "does not fit":
                fig = f"no figure: {f['reason']}"
            else:
                fig = (f"no routed figure (routing unfinished after {f.get('timeout_min')} "
                       f"min); placement estimate {f.get('placed_estimate_mhz')} MHz")
                if report.get("config", {}).get("weight_store") == "registers":
                    fig += ("; weight_store = lane_ram (the FPGA form: no weight-row "
                            "multiplexers) relieves routing congestion")
            if status == "does not fit":
                lines.append(f"  {what}: {fig}")
                continue
            lines.append(f"  {what}: {fig} on LFE5U-{d['device'].upper()} "
                         f"speed {d['speed']} (router {f.get('router', 'router1')}, seed "
                         f"{f.get('seed')})")
            if cp:
                lines.append(f"    critical path {cp['delay_ns']} ns ({cp['levels']} logic "
                             f"levels, {cp['routing_ns']} ns routing): "
                             f"{_ep(cp['start'])} -> {_ep(cp['end'])}")
    return "\n".join(lines)


#: The area metric the ratio table shows per target.
_RATIO_SHOWN = {"cmos": "area_um2_45nm", "ice40": "luts", "ecp5": "luts", "ecp5_dsp": "luts",
                "xc7": "luts"}


def _ratio_rows(report: dict) -> list:
    rows = []
    dense = report["dense_baseline"]["targets"]
    for t, ratios in report["area_ratio"].items():
        for k in (_RATIO_SHOWN.get(t, "cells"), "ffs"):
            a, b = report["targets"][t].get(k), dense.get(t, {}).get(k)
            if k.startswith("area_um2"):
                k, a, b = "area mm^2", a and f"{a / 1e6:.3f}", b and f"{b / 1e6:.3f}"
            key = _RATIO_SHOWN.get(t, "cells") if k == "area mm^2" else k
            rows.append([t, k, a, b, ratios.get(key), ratios["modules"].get("pe_array",
                                                                            {}).get(key)])
    return rows


def _ep(e: dict) -> str:
    net = f" (net {e['net']})" if e.get("net") else ""
    return f"{e['cell']}.{e['port']}{net}"


def _grid(head, rows) -> list[str]:
    cells = [[("-" if v is None else str(v)) for v in r] for r in [head] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    fmt = [" ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths,
                                                                                  strict=True)))
           for r in cells]
    return ["  " + fmt[0], "  " + "-" * len(fmt[0])] + ["  " + r for r in fmt[1:]]


# ----- command line -----

def main(argv=None) -> int:
    """``python -m synth.report [--preset NAME] [--config FILE] [--target T|all]... [--fmax]
    [--json] [--jobs N] [--reuse] [--write-baseline]``: synthesize, print a table (or the
    JSON), and write ``report.json`` into the build directory (``--write-baseline``: also update
    ``synth/baselines/<preset>.json`` for the running Yosys version)."""
    import argparse

    from dstar.config import load_config

    from .baseline import write_baseline

    ap = argparse.ArgumentParser(prog="python -m synth.report", description=main.__doc__)
    ap.add_argument("--preset")
    ap.add_argument("--config")
    ap.add_argument("--target", action="append", choices=list(TARGETS) + ["all"])
    ap.add_argument("--fmax", nargs="?", const="all", choices=FMAX_CHOICES,
                    help="place and route for Fmax: the PE array and the top (default), each "
                    "block alone (blocks), or one")
    ap.add_argument("--fmax-timeout", type=float, metavar="MIN",
                    help="stop each nextpnr run after MIN minutes (placement estimate only)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--flat-total", action="store_true")
    ap.add_argument("--no-dense", action="store_true", help="skip the dense INT8 baseline")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse statistics of an earlier run of the same Verilog")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.preset)
    targets = ALL_TARGETS if not args.target or "all" in args.target else tuple(args.target)
    fmax = fmax_selection(args.fmax)
    rep = run(cfg, targets, fmax, jobs=args.jobs, flat_total=args.flat_total,
              reuse=args.reuse, dense=False if args.no_dense else None,
              fmax_timeout_min=args.fmax_timeout)
    if args.write_baseline:
        print(f"wrote {write_baseline(rep)}")
    print(json.dumps(rep, indent=1, sort_keys=True) if args.json else format_table(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
