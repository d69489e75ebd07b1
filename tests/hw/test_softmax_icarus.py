"""cocotb on Icarus: the generated Verilog of ``dstar.hw.softmax.SoftmaxUnit`` against the golden
softmax (mantissas, group shifts, ``l``, ``r``, ``L``) on random, real, equal, extreme,
one-element and maximum-length rows, rows whose groups have different and clamped exponents and
short last groups, with ``e_max = 0`` and with four keys per beat, with and without random valid
gaps and back-pressure; with no stalls every handshake is at the cycle model's cycle.

The cases (rows, multipliers, stall probabilities) of ``tests/hw/cases/softmax.py`` are written
here to an ``.npz`` and the payload field offsets to a JSON file; ``sim/tb_softmax.py`` drives
the design and computes the golden values and the cycle model's schedule from them.
"""

import json

from amaranth import Shape
from amaranth.back import verilog
from amaranth.lib import data

from dstar.config import preset
from dstar.hw.softmax import Normalizer, SoftmaxUnit
from dstar.paths import build_dir
from dstar.sim.case_files import save_cases
from tests.hw.cases.softmax import default_cases, normalizer_cases, tiny_cases
from tests.hw.fixtures import need_iverilog, run_icarus

BUILD = build_dir("cocotb_softmax")
TOP = "dstar_softmax"


def port_fields(unit, streams=("i_row", "i_logit", "o_p", "o_sum")) -> dict:
    """Per stream, each payload field's ``[offset, width, signed]`` in the flat vector, or
    ``[offset, element width, signed, elements]`` for an array field."""
    out = {}
    for name in streams:
        layout = getattr(unit, name).payload.shape()
        out[name] = {}
        for f, field in layout:
            if isinstance(field.shape, data.ArrayLayout):
                el = Shape.cast(field.shape.elem_shape)
                out[name][f] = [field.offset, el.width, el.signed, field.shape.length]
            else:
                out[name][f] = [field.offset, field.width, Shape.cast(field.shape).signed]
    return out


def run_cocotb(name, unit, params, cases, top=TOP, testcase="test_cases"):
    need_iverilog()
    out = BUILD / name
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{top}.v").write_text(verilog.convert(unit, name=top, emit_src=False))
    (out / "params.json").write_text(json.dumps(params, indent=1))
    save_cases(out / "cases.npz", cases)
    run_icarus(out, top, "dstar.sim.tb_softmax", {"DSTAR_SOFTMAX_PARAMS": out / "params.json",
                                            "DSTAR_SOFTMAX_CASES": out / "cases.npz"},
               testcase=testcase)


def run_unit(cfg, name, cases):
    unit = SoftmaxUnit(cfg)
    params = {"max_row": unit.max_row, "logit_bits": unit.logit_bits, "lanes": unit.lanes,
              "frac_bits": unit.frac_bits, "group": cfg.group, "e_max": cfg.e_max,
              "fields": port_fields(unit)}
    run_cocotb(name, unit, params, cases)


def test_tiny():
    cfg = preset("tiny")
    run_unit(cfg, "tiny", tiny_cases(cfg))


def test_tiny_e_max_0():
    """One exponent per row (``e_max = 0``: no group-max memory) and a group size of 8."""
    cfg = preset("tiny").replace(e_max=0, group=8)
    cases = tiny_cases(cfg)
    run_unit(cfg, "tiny_e0", {k: cases[k] for k in ("random", "edge_stall", "groups")})


def test_tiny_four_lanes():
    """Four keys per beat (``softmax_lanes = 4``): rows overlap, the divider takes 4 bits per
    cycle; every handshake at the cycle model's cycle."""
    cfg = preset("tiny").replace(softmax_lanes=4)
    cases = tiny_cases(cfg)
    run_unit(cfg, "tiny_p4", {k: cases[k] for k in ("random", "random_stall", "edge", "groups",
                                                     "clamp")})


def test_default_real_and_max_length():
    cfg = preset("default")
    run_unit(cfg, "default", default_cases(cfg))


def test_normalizer():
    cfg = preset("default")
    unit = Normalizer(cfg)
    cases = normalizer_cases(cfg)
    params = {"out_frac_bits": cfg.attn_out_frac_bits, "fields": port_fields(unit, ("i", "o"))}
    run_cocotb("normalizer", unit, params, cases, top="dstar_normalizer",
               testcase="test_normalizer")
