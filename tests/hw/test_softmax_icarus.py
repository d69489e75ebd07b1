"""cocotb on Icarus: the generated Verilog of ``dstar.hw.softmax.SoftmaxUnit`` against the golden
softmax (mantissas, group shifts, ``l``, ``r``, ``L``) on random, real, equal, extreme,
one-element and maximum-length rows, rows whose groups have different and clamped exponents and
short last groups, and with ``e_max = 0``, with and without random valid gaps and back-pressure;
with no stalls every handshake is at the cycle model's cycle.

The cases (rows, multipliers, stall probabilities) are written here to an ``.npz`` and the
payload field offsets to a JSON file; ``sim/tb_softmax.py`` drives the design and computes the
golden values and the cycle model's schedule from them.
"""

import json

import numpy as np
from amaranth import Shape
from amaranth.back import verilog

from dstar.config import preset
from dstar.golden.softmax import logit_multiplier
from dstar.hw.softmax import Normalizer, SoftmaxUnit
from dstar.paths import build_dir
from dstar.sim.case_files import save_cases
from dstar.sim.tb_softmax import octave_rows, real_rows
from tests.hw.fixtures import need_iverilog, run_icarus

BUILD = build_dir("cocotb_softmax")
TOP = "dstar_softmax"


def port_fields(unit, streams=("i_row", "i_logit", "o_p", "o_sum")) -> dict:
    """Per stream, each payload field's ``[offset, width, signed]`` in the flat vector."""
    out = {}
    for name in streams:
        layout = getattr(unit, name).payload.shape()
        out[name] = {f: [field.offset, field.width, Shape.cast(field.shape).signed]
                     for f, field in layout}
    return out


def _case(rows, m, sh, stall=(1.0, 1.0), seed=0, n_hdr=None):
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    return {"lengths": lengths, "logits": np.concatenate([np.asarray(r, np.int64) for r in rows]),
            "m": np.asarray(m, np.int64), "sh": np.asarray(sh, np.int64),
            "n_hdr": lengths if n_hdr is None else np.asarray(n_hdr, np.int64),
            "stall": np.array(stall, dtype=np.float64), "seed": np.array(seed)}


def random_rows(rng, lengths, std, frac_bits, dh=32):
    rows, scales = [], []
    for n in lengths:
        s = rng.integers(-127, 128, size=(n, dh)) @ rng.integers(-127, 128, size=dh)
        rows.append(s)
        scales.append(std / max(1.0, float(np.std(s))) if n > 1 else 1e-4)
    m, sh = logit_multiplier(np.array(scales), frac_bits)
    return rows, m, sh


def tiny_cases(cfg):
    rng = np.random.default_rng(7)
    f, n = cfg.attn_frac_bits, cfg.max_tokens
    lengths = [1, n, 7, 16, 2, n - 1, 17, 5, n, 1, 1, 12, 3]
    rows, m, sh = random_rows(rng, lengths, 1.5, f)
    w = 23
    hi, lo = (1 << (w - 1)) - 1, -(1 << (w - 1))
    edge = [[5] * n, [hi] + [lo] * (n - 1), [lo] * (n - 1) + [hi], [hi, lo] * (n // 2), [hi],
            [lo], [0], [hi - 1, hi, hi, hi - 3]]
    edge_m = [40000, 65535, 65535, 1, 65535, 0, 32768, 65535]
    edge_sh = [20, 0, 0, 47, 47, 0, 0, 0]
    xs = list(range(1, ((cfg.e_max + 9) << f) + 8))
    sweep = [[0] + [-x for x in xs[i:i + n - 1]] for i in range(0, len(xs), n - 1)]
    return {
        "random": _case(rows, m, sh),
        "random_stall": _case(rows, m, sh, stall=(0.6, 0.5), seed=1),
        "random_ready": _case(rows, m, sh, stall=(1.0, 0.2), seed=2),
        "edge": _case(edge, edge_m, edge_sh),
        "edge_stall": _case(edge, edge_m, edge_sh, stall=(0.5, 0.7), seed=3),
        "exp_sweep": _case(sweep, [1] * len(sweep), [0] * len(sweep)),
        "groups": _case(*octave_rows(cfg, [n, n, n // 2 + 1, n - 1, 1, n, 3], seed=2)),
        "groups_stall": _case(*octave_rows(cfg, [n, 5, n - 3], seed=3), stall=(0.6, 0.6),
                              seed=5),
        "clamp": _case([[7], list(range(n)), [3, 4]], [30000] * 3, [12] * 3,
                       n_hdr=[0, 2 * n - 1, 2]),
    }


def default_cases(cfg):
    f = cfg.attn_frac_bits
    rows, m, sh = real_rows(layer=2, head=1, rows=range(0, 256, 37), frac_bits=f)
    rng = np.random.default_rng(8)
    rrows, rm, rsh = random_rows(rng, [256, 1, 256, 16], 3.0, f, dh=128)
    return {
        "real": _case(rows, m, sh),
        "real_stall": _case(rows[:3], m[:3], sh[:3], stall=(0.7, 0.6), seed=4),
        "max_length": _case(rrows, rm, rsh),
    }


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
    params = {"max_row": unit.max_row, "logit_bits": unit.logit_bits,
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


def test_default_real_and_max_length():
    cfg = preset("default")
    run_unit(cfg, "default", default_cases(cfg))


def test_normalizer():
    cfg = preset("default")
    unit = Normalizer(cfg)
    rng = np.random.default_rng(9)
    lmax = (255 << cfg.e_max) * cfg.max_tokens
    lsum = rng.integers(255, lmax + 1, size=200)
    lsum[:6] = [255, 255 << cfg.e_max, lmax, lmax, 256, 511]
    acc = rng.integers(-128 * lsum, 128 * lsum + 1)
    acc[:6] = [128 * 255, -128 * 255, 128 * lmax, -128 * lmax, 0, -1]
    cases = {"full": {"acc": acc, "lsum": lsum, "stall": np.array([1.0, 1.0]),
                      "seed": np.array(0)},
             "stall": {"acc": acc[:80], "lsum": lsum[:80], "stall": np.array([0.6, 0.5]),
                       "seed": np.array(1)}}
    params = {"out_frac_bits": cfg.attn_out_frac_bits, "fields": port_fields(unit, ("i", "o"))}
    run_cocotb("normalizer", unit, params, cases, top="dstar_normalizer",
               testcase="test_normalizer")
