"""Plain-text tables of a synthesis report (``dstar.synth.report.run``), section by section."""

from dstar.config import PRESETS, Encoding, WeightStore

from .fmax_runs import FMAX_FLOW

__all__ = ["SECTIONS", "format_table", "describe"]

#: The sections of ``format_table``, in the order they print.
SECTIONS = ("totals", "attention", "dense", "modules", "cells", "timing", "memories", "fmax")

#: The area metric the ratio table shows per target.
_RATIO_SHOWN = {"cmos": "area_um2_45nm", "ice40": "luts", "ecp5": "luts", "ecp5_dsp": "luts",
                "xc7": "luts", "sky130": "area_um2", "osu018": "area_um2"}
_HEAD = ["target", "cells", "luts", "carries", "ffs", "brams", "dsps", "transistors",
         "area mm^2", "fmax MHz"]


def describe(config: dict) -> str:
    """``config`` (``Config.to_dict()``) as the nearest preset and the fields that differ, e.g.
    ``tiny, weight_store=lane_ram``. A configuration without ``encoding`` is v1's:
    ``Config.hardware()`` leaves ``nibble`` out, and reports from before the field have none."""
    if "encoding" not in config:
        config = {**config, "encoding": Encoding.NIBBLE.value}

    def diff(p):
        return {k: v for k, v in config.items() if p.to_dict().get(k) != v}

    name, p = min(PRESETS.items(), key=lambda kv: len(diff(kv[1])))
    return ", ".join([name] + [f"{k}={v}" for k, v in diff(p).items()])


def format_table(report: dict, sections=SECTIONS) -> str:
    """The title line, then the ``sections`` the report has data for (names of ``SECTIONS``):
    totals per target, the attention engine and the whole accelerator, the ratio to the dense
    baseline, each block kind per target (per instance), the SRAM macros, and Fmax with the
    critical path."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown table sections {sorted(unknown)}; choose from {SECTIONS}")
    label = describe(report["config"]) if "config" in report else report["preset"]
    lines = [f"dstar synth: {label} (config {report['config_hash']}), "
             f"top {report['top']}, Yosys {report['yosys_version']}, "
             f"report v{report['report_version']}"]
    for name, section in (("totals", _totals), ("attention", _parts), ("dense", _dense),
                          ("modules", _modules), ("cells", _cells), ("timing", _timing),
                          ("memories", _memories), ("fmax", _fmax)):
        if name in sections:
            lines += section(report)
    return "\n".join(lines)


def _area(res: dict):
    area = res.get("area_um2_45nm", res.get("area_um2"))
    return f"{area / 1e6:.3f}" if area is not None else None


def _total_row(t: str, tot: dict, fmax_mhz) -> list:
    return [t, tot.get("cells"), tot.get("luts"), tot.get("carries"), tot.get("ffs"),
            tot.get("brams"), tot.get("dsps"), tot.get("transistors"), _area(tot), fmax_mhz]


def _totals(report: dict) -> list[str]:
    rows = [_total_row(t, tot, tot.get("fmax_mhz")) for t, tot in report["targets"].items()]
    return (["", "Totals of the linear datapath (sum over blocks x instances; cmos area at "
             "45 nm, sky130/osu018 area in the library's cells; SRAM included):"]
            + _grid(_HEAD, rows))


def _parts(report: dict) -> list[str]:
    lines = []
    # Reports made before the accelerator top was synthesized summed the two parts instead.
    acc = ("Accelerator top (dstar.v: both on shared PE arrays, behind the command "
           "processor):" if "top" in report.get("accelerator", {}) else
           "Accelerator (linear datapath + attention engine):")
    for part, title in (("attention", "Attention engine (without the PE arrays it shares):"),
                        ("accelerator", acc)):
        if report.get(part):
            rows = [_total_row(t, tot, None) for t, tot in report[part]["targets"].items()]
            lines += ["", title] + _grid(_HEAD, rows)
    flat = report.get("flat_top")
    if flat:
        rows = [_total_row(t, res, None) for t, res in flat["targets"].items()]
        lines += ["", f"Accelerator top {flat['top']} synthesized flat (one netlist: logic "
                  "optimized across block boundaries):"] + _grid(_HEAD, rows)
    return lines


def _dense(report: dict) -> list[str]:
    if not report.get("dense_baseline"):
        return []
    return (["", "DSTAR vs the dense INT8 baseline (the lean int8 datapath: same tiles and "
             "arrays, equal peak 8-bit throughput; ratio = DSTAR / dense):"]
            + _grid(["target", "metric", "DSTAR", "dense", "ratio", "pe_array ratio"],
                    _ratio_rows(report)))


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


def _modules(report: dict) -> list[str]:
    head = ["module", "target"] + ["cells", "luts", "ffs", "brams", "transistors", "area mm^2"]
    rows = []
    for kind, mod in report["modules"].items():
        for t, res in mod["targets"].items():
            label = f"{kind} x{mod['instances']}"
            if mod.get("part", "linear") == "attention":
                label = f"attention: {label}"
            rows.append([label, t, res.get("cells"), res.get("luts"), res.get("ffs"),
                         res.get("brams"), res.get("transistors"), _area(res)])
    return ["", "Per module (per instance; 'xN': instances):"] + _grid(head, rows)


def _cells(report: dict) -> list[str]:
    """The standard-cell targets per block: area by cell kind, SRAM, NAND2 equivalents and
    their ratio to the cmos transistor estimate's."""
    rows = []

    def add(label, res, ratio):
        by = res["area_um2_by_kind"]
        logic = res["area_um2_logic"] or 1
        rows.append([label, res["area_um2"], res["area_um2_logic"]]
                    + [f"{by[k] / logic:.0%}" for k in ("ffs", "adders", "muxes", "other")]
                    + [res["area_um2_sram"], res["nand2_eq_logic"], ratio])

    for t in ("sky130", "osu018"):
        for where, rep in (("", report), ("dense: ", report.get("dense_baseline") or {})):
            vs = rep.get("vs_cmos", {}).get(t, {})
            for kind, mod in rep.get("modules", {}).items():
                res = mod["targets"].get(t)
                if res and "area_um2_by_kind" in res:
                    add(f"{t} {where}{kind} x{mod['instances']}", res,
                        vs.get("modules", {}).get(kind))
            for part, title in (("targets", "linear datapath"), ("attention", "attention"),
                                ("accelerator", "accelerator top")):
                tot = (rep.get(part, {}) if part == "targets" else
                       rep.get(part, {}).get("targets", {})).get(t)
                key = "vs_cmos" if part == "targets" else f"vs_cmos_{part}"
                if tot and "area_um2_by_kind" in tot:
                    add(f"{t} {where}total: {title}", tot,
                        rep.get(key, {}).get(t, {}).get("total"))
    if not rows:
        return []
    return (["", "Standard cells per block (per instance; um^2 of the library's cells, share of "
             "the logic area by cell kind: flip-flops, adder cells (XOR/XNOR/majority), "
             "multiplexers, other; SRAM macros scaled from the 45 nm estimate by NAND2 area; "
             "vs cmos = logic NAND2 equivalents over the transistor estimate's):"]
            + _grid(["block", "area um^2", "logic um^2", "ff", "add", "mux", "other",
                     "SRAM um^2", "NAND2-eq", "vs cmos"], rows))


def _timing(report: dict) -> list[str]:
    """OpenSTA's paths per block of a timed standard-cell target."""
    rows, skipped = [], set()
    for rep, where in ((report, ""), (report.get("dense_baseline") or {}, "dense: ")):
        for kind, mod in rep.get("modules", {}).items():
            for t, res in mod["targets"].items():
                if res.get("sta_skipped"):
                    skipped.add(res["sta_skipped"])
                sta = res.get("sta")
                if not sta:
                    continue
                for which in ("critical", "reg2reg"):
                    p = sta.get(which)
                    if p:
                        rows.append([f"{where}{kind}", t, which, p["period_ns"], p["fmax_mhz"],
                                     f"{p['start_kind']} {p['start']} -> {p['end_kind']} "
                                     f"{p['end']}"])
    flat = report.get("flat_top") or {}
    for t, res in flat.get("targets", {}).items():
        for which in ("critical", "reg2reg"):
            p = (res.get("sta") or {}).get(which)
            if p:
                rows.append([f"top {flat['top']} (flat)", t, which, p["period_ns"],
                             p["fmax_mhz"], f"{p['start_kind']} {p['start']} -> "
                             f"{p['end_kind']} {p['end']}"])
        if res.get("sta_skipped"):
            skipped.add(res["sta_skipped"])
    lines = []
    if rows:
        lines += ["", "Static timing (OpenSTA, pre-layout: typical corner, no wires, ideal "
                  "clock, ports driven and loaded at 0 ns; period = data arrival + setup):"]
        lines += _grid(["block", "target", "path", "period ns", "Fmax MHz", "from -> to"],
                       rows)
    lines += [f"  (no static timing: {why})" for why in sorted(skipped)]
    return lines


def _memories(report: dict) -> list[str]:
    if not report.get("memories"):
        return []
    return (["", "SRAM macros (cmos; area = bits x copies x bit cell / efficiency):"]
            + _grid(["module", "memory", "depth", "width", "R/W ports", "area mm^2"],
                    [[f"{m['module']} x{m['instances']}", m["name"], m["depth"], m["width"],
                      f"{m['read_ports']}/{m['write_ports']}",
                      f"{m['area_um2_45nm'] / 1e6:.4f}"] for m in report["memories"]]))


def _fmax(report: dict) -> list[str]:
    if not report.get("fmax"):
        return []
    lines = ["", f"Fmax (nextpnr-ecp5 {report.get('nextpnr_version')}, out of context, "
             f"{FMAX_FLOW} netlists):"]
    for what, f in report["fmax"].items():
        cp = f.get("critical_path") or {}
        d = f["device"]
        status = f.get("status", "routed")
        if status == "does not fit":
            lines.append(f"  {what}: no figure: {f['reason']}")
            continue
        if status == "routed" and f.get("seeds"):
            fig = (f"{f['fmax_mhz']} MHz routed, the median of seeds 1..{len(f['seeds'])} "
                   f"(worst {f['fmax_worst_mhz']}, best {f['fmax_best_mhz']})")
        elif status == "routed":
            fig = f"{f['fmax_mhz']} MHz routed"
        else:
            fig = (f"no routed figure (routing unfinished after {f.get('timeout_min')} "
                   f"min); placement estimate {f.get('placed_estimate_mhz')} MHz")
            if report.get("config", {}).get("weight_store") == WeightStore.REGISTERS.value:
                fig += ("; weight_store = lane_ram (the FPGA form: no weight-row "
                        "multiplexers) relieves routing congestion")
        seed = "" if f.get("seeds") else f", seed {f.get('seed')}"      # else: per seed below
        lines.append(f"  {what}: {fig} on LFE5U-{d['device'].upper()} "
                     f"speed {d['speed']} (router {f.get('router', 'router1')}{seed})")
        if not f.get("seeds"):
            lines += _path("    ", cp)
        for run in f.get("seeds") or ():
            lines.append(f"    seed {run['seed']}: " + (
                f"{run['fmax_mhz']} MHz" if run["status"] == "routed" else
                f"{run['status']} (placement estimate {run['placed_estimate_mhz']} MHz)"))
            lines += _path("      ", run.get("critical_path"))
    return lines


def _path(indent: str, cp: dict | None) -> list[str]:
    """A routed critical path's line (none without one)."""
    if not cp:
        return []
    return [f"{indent}critical path {cp['delay_ns']} ns ({cp['levels']} logic levels, "
            f"{cp['routing_ns']} ns routing): {_ep(cp['start'])} -> {_ep(cp['end'])}"]


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
