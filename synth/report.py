"""Area, FPGA resources and Fmax of a dstar configuration, per target and per module.

Ref: dstar-spec.md section 6 ("Area from Yosys ..., Fmax from nextpnr, per module").

Method (per-block synthesis): the configuration's Verilog comes from ``hw.generate.generate``.
Amaranth writes one Verilog module per instance, named by its path (``dstar_linear.encoder``,
``dstar_linear.array_1.psum_3``, ...). Each direct child of the top is a *block*; blocks whose
names differ only in a trailing ``_<n>`` are instances of one block kind (``array_0``,
``array_1`` -> ``pe_array``). For every target, ``synth.flows.synth_module`` synthesizes:

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

Fmax (``fmax=True``): nextpnr-ecp5 out of context on the ECP5 (no DSP) netlist of the PE array
block alone and of the whole top, flattened (``synth.fmax``).
"""

import hashlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dstar.config import PRESETS, Config

from . import fmax as _fmax
from .flows import CMOS_ASSUMPTIONS, TARGETS, synth_module, verilog_modules, yosys_version

__all__ = ["REPORT_VERSION", "ALL_TARGETS", "BLOCK_KINDS", "run", "format_table",
           "config_hash", "preset_name", "generate_verilog", "blocks", "main"]

#: Version of the report's JSON layout; bump on any change of keys or meaning.
REPORT_VERSION = 1
ALL_TARGETS = ("cmos", "ice40", "ecp5", "ecp5_dsp", "xc7")
ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "synth"

#: Report names of the block kinds (instance name without ``_<n>`` -> kind).
BLOCK_KINDS = {"array": "pe_array", "encoder": "encoder", "dispatcher": "dispatcher",
               "softmax": "softmax", "reuse_ctrl": "controller", "controller": "controller"}
SEQUENCER = "sequencer"
#: Blocks not (yet) instantiated by the top, synthesized alone from their own Verilog and
#: reported in ``modules`` with ``in_top`` false (not part of the totals): name -> class.
STANDALONE = {"dstar_softmax": ("hw.softmax", "SoftmaxUnit")}
#: What ``fmax=True`` places and routes.
FMAX_BLOCKS = ("pe_array", "top")

_SUM_KEYS = ("cells", "luts", "carries", "muxes", "ffs", "brams", "lutram", "dsps", "gates",
             "transistors", "transistors_logic", "transistors_sram", "sram_bits",
             "area_um2_45nm", "area_um2_45nm_logic", "area_um2_45nm_sram")


def config_hash(cfg: Config) -> str:
    """12 hex digits of the SHA-256 of the configuration's fields (sorted JSON)."""
    blob = json.dumps(cfg.to_dict(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def preset_name(cfg: Config) -> str:
    """Name of the preset ``cfg`` equals, else ``"custom"``."""
    for name, p in PRESETS.items():
        if p == cfg:
            return name
    return "custom"


def generate_verilog(cfg: Config, outdir: Path) -> tuple[Path, dict]:
    """Write the configuration's Verilog and ``params.json`` into ``outdir`` (and, for every
    ``STANDALONE`` block the generator has, ``<name>.v``); files whose content is unchanged are
    left alone (their age lets ``reuse`` trust earlier results)."""
    import importlib
    import shutil

    from hw.generate import generate, generate_block
    outdir = Path(outdir)
    fresh = outdir.with_name(outdir.name + ".new")
    man = generate(cfg, fresh)
    for name, (mod, cls) in STANDALONE.items():
        try:
            comp = getattr(importlib.import_module(mod), cls)(cfg)
        except (ImportError, AttributeError):
            continue
        generate_block(comp, name, cfg, {}, fresh)
    outdir.mkdir(parents=True, exist_ok=True)
    for f in sorted(fresh.iterdir()):
        old = outdir / f.name
        if not old.exists() or old.read_bytes() != f.read_bytes():
            f.replace(old)
    shutil.rmtree(fresh)
    return outdir / man["verilog"], man


def blocks(verilog: Path, top: str) -> list[dict]:
    """The top's direct children grouped by kind: ``[{"kind", "module", "instances"}]`` (the
    first instance's module is the one synthesized), plus the blackboxed top (``sequencer``)."""
    kids = [m for m in verilog_modules(verilog)
            if m.startswith(top + ".") and "." not in m[len(top) + 1:]]
    groups: dict[str, list[str]] = {}
    for mod in kids:
        inst = mod[len(top) + 1:]
        base = re.sub(r"_\d+$", "", inst)
        groups.setdefault(BLOCK_KINDS.get(base, base), []).append(mod)
    out = [{"kind": kind, "module": sorted(mods, key=_natural)[0], "instances": len(mods)}
           for kind, mods in groups.items()]
    out.append({"kind": SEQUENCER, "module": top, "instances": 1, "blackbox": tuple(kids)})
    for name in STANDALONE:
        path = Path(verilog).parent / f"{name}.v"
        if path.exists():
            out.append({"kind": name.removeprefix("dstar_"), "module": name, "instances": 1,
                        "verilog": path, "in_top": False})
    return out


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def run(cfg: Config, targets=ALL_TARGETS, fmax=False, *, outdir: Path | None = None,
        jobs: int = 1, flat_total: bool = False, reuse: bool = False) -> dict:
    """Synthesize ``cfg`` for ``targets`` (names of ``synth.flows.TARGETS``) and return the
    report (see ``REPORT_VERSION``); it is also written to ``<outdir>/report.json``.

    ``targets[t]``: the totals of target ``t`` (``synth.flows.summarize`` keys, summed over
    the top's blocks x instances; ``fmax_mhz`` on ``ecp5`` when ``fmax``). ``modules[kind]``:
    the block kind's ``module``, ``instances``, ``in_top`` and per-target counts *per
    instance*. ``memories``: the SRAM
    macros of the cmos target. ``fmax`` (``True`` for both, or a tuple naming ``"pe_array"``
    and/or ``"top"``): nextpnr results of the PE array block and of the flat top.
    ``outdir`` defaults to ``build/synth/<preset>-<config hash>``; ``jobs`` Yosys runs at once;
    ``reuse`` takes a block's statistics from an earlier run in ``outdir`` when its script and
    Verilog are unchanged (``synth.flows.synth_module``).
    """
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"unknown synthesis target(s) {unknown}; choose from {list(TARGETS)}")
    name = preset_name(cfg)
    fmax = FMAX_BLOCKS if fmax is True else tuple(fmax or ())
    outdir = Path(outdir) if outdir else BUILD / f"{name}-{config_hash(cfg)}"
    t0 = time.monotonic()
    verilog, man = generate_verilog(cfg, outdir / "rtl")
    top = man["top"]
    blks = blocks(verilog, top)
    pe_mod = next((b["module"] for b in blks if b["kind"] == "pe_array"), None)

    jobs_list = []
    for t in targets:
        for b in blks:
            want_net = "pe_array" in fmax and t == "ecp5" and b["module"] == pe_mod
            jobs_list.append((t, b, want_net))
    if "pe_array" in fmax and "ecp5" not in targets and pe_mod:
        jobs_list.append(("ecp5", next(b for b in blks if b["module"] == pe_mod), True))

    fdir = outdir / "fmax"
    if "top" in fmax:       # the flat top for nextpnr, synthesized alongside the blocks
        jobs_list.insert(0, ("ecp5", {"kind": "top", "module": top}, True))

    def work(job):
        t, b, net = job
        s = time.monotonic()
        res = synth_module(b.get("verilog", verilog), b["module"], t,
                           fdir if b["kind"] == "top" else outdir / t,
                           blackbox=b.get("blackbox", ()), netlist=net, reuse=reuse)
        res["seconds"] = round(time.monotonic() - s, 1)
        return job, res

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = [r for r in pool.map(work, jobs_list) if r[0][1]["kind"] != "top"]

    modules: dict = {b["kind"]: {"module": b["module"], "instances": b["instances"],
                                 "in_top": b.get("in_top", True), "targets": {}}
                     for b in blks}
    for (t, b, _), res in results:
        if t in targets:
            modules[b["kind"]]["targets"][t] = res
    totals = {t: _total(modules, t) for t in targets}

    report = {
        "report_version": REPORT_VERSION,
        "preset": name,
        "config_hash": config_hash(cfg),
        "config": cfg.to_dict(),
        "top": top,
        "yosys_version": yosys_version(),
        "method": "per-block",
        "cmos_assumptions": CMOS_ASSUMPTIONS,
        "targets": totals,
        "modules": modules,
        "memories": _memories(modules),
    }
    if flat_total:
        report["flat"] = {t: _strip(synth_module(verilog, top, t, outdir / t / "flat"))
                          for t in targets}
    if fmax:
        report["nextpnr_version"] = _fmax.nextpnr_version()
        report["fmax"] = _run_fmax(fmax, top, pe_mod, fdir, outdir / "ecp5", jobs, reuse)
        if "ecp5" in totals and "top" in report["fmax"]:
            totals["ecp5"]["fmax_mhz"] = report["fmax"]["top"].get("fmax_mhz")
        for kind, f in report["fmax"].items():
            if "ecp5" in modules.get(kind, {}).get("targets", {}):
                modules[kind]["targets"]["ecp5"]["fmax_mhz"] = f.get("fmax_mhz")
    report["seconds"] = round(time.monotonic() - t0, 1)
    (outdir / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report


def _strip(res: dict) -> dict:
    return {k: v for k, v in res.items() if k not in ("cells_by_type", "memories")}


def _total(modules: dict, target: str) -> dict:
    out: dict = {}
    for mod in modules.values():
        res = mod["targets"].get(target)
        if res is None or not mod["in_top"]:
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


def _run_fmax(which, top: str, pe_mod: str | None, fdir: Path, ecp5dir: Path,
              jobs: int, reuse: bool) -> dict:
    """nextpnr on the PE array's ECP5 netlist (from the per-block run) and on the flat top."""
    runs = {"top": fdir / f"{top}.ecp5.json"} if "top" in which else {}
    if pe_mod and "pe_array" in which:
        runs["pe_array"] = ecp5dir / f"{pe_mod}.ecp5.json"
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {k: pool.submit(_fmax.place_and_route, net, fdir, reuse=reuse)
                for k, net in runs.items()}
        return {k: futs[k].result() for k in sorted(futs, key=lambda k: k != "pe_array")}


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
    lines = [f"dstar synth: preset {report['preset']} (config {report['config_hash']}), "
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
    lines += ["", "Totals (sum over blocks x instances; cmos area at 45 nm incl. SRAM):"]
    lines += _grid(head, rows)

    lines += ["", "Per module (per instance; 'xN': instances):"]
    mhead = ["module", "target"] + ["cells", "luts", "ffs", "brams", "transistors", "area mm^2"]
    mrows = []
    for kind, mod in report["modules"].items():
        for t, res in mod["targets"].items():
            area = res.get("area_um2_45nm")
            label = f"{kind} x{mod['instances']}" if mod.get("in_top", True) else \
                f"({kind} alone)"
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
        lines += ["", f"Fmax (nextpnr-ecp5 {report.get('nextpnr_version')}, out of context):"]
        for what, f in report["fmax"].items():
            cp = f.get("critical_path") or {}
            d = f["device"]
            lines.append(f"  {what}: {f['fmax_mhz']} MHz on LFE5U-{d['device'].upper()} "
                         f"speed {d['speed']} (seed {f['seed']})")
            if cp:
                lines.append(f"    critical path {cp['delay_ns']} ns ({cp['levels']} logic "
                             f"levels, {cp['routing_ns']} ns routing): "
                             f"{_ep(cp['start'])} -> {_ep(cp['end'])}")
    return "\n".join(lines)


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
    ap.add_argument("--fmax", nargs="?", const="all", choices=["all", *FMAX_BLOCKS],
                    help="place and route for Fmax: the PE array and the top (default), or one")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--flat-total", action="store_true")
    ap.add_argument("--write-baseline", action="store_true")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse statistics of an earlier run of the same Verilog")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.preset)
    targets = ALL_TARGETS if not args.target or "all" in args.target else tuple(args.target)
    fmax = FMAX_BLOCKS if args.fmax == "all" else (args.fmax,) if args.fmax else ()
    rep = run(cfg, targets, fmax, jobs=args.jobs, flat_total=args.flat_total,
              reuse=args.reuse)
    if args.write_baseline:
        print(f"wrote {write_baseline(rep)}")
    print(json.dumps(rep, indent=1, sort_keys=True) if args.json else format_table(rep))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
