"""Throughput per area of the FMDQ SIMD-4 PE array against the lean INT8 array at equal peak INT8
throughput, on the bundled DiT (``python -m dstar.synth.fmdq_area [--fit] [T,M,W ...]``).

* Area: ``FmdqPEArray(T, M, W)`` and the default configuration's ``Int8Array`` (equal peak
  throughput when ``T x M = lanes x m_tile``, 64: a SIMD-4 PE does one 8-bit activation's worth
  of work per cycle, as one INT8 MAC) synthesized alone with the
  project's CMOS flow (``dstar.synth.flows``, Yosys, 45 nm estimate); logic and the accumulator
  memory reported apart (the memory's size is the configuration's ``max_tokens x max_m``, not
  the PE design's).
* Cycles: every linear layer of every DiT block over the sampling run, FMDQ-encoded with tiles of
  ``T`` tokens (``golden.difflinear`` with ``encoding = "fmdq"``), on ``n_arrays`` arrays of each
  kind: FMDQ by ``sim.fmdq_cycles.layer_cycles``, INT8 by ``sim.int8_cycles`` (exact against
  their RTL; the FMDQ layer's weight loading is the model's assumption, see there).
* Ratio at PE-array level: (INT8 cycles / FMDQ cycles) x (INT8 area / FMDQ area).
"""

import json
import sys

from dstar.config import Config, Datapath, Encoding
from dstar.paths import build_dir

__all__ = ["fmdq_area", "fmdq_parts", "fitted_area", "int8_area", "run_cycles", "main"]


def _synth(comp, name, cfg, layouts, d) -> dict:
    """CMOS counts of ``comp``; its Verilog is rewritten only when it changed, so that an
    earlier synthesis of the same text is reused."""
    import shutil

    from dstar.hw.generate import generate_block
    from dstar.synth.flows import synth_module
    fresh = d.with_name(d.name + ".new")
    generate_block(comp, name, cfg, layouts, fresh)
    d.mkdir(parents=True, exist_ok=True)
    for f in sorted(fresh.iterdir()):
        old = d / f.name
        if not old.exists() or old.read_bytes() != f.read_bytes():
            f.replace(old)
    shutil.rmtree(fresh)
    r = synth_module(d / f"{name}.v", name, "cmos", d / "cmos", reuse=True)
    out = {k: r[k] for k in ("ffs", "gates", "transistors_logic", "area_um2_45nm",
                             "area_um2_45nm_logic", "area_um2_45nm_sram")}
    out["memories_um2"] = {mem["name"]: mem["area_um2_45nm"] for mem in r["memories"]}
    return out


def fmdq_area(tokens: int, columns: int, window: int, cfg: Config) -> dict:
    """CMOS area of one ``FmdqPEArray`` whose accumulator memory holds as many values as the
    INT8 array's of ``cfg`` (``y_depth x m_tile``) at ``cfg.acc_bits``."""
    from dstar.hw.fmdq.pe_array import FmdqPEArray
    from dstar.hw.geometry import DenseGeometry
    y_depth = DenseGeometry(cfg.replace(datapath=Datapath.INT8)).base.y_depth
    y_depth = y_depth * cfg.m_tile // columns
    comp = FmdqPEArray(tokens=tokens, columns=columns, window=window, e_max=cfg.e_max,
                       channel_bits=(cfg.max_k - 1).bit_length(), y_depth=y_depth,
                       y_bits=cfg.acc_bits)
    d = build_dir("fmdq_area", f"fmdq-T{tokens}-M{columns}-W{window}")
    return _synth(comp, "dstar_fmdq_pe_array", cfg, {}, d)


def fmdq_parts(window: int, cfg: Config, weights: str = "memory") -> dict:
    """Logic area (um^2) per PE, per column and per array of ``FmdqPEArray`` with ``window``,
    from four small arrays (``T, M`` in 1, 2) fitted to ``A = a + T a_t + M c + T M p``: ``p``
    the PE (lane selects, sum, Horner accumulator, drain register), ``c`` a column's share
    (its lanes' weight multiples, write-out row multiplexer, shifter and ``Y`` adder),
    ``a_t`` a token's slice registers, ``a`` the rest (control, the weight window's logic)."""
    from dstar.hw.fmdq.pe_array import FmdqPEArray
    got = {}
    for t in (1, 2):
        for m in (1, 2):
            comp = FmdqPEArray(tokens=t, columns=m, window=window, e_max=cfg.e_max,
                               channel_bits=(cfg.max_k - 1).bit_length(), y_depth=64,
                               y_bits=cfg.acc_bits, weights=weights)
            d = build_dir("fmdq_area", f"part-T{t}-M{m}-W{window}-{weights}")
            got[t, m] = _synth(comp, "dstar_fmdq_pe_array", cfg, {}, d)["area_um2_45nm_logic"]
    p = got[2, 2] - got[2, 1] - got[1, 2] + got[1, 1]
    c = got[1, 2] - got[1, 1] - p
    a_t = got[2, 1] - got[1, 1] - p
    return {"pe": round(p, 1), "column": round(c, 1), "token": round(a_t, 1),
            "array": round(got[1, 1] - p - c - a_t, 1)}


def int8_area(cfg: Config) -> dict:
    from dstar.hw.geometry import DenseGeometry
    from dstar.hw.int8 import Int8Array, token_op_layout
    cfg = cfg.replace(datapath=Datapath.INT8)
    dg = DenseGeometry(cfg)
    d = build_dir("fmdq_area", f"int8-g{cfg.group}-m{cfg.m_tile}")
    return _synth(Int8Array(dg), "dstar_pe_array", cfg, {"token_op": token_op_layout(dg)}, d)


def run_cycles(tokens: int, columns: int, windows, cfg: Config, steps: int) -> dict:
    """Cycles of the whole run: ``int8`` and, per window, ``fmdq``; plus the FMDQ counts."""
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.fmdq_pe import unit_bubbles
    from dstar.sim.bench import all_layers, dense_cycles
    from dstar.sim.fmdq_cycles import layer_cycles
    from dstar.sim.traces import linear_inputs
    fcfg = cfg.replace(encoding=Encoding.FMDQ, token_tile=tokens)
    out = {"int8": 0, "fmdq": {w: 0 for w in windows}, "groups": {w: 0 for w in windows},
           "bubbles": {w: 0 for w in windows}, "dense_groups": 0, "width_bits": 0}
    for layer in all_layers():
        xs, w, b = linear_inputs(layer, steps=steps)
        lin = DiffLinear(w, b, fcfg, layer)
        n, k, m_out = xs.shape[1], w.shape[1], w.shape[0]
        for s in range(len(xs)):
            enc = lin(xs[s], s).enc
            out["int8"] += dense_cycles(cfg, Datapath.INT8, n, k, m_out)
            out["dense_groups"] += enc.width.size
            out["width_bits"] += int(enc.width.sum())
            for win in windows:
                out["fmdq"][win] += layer_cycles(enc, win, m_out, columns, cfg.n_arrays)
                out["groups"][win] += int(enc.groups_per_tile(win).sum())
                out["bubbles"][win] += sum(
                    int(unit_bubbles(enc.shift[:, c:c + win], enc.width[:, c:c + win]).sum())
                    for c in range(0, k, win))
    return out


def fitted_area(tokens: int, columns: int, window: int, cfg: Config) -> dict:
    """``fmdq_area``'s figures from the per-part fit (``fmdq_parts``) and the memories' SRAM
    cost (``synth.flows.sram_cost``), without synthesizing the whole array."""
    from dstar.hw.geometry import DenseGeometry
    from dstar.synth.flows import sram_cost
    f = fmdq_parts(window, cfg)
    logic = (tokens * columns * f["pe"] + columns * f["column"] + tokens * f["token"]
             + f["array"])
    y_depth = DenseGeometry(cfg.replace(datapath=Datapath.INT8)).base.y_depth
    y_depth = y_depth * cfg.m_tile // columns
    mems = {"wmem": sram_cost({"depth": 2 * window, "width": 8 * columns, "read_ports": 4}),
            "y": sram_cost({"depth": y_depth, "width": cfg.acc_bits * columns,
                            "read_ports": 1})}
    mems = {k: (v["area_um2_45nm"] if v["depth"] >= 64 else 0.0) for k, v in mems.items()}
    return {"area_um2_45nm_logic": round(logic, 1), "memories_um2": mems,
            "area_um2_45nm": round(logic + sum(mems.values()), 1), "fit": f}


def _cached_cycles(tokens, columns, windows, cfg, steps) -> dict:
    path = build_dir("fmdq_area", f"cycles-T{tokens}-M{columns}-{config_key(cfg)}-{steps}.json")
    if path.is_file():
        got = json.loads(path.read_text())
        if all(str(w) in got["fmdq"] for w in windows):
            return got
    got = json.loads(json.dumps(run_cycles(tokens, columns, windows, cfg, steps)))
    path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    return got


def _mem(area: dict, name: str) -> float:
    """SRAM area of the memories named ``name`` (or ``name.<...>``) in an area dict."""
    return sum(v for k, v in area["memories_um2"].items()
               if k == name or k.startswith(name + "."))


def config_key(cfg: Config) -> str:
    import hashlib
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def main(argv=None) -> None:
    """``[--fit] T,M,W ...``: the report of each shape (default ``8,8,32``); ``--fit`` takes
    the FMDQ logic from the per-part fit instead of synthesizing the whole array."""
    argv = sys.argv[1:] if argv is None else argv
    fit = "--fit" in argv
    shapes = [tuple(int(v) for v in a.split(",")) for a in argv if a != "--fit"] or [(8, 8, 32)]
    cfg = Config()
    ref = int8_area(cfg)
    ref_core = ref["area_um2_45nm"] - _mem(ref, "y")
    for t, m, w in shapes:
        a = (fitted_area if fit else fmdq_area)(t, m, w, cfg)
        core = a["area_um2_45nm"] - _mem(a, "y")
        c = _cached_cycles(t, m, sorted({w, 16, 32, 64}), cfg, cfg.steps)
        sp = c["int8"] / c["fmdq"][str(w)]
        print(f"T={t} M={m} W={w}: cycles {c['fmdq'][str(w)]} vs INT8 {c['int8']} "
              f"(x{sp:.3f}; mean width {c['width_bits'] / c['dense_groups']:.2f} bits, "
              f"bubbles {c['bubbles'][str(w)]}); area um^2: logic "
              f"{a['area_um2_45nm_logic']:.0f}, weight window {_mem(a, 'wmem'):.0f}, "
              f"Y {_mem(a, 'y'):.0f}{' (fit)' if fit else ''}; INT8 logic "
              f"{ref['area_um2_45nm_logic']:.0f}, Y {_mem(ref, 'y'):.0f}; "
              f"throughput per area vs INT8: {sp * ref_core / core:.3f} without the Y memories, "
              f"{sp * ref['area_um2_45nm'] / a['area_um2_45nm']:.3f} with them", flush=True)


if __name__ == "__main__":
    main()
