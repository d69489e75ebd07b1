"""``dstar bench efficiency``: throughput per area of each linear-datapath strategy against the
lean dense INT8 datapath (``datapath = "int8"``, ``dstar.hw.int8``), on the bundled DiT.

For each strategy (``STRATEGIES``: DSTAR's ``compact`` and ``lockstep`` packings, the heavier
``dense`` INT8 datapath and the ``int8`` baseline, all of the configuration's tiles, arrays and
peak 8-bit throughput):

* ``cycles``: the cycle model (exact against the RTL) over the whole sampling run, every step of
  every linear layer of every DiT block (``dstar.sim.bench.run_model``; the dense datapaths'
  cycles depend only on the shapes, ``dstar.sim.layer_cycles.SHAPE_MODELS``);
* ``pe_area_um2``: CMOS area (Yosys estimate at 45 nm, ``dstar.synth.flows``) of its PE arrays
  (the ``pe_array`` block x ``n_arrays``, accumulator memories included);
  ``datapath_area_um2``: of the whole linear datapath (PE arrays, encoder, dispatcher,
  sequencer, and the memories they own), per-block synthesis as ``dstar.synth.report``;
* ``speedup_vs_dense`` = baseline cycles / cycles; ``tpa_pe_vs_dense`` and
  ``tpa_datapath_vs_dense`` = speedup / (area / the baseline's area) at both levels;
* with ``fmax``: routed ECP5 Fmax (nextpnr, out of context) of each block placed alone
  (``dstar.synth.fmax_runs.FMAX_KINDS``);
* ``asic`` (with ``area``, by default ``sky130``: real standard cells, ``dstar.synth.flows``):
  the same areas and throughput per area from that target's cells (``area_um2``, SRAM macros
  scaled from the 45 nm estimate), beside the transistor estimate's above, which the lone
  parts, the ceiling and other rows built from the estimate keep using.

FMDQ (``fmdq``, unless ``fmdq=False``): the configuration's ``FmdqLinear`` beside them, its cycles
(encode and replay phases) and area per part, ``dstar.synth.fmdq_efficiency``; every row gives
``parts_um2``, where its area goes.

The baseline's area per INT8 MAC (``int8_mac``) is reported next to Bit Fusion's fixed 8-bit PE
(``BIT_FUSION_PE_UM2``), together with this flow's area of a lone 8x8 multiplier.

``ceiling``: the most throughput per area any nibble-lane PE array of the configuration can
reach against the baseline, from lone parts synthesized by the same flow (``lane_ceiling``):
per lane and column only its ``5 x 8`` multiplier (registered) and its two weight registers
(one weight, double-buffered, as each baseline MAC holds), per column a ``G``-input adder tree
and the accumulator's adder, plus the DSTAR array's accumulator memory; no operand selection,
shift, skew queue or control. At the element-level ideal speedup (``ideal_vs_dense``: dense
nibble passes over element passes on the whole run) and at 85 % of it (the issue's cycle
floor), so a target above the ceiling is out of reach of the design space, not of one design.

Areas are cached per configuration hash in ``build/efficiency/<preset>-<hash>/area.json``, so a
second call does not synthesize again, and cycles per configuration, steps and layers in
``build/efficiency/cycles/`` (delete ``build/efficiency`` after a change of the RTL or of a
cycle model).
"""

import hashlib
import json
import time
from enum import StrEnum

from dstar.config import Config, Datapath, Encoding, Packing
from dstar.paths import build_dir
from dstar.sim.bench import all_layers, dense_cycles, run_model
from dstar.sim.traces import linear_inputs

from . import fmdq_efficiency
from .blocks import synth_blocks
from .flows import SynthTarget, synth_module, yosys_version
from .fmax_runs import FMAX_FLOW, FMAX_KINDS, run_fmax
from .report import config_hash, preset_name

__all__ = ["Strategy", "STRATEGIES", "BASELINE", "BIT_FUSION_PE_UM2", "DEFAULT_STEPS", "run",
           "format_text", "strategy_config"]

class Strategy(StrEnum):
    """A datapath the report compares (``STRATEGIES``: the config fields each sets; its value
    names its row in the report)."""

    #: v1's DSTAR datapath, compact packing (of the nibble encoding's elements).
    COMPACT = "compact"
    #: v1's DSTAR datapath, lockstep packing.
    LOCKSTEP = "lockstep"
    #: The heavier dense INT8 top (``datapath = "dense"``).
    DENSE = "dense"
    #: The lean dense INT8 datapath (``datapath = "int8"``): the baseline.
    INT8 = "int8"


#: The strategies compared: config fields each sets on the base configuration.
STRATEGIES: dict[Strategy, dict] = {
    Strategy.COMPACT: {"datapath": Datapath.DSTAR, "packing": Packing.COMPACT,
                       "encoding": Encoding.NIBBLE},
    Strategy.LOCKSTEP: {"datapath": Datapath.DSTAR, "packing": Packing.LOCKSTEP,
                        "encoding": Encoding.NIBBLE},
    Strategy.DENSE: {"datapath": Datapath.DENSE},
    Strategy.INT8: {"datapath": Datapath.INT8},
}
#: The strategy every ratio is measured against.
BASELINE = Strategy.INT8
#: Bit Fusion's synthesized fixed 8-bit PE at 45 nm, um^2 (per PE of a 16x1 array, and 1x1;
#: ``hsharma35/bitfusion`` results/systolic_array_synth.csv).
BIT_FUSION_PE_UM2 = (443.5, 687.6)
#: The sampling run measured unless told otherwise: the default configuration's.
DEFAULT_STEPS = Config().steps
_CMOS = SynthTarget.CMOS


def strategy_config(base: Config, name: str) -> Config:
    return base.replace(**STRATEGIES[name])


def _quiet(*args, **kwargs):
    pass


def whole_run_cycles(base: Config, steps: int, layers=None,
                     names: tuple = tuple(STRATEGIES)) -> tuple[dict, dict]:
    """Cycles of the strategies ``names`` (the baseline always) over ``steps`` steps of
    ``layers`` (None: every linear of every block) and the workload's description; cached per
    configuration (every field: the run fields decide the encoding), steps, layers and
    strategies."""
    layers = all_layers() if layers is None else layers
    names = [n for n in STRATEGIES if n in names or n == BASELINE]
    # The strategies here are v1's and the dense ones: none reads FMDQ's fields.
    base = base.replace(encoding=Encoding.NIBBLE)
    # Every field but another encoding's (``Config.unused``: they change no strategy here).
    key = json.dumps({"config": {**base.hardware(), **base.run_params()}, "steps": steps,
                      "layers": layers,
                      "strategies": names, "version": 2}, sort_keys=True)
    cache = build_dir("efficiency", "cycles",
                      hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")
    if cache.is_file():
        got = json.loads(cache.read_text())
        return got["cycles"], got["workload"]
    dstar = [(n, f["packing"], 0) for n, f in STRATEGIES.items()
             if f["datapath"] == Datapath.DSTAR and n in names]
    total, _, _, _, n_ls = run_model(base.replace(datapath=Datapath.DSTAR), dstar, layers,
                                     steps, 1, say=_quiet)
    out = {n: total.strat[n]["cycles"] for n, _, _ in dstar}
    for name, f in STRATEGIES.items():
        if f["datapath"] != Datapath.DSTAR and name in names:
            out[name] = 0
            for layer in layers:
                xs, w, _ = linear_inputs(layer, steps=steps)
                out[name] += len(xs) * dense_cycles(base, f["datapath"], xs.shape[1],
                                                    w.shape[1], w.shape[0])
    assert out[BASELINE] == total.dense, "the bench's baseline is this one"
    workload = {"model": "bundled DiT", "steps": steps, "layers": len(layers),
                "layer_steps": n_ls, "ideal_vs_dense": total.ideal}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": json.loads(key), "cycles": out, "workload": workload},
                                indent=1, sort_keys=True) + "\n")
    return out, workload


def _linear_area(modules: dict, target: str = _CMOS) -> dict:
    key = "area_um2_45nm" if target == _CMOS else "area_um2"

    def area(kind):
        mod = modules[kind]
        return mod["targets"][target][key] * mod["instances"]

    linear = [k for k, m in modules.items() if m["part"] == "linear"]
    pe = modules["pe_array"]["targets"][target]
    return {"pe_area_um2": round(area("pe_array"), 1),
            "pe_logic_area_um2": round(pe[key + "_logic"]
                                       * modules["pe_array"]["instances"], 1),
            "datapath_area_um2": round(sum(area(k) for k in linear), 1),
            "blocks_um2": {k: round(area(k), 1) for k in linear}}


def strategy_area(cfg: Config, fmax: bool, jobs: int = 1, area: str | None = None) -> dict:
    """The CMOS areas of ``cfg``'s linear datapath (``_linear_area``), with ``area`` (a
    standard-cell target) the same from its cells under ``asic``, and, with ``fmax``, each
    block's routed ECP5 Fmax; cached per configuration hash (module docstring)."""
    outdir = build_dir("efficiency", f"{preset_name(cfg)}-{config_hash(cfg)}")
    cache = outdir / "area.json"
    if cache.is_file():
        got = json.loads(cache.read_text())
        if got.get("config_hash") == config_hash(cfg) and (not fmax or "fmax_mhz" in got) \
                and (area is None or got.get("asic", {}).get("target") == area):
            return got
    t0 = time.monotonic()
    want = FMAX_KINDS if fmax else ()
    top, _, modules = synth_blocks(cfg, (_CMOS,) + ((area,) if area else ()), want, outdir,
                                   jobs, reuse=True, attention=False)
    out = {"config_hash": config_hash(cfg), "yosys_version": yosys_version(),
           **_linear_area(modules)}
    if area:
        out["asic"] = {"target": area, **_linear_area(modules, area)}
    if fmax:
        res = run_fmax(want, top, {k: m["module"] for k, m in modules.items()},
                       outdir / "fmax", outdir / FMAX_FLOW, jobs, True)
        out["fmax_mhz"] = {k: r.get("fmax_mhz") for k, r in res.items()}
    out["seconds"] = round(time.monotonic() - t0, 1)
    outdir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def _part_um2(name: str, ports: str, body: str) -> float:
    """This flow's CMOS area of a lone registered part: ``module name(input clk, ports);
    body`` (Verilog), synthesized once per text."""
    text = f"module {name}(input clk, {ports});\n  {body}\nendmodule\n"
    d = build_dir("efficiency", "parts", f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:8]}")
    d.mkdir(parents=True, exist_ok=True)
    v = d / f"{name}.v"
    v.write_text(text)
    return synth_module(v, name, _CMOS, d / "cmos", reuse=True)["area_um2_45nm"]


def _multiplier_um2() -> float:
    """This flow's CMOS area of one registered signed 8x8 multiplier (a calibration point)."""
    return _part_um2("mul8x8", "input signed [7:0] a, input signed [7:0] b, "
                     "output reg signed [15:0] p", "always @(posedge clk) p <= a * b;")


def lane_ceiling(cfg: Config, y_memory_um2: float) -> dict:
    """The lone parts of the ceiling (module docstring) for ``cfg``'s arrays, um^2: per
    lane-column ``mul`` (``5 x 8`` signed, registered) and ``weights`` (16 flip-flops), per
    column ``tree`` (``G`` products of 13 bits) and ``acc_add`` (``acc_bits``), and the
    ``pe_area_um2`` of ``n_arrays`` such arrays with ``y_memory_um2`` of accumulator memory."""
    g, acc = cfg.group, cfg.acc_bits
    tree_bits = 13 + (g - 1).bit_length()
    parts = {
        "mul": _part_um2("lane_mul", "input signed [4:0] a, input signed [7:0] b, "
                         "output reg signed [12:0] p", "always @(posedge clk) p <= a * b;"),
        "weights": _part_um2("lane_weights", "input [15:0] a, output reg [15:0] p",
                             "always @(posedge clk) p <= a;"),
        "tree": _part_um2(f"tree{g}", f"input [{13 * g - 1}:0] a, "
                          f"output reg signed [{tree_bits - 1}:0] p",
                          f"integer i; reg signed [{tree_bits - 1}:0] t;\n"
                          f"  always @(*) begin t = 0; for (i = 0; i < {g}; i = i + 1) "
                          f"t = t + $signed(a[i*13 +: 13]); end\n"
                          "  always @(posedge clk) p <= t;"),
        "acc_add": _part_um2(f"acc_add{acc}", f"input signed [{acc - 1}:0] a, "
                             f"input signed [{acc - 1}:0] b, output reg signed [{acc - 1}:0] p",
                             "always @(posedge clk) p <= a + b;"),
    }
    cols = cfg.n_arrays * cfg.m_tile
    pe = cols * (g * (parts["mul"] + parts["weights"]) + parts["tree"] + parts["acc_add"])
    return {"parts_um2": {k: round(v, 1) for k, v in parts.items()},
            "pe_area_um2": round(pe + y_memory_um2, 1)}


def _parts(a: dict) -> dict:
    """Where a synthesized datapath's area goes: the PE arrays' logic and accumulator (``Y``)
    memories apart, then its other blocks (the sequencer holds the weight memories)."""
    out = {"pe_logic": a["pe_logic_area_um2"],
           "y_memory": round(a["pe_area_um2"] - a["pe_logic_area_um2"], 1)}
    out.update({k: v for k, v in a["blocks_um2"].items() if k != "pe_array"})
    return out


def run(base: Config, *, steps: int = DEFAULT_STEPS, fmax: bool = False, jobs: int = 1,
        layers=None, fmdq: bool = True, area: str | None = SynthTarget.SKY130,
        strategies: tuple = ()) -> dict:
    """The efficiency report of ``base`` (module docstring; ``layers``: the DiT's linears to
    run, None for all; ``fmdq``: with FMDQ's row, ``dstar.synth.fmdq_efficiency``;
    ``strategies``: only these of ``STRATEGIES`` and the baseline, empty for all: a
    ``ValueError`` names an unknown one). Without a DSTAR packing strategy there is no
    ``ceiling`` (it takes that strategy's accumulator memory)."""
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        raise ValueError(f"unknown strategy {unknown[0]!r}; choose from {list(STRATEGIES)}")
    names = tuple(n for n in STRATEGIES if not strategies or n in strategies or n == BASELINE)
    cycles, workload = whole_run_cycles(base, steps, layers, names)
    # Cheapest first, so that a long run leaves the baseline's areas cached early.
    order = sorted(names, key=lambda n: (n != BASELINE, STRATEGIES[n]["datapath"]
                                         == Datapath.DSTAR))
    areas = {n: strategy_area(strategy_config(base, n), fmax, jobs, area) for n in order}
    ref_c, ref = cycles[BASELINE], areas[BASELINE]
    rows = {}
    for name in names:
        a, c = areas[name], cycles[name]
        sp = ref_c / c
        row = {"cycles": c, "speedup_vs_dense": round(sp, 4),
               "pe_area_um2": a["pe_area_um2"], "datapath_area_um2": a["datapath_area_um2"],
               "tpa_pe_vs_dense": round(sp * ref["pe_area_um2"] / a["pe_area_um2"], 4),
               "tpa_datapath_vs_dense": round(sp * ref["datapath_area_um2"]
                                              / a["datapath_area_um2"], 4),
               "blocks_um2": a["blocks_um2"], "parts_um2": _parts(a)}
        if fmax:
            row["fmax_mhz"] = a["fmax_mhz"]
        if area:
            x, rx = a["asic"], ref["asic"]
            row["asic"] = {"target": area, "pe_area_um2": x["pe_area_um2"],
                           "datapath_area_um2": x["datapath_area_um2"],
                           "tpa_pe_vs_dense": round(sp * rx["pe_area_um2"] / x["pe_area_um2"], 4),
                           "tpa_datapath_vs_dense": round(sp * rx["datapath_area_um2"]
                                                          / x["datapath_area_um2"], 4),
                           "blocks_um2": x["blocks_um2"]}
        rows[name] = row
    if fmdq:
        rows["fmdq"] = fmdq_efficiency.row(base, steps, rows[BASELINE], layers, area)
    cfg = strategy_config(base, BASELINE)
    macs = cfg.n_arrays * cfg.m_tile * cfg.group // 2
    out = {"preset": preset_name(base), "config_hash": config_hash(base), "area": area,
           "workload": workload, "baseline": BASELINE, "strategies": rows,
           "int8_mac": {"macs": macs,
                        "pe_um2_per_mac": round(ref["pe_area_um2"] / macs, 1),
                        "pe_logic_um2_per_mac": round(ref["pe_logic_area_um2"] / macs, 1),
                        "mul8x8_um2": round(_multiplier_um2(), 1),
                        "bit_fusion_pe_um2": list(BIT_FUSION_PE_UM2)},
           "yosys_version": ref["yosys_version"]}
    dstar = next((n for n in names if STRATEGIES[n]["datapath"] == Datapath.DSTAR), None)
    if dstar:
        ideal = workload["ideal_vs_dense"]
        ceil = lane_ceiling(base, areas[dstar]["pe_area_um2"]
                            - areas[dstar]["pe_logic_area_um2"])
        ceil.update({"ideal_vs_dense": round(ideal, 4),
                     "tpa_pe_at_ideal": round(ideal * ref["pe_area_um2"] / ceil["pe_area_um2"],
                                              4),
                     "tpa_pe_at_85pct": round(0.85 * ideal * ref["pe_area_um2"]
                                              / ceil["pe_area_um2"], 4)})
        out["ceiling"] = ceil
    return out


def format_text(rep: dict) -> str:
    """The report as tables (one line per strategy) plus the INT8 MAC's area. With a
    standard-cell target (``area``), its areas and throughput per area come first (the rows
    that have them: ``asic``), then the 45 nm transistor estimate's of every row, as before,
    with each row's parts, FMDQ's geometry and the routed Fmax."""
    w = rep["workload"]
    head = (f"preset {rep['preset']}: {w['model']}, {w['layers']} linears x {w['steps']} steps "
            f"({w['layer_steps']} layer-steps); baseline {rep['baseline']} (lean dense INT8)")
    cols = (f"{'strategy':10s} {'cycles':>12s} {'speedup':>8s} {'PE um2':>11s} "
            f"{'datapath um2':>13s} {'TPA PE':>7s} {'TPA dp':>7s}")

    def row(name: str, s: dict, a: dict) -> str:
        return (f"{name:10s} {s['cycles']:12d} {s['speedup_vs_dense']:8.3f} "
                f"{a['pe_area_um2']:11.0f} {a['datapath_area_um2']:13.0f} "
                f"{a['tpa_pe_vs_dense']:7.3f} {a['tpa_datapath_vs_dense']:7.3f}")

    asic = {n: s["asic"] for n, s in rep["strategies"].items() if "asic" in s}
    lines = [head]
    if asic:
        target = next(iter(asic.values()))["target"]
        lines += [f"{target} standard cells (real cell areas; SRAM macros scaled from the 45 nm "
                  "estimate by NAND2 area):", cols]
        for n, a in asic.items():
            lines.append(row(n, rep["strategies"][n], a))
            if a.get("blocks_um2"):
                lines.append("           area: " + ", ".join(
                    f"{k} {v:.0f}" for k, v in a["blocks_um2"].items()))
        lines.append("CMOS transistor estimate at 45 nm (Yosys), beside for continuity:")
    else:
        lines[0] += "; CMOS areas at 45 nm (Yosys estimate)"
    lines.append(cols)
    for name, s in rep["strategies"].items():
        lines.append(row(name, s, s))
        if "speedup_at_equal_area" in s:
            lines.append(f"           at the baseline's datapath area: x"
                         f"{s['speedup_at_equal_area']:.3f} (arrays scaled, shared parts kept)")
        if "parts_um2" in s:
            lines.append("           area: " + ", ".join(
                f"{k} {v:.0f}" for k, v in s["parts_um2"].items()))
        if "encode_cycles" in s:
            g = s["geometry"]
            lines.append(f"           T={g['tokens']} x M={g['columns']} x {g['n_arrays']} arrays "
                         f"(equal peak INT8 throughput: {g['equal_peak']}), window "
                         f"{g['window']}, {s['mean_width_bits']:.2f} bits; FmdqLinear's cycles "
                         f"(exact: the model at the commit measured); the unit's "
                         f"steady state {s['encode_cycles']}, the replay alone "
                         f"{s['replay_cycles']} (x{s['speedup_replay_only']:.3f})")
        if "fmax_mhz" in s:
            lines.append("           routed ECP5 Fmax: " + ", ".join(
                f"{k} {v:.1f} MHz" if v else f"{k} -" for k, v in s["fmax_mhz"].items()))
    mac = rep["int8_mac"]
    lo, hi = mac["bit_fusion_pe_um2"]
    base = asic.get(rep["baseline"])
    cells = (f"; {base['target']} cells: {base['pe_area_um2'] / mac['macs']:.0f} um2 per MAC"
             if base else "")
    lines.append(f"int8 baseline (45 nm estimate): {mac['pe_um2_per_mac']:.0f} um2 per INT8 MAC "
                 f"with its accumulator memory share, {mac['pe_logic_um2_per_mac']:.0f} um2 "
                 f"logic only ({mac['macs']} MACs){cells}; Bit Fusion's fixed 8-bit PE: "
                 f"{lo:.0f}-{hi:.0f} um2 (45 nm); this flow's lone 8x8 multiplier: "
                 f"{mac['mul8x8_um2']:.0f} um2")
    c = rep.get("ceiling")                    # reports before the ceiling have none
    if not c:
        return "\n".join(lines)
    p = c["parts_um2"]
    lines.append(f"ceiling of any nibble-lane array (45 nm estimate; lone parts: lane "
                 f"multiplier {p['mul']:.0f}, weights {p['weights']:.0f}, column tree "
                 f"{p['tree']:.0f} and adder "
                 f"{p['acc_add']:.0f} um2; no selection, shift or control): PE area "
                 f"{c['pe_area_um2']:.0f} um2, TPA PE {c['tpa_pe_at_ideal']:.2f} at the ideal "
                 f"x{c['ideal_vs_dense']:.2f}, {c['tpa_pe_at_85pct']:.2f} at 85 % of it")
    return "\n".join(lines)
