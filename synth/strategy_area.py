"""Area of each linear packing strategy's blocks: its dispatcher and one PE array (its lanes),
each synthesized alone with ``dstar.synth.flows`` (Yosys, per block as ``dstar.synth.report``
does), and one PE array of the lean dense INT8 baseline (``hw.int8``) they are measured
against. ``dstar bench cycles --area [PRESET]`` prints it after the cycle figures."""

from dstar.config import Datapath
from dstar.hw import layouts
from dstar.hw.dispatcher import make_dispatcher
from dstar.hw.generate import generate_block
from dstar.hw.geometry import DenseGeometry, Geometry
from dstar.hw.int8 import Int8Array, token_op_layout
from dstar.hw.pe_array import PEArray
from dstar.paths import build_dir

from .flows import synth_module

__all__ = ["strategy_area", "print_area"]


def strategy_area(base, strategies, targets=("cmos", "ice40")):
    """Synthesize each strategy's dispatcher and one PE array (its lanes) alone with
    ``dstar.synth.flows`` (Yosys, per block as ``dstar.synth.report`` does), and one PE array
    of the lean dense INT8 baseline (label ``int8``); returns ``{label: {block: {target:
    summary}}}``."""
    out = {}
    for label, p, rot in strategies:
        cfg = base.replace(packing=p, lane_rotation=rot)
        geo = Geometry(cfg)
        d = build_dir("bench_area", f"{p}-R{geo.rotation}")
        lays = {"lane_op": layouts.lane_op_layout(geo)}
        res = out[label] = {}
        for block, comp in (("dispatcher", make_dispatcher(geo)), ("pe_array", PEArray(geo))):
            generate_block(comp, f"dstar_{block}", cfg, lays, d)
            res[block] = {t: synth_module(d / f"dstar_{block}.v", f"dstar_{block}", t, d / t)
                          for t in targets}
    cfg = base.replace(datapath=Datapath.INT8)
    dg = DenseGeometry(cfg)
    d = build_dir("bench_area", "int8")
    generate_block(Int8Array(dg), "dstar_pe_array", cfg, {"token_op": token_op_layout(dg)}, d)
    out["int8"] = {"pe_array": {t: synth_module(d / "dstar_pe_array.v", "dstar_pe_array", t,
                                                d / t) for t in targets}}
    return out


def print_area(area):
    for label, blocks in area.items():
        parts = []
        for block, per_t in blocks.items():
            f = []
            if "cmos" in per_t:
                c = per_t["cmos"]
                f.append(f"{c['transistors'] / 1e3:.0f}k transistors "
                         f"{c['area_um2_45nm'] / 1e6:.4f} mm2")
            if "ice40" in per_t:
                f.append(f"{per_t['ice40']['luts']} LUT4 {per_t['ice40']['ffs']} FF (iCE40)")
            parts.append(f"{block} " + ", ".join(f))
        print(f"{label:12s} " + " | ".join(parts))
