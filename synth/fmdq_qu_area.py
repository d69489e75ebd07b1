"""Area of the FMDQ quantization unit (``dstar.hw.fmdq.quant_unit``) on the CMOS flow, against
an INT8 PE array of the same peak throughput.

``python -m dstar.synth.fmdq_qu_area [name ...]`` synthesizes each named configuration of
``CONFIGS`` (the whole unit, the code buffer costed as SRAM when it has at least
``SRAM_MIN_DEPTH`` words, or with ``--rest`` the unit without its sort network, and unless
``--no-sorter`` its sort network alone; ``--keep-verilog`` reuses an earlier run's Verilog
file) and prints one JSON object per configuration: the unit's area, its sort network's, and
the unit's against ``tokens x 64`` lean INT8 MACs (the SIMD-4 array the unit feeds has
``tokens`` columns of 64 PEs, one 8x8 product per PE and cycle at dense INT8), priced at the
lean INT8 datapath's area per MAC (``INT8_MAC_UM2``, from ``docs/results/efficiency_tiny.json``).
Builds in ``build/fmdq_qu/<name>``.

``python -m dstar.synth.fmdq_qu_area --fmax [preset]`` instead places and routes the unit
``FmdqLinear`` builds for ``preset`` (default ``tiny``) alone on the ECP5 (``fmax``): a few
minutes against the whole datapath's quarter of an hour, to iterate on the unit's critical path.
"""

import json
import sys
import time

from amaranth.back import verilog

from dstar.hw.fmdq.quant_unit import QuantUnit
from dstar.paths import build_dir

from .flows import SynthTarget, synth_module, verilog_modules

__all__ = ["CONFIGS", "INT8_MAC_UM2", "ARRAY_ROWS", "unit_area", "run"]

#: Unit configurations: test-sized, middle and the default's sizes (T = window = 64); ``_r3``:
#: a sort-network register after every 3 comparator stages instead of every one.
CONFIGS = {
    "tiny": dict(tokens=4, window=8, e_max=3, tau=0, diff_bits=12, channel_bits=5),
    "tiny_r3": dict(tokens=4, window=8, e_max=3, tau=0, diff_bits=12, channel_bits=5,
                    reg_every=3),
    "mid": dict(tokens=16, window=16, e_max=7, tau=0, diff_bits=17, channel_bits=10),
    "mid_r3": dict(tokens=16, window=16, e_max=7, tau=0, diff_bits=17, channel_bits=10,
                   reg_every=3),
    "default": dict(tokens=64, window=64, e_max=7, tau=0, diff_bits=17, channel_bits=12),
    # The chosen geometry (docs/design/fmdq.md): T = 8, window 32, the tiny preset's channel
    # indices; the unit FmdqLinear builds is the r1 one (``dstar bench efficiency``).
    "t8w32_r3": dict(tokens=8, window=32, e_max=7, tau=0, diff_bits=17, channel_bits=7,
                     reg_every=3),
    # The network variants by name (the default's network may change): ``_oe`` odd-even merges,
    # a register after every stage; ``_bucket`` the bucket ordering stage (no network).
    "tiny_oe": dict(tokens=4, window=8, e_max=3, tau=0, diff_bits=12, channel_bits=5,
                    network="odd_even"),
    "tiny_bucket": dict(tokens=4, window=8, e_max=3, tau=0, diff_bits=12, channel_bits=5,
                        network="bucket"),
    "t8w32_oe": dict(tokens=8, window=32, e_max=7, tau=0, diff_bits=17, channel_bits=7,
                     network="odd_even"),
    "t8w32_bucket": dict(tokens=8, window=32, e_max=7, tau=0, diff_bits=17, channel_bits=7,
                         network="bucket"),
}

#: The lean INT8 datapath's PE area per MAC, logic and with its accumulator memory share
#: (um^2, ``dstar bench efficiency`` on the tiny preset, ``int8_mac``).
INT8_MAC_UM2 = {"logic": 924.6, "with_memory": 1433.9}
#: Output columns of the PE array the unit feeds (spec 7.1: 64 x 64 PEs).
ARRAY_ROWS = 64


def unit_area(kw: dict) -> dict:
    """The whole unit ``QuantUnit(**kw)`` synthesized (flattened; the code buffer as SRAM when
    deep enough), cached in ``build/fmdq_qu/<hash of kw>``: ``unit_um2``, ``unit_logic_um2``,
    ``code_buffer_sram_um2``, ``unit_ffs``, ``sort_latency``, ``buffers``."""
    import hashlib
    name = "u" + hashlib.sha256(json.dumps(kw, sort_keys=True).encode()).hexdigest()[:10]
    d = build_dir("fmdq_qu", name)
    d.mkdir(parents=True, exist_ok=True)
    qu = QuantUnit(**kw)
    v = d / f"qu_{name}.v"
    if not v.exists():
        v.write_text(verilog.convert(qu, name=f"qu_{name}"))
    r = synth_module(v, f"qu_{name}", SynthTarget.CMOS, d / "cmos", reuse=True)
    return {"config": kw, "buffers": qu.buffers, "sort_latency": qu.sort_latency,
            "unit_um2": r["area_um2_45nm"], "unit_logic_um2": r["area_um2_45nm_logic"],
            "code_buffer_sram_um2": r["area_um2_45nm_sram"], "unit_ffs": r["ffs"]}


def run(name: str, sorter: bool = True, rest: bool = False, keep_verilog: bool = False) -> dict:
    """Synthesize configuration ``name``: the whole unit (flattened, so the sort network's
    constant inputs fold; with ``rest``, the unit without its sort network, blackboxed) and,
    with ``sorter``, its sort network alone (from the same Verilog file, all inputs free: an
    upper bound of its share); areas in um^2. ``keep_verilog``: synthesize an earlier run's
    Verilog file instead of generating it again."""
    kw = CONFIGS[name]
    t0 = time.monotonic()
    qu = QuantUnit(**kw)
    top = f"qu_{name}"
    d = build_dir("fmdq_qu", name)
    d.mkdir(parents=True, exist_ok=True)
    v = d / f"{top}.v"
    if not (keep_verilog and v.exists()):
        v.write_text(verilog.convert(qu, name=top))
    # The ordering stage: a sort network, or the bucket stage (``QuantUnit``'s submodules).
    mod = next(m for m in verilog_modules(v) if m.endswith((".sorter", ".order")))
    unit = synth_module(v, top, SynthTarget.CMOS, d / ("rest" if rest else "cmos"),
                        blackbox=(mod,) if rest else (), reuse=True)
    macs = qu.tokens * ARRAY_ROWS
    out = {"config": kw, "buffers": qu.buffers, "sort_latency": qu.sort_latency,
           "without_sorter": rest, "unit_um2": unit["area_um2_45nm"],
           "unit_logic_um2": unit["area_um2_45nm_logic"],
           "code_buffer_sram_um2": unit["area_um2_45nm_sram"], "unit_ffs": unit["ffs"],
           "int8_array_macs": macs}
    for k, per in INT8_MAC_UM2.items():
        out[f"unit_vs_int8_array_{k}"] = round(unit["area_um2_45nm"] / (macs * per), 4)
    if sorter:
        srt = synth_module(v, mod, SynthTarget.CMOS, d / "cmos", reuse=True)
        out.update(sorter_alone_um2=srt["area_um2_45nm"], sorter_alone_ffs=srt["ffs"])
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def fmax(preset_name: str = "tiny", timeout_min: float = 30) -> dict:
    """The quantization unit of ``FmdqLinear`` at ``preset_name`` (``encoding = fmdq``)
    synthesized for the ECP5 with DSPs and placed and routed out of context
    (``dstar.synth.fmax.place_and_route``), in ``build/fmdq_qu/fmax_<preset>``."""
    from dstar.config import preset
    from dstar.hw.fmdq.linear import FmdqLinear

    from . import fmax as _fmax
    qu = FmdqLinear(preset(preset_name, encoding="fmdq")).quant_unit()
    top = "qu"
    d = build_dir("fmdq_qu", f"fmax_{preset_name}")
    d.mkdir(parents=True, exist_ok=True)
    v = d / f"{top}.v"
    text = verilog.convert(qu, name=top)
    if not v.exists() or v.read_text() != text:
        v.write_text(text)
    syn = synth_module(v, top, SynthTarget.ECP5_DSP, d, netlist=True, reuse=True)
    pnr = _fmax.place_and_route(d / f"{top}.{SynthTarget.ECP5_DSP}.json", d, reuse=True,
                                timeout_min=timeout_min)
    return {"preset": preset_name, "luts": syn.get("luts"), "ffs": syn.get("ffs"), **pnr}


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--fmax" in args:
        print(json.dumps(fmax(*[a for a in args if not a.startswith("--")][:1]), indent=1))
        sys.exit()
    for n in [a for a in args if not a.startswith("--")] or ["tiny"]:
        print(json.dumps({n: run(n, "--no-sorter" not in args, "--rest" in args,
                                 "--keep-verilog" in args)}), flush=True)
