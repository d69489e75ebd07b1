"""Generation: deterministic Verilog of the linear-layer wrapper and of the attention engine,
and their ``params.json``.

The manifest holds everything a testbench or report needs so that none restates a width: the
resolved config and its derived values, the hardware geometry, every top-level port with its
direction and width, and the payload and memory-word layouts as field lists
(``name``/``offset``/``width``/``signed``, LSB-first offsets into the flat vector).
"""

import json
from pathlib import Path

from amaranth import Shape, Signal, signed, unsigned
from amaranth.back import verilog
from amaranth.lib import data, wiring

from . import layouts
from .dispatcher import bundle_layout
from .encoder import row_layouts
from .linear import LinearLayer
from .pe_array import token_depth, y_row_layout

__all__ = ["generate", "generate_block", "manifest", "attention_manifest", "top_of", "TOP_NAME",
           "ATTN_TOP_NAME"]

TOP_NAME = "dstar_linear"
ATTN_TOP_NAME = "dstar_attention"
SCHEMA_VERSION = 1


def _fields(layout, prefix="", base=0):
    """Flatten a layout into leaf fields (dotted names, ``[i]`` for array elements)."""
    out = []
    if isinstance(layout, data.StructLayout):
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


def top_of(cfg) -> wiring.Component:
    """The top ``cfg`` generates: DSTAR's ``LinearLayer``, or with ``packing = "dense"`` the
    dense INT8 baseline ``dstar.hw.dense.DenseLinearLayer`` (same top name and host ports)."""
    if cfg.packing == "dense":
        from .dense import DenseLinearLayer
        return DenseLinearLayer(cfg)
    return LinearLayer(cfg)


def manifest(cfg, top: wiring.Component) -> dict:
    """The ``params.json`` content for ``cfg`` and its built top (``top_of(cfg)``): the ports
    and geometry are read from ``top``, which is not built here so that none is left unused."""
    geo = top.geometry
    if not isinstance(top, LinearLayer):    # the dense baseline names its own layouts
        return _manifest(cfg, top, geo.to_dict(), top.layouts())
    t_l, s_l = row_layouts(geo)
    lays = {
        "target_row": t_l, "state_row": s_l, "y_row": y_row_layout(geo),
        "weight_row": layouts.weight_row_layout(geo).members["w"],
        "slice_cmd": layouts.slice_cmd_layout(geo),
        "encoded_slice": layouts.encoded_slice_layout(geo),
        "lane_op": layouts.lane_op_layout(geo),
        "token": layouts.token_layout(geo),
        "bundle": bundle_layout(geo),
    }
    return _manifest(cfg, top, {**geo.to_dict(), "token_depth": token_depth(geo)}, lays)


def _manifest(cfg, top, geometry: dict, lays: dict) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "top": TOP_NAME,
        "config": cfg.to_dict(),
        "derived": cfg.derived(),
        "geometry": geometry,
        "ports": _ports(top),
        "layouts": {name: {"width": Shape.cast(lay).width, "fields": _fields(lay)}
                    for name, lay in lays.items()},
    }


def attention_manifest(cfg, top=None) -> dict:
    """The ``attention`` section of ``params.json``: the attention engine's geometry, ports and
    memory-word layouts (``top``: an already built ``AttentionEngine``)."""
    from .attention import OUT_BITS, RES_BITS, AttentionEngine, ms_layout

    top = top if top is not None else AttentionEngine(cfg)
    ag = top.geometry
    g, mt = cfg.group, cfg.m_tile
    lays = {
        "q_word": data.ArrayLayout(signed(8), g),
        "kt_word": data.ArrayLayout(signed(8), mt),
        "v_word": data.ArrayLayout(signed(8), mt),
        "ms_word": ms_layout(),
        "o_word": signed(OUT_BITS),
        "res_word": signed(RES_BITS),
        "mask_word": unsigned(ag.nkb),
    }
    return {
        "top": ATTN_TOP_NAME,
        "verilog": f"{ATTN_TOP_NAME}.v",
        "config": cfg.to_dict(),
        "geometry": ag.to_dict(),
        "ports": _ports(top),
        "layouts": {name: {"width": Shape.cast(lay).width, "fields": _fields(lay)}
                    for name, lay in lays.items()},
        "addresses": {
            "q": "i * rows_q + r (elements r*group ..)",
            "kt": "d * n_kc + kc, array a: keys kc*block_cols + a*m_tile ..",
            "v": "j * n_cp + cp, array a: columns cp*block_cols + a*m_tile ..",
            "ms": "i",
            "o": "i * head_dim + d",
            "res": "(slot * n_max + i) * head_dim + d",
            "mask": "slot * nqb + I, bit J: key block J selected for query block I",
        },
    }


def generate_block(component: wiring.Component, name: str, cfg, layouts_: dict,
                   outdir) -> dict:
    """Write a sub-block (e.g. the dispatcher alone, for stream-level testbenches) as
    ``<outdir>/<name>.v`` plus ``<outdir>/<name>.json`` (config, geometry, ports, layouts)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    man = {
        "schema_version": SCHEMA_VERSION, "top": name, "config": cfg.to_dict(),
        "derived": cfg.derived(), "ports": _ports(component),
        "layouts": {n: {"width": Shape.cast(lay).width, "fields": _fields(lay)}
                    for n, lay in layouts_.items()},
        "verilog": f"{name}.v",
    }
    text = verilog.convert(component, name=name, emit_src=False,
                           ports=_port_signals(component))
    (outdir / f"{name}.v").write_text(text)
    (outdir / f"{name}.json").write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    return man


def generate(cfg, outdir, *, attention: bool = True) -> dict:
    """Write ``<outdir>/dstar_linear.v`` and (with ``attention``) ``<outdir>/dstar_attention.v``
    (no source paths: byte-identical across runs and checkouts) and ``<outdir>/params.json``
    (the attention engine's part under ``attention``); return the manifest. The dense INT8
    baseline (``packing = "dense"``) has no attention engine: its lanes are 8 x 8, not the
    nibble lanes the engine schedules."""
    from .attention import AttentionEngine

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    top = top_of(cfg)
    man = manifest(cfg, top)
    text = verilog.convert(top, name=TOP_NAME, emit_src=False)
    (outdir / f"{TOP_NAME}.v").write_text(text)
    man["verilog"] = f"{TOP_NAME}.v"
    if attention and cfg.packing != "dense":
        att = AttentionEngine(cfg)
        man["attention"] = attention_manifest(cfg, att)
        text = verilog.convert(att, name=ATTN_TOP_NAME, emit_src=False)
        (outdir / f"{ATTN_TOP_NAME}.v").write_text(text)
    (outdir / "params.json").write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    return man

