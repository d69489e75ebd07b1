"""Constrained-random regression of the accelerator top (``dstar.v``) of either encoding: cases
of linear and attention steps, refused commands and stream patterns, each checked bit for bit
against the golden model (v1, ``encoding = "nibble"``: ``golden.difflinear.encode_step`` with
``golden.quant.exact_matmul``, as the hardware tests' golden step; FMDQ, the default:
``golden.fmdq_pe.linear_step``, its steps built and driven by ``sim.fmdq_regress``; attention
through ``dstar.golden.host.GoldenEngine``) and the cycle models (``sim.cycle_model`` or
``sim.fmdq_cycles.linear_cycles``, ``sim.attention_cycles``), with functional coverage
(``sim.coverage``).

A case is a script on a freshly reset design, drawn from ``(seed, index)`` alone
(``make_case``): the same seed gives the same cases, and case ``i`` can be rerun by itself. It
holds one or two linear layers (shapes within the manifest's limits, weights somewhere in the
weight memory, a key step and delta steps from targets that drift, stay, jump, saturate, sit at
the extremes or beyond ``target_max``, state and ``Y`` kept on chip, restored, or a random
consistent state; FMDQ's: ``sim.fmdq_regress``) and attention heads (random, sink-dominated,
extreme or flat logits, key and reuse steps at a random ``theta`` and ``refresh``, heads sharing
a slot saved and restored, ``CLEAR_SLOTS``), interleaved, with refused commands (every reason
the top has, also between a step's loads and its run: a refused command that did anything shows
in that step's results), ``NOP``, ``ACK_ERROR`` and a stream profile (idle cycles before
commands, ``din`` gaps, ``din`` offered before its ``LOAD`` is taken, ``dout`` stalls, a command
offered while a run is busy; FMDQ's runs stream their own ``din`` and ``dout`` too).
Every step's integers and counters are compared; ``commands``, ``errors`` and
``target_clipped`` are predicted from the script; the ``error`` flag is checked after every
command.

``Driver`` runs a case through the ``(set, get, tick[, until])`` adapter of any simulator;
``run_cases`` runs many on one design (the cocotb testbench ``dstar.sim.tb_regress``);
``regress`` generates the top, compiles it for Verilator once and runs the testbench for a
number of cases or minutes, then writes the report (``report``).
"""

import json
import math
import os
import time

import numpy as np

from dstar.golden.attention import theta_fixed
from dstar.golden.difflinear import encode_step
from dstar.golden.encoder import HIGH, LOW, ZERO
from dstar.golden.quant import exact_matmul
from dstar.golden.softmax import logit_multiplier

from .accel_io import AttentionStep, LinearStep, command
from .attention_cycles import predict as predict_attention
from .coverage import OPCODES, Coverage, bin_names, is_fmdq, refusals
from .cycle_model import predict as predict_linear
from .host import GoldenEngine
from .layer_io import pack_named
from .tb_accelerator import ATTENTION_COUNTERS, LINEAR_COUNTERS

__all__ = ["make_case", "Driver", "run_cases", "regress", "report", "format_report",
           "case_seed", "inject_mismatch"]

#: Cycles a command, a ``din`` beat or a read may wait before the driver gives up (a hang).
MAX_WAIT = 200_000


def case_seed(seed: int, index: int) -> list[int]:
    """The seed sequence of case ``index`` of a run of ``seed`` (NumPy's ``default_rng``)."""
    return [int(seed), int(index)]


# ----- cases -----
def _geometry(cfg):
    from dstar.hw.geometry import AttentionGeometry

    return AttentionGeometry(cfg, shared=True).lin


def _pick(rng, options, p=None):
    return options[int(rng.choice(len(options), p=p))]


def _profile(rng) -> dict:
    """A case's stream pattern: probabilities of idle cycles before a command, a gap before a
    ``din`` beat, ``dout`` not ready in a cycle; ``din`` offered before its ``LOAD`` is taken;
    the command after a run offered while the run is busy."""
    return {"cmd_idle": _pick(rng, [0.0, 0.2, 0.6]), "din_gap": _pick(rng, [0.0, 0.1, 0.5]),
            "dout_stall": _pick(rng, [0.0, 0.3, 0.8]), "overlap": _pick(rng, [0.0, 0.5, 1.0]),
            "pipeline": _pick(rng, [0.0, 0.5, 1.0])}


def _targets(rng, cfg, prev, n, k, mode):
    """Raw targets (as loaded: 16-bit words, maybe beyond ``target_max``) of a step after
    ``prev`` (None on a first key step) in a data ``mode``."""
    tmax, top = cfg.target_max, (1 << (cfg.state_bits - 1)) - 1
    base = np.zeros((n, k), np.int64) if prev is None else prev
    if mode == "drift":
        scale = _pick(rng, [2.0, 30.0, 300.0, 3000.0, 20000.0])
        step = scale * (1.0 if prev is None else _pick(rng, [0.003, 0.03, 0.3]))
        t = base + np.rint(rng.standard_normal((n, k)) * step).astype(np.int64)
    elif mode == "same":
        t = base.copy()
    elif mode == "zero":
        t = np.zeros((n, k), np.int64)
    elif mode == "low":                               # codes in INT4 at shift 0
        t = base + rng.choice([-8, -5, -1, 1, 3, 7], size=(n, k))
    elif mode == "high":                              # INT8 codes at shift 0
        t = base + rng.choice([-128, -100, -9, 8, 50, 127], size=(n, k))
    elif mode == "shifted":                           # one shift per row, 0 .. e_max
        e = rng.integers(0, cfg.e_max + 1, size=(n, 1))
        t = base + (rng.integers(-127, 128, size=(n, k)) << e)
    elif mode == "sparse":                            # one busy channel per group
        t = base.copy()
        t[:, rng.integers(0, cfg.group)::cfg.group] += rng.choice([-3000, 700, 20000])
    elif mode == "mixed":                             # groups of some of ZERO, LOW, HIGH
        kinds = _pick(rng, [(0, 1), (0, 2), (1, 2), (0, 1, 2), (0, 1, 2)])
        width = np.array([0, 5, 100])[rng.choice(kinds, size=(n, k // cfg.group))]
        t = base + np.repeat(width, cfg.group, axis=1) * rng.choice([-1, 1], size=(n, k))
    elif mode == "extreme":
        t = rng.choice([-top - 1, -tmax, -128, 0, 127, tmax, top], size=(n, k))
    elif mode == "flip":                              # the largest jumps: saturated groups
        t = np.where(base == 0, tmax, -base)
    else:                                             # "beyond": clipped by the top
        t = rng.choice([-top - 1, -tmax - 1, -tmax, tmax, tmax + 1, top], size=(n, k))
        t = np.where(rng.random((n, k)) < 0.5, t, base)
    return np.clip(t, -top - 1, top)


_DATA_MODES = ("drift", "same", "zero", "low", "high", "mixed", "shifted", "sparse", "extreme",
               "flip", "beyond")
_DATA_P = (0.2, 0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.07, 0.07, 0.06)


def _data_bins(cfg, enc, target, xs_prev) -> list[str]:
    """The coverage bins the encoded step ``enc`` (of ``target`` from state ``xs_prev``)
    hits."""
    present = [c for c, x in ((ZERO, "Z"), (LOW, "L"), (HIGH, "H")) if (enc.cls == c).any()]
    names = {ZERO: "Z", LOW: "L", HIGH: "H"}
    out = ["data.mix." + "".join(names[c] for c in present)]
    cost = enc.group_cost
    if all((cost == c).any() for c in (0, 1, 2)):
        out.append("data.group_widths.all")
    out += [f"data.shift.{int(e)}" for e in np.unique(enc.shift)]
    if enc.clipped.any():
        out.append("data.clipped_groups")
    if enc.saturated.any():
        out.append("data.saturated_groups")
    if np.abs(target).max() > cfg.target_max:
        out.append("data.target_clipped")
    d = np.clip(target, -cfg.target_max, cfg.target_max) - xs_prev
    if cfg.tau > 0 and ((d != 0) & (np.abs(d) <= cfg.tau)).any():
        out.append("data.dead_zone")
    return out


def _layer_shapes(rng, cfg, lin, n_layers):
    """``n_layers`` (K, M, N) whose weights fit the weight memory together."""
    while True:
        shapes = []
        for _ in range(n_layers):
            k = cfg.group * int(rng.integers(1, cfg.max_k // cfg.group + 1))
            m = int(_pick(rng, [1, cfg.max_m, int(rng.integers(1, cfg.max_m + 1))]))
            n = int(_pick(rng, [1, cfg.max_tokens, int(rng.integers(1, cfg.max_tokens + 1))]))
            shapes.append((k, m, n))
        spans = [lin.n_kt(k) * lin.n_mt(m) * cfg.k_tile for k, m, _ in shapes]
        if sum(spans) <= lin.weight_depth:
            return shapes, spans


def _bases(rng, spans, depth):
    """Weight bases of layers of ``spans`` words in a memory of ``depth``: from 0, at the end,
    or anywhere, never overlapping."""
    free = depth - sum(spans)
    gaps = []
    for _ in spans:
        r = rng.random()
        g = 0 if r < 0.4 else free if r < 0.7 else int(rng.integers(0, free + 1))
        gaps.append(g)
        free -= g
    order = rng.permutation(len(spans))
    bases, at = [0] * len(spans), 0
    for i, g in zip(order, gaps, strict=True):
        bases[i] = at + g
        at += g + spans[i]
    return bases


def _weights(rng, k, m):
    if rng.random() < 0.15:
        return rng.choice([-127, -1, 0, 1, 127], size=(k, m))
    return rng.integers(-127, 128, size=(k, m))


def _head_data(rng, cfg, n, mode, prev=None):
    """An attention step's ``(q, k, v, m, sh)`` of ``n`` tokens (INT8 Q, K, V; the logit
    multipliers of a natural-log scale): ``random`` logits of a random size, a ``sink`` (the
    first keys share a direction most queries lean to: sparse masks), ``extreme`` (+-127
    everywhere), ``flat`` (K = 0: equal logits); a reuse step perturbs ``prev``."""
    dh = cfg.head_dim
    if prev is not None and rng.random() < 0.7:
        q, k, v = (np.clip(a + rng.integers(-6, 7, size=a.shape), -127, 127) for a in prev[:3])
        return q, k, v, prev[3], prev[4]
    q, k, v = (rng.integers(-127, 128, size=(n, dh)) for _ in range(3))
    std = _pick(rng, [0.3, 1.0, 4.0, 30.0])
    if mode == "sink":
        u = rng.choice([-127, 127], size=dh)
        sink = min(n, 4)
        k[:sink] = np.clip(u + rng.integers(-20, 21, size=(sink, dh)), -127, 127)
        q = np.clip(np.rint(0.6 * u + 0.4 * q), -127, 127).astype(np.int64)
    elif mode == "extreme":
        q, k, v = (rng.choice([-127, 127], size=(n, dh)) for _ in range(3))
    elif mode == "flat":
        k = np.zeros((n, dh), np.int64)
    scale = np.full(n, std / (127 ** 2 * math.sqrt(dh / 3))) * rng.uniform(0.5, 2.0, n)
    m, sh = logit_multiplier(scale, cfg.attn_frac_bits)
    return q, k, v, m, sh


def _refusal(rng, man, cfg, reason) -> tuple[int, str]:
    """A command the top must refuse for ``reason`` alone (``coverage.REFUSALS``) and which
    stream it would have used (``load``, ``read`` or ``run``)."""
    mems, lin = man["memories"], _geometry(cfg)
    depth = {name: mm["depth"] for name, mm in mems.items()}
    # (FMDQ's TARGET and STATE have no words: their LOAD and READ are ``stream_mem``.)
    writable = [n for n, mm in mems.items() if "w" in mm["access"] and mm["depth"]]
    readable = [n for n, mm in mems.items() if "r" in mm["access"] and mm["depth"]]
    lay = man["layouts"]["command"]
    fmdq = is_fmdq(cfg)

    def mem_cmd(op, mem, addr, count):
        mid = mems[mem]["id"] if isinstance(mem, str) else mem
        return pack_named({"op": man["opcodes"][op], "args.mem.mem": mid, "args.mem.addr": addr,
                           "args.mem.count": count}, lay)

    def lin_cmd(n_tokens=1, n_mt=1, w_base=0, **tiles):
        return command(man, "RUN_LINEAR", n_tokens=n_tokens, n_mt=n_mt,
                       key=int(rng.integers(0, 2)), w_base=w_base, **(tiles or {"n_kt": 1}))

    def att_cmd(slot=0, n_tokens=1):
        return command(man, "RUN_ATTENTION", slot=slot, n_tokens=n_tokens,
                       theta_q=theta_fixed(0.5), refresh=1)

    field = {f["name"]: f["width"] for f in lay["fields"]}
    if fmdq:
        from .fmdq_regress import refusal

        own = refusal(rng, man, cfg, reason, lin_cmd)
        if own is not None:
            return own
    if reason == "opcode":                 # junk in the argument bits too
        bits = max(f["offset"] + f["width"] for f in lay["fields"])
        junk = int(rng.integers(0, 1 << min(bits, 62))) & ~0xF
        return junk | int(rng.integers(len(OPCODES), 16)), "other"
    if reason in ("load_mem", "read_mem"):
        op = "LOAD" if reason == "load_mem" else "READ"
        ok = writable if op == "LOAD" else readable
        bad = [mm["id"] for n, mm in mems.items() if n not in ok] + list(range(len(mems), 16))
        return mem_cmd(op, int(_pick(rng, bad)), 0, 1), op.lower()
    if reason in ("range", "count0"):
        op = _pick(rng, ["LOAD", "READ"])
        mem = _pick(rng, writable if op == "LOAD" else readable)
        if reason == "count0":
            return mem_cmd(op, mem, int(rng.integers(0, depth[mem])), 0), op.lower()
        # (The address field holds the deepest memory's last address, not its depth.)
        addr = int(rng.integers(0, min(depth[mem], (1 << field["args.mem.addr"]) - 1) + 1))
        count = depth[mem] - addr + int(rng.integers(1, 4))
        return mem_cmd(op, mem, addr, count), op.lower()
    if reason == "lin_tokens":
        return lin_cmd(n_tokens=_pick(rng, [0, cfg.max_tokens + 1])), "run"
    if reason == "lin_tiles":
        if rng.random() < 0.5:
            return lin_cmd(n_kt=lin.n_kt_max + 1), "run"
        return lin_cmd(n_mt=lin.n_mt_max + 1), "run"
    if reason == "lin_weights":
        n_kt, n_mt = int(rng.integers(1, lin.n_kt_max + 1)), int(rng.integers(1, lin.n_mt_max + 1))
        span = n_kt * n_mt * cfg.k_tile
        top = min(lin.weight_depth, (1 << field["args.linear.w_base"]) - 1)    # the field's
        w_base = int(rng.integers(lin.weight_depth - span + 1, top + 1))
        return lin_cmd(n_kt=n_kt, n_mt=n_mt, w_base=w_base), "run"
    if reason == "att_tokens":
        return att_cmd(n_tokens=_pick(rng, [0, cfg.max_tokens + 1])), "run"
    return att_cmd(slot=int(rng.integers(cfg.attn_slots, 1 << field["args.attention.slot"]))), \
        "run"


def _refusals(rng, man, cfg, p) -> list:
    """Some refused commands (each ``(reason, word, stream)``), with probability ``p``."""
    out = []
    while rng.random() < p:
        reason = _pick(rng, refusals(cfg))
        out.append((reason, *_refusal(rng, man, cfg, reason)))
    return out


class _CaseBuilder:
    """The script of one case, its golden results computed as it is written."""

    def __init__(self, cfg, man, rng):
        self.cfg, self.man, self.rng = cfg, man, rng
        self.lin = _geometry(cfg)
        self.ops: list[dict] = []
        self.last = None              # the last step run: ("lin", layer) or ("att", head)

    def refusals(self, p) -> list:
        return _refusals(self.rng, self.man, self.cfg, p)

    def extras(self):
        """Between steps: refused commands, NOP, ACK_ERROR, CLEAR_SLOTS (the last handled by
        the caller, which knows the slots)."""
        rng = self.rng
        for reason, word, stream in _refusals(rng, self.man, self.cfg, 0.25):
            self.ops.append({"kind": "refuse", "reason": reason, "word": word,
                             "stream": stream})
        if rng.random() < 0.1:
            self.ops.append({"kind": "nop"})
        if rng.random() < 0.2:
            self.ops.append({"kind": "ack"})

    def linear(self, layer: dict):
        """Layer ``layer``'s next step (FMDQ: ``fmdq_regress.build_linear``)."""
        if is_fmdq(self.cfg):
            from .fmdq_regress import build_linear

            build_linear(self, layer)
            return
        cfg, rng = self.cfg, self.rng
        key = layer["xs"] is None or rng.random() < 0.15
        mode = _pick(rng, _DATA_MODES, p=_DATA_P)
        target = _targets(rng, cfg, layer["raw"], layer["n"], layer["k"], mode)
        clipped = np.clip(target, -cfg.target_max, cfg.target_max)
        op = {"kind": "linear", "layer": layer["id"], "key": key, "target": target,
              "k": layer["k"], "m": layer["m"], "n": layer["n"], "w_base": layer["base"],
              "w": None if layer["loaded"] else layer["w"], "state": None, "y": None,
              "refuse_mid": _refusals(rng, self.man, cfg, 0.3)}
        layer["loaded"] = True
        bins = [f"lin.n_kt.{self.lin.n_kt(layer['k'])}", f"lin.n_mt.{self.lin.n_mt(layer['m'])}",
                "lin.tokens." + ("1" if layer["n"] == 1 else
                                 "max" if layer["n"] == cfg.max_tokens else "mid")]
        if layer["m"] % self.man["attention_geometry"]["block_cols"]:
            bins.append("lin.m_partial")
        span = self.lin.n_kt(layer["k"]) * self.lin.n_mt(layer["m"]) * cfg.k_tile
        bins.append("lin.w_base." + ("0" if layer["base"] == 0 else "end"
                                     if layer["base"] + span == self.lin.weight_depth else "mid"))
        if key:
            xs, y = np.zeros_like(target), np.zeros((layer["n"], layer["m"]), np.int64)
            bins.append("lin.key")
        else:
            xs, y = layer["xs"], layer["y"]
            r = rng.random()
            if r < 0.15:                      # a random state, Y consistent with it
                xs = np.clip(clipped + rng.integers(-40000, 40001, size=clipped.shape),
                             -cfg.state_max, cfg.state_max)
                y = exact_matmul(xs, layer["w"])
                op["state"], op["y"] = xs, y
                bins.append("lin.delta_random_state")
            elif self.last != ("lin", layer["id"]) or r < 0.5:
                op["state"], op["y"] = xs, y
                bins.append("lin.delta_restored")
            else:
                bins.append("lin.delta_kept")
        enc, xs_new = encode_step(clipped, xs, cfg)
        y_new = y + exact_matmul(enc.decode(), layer["w"])
        rep = predict_linear(cfg, enc, layer["k"], layer["m"])
        op["exp"] = {"y": y_new, "xs": xs_new, "counters": list(rep.counters().values()),
                     "clipped": int((np.abs(target) > cfg.target_max).sum())}
        op["bins"] = bins + _data_bins(cfg, enc, target, xs)
        layer.update(xs=xs_new, y=y_new, raw=target)
        self.ops.append(op)
        self.last = ("lin", layer["id"])

    def attention(self, head: dict, golden, resident: dict, parked: set):
        """Head ``head``'s next step on its slot (saving the head that had the slot, restoring
        this one's state or starting it fresh)."""
        cfg, rng, slot = self.cfg, self.rng, head["slot"]
        data = _head_data(rng, cfg, head["n"], head["mode"], head["prev"])
        head["prev"] = data
        op = {"kind": "attention", "head": head["id"], "slot": slot, "n": head["n"],
              "data": data, "theta_q": theta_fixed(golden.cfg.theta),
              "refresh": golden.cfg.refresh_attn, "save": None, "restore": None,
              "read_state": bool(rng.random() < 0.4),
              "refuse_mid": _refusals(rng, self.man, cfg, 0.2)}
        bins = [f"att.slot.{slot}", f"att.refresh.{min(golden.cfg.refresh_attn, 3)}",
                "att.theta.1" if golden.cfg.theta == 1.0 else "att.theta.lt1"]
        owner = resident.get(slot)
        if owner != head["id"]:
            if owner is not None:
                op["save"] = (owner["id"], owner["n"])
                parked.add(owner["id"])
            if head["id"] in parked:
                op["restore"] = "parked"
                parked.discard(head["id"])
                bins.append("att.slot_swapped")
            elif owner is not None or rng.random() < 0.5:
                op["restore"] = "fresh"
            resident[slot] = head
        cleared = head.get("cleared", False)
        head["cleared"] = False
        o, key = _run_sync(golden.attention(head["id"], *data))
        st = golden.slots[head["id"]]
        picks = st["picks"] if key else None
        want = predict_attention(golden.cfg, head["n"], st["mask"], key, op["theta_q"], picks)
        op["exp"] = {"o": o, "key": key, "r": st["r"], "mask": st["mask"],
                     "counters": list(want.counters().values())}
        bins.append("att.key" if key else "att.reuse")
        if cleared and key:
            bins.append("att.clear_slots_key")
        if not key and not st["mask"].all():
            bins.append("att.mask_sparse")
        if op["read_state"]:
            bins.append("att.read_state")
        n, bq = head["n"], cfg.block_q
        bins.append("att.tokens." + ("1" if n == 1 else "one_block" if n <= bq else
                                     "max" if n == cfg.max_tokens else "mid"))
        op["bins"] = bins
        self.ops.append(op)
        self.last = ("att", head["id"])


def _run_sync(coro):
    from .host import run_sync

    return run_sync(coro)


def make_case(cfg, man: dict, seed: int, index: int) -> dict:
    """Case ``index`` of a run of ``seed`` on configuration ``cfg`` (manifest ``man``: the
    ``accelerator`` section): ``{"seed", "index", "profile", "ops"}``, each op a dict with its
    golden results (``exp``) and the coverage bins its data hits (``bins``). Deterministic."""
    rng = np.random.default_rng(case_seed(seed, index))
    b = _CaseBuilder(cfg, man, rng)
    n_layers, n_heads = _pick(rng, [(1, 0), (0, 1), (1, 1), (2, 0), (1, 2), (2, 1), (0, 2)])
    if is_fmdq(cfg):
        from . import fmdq_regress as fq

        shapes, spans = fq.layer_shapes(rng, cfg, n_layers) if n_layers else ([], [])
        depth, weights = fq._geometry(cfg).weight_depth, fq.weights
    else:
        shapes, spans = _layer_shapes(rng, cfg, b.lin, n_layers) if n_layers else ([], [])
        depth, weights = b.lin.weight_depth, _weights
    bases = _bases(rng, spans, depth)
    layers = [{"id": i, "k": k, "m": m, "n": n, "base": base, "w": weights(rng, k, m),
               "xs": None, "y": None, "raw": None, "loaded": False}
              for i, ((k, m, n), base) in enumerate(zip(shapes, bases, strict=True))]
    theta = float(_pick(rng, [1.0, 0.5, 0.9, float(rng.uniform(0.05, 1.0))]))
    golden = GoldenEngine(cfg.replace(theta=theta, refresh_attn=int(rng.integers(0, 4))))
    heads = []
    for h in range(n_heads):
        n = int(_pick(rng, [1, cfg.max_tokens, int(rng.integers(2, cfg.block_q + 1)),
                            int(rng.integers(1, cfg.max_tokens + 1))]))
        heads.append({"id": h, "n": n, "slot": int(rng.integers(0, cfg.attn_slots)),
                      "mode": _pick(rng, ["random", "sink", "sink", "extreme", "flat"]),
                      "prev": None})
    if n_heads == 2 and rng.random() < 0.5:
        heads[1]["slot"] = heads[0]["slot"]               # two heads take turns in a slot
    todo = [("lin", i) for i, _ in enumerate(layers) for _ in range(int(rng.integers(1, 4)))]
    todo += [("att", i) for i, _ in enumerate(heads) for _ in range(int(rng.integers(1, 5)))]
    order = rng.permutation(len(todo))
    resident, parked = {}, set()
    for j in order:
        kind, i = todo[j]
        b.extras()
        if kind == "lin":
            b.linear(layers[i])
        else:
            if rng.random() < 0.1:
                b.ops.append({"kind": "clear_slots"})
                for head in resident.values():
                    golden.slots.get(head["id"], {})["calls"] = 0
                    head["cleared"] = True
            b.attention(heads[i], golden, resident, parked)
    b.extras()
    return {"seed": int(seed), "index": int(index), "profile": _profile(rng), "ops": b.ops}


# ----- driving a case -----
class Driver:
    """Runs a case (``make_case``) on the design behind ``io`` (reset, its counters zero),
    records what it covers in ``cov`` and returns the differences (``run``)."""

    def __init__(self, io, man: dict, cfg, case: dict, cov: Coverage):
        self.io, self.man, self.cfg, self.case, self.cov = io, man, cfg, case, cov
        self.set, self.get, self.tick = io[0], io[1], io[2]
        self.until = getattr(io, "until", None)
        self.prof = case["profile"]
        self.rng = np.random.default_rng([*case_seed(case["seed"], case["index"]), 1])
        self.fails: list[str] = []
        self.commands = self.errors = self.clipped = 0
        self.error = 0
        self.parked: dict[int, dict] = {}
        self.where = ""

    def fail(self, what: str) -> None:
        self.fails.append(f"{self.where}: {what}")

    async def run(self) -> list[str]:
        for j, op in enumerate(self.case["ops"]):
            self.where = f"op {j} ({op['kind']})"
            await getattr(self, "_" + op["kind"])(op)
            if self.get("error") != self.error:
                self.fail(f"error flag {self.get('error')}, expected {self.error}")
        self.where = "end"
        await self.counters()
        return self.fails

    # -- streams --
    async def _wait(self, port: str) -> None:
        """Tick until ``port`` has read 1 before a tick (the handshake of a valid beat)."""
        if self.until is not None and not self.get(port):     # a simulator's trigger
            await self.until(port, MAX_WAIT)
            return
        for _ in range(MAX_WAIT):
            ready = self.get(port)
            await self.tick()
            if ready:
                return
        raise TimeoutError(f"{port} low for {MAX_WAIT} cycles")

    async def command(self, word: int, op: str | None = None) -> None:
        """Offer ``word`` on ``cmd`` (after idle cycles, maybe) until it is taken."""
        if self.rng.random() < self.prof["cmd_idle"]:
            self.cov.hit("stream.cmd_idle")
            for _ in range(int(self.rng.integers(1, 4))):
                await self.tick()
        self.set("cmd__payload", word)
        self.set("cmd__valid", 1)
        if not self.get("cmd__ready"):
            self.cov.hit("stream.cmd_backpressure")
        await self._wait("cmd__ready")
        self.set("cmd__valid", 0)
        self.commands += 1
        if op is not None:
            self.cov.hit(f"op.{op}")

    async def load(self, mem: str, words: dict[int, int]) -> None:
        """``LOAD`` of ``{address: word}``, one command per run of addresses; ``din`` beats
        with gaps, the first maybe offered before the command is taken."""
        for start, beats in _runs(words):
            early = self.rng.random() < self.prof["overlap"]
            if early:
                self.set("din__payload", beats[0])
                self.set("din__valid", 1)
            await self.command(command(self.man, "LOAD", mem=mem, addr=start,
                                       count=len(beats)), "LOAD")
            if early:
                self.cov.hit("stream.din_backpressure")      # offered while not ready
            for i, beat in enumerate(beats):
                if not (early and i == 0) and self.rng.random() < self.prof["din_gap"]:
                    self.set("din__valid", 0)
                    self.cov.hit("stream.din_gap")
                    for _ in range(int(self.rng.integers(1, 4))):
                        await self.tick()
                self.set("din__payload", beat)
                self.set("din__valid", 1)
                await self._wait("din__ready")
            self.set("din__valid", 0)
            self.cov.hit(f"load.{mem}")

    async def receive(self, n: int) -> list[int]:
        out = []
        for _ in range(MAX_WAIT):
            if len(out) == n:
                break
            ready = 0 if self.rng.random() < self.prof["dout_stall"] else 1
            self.set("dout__ready", ready)
            valid, payload = self.get("dout__valid"), self.get("dout__payload")
            if valid and not ready:
                self.cov.hit("stream.dout_backpressure")
            await self.tick()
            if valid and ready:
                out.append(payload)
        self.set("dout__ready", 0)
        if len(out) < n:
            raise TimeoutError(f"dout: {len(out)} of {n} words")
        return out

    async def read(self, mem: str, addrs) -> dict[int, int]:
        out = {}
        addrs = sorted(set(addrs))
        for start, beats in _runs({a: 0 for a in addrs}):
            await self.command(command(self.man, "READ", mem=mem, addr=start,
                                       count=len(beats)), "READ")
            for i, w in enumerate(await self.receive(len(beats))):
                out[start + i] = w
            self.cov.hit(f"read.{mem}")
        return out

    async def counters(self) -> dict[str, int]:
        """``READ_COUNTERS``; the top's own counters checked against the script's."""
        await self.command(command(self.man, "READ_COUNTERS"), "READ_COUNTERS")
        names = self.man["counters"]
        cnt = dict(zip(names, await self.receive(len(names)), strict=True))
        want = {"commands": self.commands, "errors": self.errors,
                "target_clipped": self.clipped}
        got = {k: cnt[k] for k in want}
        if got != want:
            self.fail(f"counters {got}, expected {want}")
        return cnt

    async def start(self, op: str, **args) -> None:
        """A run command; then, unless the next command is to wait on ``cmd`` while the run is
        busy, wait for ``done``."""
        if self.error:
            self.cov.hit("error.run_while_set")
        await self.command(command(self.man, op, **args), op)
        if self.get("error") != self.error:
            self.fail(f"{op} {args} refused")
            self.error = 1
            return
        if self.rng.random() >= self.prof["pipeline"]:
            await self._wait("done")

    # -- ops --
    async def _refuse(self, op) -> None:
        await self.command(op["word"])
        self.errors += 1
        self.error = 1
        if not self.get("error") or self.get("busy"):
            self.fail(f"{op['reason']} command {op['word']:#x} not refused "
                      f"(error {self.get('error')}, busy {self.get('busy')})")
        if op["stream"] == "load":                 # no beat may be taken
            self.set("din__valid", 1)
            for _ in range(2):
                if self.get("din__ready"):
                    self.fail("din ready after a refused LOAD")
                await self.tick()
            self.set("din__valid", 0)
        elif op["stream"] == "read":               # no word may come out
            self.set("dout__ready", 1)
            for _ in range(3):
                if self.get("dout__valid"):
                    self.fail("dout valid after a refused READ")
                await self.tick()
            self.set("dout__ready", 0)
        self.cov.hit(f"refuse.{op['reason']}")

    async def _nop(self, op) -> None:
        await self.command(command(self.man, "NOP"), "NOP")

    async def _ack(self, op) -> None:
        was = self.error
        await self.command(command(self.man, "ACK_ERROR"), "ACK_ERROR")
        self.error = 0
        if was and not self.get("error"):
            self.cov.hit("error.acked")

    async def _clear_slots(self, op) -> None:
        await self.command(command(self.man, "CLEAR_SLOTS"), "CLEAR_SLOTS")

    async def _linear(self, op) -> None:
        if is_fmdq(self.cfg):
            from .fmdq_regress import drive_linear

            await drive_linear(self, op)
            return
        step = LinearStep(self.man, op["k"], op["m"], op["n"])
        img = step.img
        if op["w"] is not None:
            await self.load("WEIGHTS", step.weight_words(op["w"], op["w_base"]))
        rows = img.row_words(op["target"], "target")
        await self.load("TARGET", rows)
        self.clipped += op["exp"]["clipped"]
        if op["state"] is not None:
            await self.load("STATE", img.row_words(op["state"], "state"))
            await self.load("Y", step.y_words(op["y"]))
        for r in op["refuse_mid"]:
            await self._refuse(dict(zip(("reason", "word", "stream"), r, strict=True)))
        await self.start("RUN_LINEAR", n_tokens=img.n, n_kt=img.n_kt, n_mt=img.n_mt,
                         key=int(op["key"]), w_base=op["w_base"])
        cnt = await self.counters()
        xs = img.rows_from(await self.read("STATE", rows), "state")
        y = step.y_from(await self.read("Y", img.y_addrs()))
        exp = op["exp"]
        if not np.array_equal(y, exp["y"]):
            self.fail(f"Y differs in {int((y != exp['y']).sum())} of {y.size} values")
        if not np.array_equal(xs, exp["xs"]):
            self.fail(f"state differs in {int((xs != exp['xs']).sum())} of {xs.size} values")
        got = [cnt[c] for c in LINEAR_COUNTERS]
        if got != exp["counters"]:
            self.fail(f"counters {dict(zip(LINEAR_COUNTERS, got, strict=True))}, cycle model "
                      f"{exp['counters']}")
        for name in op["bins"]:
            self.cov.hit(name)

    async def _attention(self, op) -> None:
        step, slot = AttentionStep(self.man, op["n"]), op["slot"]
        img = step.img
        if op["save"] is not None:
            head, n = op["save"]
            self.parked[head] = {mem: await self.read(mem, addrs) for mem, addrs in
                                 _slot_addrs(AttentionStep(self.man, n), slot).items()}
        if op["restore"] == "parked":
            for mem, words in self.parked.pop(op["head"]).items():
                await self.load(mem, words)
        elif op["restore"] == "fresh":
            await self.load("SLOT", {slot: step.slot_word(False, 0)})
        q, k, v, m, sh = op["data"]
        await self.load("Q", img.q_words(q))
        await self.load("KT", step.k_words(k))
        await self.load("V", step.v_words(v))
        await self.load("MS", img.ms_words(m, sh))
        for r in op["refuse_mid"]:
            await self._refuse(dict(zip(("reason", "word", "stream"), r, strict=True)))
        await self.start("RUN_ATTENTION", slot=slot, n_tokens=op["n"], theta_q=op["theta_q"],
                         refresh=op["refresh"])
        cnt = await self.counters()
        exp = op["exp"]
        o = img.rows_from(await self.read("O", img.o_addrs()), img.o_addrs(), "o_word")
        if not np.array_equal(o, exp["o"]):
            self.fail(f"O differs in {int((o != exp['o']).sum())} of {o.size} values")
        if bool(cnt["attention_key"]) != exp["key"]:
            self.fail(f"key step {bool(cnt['attention_key'])}, expected {exp['key']}")
        got = [cnt[c] for c in ATTENTION_COUNTERS]
        if got != exp["counters"]:
            self.fail(f"counters {dict(zip(ATTENTION_COUNTERS, got, strict=True))}, cycle "
                      f"model {exp['counters']}")
        if op["read_state"]:
            res = img.rows_from(await self.read("RES", img.res_addrs(slot)),
                                img.res_addrs(slot), "res_word")
            m_w = await self.read("MASK", step.mask_addrs(slot))
            nkb = exp["mask"].shape[1]
            mask = np.array([[(m_w[a] >> j) & 1 for j in range(nkb)]
                             for a in step.mask_addrs(slot)], dtype=bool)
            if not np.array_equal(res, exp["r"]):
                self.fail(f"residual differs in {int((res != exp['r']).sum())} values")
            if not np.array_equal(mask, exp["mask"]):
                self.fail("mask differs")
        for name in op["bins"]:
            self.cov.hit(name)


def _slot_addrs(step: AttentionStep, slot: int) -> dict:
    """The addresses of a slot's state for ``step``'s N: step counter, residual, mask."""
    return {"SLOT": [slot], "RES": list(step.img.res_addrs(slot)),
            "MASK": list(step.mask_addrs(slot))}


def _runs(words: dict[int, int]):
    """``(start, [word, ...])`` per run of consecutive addresses of ``words``."""
    addrs = sorted(words)
    i = 0
    while i < len(addrs):
        j = i
        while j + 1 < len(addrs) and addrs[j + 1] == addrs[j] + 1:
            j += 1
        yield addrs[i], [words[a] for a in addrs[i:j + 1]]
        i = j + 1


def inject_mismatch(case: dict) -> dict:
    """``case`` with one expected value off by one (its first step's first output): the check
    must report it."""
    for op in case["ops"]:
        if op["kind"] in ("linear", "attention"):
            key = "y" if op["kind"] == "linear" else "o"
            op["exp"] = {**op["exp"], key: op["exp"][key].copy()}
            op["exp"][key].flat[0] += 1
            return case
    raise ValueError("the case has no step")


# ----- many cases on one design -----
async def run_cases(io, man: dict, cfg, *, seed: int, first: int = 0, count: int | None = None,
                    seconds: float | None = None, inject: int | None = None, reset,
                    guard=None, progress=None, log=None) -> dict:
    """Cases ``first, first + 1, ...`` of ``seed`` on the design behind ``io``, each after
    ``await reset()``, until ``count`` cases have run or ``seconds`` have passed (at least one
    case). ``guard(coroutine)`` bounds a case (a hang becomes an exception: the simulator's
    timeout); ``inject``: the index of a case whose expectation is made wrong
    (``inject_mismatch``). ``progress(results)`` is called every 15 s and at the end. Returns
    ``results``: ``seed``, ``first``, ``cases``, ``failed_cases`` (indices), ``failures``
    (one line each, the first 200), ``hits`` (bin -> count), ``seconds``, ``complete`` (set
    at the end)."""
    if count is None and seconds is None:
        raise ValueError("give a number of cases or a time")
    cov = Coverage(bin_names(cfg))
    t0 = last = time.monotonic()
    res = {"seed": int(seed), "first": int(first), "cases": 0, "failed_cases": [],
           "failures": [], "hits": cov.hits, "seconds": 0.0}
    i = first
    while True:
        try:
            case = make_case(cfg, man, seed, i)
        except Exception as e:                      # the generator's bug: this case's failure
            case, fails = None, [f"making the case: {type(e).__name__}: {e}"]
        if case is not None:
            if inject == i:
                inject_mismatch(case)
            await reset()
            drv = Driver(io, man, cfg, case, cov)
            try:
                fails = await (drv.run() if guard is None else guard(drv.run()))
            except Exception as e:                  # a hang (the guard's timeout) or a crash
                fails = [*drv.fails, f"{drv.where}: {type(e).__name__}: {e}"]
        res["cases"] += 1
        if fails:
            res["failed_cases"].append(i)
            room = 200 - len(res["failures"])
            res["failures"] += [f"case {i}: {f}" for f in fails][:max(room, 0)]
            if log is not None:
                log(f"case {i}: {len(fails)} differences: {fails[0]}")
        i += 1
        now = time.monotonic()
        res["seconds"] = round(now - t0, 1)
        if progress is not None and now - last > 15:
            progress(res)
            last = now
        if (count is not None and i - first >= count) or (seconds is not None
                                                          and now - t0 >= seconds):
            break
    res["complete"] = True
    if progress is not None:
        progress(res)
    return res


# ----- the command -----
TESTBENCH = "dstar.sim.tb_regress"


def _generator_digest() -> str:
    """A digest of the sources the Verilog comes from, so that a cached ``dstar.v`` of an
    older generator is not reused."""
    import hashlib
    from pathlib import Path

    import dstar.config as config_module
    import dstar.hw as hw_package

    h = hashlib.sha256()
    files = [*sorted(Path(hw_package.__file__).parent.rglob("*.py")),
             Path(config_module.__file__)]
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _folder(cfg):
    import hashlib

    from dstar.paths import build_dir

    key = json.dumps(cfg.hardware(), sort_keys=True).encode()
    return build_dir("regress", hashlib.sha256(key).hexdigest()[:16])


def _generate(cfg, folder, say) -> None:
    """``dstar.v`` and ``params.json`` in ``folder`` unless they are already these sources'."""
    from dstar.hw.generate import ACCEL_TOP_NAME, build_accelerator
    from dstar.outputs import write_atomic

    stamp, digest = folder / "generator.sha256", _generator_digest()
    if ((folder / f"{ACCEL_TOP_NAME}.v").is_file() and (folder / "params.json").is_file()
            and stamp.is_file() and stamp.read_text().strip() == digest):
        say(f"reusing {folder / ACCEL_TOP_NAME}.v")
        return
    say("generating the accelerator top ...")
    files, _ = build_accelerator(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for name, text in files.items():
        write_atomic(folder / name, text)
    write_atomic(stamp, digest + "\n")


def _verilog_folder(verilog):
    """A copy of the Verilog file ``verilog`` in a folder named by its contents, whose
    ``verilator`` build it shares: a configuration or generator change that leaves the Verilog
    alone does not compile it again (Verilator skips identical inputs, make the rest)."""
    import hashlib

    from dstar.outputs import write_atomic
    from dstar.paths import build_dir

    text = verilog.read_bytes()
    copy = build_dir("regress", "verilog-" + hashlib.sha256(text).hexdigest()[:16]) / verilog.name
    if not copy.is_file() or copy.read_bytes() != text:
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(copy, text)
    return copy


def regress(cfg, *, seed: int, cases: int | None = None, minutes: float | None = None,
            first: int = 0, inject: int | None = None, output=None,
            rerun: str = "dstar regress", say=print) -> dict:
    """Run cases ``first ..`` of ``seed`` on ``cfg``'s accelerator top under Verilator (one
    compile, one simulation) for ``cases`` cases or ``minutes`` (whichever ends first); returns
    the report (``report``), also written whole to ``output`` if given and to the run's folder
    (``regress/<config>/run-<seed>-<pid>/report.json`` under the build root, beside the
    simulator's log; the build is shared by every configuration of the same Verilog,
    ``_verilog_folder``). ``rerun``: the command line that
    reproduces this run without its limits (the seed and case are added to it). ``ValueError``
    if Verilator is missing."""
    from dstar.hw.generate import ACCEL_TOP_NAME
    from dstar.outputs import write_atomic

    from . import simulators
    from .simulators import Simulator

    reason = simulators.missing(Simulator.VERILATOR)
    if reason is not None:
        raise ValueError(f"dstar regress needs Verilator: {reason}")
    t_start = time.perf_counter()
    folder = _folder(cfg)
    _generate(cfg, folder, say)
    # The run's own files in a folder of their own: runs of one configuration may overlap.
    run = folder / f"run-{seed}-{os.getpid()}"
    run.mkdir(parents=True, exist_ok=True)
    write_atomic(run / "params.json", (folder / "params.json").read_bytes())
    plan = {"config": cfg.to_dict(), "seed": seed, "first": first, "count": cases,
            "seconds": None if minutes is None else minutes * 60.0, "inject": inject}
    write_atomic(run / "plan.json", json.dumps(plan) + "\n")
    verilog = _verilog_folder(folder / f"{ACCEL_TOP_NAME}.v")
    build = verilog.parent / "verilator"
    say(f"compiling for Verilator in {build} (log: {run / 'build.log'}) ...")
    t0 = time.perf_counter()
    runner = simulators.build(Simulator.VERILATOR, verilog, ACCEL_TOP_NAME, build,
                              log_file=run / "build.log")
    t_build = time.perf_counter() - t0
    limit = " and ".join(x for x in (cases and f"{cases} cases",
                                     minutes and f"{minutes:g} minutes") if x)
    say(f"compiled in {t_build:.0f} s; running seed {seed} from case {first} for {limit} ...")
    t0 = time.perf_counter()
    simulators.test(runner, ACCEL_TOP_NAME, TESTBENCH, build, run,
                    {"DSTAR_REGRESS_DIR": run}, log_file=run / "sim.log")
    t_sim = time.perf_counter() - t0
    res = (json.loads((run / "results.json").read_text())
           if (run / "results.json").is_file() else {})
    if not res.get("complete"):
        raise RuntimeError(f"the simulation ended before its cases did; see {run / 'sim.log'}")
    rep = report(cfg, res, rerun=rerun, seconds={
        "build": round(t_build, 1), "simulation": round(t_sim, 1),
        "total": round(time.perf_counter() - t_start, 1)})
    text = json.dumps(rep, indent=1) + "\n"
    write_atomic(run / "report.json", text)
    if output is not None:
        write_atomic(output, text)
    return rep


def report(cfg, res: dict, *, rerun: str, seconds: dict) -> dict:
    """The report of ``run_cases``' results: seed, cases, mismatches (cases that differed),
    the coverage (``bins``, ``hit``, ``percent``, ``missed``, ``hits`` per bin), the first
    differences and a command line per failed case that reruns it alone, wall times."""
    cov = Coverage(bin_names(cfg))
    cov.merge(res["hits"])
    return {"seed": res["seed"], "first": res["first"], "cases": res["cases"],
            "mismatches": len(res["failed_cases"]), "failed_cases": res["failed_cases"],
            "failures": res["failures"],
            "rerun": [f"{rerun} --seed {res['seed']} --case {i}" for i in res["failed_cases"]],
            "config": cfg.hardware(), "sim": "verilator",
            "coverage": {"bins": len(cov.hits), "hit": sum(1 for n in cov.hits.values() if n),
                         "percent": round(cov.percent, 1), "missed": cov.missed()},
            "hits": cov.hits, "seconds": {"cases": res["seconds"], **seconds}}


def format_report(rep: dict) -> str:
    """The report in a few lines: cases, mismatches with their rerun lines, coverage."""
    c = rep["coverage"]
    lines = [f"dstar regress: seed {rep['seed']}, cases {rep['first']} .. "
             f"{rep['first'] + rep['cases'] - 1} ({rep['cases']} cases) in "
             f"{rep['seconds']['cases']:.0f} s on Verilator",
             f"mismatches: {rep['mismatches']} cases",
             f"coverage: {c['hit']} of {c['bins']} bins ({c['percent']:.1f} %)"
             + (f"; missed: {', '.join(c['missed'])}" if c["missed"] else "")]
    for f in rep["failures"][:20]:
        lines.append(f"  seed {rep['seed']} {f}")
    for r in rep["rerun"][:20]:
        lines.append(f"rerun: {r}")
    sec = rep["seconds"]
    lines.append(f"time: compile {sec['build']:.0f} s, simulation {sec['simulation']:.0f} s, "
                 f"total {sec['total']:.0f} s")
    return "\n".join(lines)
