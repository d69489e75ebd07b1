"""The blocks of a generated configuration and their per-block Yosys runs.

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

Logic is not optimized across block boundaries (as in a hierarchical ASIC flow), so totals are
slightly above a flat synthesis of the whole top.

Accelerator top (``dstar.v``, ``hw.accelerator``, with ``accelerator``): the same split one
level further down, since its children are the linear datapath and the attention engine
themselves: the shared PE arrays (``array_<n>``), the children of ``linear`` and of
``attention`` by kind, ``linear`` and ``attention`` with their children blackboxed
(``sequencer``, ``attention_controller``), and the top with its children blackboxed
(``command_processor``: command decoding, the arrays' sharing muxes, the ``dout`` queue, the
counters). These blocks carry ``part = "accelerator"`` and report names ``accelerator.<kind>``.

Attention engine: the configuration's ``dstar_attention.v`` (``hw.attention``, written beside the
linear top unless the configuration is the dense baseline) is split the same way: its
``softmax`` and ``normalizer`` blocks, and ``attention_controller`` (the engine's top with every
block blackboxed: the block schedule, slot counters, mask memory, residual cache, Q/K^T/V/P and
output memories). Its PE arrays are left out: the accelerator runs attention on the linear
datapath's arrays (spec section 5), so they are counted once, in the linear part. These blocks
carry ``part = "attention"``.
"""

import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dstar.config import Config

from . import fmax_runs
from .flows import synth_module, verilog_modules

__all__ = ["BLOCK_KINDS", "SEQUENCER", "ATTN_CONTROLLER", "COMMAND_PROCESSOR", "ACCEL_PREFIX",
           "generate_verilog", "blocks", "accelerator_blocks",
           "synth_blocks"]

#: Report names of the block kinds (instance name without ``_<n>`` -> kind).
BLOCK_KINDS = {"array": "pe_array", "encoder": "encoder", "dispatcher": "dispatcher",
               "softmax": "softmax", "normalizer": "normalizer"}
SEQUENCER = "sequencer"
#: The attention engine's top with its blocks blackboxed.
ATTN_CONTROLLER = "attention_controller"
#: The accelerator top with its blocks blackboxed, and the prefix of its blocks' report names.
COMMAND_PROCESSOR = "command_processor"
ACCEL_PREFIX = "accelerator."
#: The accelerator top's children that are themselves split into blocks, and the name of
#: each one's own logic (the child with its children blackboxed).
_ACCEL_SPLIT = {"linear": SEQUENCER, "attention": ATTN_CONTROLLER}


def generate_verilog(cfg: Config, outdir: Path, attention: bool = True,
                     accelerator: bool = False) -> tuple[Path, dict]:
    """Write the configuration's Verilog and ``params.json`` into ``outdir`` (the attention
    engine's too, with ``attention``, and the accelerator top, with ``accelerator``, if the
    datapath has them); files whose content is unchanged are left alone (their age lets
    ``reuse`` trust earlier results)."""
    from dstar.hw.generate import TOPS, generate
    outdir = Path(outdir)
    fresh = outdir.with_name(outdir.name + ".new")
    has = TOPS[cfg.datapath].attention
    man = generate(cfg, fresh, attention=attention and has,
                   accelerator=accelerator and attention and has)
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


def accelerator_blocks(verilog: Path) -> list[dict]:
    """The blocks of the accelerator top in ``verilog`` (``dstar.v``), as ``blocks`` lists
    them, each with ``part = "accelerator"``, ``verilog`` and a kind ``accelerator.<kind>``."""
    top = Path(verilog).stem
    kids, groups = _children(verilog, top)
    out = []

    def add(kind, mods, blackbox=()):
        out.append({"kind": ACCEL_PREFIX + kind, "module": sorted(mods, key=_natural)[0],
                    "instances": len(mods), "verilog": verilog, "part": "accelerator",
                    **({"blackbox": tuple(blackbox)} if blackbox else {})})

    for kind, mods in groups.items():
        if kind in _ACCEL_SPLIT:
            sub_kids, sub_groups = _children(verilog, mods[0])
            for sub, sub_mods in sub_groups.items():
                add(sub, sub_mods)
            add(_ACCEL_SPLIT[kind], mods, sub_kids)
        else:
            add(kind, mods)
    add(COMMAND_PROCESSOR, [top], kids)
    return out


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def synth_blocks(cfg: Config, targets: tuple, fmax: tuple, outdir: Path, jobs: int,
                 reuse: bool, skipped: dict | None = None, attention: bool = True,
                 accelerator: bool = False, only: tuple = (), strict: bool = True):
    """Generate ``cfg`` into ``<outdir>/rtl`` (without the attention engine unless
    ``attention``; with the accelerator top if ``accelerator`` and the datapath has one) and
    synthesize its blocks for ``targets`` (and
    the netlists ``fmax`` needs, ``dstar.synth.fmax_runs``); returns ``(top, verilog,
    modules)``, ``modules[kind]`` holding ``module``, ``instances``, ``part`` and per-target
    counts per instance. The whole top is synthesized for nextpnr only if its PE arrays fit the
    device's MULT18X18D; otherwise ``skipped["top"]`` says why. ``only``: synthesize just these
    block kinds (report names; with ``strict``, ``ValueError`` naming the kinds there are if
    one is not, else the others are ignored)."""
    verilog, man = generate_verilog(cfg, outdir / "rtl", attention, accelerator)
    top = man["top"]
    att = man.get("attention")
    blks = blocks(verilog, top, verilog.parent / att["verilog"] if att else None)
    if "accelerator" in man:
        blks += accelerator_blocks(verilog.parent / man["accelerator"]["verilog"])
    if only:
        unknown = sorted(set(only) - {b["kind"] for b in blks})
        if unknown and strict:
            raise ValueError(f"no block kind(s) {unknown}; the configuration's blocks are "
                             f"{sorted(b['kind'] for b in blks)}")
        blks = [b for b in blks if b["kind"] in only]
    fdir = outdir / "fmax"

    def work(job):
        t, b, net = job
        s = time.monotonic()
        res = synth_module(b.get("verilog", verilog), b["module"], t,
                           fdir if b["kind"] in fmax_runs.FMAX_TOPS else outdir / t,
                           blackbox=b.get("blackbox", ()), netlist=net, reuse=reuse)
        res["seconds"] = round(time.monotonic() - s, 1)
        return job, res

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(work, fmax_runs.synth_jobs(blks, targets, fmax)))
    if "top" in fmax:       # the whole top for nextpnr, if its PE arrays fit the device
        why = fmax_runs.top_misfit(results)
        if why:
            skipped["top"] = why
        else:
            work((fmax_runs.TOP_FLOW, {"kind": "top", "module": top}, True))
    if "accelerator" in fmax:   # the accelerator top whole, as the linear top above
        if "accelerator" not in man:
            raise ValueError("--fmax accelerator: this configuration has no accelerator top "
                             "(dstar.v)")
        why = fmax_runs.top_misfit(results)
        if why:
            skipped["accelerator"] = why
        else:
            work((fmax_runs.TOP_FLOW, {"kind": "accelerator", "module": man["accelerator"]["top"],
                                       "verilog": verilog.parent / man["accelerator"]["verilog"]},
                  True))

    modules: dict = {b["kind"]: {"module": b["module"], "instances": b["instances"],
                                 "part": b.get("part", "linear"), "targets": {}}
                     for b in blks}
    for (t, b, _), res in results:
        if t in targets:
            modules[b["kind"]]["targets"][t] = res
    return top, verilog, modules
