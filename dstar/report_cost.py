"""The roofline cost of one model's sampling run on one design (``dstar report``).

Per operation and step: compute time = the design's work ``w`` x dense INT8 cycles on the
machine (``dense_cycles``: tiles of ``cols`` tokens x ``rows`` outputs spread over the cores,
``k`` cycles each) / clock, times the design's PE area ratio at equal area; memory time = DRAM
bytes / HBM bandwidth; the operation costs the larger (``max(compute, memory)``). DRAM bytes:

* ``weights``: INT8 ``k x n`` per linear per step (the CFG branches share one read);
* ``state``: differential designs' ``X_{t-1}`` (``x_bits``) and ``Y_{t-1}`` (``y_bits``) of every
  linear but the modulation, per branch: written on the first step, read and written after;
* ``cache``: attention reuse caches (SAR's kept probabilities, 8 bits, written on cache steps and
  read on reuse steps; v1's residual, 16 bits per output value; EXION's FFN mask, a bit per
  fc1 output);
* ``act``: activations that spill: a linear's input and output (a differential linear's output
  is its ``Y`` state's write) when they do not fit the
  scratchpad, attention's Q, K, V and O (flash-style: scores stay on chip).

Step-invariant operations (cross-attention K/V of the text) run on the first step only.
Energy (pJ at 45 nm for logic and SRAM, scaled to the machine's node; DRAM unscaled): compute
(the design's per-MAC energy), encoding (``qpu_element`` per input value of a differential
linear), vector unit (softmax, GELU, norms; not on the critical path: overlapped with the
arrays, ours), SRAM (operand feed: 1/32 byte per dense MAC of work, a 64 x 64 tile reading 64
activations and 64 weights per cycle; and every DRAM byte written and read once on chip) and
DRAM (``hbm_bit``).
"""

import math
from collections import Counter

from dstar.golden.dit_models import operations
from dstar.golden.schedule import is_key_step

from .report_designs import (
    DESIGNS,
    EXION_FFN_INTERVAL,
    AttentionKind,
    DesignName,
    attention_work,
    linear_work,
)
from .report_energy import NODE_ENERGY, VPU_OPS, area_per_mac, value
from .report_mix import phase_of

__all__ = ["dense_cycles", "run_model", "TIME_PARTS", "ENERGY_PARTS", "step_contexts",
           "peak_macs_per_cycle"]

TIME_PARTS = ("compute", "weights", "state", "cache", "act")
ENERGY_PARTS = ("compute", "weights", "state", "cache", "act", "sram", "vpu", "qpu")


def dense_cycles(machine, rows: int, k: int, n: int, inst: int) -> int:
    """Dense INT8 cycles of ``inst`` GEMMs ``(rows, k) x (k, n)`` on the machine."""
    units = inst * math.ceil(rows / machine.cols) * math.ceil(n / machine.rows)
    return math.ceil(units / machine.cores) * k


def peak_macs_per_cycle(design: str, machine, equal_area: bool = False) -> float:
    """A design's peak 8-bit MACs per cycle: the machine's (equal TOPS), or the INT8 array's
    PE area's worth of the design's PEs (equal area)."""
    area = area_per_mac(design) if equal_area else 1.0
    return machine.macs_per_cycle / area


def step_contexts(steps: int, refresh_attn: int) -> Counter:
    """``{(phase, attention key step, EXION dense FFN step, first step): count}`` over a run."""
    out = Counter()
    for i in range(steps):
        key = is_key_step(i, refresh_attn)
        out[(phase_of(i, steps), key, i % EXION_FFN_INTERVAL == 0, i == 0)] += 1
    return out


def _linear(design, op, ctx, mix, m, b, dense=False):
    phase, _key, ffn_dense, first = ctx
    w, e, diff = linear_work(design, op.layer_type, phase, mix, first=first,
                             ffn_dense=ffn_dense, dense=dense)
    if DESIGNS[design].attention is AttentionKind.SAR and not _key and op.layer_type == "qkv":
        w, e = (0.0, 0.0) if op.name.endswith("xq") else (w / 3, e / 3)   # no Q, K
    cyc = dense_cycles(m, b * op.m, op.k, op.n, op.count) * w
    act_b = m.act_bits / 8
    spill = b * op.m * (op.k + op.n) * act_b > m.sram_kb * 1024
    by = {"weights": op.k * op.n * op.count,
          "act": b * op.count * op.m * (op.k + op.n) * act_b if spill else 0.0,
          "state": 0.0, "cache": 0.0}
    if diff:                    # the output is the Y state's write: no separate write
        by["act"] = b * op.count * op.m * op.k * act_b if spill else 0.0
        xy = b * op.count * op.m * (op.k * m.x_bits + op.n * m.y_bits) / 8
        by["state"] = xy if first else 2 * xy
    if design == DesignName.EXION_LIKE and op.layer_type == "fc1":
        by["cache"] = b * op.count * op.m * op.n / 8
    macs = b * op.m * op.k * op.n * op.count
    en = {"compute": macs * e, "qpu": b * op.count * op.m * op.k * value("qpu_element")
          if diff else 0.0,
          "vpu": _vpu_linear(op, b), "sram_feed": macs * w / 32}
    return cyc, by, en


def _vpu_linear(op, b) -> float:
    ops = 0
    if op.layer_type == "fc1":
        ops += VPU_OPS["gelu"] * op.m * op.n
    if op.layer_type in ("qkv", "fc1") and not op.invariant:
        ops += VPU_OPS["norm"] * op.m * op.k
    return b * op.count * ops * value("vpu_op")


def _attention(design, op, ctx, mix, m, b):
    key = ctx[1]
    w, soft = attention_work(design, op.kind, key, mix)
    inst = b * op.count
    cyc = dense_cycles(m, op.m, op.k, op.n, inst) * w
    act_b = m.act_bits / 8
    moved = (op.m * op.k + op.n * op.k) if op.kind == "qk" else (op.k * op.n + op.m * op.n)
    by = {"weights": 0.0, "state": 0.0, "cache": 0.0,
          "act": inst * moved * act_b if w > 0 else 0.0}
    att = DESIGNS[design].attention
    if att is AttentionKind.SAR and op.kind == "qk":
        by["cache"] = inst * op.m * op.n * mix.mask_fraction()       # 8-bit probabilities
    elif att is AttentionKind.V1 and op.kind == "pv":
        by["cache"] = inst * op.m * op.n * 2                         # residual, 16 bits
    macs = inst * op.m * op.k * op.n
    e_mac = value("simd4_cycle") if design == DesignName.FMDQ else value("mac_int8")
    en = {"compute": macs * w * e_mac, "qpu": 0.0, "sram_feed": macs * w / 32,
          "vpu": inst * op.m * op.n * soft * VPU_OPS["softmax"] * value("vpu_op")
          if op.kind == "qk" else 0.0}
    return cyc, by, en


def _op_cost(design, op, ctx, mix, m, b, area):
    if op.kind == "linear":
        best = _linear(design, op, ctx, mix, m, b)
        if design == DesignName.DITTO_LIKE and op.layer_type != "adaln":      # Defo
            alt = _linear(design, op, ctx, mix, m, b, dense=True)
            if _time(alt, m, area) < _time(best, m, area):
                best = alt
        return best
    return _attention(design, op, ctx, mix, m, b)


def _time(cost, m, area) -> float:
    cyc, by, _ = cost
    return max(cyc * area / (m.ghz * 1e9), sum(by.values()) / (m.hbm_tbs * 1e12))


def run_model(shape, design: str, mix, machine, *, equal_area: bool = False) -> dict:
    """Latency (s), energy (J) and their breakdowns of ``shape``'s whole sampling run."""
    area = machine.macs_per_cycle / peak_macs_per_cycle(design, machine, equal_area)
    node = NODE_ENERGY[machine.node_nm].value
    bw = machine.hbm_tbs * 1e12
    ops = operations(shape)
    t_parts = dict.fromkeys(TIME_PARTS, 0.0)
    e_parts = dict.fromkeys(ENERGY_PARTS, 0.0)
    work = {"dense_cycles": 0.0, "cycles": 0.0}
    logic45 = 0.0                  # logic and SRAM energy before node scaling (pJ)
    for ctx, count in step_contexts(shape.steps, mix.refresh_attn()).items():
        for op in ops:
            if op.invariant and not ctx[3]:
                continue
            cyc, by, en = _op_cost(design, op, ctx, mix, machine, shape.branches, area)
            tc = cyc * area / (machine.ghz * 1e9)
            tm = sum(by.values()) / bw
            if tc >= tm:
                t_parts["compute"] += count * tc
            else:
                for k, v in by.items():
                    t_parts[k] += count * v / bw
            for k, v in by.items():
                e_parts[k] += count * v * 8 * value("hbm_bit")
            dram = sum(by.values())
            sram = count * (en["sram_feed"] + 2 * dram) * 8 * value("sram_bit")
            e_parts["sram"] += sram * node
            logic45 += sram + count * sum(en[k] for k in ("compute", "vpu", "qpu"))
            for k in ("compute", "vpu", "qpu"):
                e_parts[k] += count * en[k] * node
            work["cycles"] += count * cyc * area
    lat = sum(t_parts.values())
    energy = sum(e_parts.values()) * 1e-12
    dram = sum(e_parts[k] for k in ("weights", "state", "cache", "act"))
    return {"latency_s": lat, "energy_j": energy, "energy_45nm_j": (logic45 + dram) * 1e-12,
            "time_s": t_parts,
            "energy_parts_j": {k: v * 1e-12 for k, v in e_parts.items()},
            "array_cycles": work["cycles"]}
