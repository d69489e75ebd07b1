"""Generation: deterministic Verilog of the linear-layer wrapper, the attention engine and the
accelerator top, and their ``params.json``.

The manifest holds everything a testbench or report needs so that none restates a width: the
resolved config's hardware fields (``config``, ``Config.hardware()``; the others under ``run``,
in the file's top level) and its derived values, the hardware geometry, every top-level port
with its direction and width, and the payload and memory-word layouts as field lists
(``name``/``offset``/``width``/``signed``, LSB-first offsets into the flat vector). Every top
describes itself, and one ``manifest(top)`` serves them all: ``top.geometry.to_dict()``,
``top.geometry.sections()`` (if it has more to say) and ``top.layouts()`` (a dict of
``lib.data`` layouts by name) are all it reads, so a new block's layouts reach the testbenches
through its own ``layouts()``.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amaranth import Shape, Signal
from amaranth.back import verilog
from amaranth.lib import data, wiring

from dstar.config import Config, ConfigError, Datapath, Encoding
from dstar.outputs import write_atomic

from .dense import DenseLinearLayer
from .fmdq.geometry import FmdqGeometry
from .fmdq.linear import FmdqLinear
from .geometry import AttentionGeometry, Geometry
from .int8 import Int8LinearLayer
from .linear import LinearLayer

__all__ = ["generate", "build", "build_accelerator", "check_buildable", "generate_block",
           "manifest", "top_name", "top_of", "TOP_NAME",
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


def top_name(top: wiring.Component) -> str:
    """The module name ``build`` gives ``top``: ``ACCEL_TOP_NAME`` for the accelerator,
    ``ATTN_TOP_NAME`` for the attention engine, ``TOP_NAME`` for a linear top."""
    from .accelerator import Accelerator
    from .attention import AttentionEngine

    return {Accelerator: ACCEL_TOP_NAME, AttentionEngine: ATTN_TOP_NAME}.get(type(top), TOP_NAME)


def manifest(top: wiring.Component, name: str | None = None) -> dict:
    """The manifest of a built top (a linear top, the attention engine, the accelerator), read
    from the top alone (which is not elaborated here, so that none is left unused): its name
    (``name``, default ``top_name(top)``) and Verilog file, its configuration's hardware fields
    (``config``) and derived values, its geometry (``top.geometry.to_dict()``), ports and
    layouts (``top.layouts()``), and the sections its geometry adds (``sections()``, if it has
    any: the engine's softmax sizes and address rules; the accelerator's command protocol,
    ``dstar.hw.accelerator_manifest``)."""
    geo = top.geometry
    name = name or top_name(top)
    sections = geo.sections() if hasattr(geo, "sections") else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "top": name,
        "verilog": f"{name}.v",
        "config": geo.cfg.hardware(),
        "derived": geo.cfg.derived(),
        "geometry": geo.to_dict(),
        "ports": _ports(top),
        "layouts": _layouts(top.layouts()),
        **sections,
    }


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
    man = manifest(top) | {"run": cfg.run_params()}
    files = {f"{TOP_NAME}.v": verilog.convert(top, name=TOP_NAME, emit_src=False)}
    if attention and TOPS[cfg.datapath].attention:
        att = AttentionEngine(cfg)
        man["attention"] = manifest(att)
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
    return manifest(acc), verilog.convert(acc, name=ACCEL_TOP_NAME, emit_src=False,
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
