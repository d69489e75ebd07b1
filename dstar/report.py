"""``dstar report``: the paper's evaluation on the project's own measured parts — every model's
sampling run on DSTAR (v2: FMDQ + SAR; v1: nibble lanes + residual reuse) against an INT8
systolic array, Ditto-, Cambricon-D- and EXION-like accelerators and an A100, at equal peak INT8
throughput (and, with ``equal_area``, at equal PE-array area): latency, energy, their breakdowns.

Parts, one idea each:

* ``golden.dit_models``: the models' shapes with their sources, every operation of a step;
* ``report_mix``: the element mix and cycle ratios measured on a bundled DiT's golden run with
  the exact cycle models (cached under ``build/report``), transferred to every model by step
  phase and layer type;
* ``report_machine``: the machine (the paper's configuration by default);
* ``report_designs``: each design's mechanism; ``report_cost``: the roofline and energy;
* ``report_a100``: the A100's calibrated FP16 roofline;
* ``report_energy``: every constant with its source;
* ``report_plot``: the PNGs.

``run`` returns the report dict (``--json``); ``write_outputs`` writes ``report.md``,
``report.json`` and the PNGs into a folder all at once; ``format_text`` is the summary that the
results page shows.
"""

import json
import math

from dstar.golden.dit_models import (
    MODELS,
    REPORT_MODELS,
    ShapeError,
    bundled_shape,
    linear_params,
    macs,
    modulation_params,
    operations,
    shape_from_dict,
)

from .report_a100 import calibrate, run_a100
from .report_cost import run_model
from .report_designs import DESIGNS
from .report_energy import area_per_mac, table
from .report_machine import Machine, ReportError

__all__ = ["run", "format_text", "format_md", "write_outputs", "resolve_models", "OURS",
           "BASELINES", "PAPER", "PAPER_SEVEN", "load_shapes"]

#: The design every ratio is of: DSTAR v2.
OURS = "fmdq"
#: The baselines of every ratio (``speedup_vs`` and ``energy_saving_vs`` keys).
BASELINES = ("int8_sa", "ditto_like", "cambricon_d_like", "exion_like", "a100", "nibble")
#: The paper's seven DiTs (eval-anchors 1.1): DiT-XL/2 at 512.
PAPER_SEVEN = ("dit-xl-512", "pixart-sigma-1024", "sd35-medium", "sd35-large", "flux1-dev",
               "flux1-schnell", "latte-512")
#: The paper's headline figures (abstract [V]; geomeans from the summaries [S], eval-anchors 1.4).
PAPER = {"a100": {"speedup_max": 7.33, "speedup_geomean": 4.91, "energy_max": 41.89,
                  "energy_geomean": 27.07},
         "accelerators": {"speedup_max": 2.54, "energy_max": 3.68}}


def load_shapes(path) -> dict:
    """Models of a user's shapes file (JSON: a list of entries, ``golden.dit_models``'
    ``ModelShape`` fields); ``ReportError`` naming the file and the bad value."""
    from pathlib import Path
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise ReportError(f"shapes file {str(p)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"shapes file {str(p)!r}: not JSON ({e})") from None
    if not isinstance(data, list) or not data:
        raise ReportError(f"shapes file {str(p)!r}: expected a non-empty list of models")
    out = {}
    for entry in data:
        try:
            s = shape_from_dict(entry)
        except ShapeError as e:
            raise ReportError(f"shapes file {str(p)!r}: {e}") from None
        out[s.name] = s
    return out


def resolve_models(names, extra: dict | None = None) -> list:
    """``ModelShape`` of each name (``MODELS``, ``bundled-<workload>``, or ``extra``)."""
    from dstar.config import Workload
    out = []
    for n in names:
        if extra and n in extra:
            out.append(extra[n])
        elif n in MODELS:
            out.append(MODELS[n])
        elif n.startswith("bundled-") and n.removeprefix("bundled-") in {w.value for w in
                                                                          Workload}:
            out.append(bundled_shape(n.removeprefix("bundled-")))
        else:
            known = list(REPORT_MODELS) + [m for m in MODELS if m not in REPORT_MODELS]
            raise ReportError(f"unknown model {n!r} (known: {', '.join(known)})")
    return out


def _shape_facts(s) -> dict:
    ops = operations(s)
    lin = sum(o.macs for o in ops if o.kind == "linear" and o.layer_type != "adaln")
    return {"kind": s.kind, "blocks": s.blocks, "single_blocks": s.single_blocks,
            "hidden": s.hidden, "heads": s.heads, "mlp": s.mlp, "tokens": s.tokens,
            "frames": s.frames, "text_tokens": s.text_tokens, "steps": s.steps,
            "branches": s.branches, "gmacs_per_branch": macs(ops) / 1e9,
            "linear_gmacs": lin / 1e9, "attention_gmacs": (macs(ops) - lin) / 1e9,
            "gmacs_published": s.gmacs_published,
            "params_b": (linear_params(ops) + modulation_params(ops)) / 1e9,
            "params_b_published": s.params_b, "sources": s.sources}


def _model(s, mix, machine, eta) -> dict:
    res = {d: run_model(s, d, mix, machine) for d in DESIGNS}
    area = {d: run_model(s, d, mix, machine, equal_area=True) for d in DESIGNS}
    a = run_a100(s, eta)
    lat = {d: r["latency_s"] for d, r in res.items()} | {"a100": a["latency_s"]}
    en = {d: r["energy_j"] for d, r in res.items()} | {"a100": a["energy_j"],
                                                       "a100_400w": a["energy_400w_j"]}
    lat_area = {d: r["latency_s"] for d, r in area.items()} | {"a100": a["latency_s"]}
    return {"title": s.title, "shape": _shape_facts(s), "latency_s": lat, "energy_j": en,
            "speedup_vs": {b: lat[b] / lat[OURS] for b in BASELINES},
            "energy_saving_vs": {b: en[b] / en[OURS] for b in BASELINES}
            | {"a100_400w": en["a100_400w"] / en[OURS]},
            "energy_saving_vs_at_45nm": {b: (en[b] if b == "a100" else
                                             res[b]["energy_45nm_j"]) / res[OURS]["energy_45nm_j"]
                                         for b in BASELINES},
            "equal_area": {"latency_s": lat_area,
                           "speedup_vs": {b: lat_area[b] / lat_area[OURS] for b in BASELINES}},
            "breakdown": {d: {"time_s": r["time_s"], "energy_parts_j": r["energy_parts_j"]}
                          for d, r in res.items()}}


def _stats(models: dict, names, key: str, sub: str | None = None) -> dict:
    out = {}
    for b in BASELINES + (("a100_400w",) if key == "energy_saving_vs" else ()):
        vals = {m: (models[m][sub] if sub else models[m])[key].get(b) for m in names
                if m in models}
        vals = {m: v for m, v in vals.items() if v}
        if not vals:
            continue
        top = max(vals, key=vals.get)
        out[b] = {"geomean": math.exp(sum(math.log(v) for v in vals.values()) / len(vals)),
                  "max": vals[top], "max_model": top, "models": len(vals)}
    return out


#: HBM bandwidths of the sensitivity sweep (TB/s; issue 30 part 3).
HBM_SWEEP = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
#: The designs the sweep compares DSTAR v2 with (the A100's own bandwidth stays).
SWEEP_BASELINES = ("int8_sa", "ditto_like", "exion_like", "a100")


def hbm_sweep(shapes, machine: Machine, mix, eta: float) -> dict:
    """``{"<bw> TB/s": {"speedup_vs": {baseline: geomean over shapes}}}``: every design on the
    machine at each ``HBM_SWEEP`` bandwidth."""
    from dataclasses import replace
    out = {}
    for bw in HBM_SWEEP:
        m = replace(machine, hbm_tbs=bw)
        logs = dict.fromkeys(SWEEP_BASELINES, 0.0)
        for s in shapes:
            ours = run_model(s, OURS, mix, m)["latency_s"]
            for b in SWEEP_BASELINES:
                t = run_a100(s, eta)["latency_s"] if b == "a100" else \
                    run_model(s, b, mix, m)["latency_s"]
                logs[b] += math.log(t / ours)
        out[f"{bw:g} TB/s"] = {"speedup_vs": {b: math.exp(v / len(shapes))
                                              for b, v in logs.items()}}
    return out


def run(shapes, machine: Machine, mix, *, mix_note: str) -> dict:
    """The report (module docstring) of ``shapes`` (``ModelShape`` list) on ``machine`` with the
    measured ``mix`` (``report_mix.Mix``)."""
    cal = calibrate()
    models = {s.name: _model(s, mix, machine, cal["eta"]) for s in shapes}
    seven = [m for m in PAPER_SEVEN if m in models] or list(models)
    summary = {"over": seven,
               "speedup_vs": _stats(models, seven, "speedup_vs"),
               "energy_saving_vs": _stats(models, seven, "energy_saving_vs"),
               "energy_saving_vs_at_45nm": _stats(models, seven, "energy_saving_vs_at_45nm"),
               "equal_area_speedup_vs": _stats(models, seven, "speedup_vs", "equal_area")}
    summary["hbm_sweep"] = hbm_sweep([s for s in shapes if s.name in seven], machine, mix,
                                     cal["eta"])
    return {"report": "dstar report", "ours": OURS, "machine": machine.to_dict(),
            "mix": {"note": mix_note, **mix.summary(), "source": mix.rep["source"],
                    "config": mix.rep["config"]},
            "a100": cal,
            "designs": {d: {"title": v.title, "how": v.how,
                            "area_per_mac_vs_int8": area_per_mac(d),
                            "area_per_mac_vs_int8_cmos": area_per_mac(d, "cmos")}
                        for d, v in DESIGNS.items()},
            "models": models, "summary": summary, "paper": PAPER, "constants": table(),
            "notes": NOTES}


NOTES = [
    "The mix (cycle ratios per layer type and step phase, element classes, attention masks) is "
    "measured on a bundled DiT and transferred to every model by layer type and by the phase "
    "of the run (key step, then quarters): the large models' own mixes are not measured.",
    "SAR is modelled from the paper's mechanism with the measured density of v1's masks; the "
    "golden SAR is not in yet. FMDQ's cycles are the exact array model's at the configuration's "
    "token tile and sort window (mix.config), on arrays of the configuration's MACs; the paper's "
    "64 x 64 array's tile shape is not known, and the ratio is applied to it as measured.",
    "Every accelerator has the same peak INT8 throughput, HBM and scratchpad; equal area scales "
    "each design's PE count by its PE-array area per MAC on sky130 HD cells "
    "(report_energy.AREA_PER_MAC; the CMOS transistor estimate's beside it in Designs); energy "
    "is the same at equal area (no leakage term).",
    "Not modelled: leakage, the NoC, the vector unit's time (overlapped), the text encoder and "
    "VAE, per-kernel launch costs on the A100 beyond its calibrated efficiency.",
]


def _f(v, fmt=".2f") -> str:
    return "-" if v is None else format(v, fmt)


def format_text(rep: dict) -> str:
    """The summary: the machine, per model DSTAR v2's speedup and energy saving against each
    baseline, geomean and max over the paper's seven beside the paper's figures."""
    m = rep["machine"]
    out = [f"dstar report: ours = {rep['ours']} (DSTAR v2); machine {m['cores']} cores x "
           f"{m['rows']}x{m['cols']} PEs at {m['ghz']:g} GHz = {m['peak_int8_tops']:.0f} INT8 "
           f"TOPS, HBM {m['hbm_tbs']:g} TB/s, {m['sram_kb']} KB scratchpad, state X "
           f"{m['x_bits']} b / Y {m['y_bits']} b, energy at {m['node_nm']} nm",
           f"mix: {rep['mix']['source']} (transferred to every model)",
           f"A100: FP16 roofline at eta {rep['a100']['eta']:.3f} (calibration error "
           f"{rep['a100']['max_error']:.1%})", ""]
    base = list(BASELINES)
    out.append("speedup (latency ratio) of DSTAR v2 vs, at equal peak INT8 TOPS")
    out.append(f"{'model':20s}" + "".join(f"{b:>17s}" for b in base))
    for name, r in rep["models"].items():
        out.append(f"{name:20s}" + "".join(f"{_f(r['speedup_vs'][b]):>17s}" for b in base))
    out.append("")
    out.append("energy saving of DSTAR v2 vs (A100 at 250 W)")
    for name, r in rep["models"].items():
        out.append(f"{name:20s}" + "".join(f"{_f(r['energy_saving_vs'][b]):>17s}"
                                           for b in base))
    out.append("")
    out.append("speedup at equal PE-array area")
    for name, r in rep["models"].items():
        out.append(f"{name:20s}" + "".join(f"{_f(r['equal_area']['speedup_vs'][b]):>17s}"
                                           for b in base))
    s = rep["summary"]
    out.append("")
    out.append(f"over {len(s['over'])} models ({', '.join(s['over'])}): geomean / max")
    for key, label in (("speedup_vs", "speedup"), ("energy_saving_vs", "energy saving"),
                       ("energy_saving_vs_at_45nm", "energy, accel. 45 nm"),
                       ("equal_area_speedup_vs", "speedup, equal area")):
        out.append(f"  {label:22s}" + "  ".join(
            f"{b} {v['geomean']:.2f}/{v['max']:.2f}" for b, v in s[key].items()))
    out.append("  geomean speedup vs HBM bandwidth (the A100 at its own): " + "; ".join(
        f"{bw}: " + " ".join(f"{b} {v:.2f}" for b, v in d["speedup_vs"].items())
        for bw, d in s.get("hbm_sweep", {}).items()))
    p = rep["paper"]
    out.append(f"  paper vs A100: speedup {p['a100']['speedup_geomean']}/"
               f"{p['a100']['speedup_max']}, energy {p['a100']['energy_geomean']}/"
               f"{p['a100']['energy_max']}; vs accelerators max speedup "
               f"{p['accelerators']['speedup_max']}, energy {p['accelerators']['energy_max']}")
    return "\n".join(out)


def format_md(rep: dict) -> str:
    """``report.md``: the summary, per model latency and energy per design, the breakdowns, the
    mix, the A100 calibration, the shapes and every constant with its source."""
    out = ["# dstar report", "", "```", format_text(rep), "```", "", "## Notes", ""]
    out += [f"- {n}" for n in rep["notes"]]
    out += ["", "## Designs", "", "| design | what | PE area per MAC vs INT8, sky130 (used) | "
            "the same, CMOS estimate |", "|---|---|---|---|"]
    out += [f"| `{d}` {v['title']} | {v['how']} | {v['area_per_mac_vs_int8']:.3f} | "
            f"{v['area_per_mac_vs_int8_cmos']:.3f} |" for d, v in rep["designs"].items()]
    designs = list(rep["designs"]) + ["a100"]
    out += ["", "## Latency (s per image) and energy (J per image)", "",
            "| model | " + " | ".join(designs) + " |", "|---|" + "---|" * len(designs)]
    for name, r in rep["models"].items():
        out.append(f"| {name} latency | " + " | ".join(f"{r['latency_s'][d]:.4g}"
                                                       for d in designs) + " |")
        out.append(f"| {name} energy | " + " | ".join(f"{r['energy_j'][d]:.4g}"
                                                      for d in designs) + " |")
    out += ["", "## Breakdown of DSTAR v2 (fractions)", ""]
    for name, r in rep["models"].items():
        b = r["breakdown"][rep["ours"]]
        for part in ("time_s", "energy_parts_j"):
            tot = sum(b[part].values()) or 1.0
            out.append(f"- {name} {part.split('_')[0]}: " + ", ".join(
                f"{k} {v / tot:.1%}" for k, v in b[part].items()))
    out += ["", "## Measured mix (transferred)", "", "```",
            json.dumps(rep["mix"], indent=1, sort_keys=True), "```", "",
            "## A100 calibration", "", "```", json.dumps(rep["a100"], indent=1), "```", "",
            "## Shapes", "", "| model | kind | blocks | hidden | tokens | steps | CFG | "
            "GMAC/branch | published | params B | published | sources |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rep["models"].items():
        s = r["shape"]
        src = "; ".join(f"{k}: {v}" for k, v in s["sources"].items())
        out.append(f"| {name} | {s['kind']} | {s['blocks']}+{s['single_blocks']} | "
                   f"{s['hidden']} | {s['tokens']}x{s['frames']} +{s['text_tokens']} | "
                   f"{s['steps']} | {s['branches']} | {s['gmacs_per_branch']:.1f} | "
                   f"{_f(s['gmacs_published'], '.1f')} | {s['params_b']:.3f} | "
                   f"{_f(s['params_b_published'], '.3f')} | {src} |")
    out += ["", "## Constants", "", "| group | name | value | unit | source |",
            "|---|---|---|---|---|"]
    out += [f"| {c['group']} | {c['name']} | {_f(c['value'], 'g')} | {c['unit']} | "
            f"{c['source']} |" for c in rep["constants"]]
    return "\n".join(out) + "\n"


#: The files ``write_outputs`` writes.
FILES = ("report.md", "report.json", "speedup.png", "energy.png", "breakdown_time.png",
         "breakdown_energy.png", "hbm_sweep.png")


def write_outputs(rep: dict, folder) -> None:
    """Every file of ``FILES`` into ``folder``, all or nothing (``outputs.atomic_dir``)."""
    from .outputs import atomic_dir
    from .report_plot import bars_png, breakdown_png
    files = {
        "report.md": format_md(rep).encode(),
        "report.json": (json.dumps(rep, indent=1, sort_keys=True) + "\n").encode(),
        "speedup.png": bars_png(rep, "speedup_vs", "speedup of DSTAR v2 at equal TOPS"),
        "energy.png": bars_png(rep, "energy_saving_vs", "energy saving of DSTAR v2"),
        "breakdown_time.png": breakdown_png(rep, rep["ours"], "time_s",
                                            "DSTAR v2 time: compute, weights, state, cache, "
                                            "act"),
        "breakdown_energy.png": breakdown_png(rep, rep["ours"], "energy_parts_j",
                                              "DSTAR v2 energy by part"),
        "hbm_sweep.png": bars_png({"models": rep["summary"]["hbm_sweep"]}, "speedup_vs",
                                  "geomean speedup of DSTAR v2 vs HBM bandwidth"),
    }
    with atomic_dir(folder, owned=FILES) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)


def command(cfg, *, models=None, shapes=None, machine=(), trace=None, output=None,
            as_json=False, quiet=False, mix_steps: int = 50) -> str:
    """``dstar report``: validate everything first (models, shapes file, machine, output
    folder), measure or read the cached mix (progress on stderr unless ``quiet``), evaluate,
    write ``output`` all or nothing; returns the text to print (JSON with ``as_json``)."""
    import sys

    from .outputs import check_output_dir
    from .report_machine import parse_machine
    from .report_mix import Mix, measure, measure_trace
    mach = parse_machine(machine)
    extra = load_shapes(shapes) if shapes else {}
    names = list(models) if models else (list(extra) if extra else list(REPORT_MODELS))
    shapes_l = resolve_models(names, extra)
    if output is not None:
        check_output_dir(output, "report folder")
    progress = None if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    workload = str(cfg.workload)
    if trace is not None:
        rep_mix = measure_trace(cfg, trace, workload, progress)
    else:
        rep_mix = measure(cfg, workload, mix_steps, progress)
    note = (f"from the user trace {trace}" if trace is not None else
            f"from the bundled {workload} DiT's golden run") + "; transferred to every model"
    rep = run(shapes_l, mach, Mix(rep_mix), mix_note=note)
    if output is not None:
        write_outputs(rep, output)
    return json.dumps(rep, indent=1, sort_keys=True) if as_json else format_text(rep)
