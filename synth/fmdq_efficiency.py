"""FMDQ's row of ``dstar bench efficiency``: the FMDQ linear datapath (``hw.fmdq.linear``,
``FmdqLinear``) over the bundled DiT's run, its cycles and its area per part (issue 28 part 4).

Geometry: the configuration's ``FmdqLinear`` (``hw.fmdq.geometry.FmdqGeometry``): ``n_arrays``
arrays of ``token_tile`` x ``m_tile`` SIMD-4 PEs, one quantization unit, the sort window and
the arrays' weight window ``sort_window``. A SIMD-4 PE does one 8-bit activation's work per
cycle, as one INT8 MAC, so the peak INT8 throughput equals the lean INT8 datapath's (``group /
2`` lanes x ``m_tile`` columns per array) when ``token_tile = group / 2`` (``geometry``'s
``equal_peak``).

Cycles (``run_cycles``): every linear layer of every DiT block over the run, FMDQ-encoded with
the configuration's ``token_tile`` (``golden.difflinear``, the closed loop): ``cycles``, the
``FmdqLinear`` runs' own (``sim.fmdq_cycles.linear_cycles``, exact against its RTL: window
after window, the window's encode, overlapping the previous window's replay over every column
block, two banks of groups). Two parts for design-space figures: ``encode``, the quantization
unit's steady state over every unit (a unit takes its ``min(W, K - jW)`` beats or its groups,
whichever is more), and ``replay``, the arrays over every column block without the encode
(``sim.fmdq_cycles.layer_cycles``): ``replay`` alone is the arrays' time if the encode were
entirely hidden (``cycles`` still pays the first window's encode and each encode that outlasts
the previous window's replay).

Area per part (CMOS flow, 45 nm estimate, ``dstar.synth.flows``; ``FmdqLinear(cfg)`` from one
Verilog file, ``areas``): ``pe_logic``, ``weight_window`` (its 4-port SRAM), ``y_memory``: the
first PE array synthesized alone, times ``n_arrays``; ``quant_unit``: the unit synthesized alone
(its code buffer as SRAM when deep enough); the layer with both blackboxed gives
``group_memory`` (its two banks: a window's groups, replayed per column block while the next
window's are written), ``weight_memories`` (the layer's weights, as the INT8 datapath's
sequencer holds them) and ``control`` (the rest of its logic). The targets and the differential
state have no memory: a step streams them in and the new state out (``FmdqLinear``; the INT8
datapath keeps its INT8 targets in a memory, part of its sequencer's area). ``pe_area_um2``
(PE-array level) = PE logic + weight window + ``Y``; ``datapath_area_um2`` = every part.

Cached in ``build/efficiency`` (cycles per configuration and steps, areas per configuration
and digest of the RTL's sources, ``dstar.hw.sources``).

``estimate``: the same parts without synthesis (memories by ``flows.sram_cost`` from
``FmdqGeometry``, the PE logic from the per-part fit, the quantization unit from ``QU_MODEL``),
for design-space figures (docs/design/fmdq-hw.md), never for the results page.
"""

import hashlib
import json
import time

from dstar.config import Config, Encoding
from dstar.paths import build_dir

__all__ = ["PARTS", "PE_PARTS", "QU_MODEL", "PE_FIT", "geometry", "fmdq_config", "run_cycles",
           "areas", "row", "quant_unit_estimate", "estimate", "int8_estimate"]

#: Area parts of the FMDQ linear datapath, in report order.
PARTS = ("pe_logic", "weight_window", "y_memory", "quant_unit", "group_memory",
         "weight_memories", "control")
#: The parts of the PE-array level.
PE_PARTS = PARTS[:3]


def fmdq_config(base: Config) -> Config:
    return base.replace(encoding=Encoding.FMDQ)


def geometry(cfg: Config) -> dict:
    """``tokens`` T, ``columns`` M, ``window``, ``n_arrays``, ``macs`` per array and
    ``equal_peak`` (module docstring)."""
    t, m = cfg.token_tile, cfg.m_tile
    return {"tokens": t, "columns": m, "window": cfg.sort_window, "n_arrays": cfg.n_arrays,
            "macs": t * m, "equal_peak": t * m == cfg.group // 2 * m}


def _key(cfg: Config, *extra) -> str:
    text = json.dumps([cfg.hardware(), cfg.run_params(), *extra], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_cycles(base: Config, steps: int, layers=None) -> dict:
    """FMDQ's cycles over the run (module docstring): ``cycles``, ``encode``, ``replay``, the
    groups, the mean width; cached per configuration, steps and layers."""
    import numpy as np

    from dstar.golden.difflinear import DiffLinear
    from dstar.sim.bench import all_layers
    from dstar.sim.fmdq_cycles import layer_cycles, linear_cycles, unit_table
    from dstar.sim.traces import linear_inputs
    cfg = fmdq_config(base)
    geo = geometry(cfg)
    layers = all_layers() if layers is None else layers
    cache = build_dir("efficiency", "cycles", f"fmdq-{_key(cfg, steps, layers, 4)}.json")
    if cache.is_file():
        return json.loads(cache.read_text())
    win = geo["window"]
    out = {"cycles": 0, "encode": 0, "replay": 0, "groups": 0, "dense_groups": 0,
           "width_bits": 0, "layer_steps": 0}
    block = geo["columns"] * geo["n_arrays"]
    for layer in layers:
        xs, w, b = linear_inputs(layer, steps=steps)
        lin = DiffLinear(w, b, cfg, layer)
        k, m_out = w.shape[1], w.shape[0]
        beats = np.array([min(win, k - c) for c in range(0, k, win)])[:, None]
        for s in range(len(xs)):
            enc = lin(xs[s], s).enc
            g = unit_table(enc, win)[0]
            g[0] = np.maximum(g[0], 1)          # a tile's first window issues a group
            out["encode"] += int(np.maximum(beats, g).sum())
            out["replay"] += layer_cycles(enc, win, m_out, geo["columns"], geo["n_arrays"])
            out["cycles"] += linear_cycles(enc, win, -(-m_out // block))["cycles"]
            out["groups"] += int(g.sum())
            out["dense_groups"] += int(enc.width.size)
            out["width_bits"] += int(enc.width.sum())
            out["layer_steps"] += 1
    out["mean_width_bits"] = round(out["width_bits"] / max(1, out["dense_groups"]), 3)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def _synth_linear(cfg: Config, target: str) -> dict:
    """``FmdqLinear(cfg)`` (``hw.fmdq.linear``) synthesized for ``target`` in three runs from
    one Verilog file: its quantization unit and its first PE array alone, and the layer with
    both blackboxed (its control and the memories it owns)."""
    from amaranth.back import verilog

    from dstar.hw.fmdq.linear import FmdqLinear
    from dstar.hw.sources import source_digest

    from .flows import synth_module, verilog_modules
    top = "fmdq_linear"
    d = build_dir("efficiency", "fmdq", f"linear-{_key(cfg, source_digest())}")
    d.mkdir(parents=True, exist_ok=True)
    v = d / f"{top}.v"
    if not v.exists():
        v.write_text(verilog.convert(FmdqLinear(cfg), name=top))
    mods = verilog_modules(v)
    qu = next(m for m in mods if m == f"{top}.qu")
    arrays = [m for m in mods if m.startswith(f"{top}.array_") and m.count(".") == 1]
    sub = d / target
    return {"quant_unit": synth_module(v, qu, target, sub / "qu", reuse=True),
            "array": synth_module(v, arrays[0], target, sub / "array", reuse=True),
            "rest": synth_module(v, top, target, sub / "rest", blackbox=(qu, *arrays),
                                 reuse=True)}


def _parts(r: dict, n_arrays: int, key: str) -> dict:
    """``PARTS`` of one target's ``_synth_linear`` results; ``key``: its area key
    (``area_um2_45nm`` for the CMOS estimate, ``area_um2`` for standard cells)."""
    arr, rest, qu = r["array"], r["rest"], r["quant_unit"]

    def sram(res, prefix):          # the memories whose name starts with ``prefix``
        return sum(mem[key] for mem in res["memories"] if mem["name"].startswith(prefix))
    parts = {"pe_logic": n_arrays * arr[key + "_logic"],
             "weight_window": n_arrays * sram(arr, "wmem"), "y_memory": n_arrays * sram(arr, "y"),
             "quant_unit": qu[key], "group_memory": sram(rest, "groups"),
             "weight_memories": sram(rest, "weights"), "control": rest[key + "_logic"]}
    other = arr[key + "_sram"] - (parts["weight_window"] + parts["y_memory"]) / n_arrays
    assert abs(other) < 1 and abs(rest[key + "_sram"] - sum(
        parts[k] for k in ("group_memory", "weight_memories"))) < 1, \
        "every memory of the FMDQ layer has its part"
    return {k: round(v, 1) for k, v in parts.items()}


def areas(base: Config, area: str | None = None) -> dict:
    """The FMDQ linear datapath's area per part (``PARTS``, um^2, module docstring), and with
    ``area`` (a standard-cell target) the same from its cells under ``asic``; cached per
    configuration and target."""
    from dstar.hw.fmdq.geometry import FmdqGeometry

    from .flows import SynthTarget
    cfg = fmdq_config(base)
    geo = geometry(cfg)
    from dstar.hw.sources import source_digest
    cache = build_dir("efficiency", "fmdq", f"area-{_key(cfg, area, source_digest())}.json")
    if cache.is_file():
        return json.loads(cache.read_text())
    t0 = time.monotonic()
    r = _synth_linear(cfg, SynthTarget.CMOS)
    na, arr, qu = geo["n_arrays"], r["array"], r["quant_unit"]
    out = {"geometry": geo, "fmdq_geometry": FmdqGeometry(cfg).to_dict(),
           "parts_um2": _parts(r, na, "area_um2_45nm"),
           "quant_unit": {"ffs": qu["ffs"],
                          "logic_um2": qu["area_um2_45nm_logic"],
                          "code_buffer_sram_um2": qu["area_um2_45nm_sram"]},
           "array_ffs": arr["ffs"]}
    if area:
        out["asic"] = {"target": area,
                       "parts_um2": _parts(_synth_linear(cfg, area), na, "area_um2")}
    out["seconds"] = round(time.monotonic() - t0, 1)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def row(base: Config, steps: int, ref: dict, layers=None, area: str | None = None) -> dict:
    """FMDQ's report row against the baseline's ``ref`` row (``cycles``, ``pe_area_um2``,
    ``datapath_area_um2``): cycles (and the replay alone), areas per part, throughput per area
    at both levels, and the speed-up at the baseline's datapath area (arrays added or removed
    in proportion, the other parts kept: a first-order estimate); with ``area`` and the
    baseline's ``asic`` figures, the same on that target's cells under ``asic``."""
    c = run_cycles(base, steps, layers)
    a = areas(base, area if ref.get("asic") else None)
    p = a["parts_um2"]
    pe = sum(p[k] for k in PE_PARTS)
    dp = sum(p.values())
    sp = ref["cycles"] / c["cycles"]
    out = {"cycles": c["cycles"], "speedup_vs_dense": round(sp, 4),
           "pe_area_um2": round(pe, 1), "datapath_area_um2": round(dp, 1),
           "tpa_pe_vs_dense": round(sp * ref["pe_area_um2"] / pe, 4),
           "tpa_datapath_vs_dense": round(sp * ref["datapath_area_um2"] / dp, 4),
           "speedup_at_equal_area": round(
               sp * max(0.0, ref["datapath_area_um2"] - (dp - pe)) / pe, 4),
           "replay_cycles": c["replay"], "encode_cycles": c["encode"],
           "speedup_replay_only": round(ref["cycles"] / c["replay"], 4),
           "parts_um2": p, "geometry": a["geometry"], "quant_unit": a["quant_unit"],
           "mean_width_bits": c["mean_width_bits"], "layer_steps": c["layer_steps"]}
    if "asic" in a:
        x, rx = a["asic"]["parts_um2"], ref["asic"]
        x_pe, x_dp = sum(x[k] for k in PE_PARTS), sum(x.values())
        out["asic"] = {"target": a["asic"]["target"], "pe_area_um2": round(x_pe, 1),
                       "datapath_area_um2": round(x_dp, 1),
                       "tpa_pe_vs_dense": round(sp * rx["pe_area_um2"] / x_pe, 4),
                       "tpa_datapath_vs_dense": round(sp * rx["datapath_area_um2"] / x_dp, 4),
                       "blocks_um2": x}
    return out


#: Cost model of the quantization unit (um^2, CMOS flow) for ``estimate``, from the units
#: measured with bitonic networks (docs/design/data/fmdq_qu_area.json, commit f640609): a
#: network flip-flop with its enable (tiny against tiny_r3: 15,089 um^2 for 2,269 flip-flops),
#: a comparator per entry bit (the mid network alone less its flip-flops at that rate, over
#: 576 comparators of 9 bits), the share of the network alone left inside the unit (its
#: constant channel fields fold) and the unit's other logic (both from the mid unit, the
#: split between them assumed).
#: The bucket ordering stage (``SortNetwork.BUCKET``, no network): its flip-flops at the same
#: rate, its other logic per mask bit (window x levels: the stage alone less its flip-flops,
#: 2.8 and 2.85 um^2 at tiny and at T = 8, window 32) and the unit's other logic beside it
#: (the T = 8, window 32 unit's logic less its stage alone: 10,191 um^2; docs/design/fmdq-qu.md).
QU_MODEL = {"ff": 6.65, "comparator_bit": 5.6, "inside": 0.8, "rest_logic": 20000.0,
            "bucket_bit": 2.85, "bucket_rest_logic": 10200.0}
#: The FMDQ PE array's per-part fit at window 32 (docs/design/fmdq-hw.md, um^2 of logic).
PE_FIT = {"pe": 1019.5, "column": 797.9, "token": 12.3, "array": 463.0}


def quant_unit_estimate(cfg: Config, reg_every: int, kind=None) -> dict:
    """The quantization unit of ``FmdqLinear(cfg)`` by ``QU_MODEL`` (not synthesized): its
    ordering stage ``kind`` (``SortNetwork``, the unit's ``DEFAULT_ORDER`` by default): a sort
    network's flip-flops and comparators (``network_alone_um2``) or the bucket stage's
    flip-flops and mask bits (there ``comparators`` is 0), the rest and the code buffer's
    SRAM."""
    from dstar.golden.fmdq import MAX_SLICES, SLICE_BITS
    from dstar.hw.fmdq.geometry import FmdqGeometry
    from dstar.hw.fmdq.layouts import total_shift_bits
    from dstar.hw.fmdq.quant_unit import DEFAULT_ORDER, default_buffers
    from dstar.hw.fmdq.sorter import SortNetwork, network, register_stages
    from dstar.hw.geometry import uwidth

    from .flows import sram_cost
    geo = FmdqGeometry(cfg)
    w, t = geo.window, geo.tokens
    n = w * MAX_SLICES
    kind = DEFAULT_ORDER if kind is None else SortNetwork(kind)
    if not kind.is_network:
        # A FIFO slot per code buffer and the working copy, each a window's masks and its tag.
        buffers = default_buffers(w, 1, 1)
        levels = cfg.e_max + SLICE_BITS * (MAX_SLICES - 1) + 1
        ffs = (buffers + 1) * (w * levels + uwidth(buffers) + geo.channel_bits)
        net = QU_MODEL["ff"] * ffs + QU_MODEL["bucket_bit"] * w * levels
        code = sram_cost({"depth": buffers * w, "width": t * 8 + 6,
                          "read_ports": 4})["area_um2_45nm"]
        total = net + QU_MODEL["bucket_rest_logic"] + code
        return {"network_ffs": ffs, "comparators": 0, "network_alone_um2": round(net, 1),
                "code_buffer_um2": code, "unit_um2": round(total, 1)}
    bits = uwidth(w) + total_shift_bits(cfg.e_max) + 1
    regs = register_stages(n, reg_every, MAX_SLICES)
    buffers = default_buffers(w, 1, regs)
    ffs = regs * (n * bits + uwidth(buffers) + geo.channel_bits + 1)
    comps = sum(map(len, network(kind, n, MAX_SLICES)))
    net = QU_MODEL["ff"] * ffs + QU_MODEL["comparator_bit"] * comps * bits
    code = sram_cost({"depth": buffers * w, "width": t * 8 + 6,
                      "read_ports": 4})["area_um2_45nm"]
    total = QU_MODEL["inside"] * net + QU_MODEL["rest_logic"] + code
    return {"network_ffs": ffs, "comparators": comps, "network_alone_um2": round(net, 1),
            "code_buffer_um2": code, "unit_um2": round(total, 1)}


def estimate(base: Config, reg_every: int = 1, control_um2: float = 0.0, kind=None) -> dict:
    """``areas``' parts without synthesis: the PE logic from ``PE_FIT``, the unit from
    ``quant_unit_estimate``, every memory from ``FmdqGeometry`` by ``flows.sram_cost``,
    ``control`` as given (a stand-in)."""
    from dstar.hw.fmdq.geometry import FmdqGeometry
    from dstar.hw.fmdq.layouts import slice_group_layout
    from dstar.hw.geometry import uwidth

    from .flows import sram_cost
    cfg = fmdq_config(base)
    geo = FmdqGeometry(cfg)
    t, m, na = geo.tokens, geo.columns, cfg.n_arrays

    def sram(depth, width, ports=1):
        return sram_cost({"depth": depth, "width": width, "read_ports": ports})["area_um2_45nm"]
    entry = (slice_group_layout(t, geo.channel_bits, cfg.e_max).size
             + uwidth(geo.n_tiles_max) + uwidth(geo.n_win_max))
    parts = {
        "pe_logic": na * (t * m * PE_FIT["pe"] + m * PE_FIT["column"] + t * PE_FIT["token"]
                          + PE_FIT["array"]),
        "weight_window": na * sram(2 * geo.window, 8 * m, 4),
        "y_memory": na * sram(geo.y_depth, geo.y_bits * m),
        "quant_unit": quant_unit_estimate(cfg, reg_every, kind)["unit_um2"],
        "group_memory": sram(geo.group_depth, entry),
        "weight_memories": na * sram(geo.weight_depth, 8 * m),
        "control": control_um2}
    return {k: round(v, 1) for k, v in parts.items()}


def int8_estimate(base: Config, pe_logic_um2: float, control_um2: float) -> dict:
    """The lean INT8 datapath's parts for ``estimate``'s comparison: its arrays' logic as
    measured (``pe_logic_um2``), its memories from ``DenseGeometry`` by ``flows.sram_cost``
    (``Y``, the weights and the INT8 targets, which it keeps on chip and reads once per column
    block), ``control`` as given."""
    from dstar.config import Datapath
    from dstar.hw.geometry import DenseGeometry

    from .flows import sram_cost
    cfg = base.replace(datapath=Datapath.INT8)
    dg = DenseGeometry(cfg)
    g, na, m = dg.base, cfg.n_arrays, cfg.m_tile

    def sram(depth, width):
        return sram_cost({"depth": depth, "width": width, "read_ports": 1})["area_um2_45nm"]
    parts = {"pe_logic": pe_logic_um2, "y_memory": na * sram(g.y_depth, dg.acc_bits * m),
             "weight_memories": na * sram(g.weight_depth, 8 * m),
             "target_memory": sram(g.row_depth, 8 * cfg.k_tile), "control": control_um2}
    return {k: round(v, 1) for k, v in parts.items()}
