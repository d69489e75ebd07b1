"""Generation: deterministic Verilog of the linear-layer wrapper and of the attention engine,
and their ``params.json``.

The manifest holds everything a testbench or report needs so that none restates a width: the
resolved config's hardware fields (``config``, ``Config.hardware()``; the others under ``run``)
and its derived values, the hardware geometry, every top-level port with its
direction and width, and the payload and memory-word layouts as field lists
(``name``/``offset``/``width``/``signed``, LSB-first offsets into the flat vector). Every top
describes itself: ``top.geometry.to_dict()`` and ``top.layouts()`` (a dict of
``lib.data`` layouts by name) are all this module reads, so a new block's layouts reach the
testbenches through its own ``layouts()``.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amaranth import Shape, Signal
from amaranth.back import verilog
from amaranth.lib import data, wiring

from dstar.config import Config, ConfigError, Datapath, Encoding
from dstar.golden.attention import THETA_BITS
from dstar.outputs import write_atomic

from .dense import DenseLinearLayer
from .fmdq.geometry import FmdqGeometry
from .fmdq.linear import FmdqLinear
from .geometry import COUNTER_BITS, AttentionGeometry, Geometry
from .int8 import Int8LinearLayer
from .linear import LinearLayer

__all__ = ["generate", "build", "build_accelerator", "check_buildable", "generate_block",
           "manifest", "attention_manifest", "accelerator_manifest", "top_of", "TOP_NAME",
           "ATTN_TOP_NAME", "ACCEL_TOP_NAME", "OUTPUTS", "Tops", "TOPS", "ENCODED_TOPS",
           "MAX_MEMORY_WORDS", "LARGE_MEMORY_WORDS"]

TOP_NAME = "dstar_linear"
ATTN_TOP_NAME = "dstar_attention"
ACCEL_TOP_NAME = "dstar"
SCHEMA_VERSION = 1
#: Every file ``generate`` may write into its folder (a run removes those it no longer makes).
OUTPUTS = (f"{TOP_NAME}.v", f"{ATTN_TOP_NAME}.v", f"{ACCEL_TOP_NAME}.v", "params.json")
#: Memory words of all tops beyond which ``check_buildable`` refuses a configuration: the
#: Verilog spells out every word's initial value, so its size, the generation time and the
#: generator's memory grow with it (the default preset has about 61 500).
MAX_MEMORY_WORDS = 1 << 20
#: Memory words from which ``dstar generate`` announces a long generation (``attn_slots =
#: 4096`` on ``tiny``: 537 152 words, over 2 minutes and 5 GB).
LARGE_MEMORY_WORDS = 1 << 18


def _fields(layout, prefix="", base=0):
    """Flatten a layout into leaf fields (dotted names, ``[i]`` for array elements)."""
    out = []
    if isinstance(layout, data.StructLayout | data.UnionLayout):   # a union's at offset 0
        for name, fld in layout:
            out += _fields(fld.shape, f"{prefix}{name}.", base + fld.offset)
        return out
    if isinstance(layout, data.ArrayLayout):
        w = Shape.cast(layout.elem_shape).width
        for i in range(layout.length):
            out += _fields(layout.elem_shape, f"{prefix.rstrip('.')}[{i}].", base + i * w)
        return out
    shape = Shape.cast(layout)
    return [{"name": prefix.rstrip("."), "offset": base, "width": shape.width,
             "signed": shape.signed}]


def _port_signals(top: wiring.Component) -> list:
    """Signals of every port (constant members, such as an always-ready stream's ``ready``,
    are not ports)."""
    sigs = (_unview(sig) for _, _, sig in top.signature.flatten(top))
    return [sig for sig in sigs if isinstance(sig, Signal)]


def _unview(sig):
    return sig.as_value() if isinstance(sig, data.View) else sig


def _ports(top: wiring.Component) -> dict:
    ports = {}
    for path, member, sig in top.signature.flatten(top):
        if not isinstance(_unview(sig), Signal):
            continue
        name = "__".join(str(p) for p in path)
        ports[name] = {"dir": "in" if member.flow == wiring.In else "out",
                       "width": Shape.cast(member.shape).width}
    return ports


@dataclass(frozen=True)
class Tops:
    """What ``generate`` builds for one ``Datapath``: ``linear(cfg)``, the ``dstar_linear`` top
    (same top name and host ports for every datapath), and whether the attention engine
    (``dstar_attention``) is built beside it."""

    linear: Callable[[Config], wiring.Component]
    attention: bool


#: The tops of each ``Datapath``. The dense INT8 datapaths have no attention engine: their lanes
#: are 8 x 8, not the nibble lanes the engine schedules.
TOPS: dict[Datapath, Tops] = {
    Datapath.DSTAR: Tops(LinearLayer, attention=True),
    Datapath.DENSE: Tops(DenseLinearLayer, attention=False),
    Datapath.INT8: Tops(Int8LinearLayer, attention=False),
}


#: The DSTAR datapath's ``dstar_linear`` top of each ``Encoding`` (v1's nibble encoder and
#: dispatcher, or FMDQ's quantization unit and SIMD-4 arrays).
ENCODED_TOPS: dict[Encoding, Callable[[Config], wiring.Component]] = {
    Encoding.NIBBLE: LinearLayer,
    Encoding.FMDQ: FmdqLinear,
}


def top_of(cfg) -> wiring.Component:
    """The ``dstar_linear`` top ``cfg`` generates (``TOPS[cfg.datapath]``; the DSTAR datapath's
    by ``ENCODED_TOPS[cfg.encoding]``)."""
    if cfg.datapath is Datapath.DSTAR:
        return ENCODED_TOPS[cfg.encoding](cfg)
    return TOPS[cfg.datapath].linear(cfg)


def _layouts(lays: dict) -> dict:
    return {name: {"width": Shape.cast(lay).width, "fields": _fields(lay)}
            for name, lay in lays.items()}


def manifest(cfg, top: wiring.Component) -> dict:
    """The ``params.json`` content for ``cfg`` and its built top (``top_of(cfg)``): the ports,
    geometry and layouts are read from ``top``, which is not built here so that none is left
    unused."""
    return {
        "schema_version": SCHEMA_VERSION,
        "top": TOP_NAME,
        "config": cfg.hardware(),
        "run": cfg.run_params(),
        "derived": cfg.derived(),
        "geometry": top.geometry.to_dict(),
        "ports": _ports(top),
        "layouts": _layouts(top.layouts()),
    }


def attention_manifest(cfg, top=None) -> dict:
    """The ``attention`` section of ``params.json``: the attention engine's geometry, ports and
    memory-word layouts (``top``: an already built ``AttentionEngine``)."""
    from .attention import AttentionEngine

    top = top if top is not None else AttentionEngine(cfg)
    man = {
        "top": ATTN_TOP_NAME,
        "verilog": f"{ATTN_TOP_NAME}.v",
        "config": cfg.hardware(),
        "geometry": top.geometry.to_dict(),
        "softmax": top.geometry.softmax.to_dict(),
        "ports": _ports(top),
        "layouts": _layouts(top.layouts()),
        "addresses": {
            "q": (_Q_TILE if top.geometry.fmdq else "i * rows_q + r (elements r*group ..)"),
            "kt": "d * n_kc + kc, array a: keys kc*block_cols + a*m_tile ..",
            "v": "j * n_cp + cp, array a: columns cp*block_cols + a*m_tile ..",
            "ms": "i",
            "o": "i * n_cp + cp (columns cp*block_cols ..)",
            "res": "(slot * n_max + i) * n_cp + cp (columns cp*block_cols ..)",
            "mask": "slot * nqb + I, bit J: key block J selected for query block I",
            "slot": "slot (host_slot_addr to read, host_addr to write)",
        },
    }
    if top.geometry.sar:
        del man["addresses"]["res"]
        man["addresses"].update(_SAR_ADDRESSES)
    return man


#: SAR's memories (``attention = "sar"``: no residual cache; the score cache, dense per slot).
_SAR_ADDRESSES = {
    "mask": "slot * nqb + I, bit J: key block J kept for query block I (the host's; the engine "
            "only reads it)",
    "sc": "((slot * sc_rows + i) // p_banks * n_kg + kg) * p_banks + i % p_banks: the P word of "
          "row i, key group kg (host_addr to write, host_sc_addr to read)",
    "rl": "slot * sc_rows + i: (r, L) of row i (host_addr to write, host_rl_addr to read)",
}


#: The Q address rule of the engine on the FMDQ arrays (a word: 4 dimensions of a token tile).
_Q_TILE = ("(i // q_tokens) * head_dim / 4 + c (rows of the token tile, dimensions 4c .., "
           "element [t][d]: row t of the tile)")


def accelerator_manifest(cfg, top=None) -> dict:
    """The manifest of the accelerator top (``dstar.hw.accelerator.Accelerator``; ``top``: one
    already built): everything a driver needs, in any language. Ports (clock ``clk`` and
    reset ``rst``, synchronous, active high, included), the command word's and every
    memory word's layout (``layouts``: ``command`` and each memory by name), the opcodes, the
    memories (id, depth, access, address rule), the read latency, the ``din`` /
    ``dout`` beat width, the counters ``READ_COUNTERS`` sends, in order, and the rules of
    driving the top (``driver``: ``_driver_rules``)."""
    from . import accelerator as acc

    top = top if top is not None else acc.Accelerator(cfg)
    geo = top.geometry
    words, depths = geo.words, geo.depths
    fmdq = cfg.encoding is Encoding.FMDQ
    rules = {
        "TARGET": "token * n_kt_max + kt (elements kt*k_tile ..; clipped to +-target_max)",
        "STATE": "token * n_kt_max + kt",
        "WEIGHTS": "w_base + (kt * n_mt + mt) * k_tile + r for row kt * k_tile + r, columns "
                   "mt * block_cols .. (a run's n_kt * n_mt tiles in run order, K tiles outer; "
                   "rows beyond K zero)",
        "Y": "token * n_mt_max + mt (columns mt * block_cols ..)",
        "Q": "i * rows_q + r (elements r*group ..)",
        "KT": "d * n_kc + kc (keys kc * block_cols ..)",
        "V": "j * n_cp + cp (columns cp * block_cols ..)",
        "MS": "i", "O": "i * n_cp + cp (columns cp * block_cols ..)",
        "RES": "(slot * n_max + i) * n_cp + cp (columns cp * block_cols ..)",
        "MASK": "slot * nqb + I, bit J: key block J selected for query block I",
        "SLOT": "slot (valid: stepped since CLEAR_SLOTS or reset; phase: calls mod refresh)",
    }
    if fmdq:                  # FmdqLinear's sub-channel words and packed column blocks
        rules.update({
            "Q": _Q_TILE,
            "TARGET": "tile * max_k + k (tokens tile*token_tile ..; clipped to +-target_max)",
            "STATE": "tile * max_k + k (tokens tile*token_tile ..)",
            "WEIGHTS": "w_base + mt * K + k for row k, columns mt * block_cols .. (a run's "
                       "n_mt blocks of K rows)",
        })
    if top.attention_geometry.sar:        # the score cache instead of the residual cache
        rules.update(MASK=_SAR_ADDRESSES["mask"],
                     SC="((slot * sc_rows + i) // p_banks * n_kg + kg) * p_banks + i % p_banks: "
                        "the P word of row i, key group kg",
                     RL="slot * sc_rows + i: (r, L) of row i")
    mems = {}
    for mm in acc.Mem:
        if mm.name not in depths:           # v1: no score cache; SAR: no residual cache
            continue
        access = ("rw" if mm in geo.writable and mm in geo.readable else
                  "w" if mm in geo.writable else "r")
        mems[mm.name] = {"id": int(mm), "depth": depths[mm.name], "access": access,
                         "address": rules[mm.name]}
    lin = top.linear_geometry
    return {
        "schema_version": SCHEMA_VERSION,
        "top": ACCEL_TOP_NAME,
        "verilog": f"{ACCEL_TOP_NAME}.v",
        "clock": {"port": "clk", "edge": "rising"},
        "reset": {"port": "rst", "synchronous": True, "active": "high"},
        "config": cfg.hardware(),
        "derived": cfg.derived(),
        "geometry": lin.to_dict(),
        "attention_geometry": top.attention_geometry.to_dict(),
        "ports": _ports(top),
        "layouts": _layouts({"command": geo.command, **words}),
        "opcodes": {op.name: int(op) for op in acc.Opcode},
        "memories": mems,
        "data_bits": geo.data_bits,
        "read_latency": "a READ's words leave on dout in address order; the first no earlier "
                        "than 2 cycles after the command is taken",
        "counters": list(geo.counters),
        "counter_bits": COUNTER_BITS,
        "driver": _driver_rules(cfg, top),
    }


#: What clears a counter of ``READ_COUNTERS``, by name prefix (the others: reset only).
_COUNTER_RUNS = {"linear_": "RUN_LINEAR", "attention_": "RUN_ATTENTION"}
#: Cycles a run command adds to its block's counter, from the cycle it is taken to ``done``.
RUN_OVERHEAD_CYCLES = 2


def _driver_rules(cfg, top) -> dict:
    """The ``driver`` section of the accelerator's manifest: the rules of driving the top
    beyond ports and layouts, as data (docs/design/accelerator.md, "Driving the top", says
    them in words; ``tests/hw/test_accelerator_docs.py`` checks each on the RTL). Word counts
    are arithmetic expressions in ``N`` (``n_tokens``), ``ceil`` and the names of ``config``
    and ``attention_geometry``.

    - ``beat``: a memory word sits in the low bits of its ``din`` / ``dout`` beat, one word a
      beat (above it: 0 on ``dout``, ignored on ``din``); in the arrays' memories array ``a``'s
      element ``e`` is the word's element ``a * m_tile + e``.
    - ``read_counters``: one counter a beat, in ``counters`` order, wrapping at
      ``2**counter_bits``.
    - ``counter_cleared_by``: each counter's lifetime: ``reset`` (counts from reset), or the
      run opcode whose start clears it (it then holds the last such run's value).
    - ``done``: the opcodes that pulse ``done`` (for one cycle), never for a refused command;
      ``run_overhead_cycles``: a run's cycles from taken to ``done`` beyond its counter.
    - ``key``: the ``key`` output is the counter ``counter`` of the last ``set_by`` run (set
      when it starts, held until the next; ``after_reset`` after reset).
    - ``error``: rises ``latency`` cycles after a refused command is taken, blocks nothing,
      one ``ACK_ERROR`` clears it whatever the number of refusals, ``errors`` keeps counting.
    - ``accepted``: per opcode, each argument's accepted range ``[lo, hi]``, bounds that are
      strings being expressions in the other arguments, ``depth`` (the memory's) and the
      names of ``config`` and ``geometry``; outside it the command is refused (a memory must
      also have the access: ``memories``). ``empty_run``: the ``RUN_LINEAR`` fields of which
      any one 0 makes an accepted run that writes nothing, leaves its counters 0 and is done
      ``done_after`` cycles after it is taken (``n_tokens`` 0 is refused instead). With
      ``encoding = "fmdq"`` only ``n_tokens`` is listed for ``RUN_LINEAR``, and no
      ``empty_run``: ``FmdqLinear``'s run limits are its own.
    - ``theta_q``: its meaningful range, and how the top treats the values outside it.
    - ``run_attention``: the words it needs loaded, those it needs on a reuse step, what it
      writes and overwrites, and its tile counts (the cycles: ``dstar.sim.attention_cycles``).
    """
    from . import accelerator as acc

    ag, lin = top.attention_geometry, top.linear_geometry
    tokens = [1, cfg.max_tokens]
    linear = {"n_tokens": tokens}
    mem = {"addr": [0, "depth - 1"], "count": [1, "depth - addr"]}
    rules = {
        "beat": {"words_per_beat": 1, "word_lsb": 0, "dout_above_word": 0,
                 "din_above_word": "ignored", "array_element": "a * m_tile + e"},
        "read_counters": {"beats": len(top.geometry.counters), "counters_per_beat": 1,
                          "order": "counters", "wraps_at": 1 << COUNTER_BITS},
        "counter_cleared_by": {
            name: next((op for pre, op in _COUNTER_RUNS.items() if name.startswith(pre)),
                       "reset")
            for name in top.geometry.counters},
        "done": {"opcodes": [acc.Opcode.RUN_LINEAR.name, acc.Opcode.RUN_ATTENTION.name],
                 "pulse_cycles": 1, "on_refused": False},
        "run_overhead_cycles": RUN_OVERHEAD_CYCLES,
        "key": {"counter": "attention_key", "set_by": acc.Opcode.RUN_ATTENTION.name,
                "after_reset": 0},
        "error": {"latency": 1, "blocks_commands": False, "cleared_by": "ACK_ERROR",
                  "acks_to_clear": 1, "counted_in": "errors", "ack_clears_count": False},
        "accepted": {
            "LOAD": mem, "READ": mem,
            "RUN_LINEAR": linear,
            "RUN_ATTENTION": {"n_tokens": tokens, "slot": [0, cfg.attn_slots - 1],
                              "theta_q": [0, (1 << ag.theta_bits) - 1],
                              "refresh": [0, (1 << ag.REFRESH_BITS) - 1]},
        },
        "theta_q": {"meaningful": [1, 1 << THETA_BITS], "below_as": 1,
                    "every_block_from": 1 << THETA_BITS, "read_on": "key steps"},
        "run_attention": {
            "needs": {"Q": ("ceil(N / q_tokens) * head_dim / 4" if ag.fmdq else "N * rows_q"),
                      "MS": "N", "KT": "head_dim * ceil(N / block_cols)",
                      "V": "ceil(N / group) * group * n_cp"},
            "needs_on_reuse": [acc.Mem.MASK.name, acc.Mem.RES.name, acc.Mem.SLOT.name],
            "writes": {"O": "N * n_cp"},
            "writes_on_key": [acc.Mem.MASK.name, acc.Mem.RES.name],
            "advances": acc.Mem.SLOT.name,
            "overwrites": [acc.Mem.Y.name],
            "tiles": {"nqb": "ceil(N / block_q)", "nkb": "ceil(N / block_k)",
                      "key_step": "nqb * nkb", "reuse_step": "mask bits set in rows < nqb"},
            "cycles": "dstar.sim.attention_cycles.predict",
        },
    }
    if ag.sar:                                # cache steps and V-only reuse steps
        rules["run_attention"].update({
            "needs_on_reuse": [acc.Mem.MASK.name, acc.Mem.SC.name, acc.Mem.RL.name,
                               acc.Mem.SLOT.name],
            "reads_on_reuse": [acc.Mem.V.name],
            "needs_always": [acc.Mem.MASK.name],
            "writes_on_key": [acc.Mem.SC.name, acc.Mem.RL.name],
            "tiles": {"nqb": "ceil(N / block_q)", "nkb": "ceil(N / block_k)",
                      "key_step": "mask bits set in rows < nqb (QK^T and PV)",
                      "reuse_step": "mask bits set in rows < nqb (PV only)"}})
        rules["theta_q"]["read_on"] = "never (SAR: the host's masks)"
    if cfg.encoding is Encoding.NIBBLE:       # FmdqLinear's run limits are its own
        linear |= {"n_kt": [0, lin.n_kt_max], "n_mt": [0, lin.n_mt_max],
                   "w_base": [0, "weight_depth - n_kt * n_mt * k_tile"]}
        rules["empty_run"] = {"opcode": acc.Opcode.RUN_LINEAR.name,
                              "zero_fields": ["n_kt", "n_mt"], "done_after": RUN_OVERHEAD_CYCLES,
                              "writes": [], "counters": 0}
    return rules


def generate_block(component: wiring.Component, name: str, cfg, layouts_: dict,
                   outdir) -> dict:
    """Write a sub-block (e.g. the dispatcher alone, for stream-level testbenches) as
    ``<outdir>/<name>.v`` plus ``<outdir>/<name>.json`` (hardware config, ports, layouts)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    man = {
        "schema_version": SCHEMA_VERSION, "top": name, "config": cfg.hardware(),
        "derived": cfg.derived(), "ports": _ports(component),
        "layouts": _layouts(layouts_),
        "verilog": f"{name}.v",
    }
    text = verilog.convert(component, name=name, emit_src=False,
                           ports=_port_signals(component))
    (outdir / f"{name}.v").write_text(text)
    (outdir / f"{name}.json").write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    return man


def check_buildable(cfg, *, attention: bool = True) -> dict:
    """Raise ``ConfigError`` (naming the field, the value or the limit) unless ``generate`` can
    build every top of ``cfg`` (``TOPS[cfg.datapath]``; the attention engine only with
    ``attention``), without elaborating anything: the geometries' checks and the size bound
    ``MAX_MEMORY_WORDS``. The one buildability check of dstar (``dstar config`` runs it too).
    Returns the size estimate: ``{"memory_words": n, "memory_words_limit": MAX_MEMORY_WORDS,
    "largest_memory": [name, words]}``."""
    if cfg.refine_max:
        raise ConfigError(f"refine_max={cfg.refine_max}: lattice refinement is in the golden "
                          "model only; the RTL does not shift a token's state and accumulators "
                          "yet (refine_max = 0 builds)")
    mems = Geometry(cfg).memories()
    if cfg.datapath is Datapath.DSTAR and cfg.encoding is Encoding.FMDQ:
        mems = FmdqGeometry(cfg).memories()
    if attention and TOPS[cfg.datapath].attention:
        for name, words in AttentionGeometry(cfg).memories().items():
            mems[f"attention {name}"] = words
    total = sum(mems.values())
    big = max(mems, key=mems.get)
    if total > MAX_MEMORY_WORDS:
        raise ConfigError(f"the tops' memories would hold {total} words (limit "
                          f"{MAX_MEMORY_WORDS}; the largest: {big}, {mems[big]} words): the "
                          "Verilog spells out every word, so its size and the generation time "
                          "grow with them")
    return {"memory_words": total, "memory_words_limit": MAX_MEMORY_WORDS,
            "largest_memory": [big, mems[big]]}


def build(cfg, *, attention: bool = True, accelerator: bool = False
          ) -> tuple[dict[str, str], dict]:
    """Elaborate and convert every top of ``cfg`` (after ``check_buildable``) without writing
    anything: ``({file name: text}, manifest)``, the files ``generate`` writes. With
    ``accelerator`` also the accelerator top (``dstar.hw.accelerator``, ``dstar.v``; its
    manifest under ``accelerator``; DSTAR datapath only)."""
    from .attention import AttentionEngine

    check_buildable(cfg, attention=attention)
    if accelerator and not TOPS[cfg.datapath].attention:
        raise ConfigError(f"datapath={cfg.datapath}: the accelerator top needs the DSTAR "
                          "datapath (its attention engine runs on the nibble lanes)")
    top = top_of(cfg)
    att = AttentionEngine(cfg) if attention and TOPS[cfg.datapath].attention else None
    man = manifest(cfg, top)
    files = {f"{TOP_NAME}.v": verilog.convert(top, name=TOP_NAME, emit_src=False)}
    man["verilog"] = f"{TOP_NAME}.v"
    if att is not None:
        man["attention"] = attention_manifest(cfg, att)
        files[f"{ATTN_TOP_NAME}.v"] = verilog.convert(att, name=ATTN_TOP_NAME, emit_src=False)
    if accelerator:
        man["accelerator"], files[f"{ACCEL_TOP_NAME}.v"] = _accelerator(cfg)
    files["params.json"] = json.dumps(man, indent=1, sort_keys=True) + "\n"
    return files, man


def build_accelerator(cfg) -> tuple[dict[str, str], dict]:
    """The accelerator top alone, as ``build`` makes it: ``({"dstar.v": ..., "params.json":
    ...}, manifest)``, the manifest holding only ``schema_version`` and ``accelerator``."""
    check_buildable(cfg)
    if not TOPS[cfg.datapath].attention:
        raise ConfigError(f"datapath={cfg.datapath}: the accelerator top needs the DSTAR "
                          "datapath (its attention engine runs on the nibble lanes)")
    section, text = _accelerator(cfg)
    man = {"schema_version": SCHEMA_VERSION, "accelerator": section}
    return ({f"{ACCEL_TOP_NAME}.v": text,
             "params.json": json.dumps(man, indent=1, sort_keys=True) + "\n"}, man)


def _accelerator(cfg) -> tuple[dict, str]:
    """The accelerator top's manifest section and Verilog."""
    from .accelerator import Accelerator

    acc = Accelerator(cfg)
    return accelerator_manifest(cfg, acc), verilog.convert(acc, name=ACCEL_TOP_NAME,
                                                           emit_src=False,
                                                           ports=_port_signals(acc))


def generate(cfg, outdir, *, attention: bool = True, accelerator: bool = False) -> dict:
    """Write ``<outdir>/dstar_linear.v`` and (with ``attention``) ``<outdir>/dstar_attention.v``
    (no source paths: byte-identical across runs and checkouts) and ``<outdir>/params.json``
    (the attention engine's part under ``attention``); return the manifest. Which tops:
    ``TOPS[cfg.datapath]`` (the dense INT8 datapaths have no attention engine). Everything is
    built and checked before the first file is written; each file is written whole
    (``write_atomic``), and files of ``OUTPUTS`` this run does not make are removed. Other files
    in ``outdir`` are left alone (``dstar generate`` replaces the folder whole instead).
    ``accelerator``: also ``dstar.v``, the accelerator top (``build``)."""
    files, man = build(cfg, attention=attention, accelerator=accelerator)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_atomic(outdir / name, text)
    for name in set(OUTPUTS) - set(files):
        (outdir / name).unlink(missing_ok=True)
    return man
