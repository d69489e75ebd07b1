"""Area of the FMDQ quantization unit (``dstar.hw.fmdq.quant_unit``) on the CMOS flow, against
an INT8 PE array of the same peak throughput.

``python -m dstar.synth.fmdq_qu_area [name ...]`` synthesizes each named configuration of
``CONFIGS`` (the unit alone, its sort network and front end inside it, the code buffer costed
as SRAM when it has at least ``SRAM_MIN_DEPTH`` words) and prints one JSON object per
configuration: the unit's area, its sort network's (the same sorter synthesized alone) and
both against ``tokens x 64`` lean INT8 MACs (the SIMD-4 array the unit feeds has ``tokens``
columns of 64 PEs, one 8x8 product per PE and cycle at dense INT8), priced at the lean INT8
datapath's area per MAC (``INT8_MAC_UM2``, from ``docs/results/efficiency_tiny.json``).
"""

import json
import sys
import time

from amaranth.back import verilog

from dstar.hw.fmdq.quant_unit import QuantUnit, _entry_key, sort_entry_layout
from dstar.hw.fmdq.sorter import BitonicSorter
from dstar.paths import build_dir

from .flows import SynthTarget, synth_module

__all__ = ["CONFIGS", "INT8_MAC_UM2", "ARRAY_ROWS", "run"]

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
}

#: The lean INT8 datapath's PE area per MAC, logic and with its accumulator memory share
#: (um^2, ``dstar bench efficiency`` on the tiny preset, ``int8_mac``).
INT8_MAC_UM2 = {"logic": 924.6, "with_memory": 1433.9}
#: Output columns of the PE array the unit feeds (spec 7.1: 64 x 64 PEs).
ARRAY_ROWS = 64


def _synth(top, name: str) -> dict:
    d = build_dir("fmdq_qu", name)
    d.mkdir(parents=True, exist_ok=True)
    v = d / f"{name}.v"
    v.write_text(verilog.convert(top, name=name))
    return synth_module(v, name, SynthTarget.CMOS, d / "cmos", reuse=True)


def run(name: str) -> dict:
    kw = CONFIGS[name]
    t0 = time.monotonic()
    qu = QuantUnit(**kw)
    unit = _synth(qu, f"qu_{name}")
    srt = BitonicSorter(sort_entry_layout(qu.window, qu.e_max), 4 * qu.window, _entry_key,
                        1, qu.reg_every)
    sorter = _synth(srt, f"qu_sorter_{name}")
    macs = qu.tokens * ARRAY_ROWS
    out = {"config": kw, "buffers": qu.buffers, "sort_latency": qu.sort_latency,
           "unit_um2": unit["area_um2_45nm"], "unit_logic_um2": unit["area_um2_45nm_logic"],
           "unit_sram_um2": unit["area_um2_45nm_sram"], "unit_ffs": unit["ffs"],
           "sorter_um2": sorter["area_um2_45nm"], "sorter_ffs": sorter["ffs"],
           "int8_array_macs": macs}
    for k, per in INT8_MAC_UM2.items():
        out[f"unit_vs_int8_array_{k}"] = round(unit["area_um2_45nm"] / (macs * per), 4)
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


if __name__ == "__main__":
    for n in sys.argv[1:] or ["tiny"]:
        print(json.dumps({n: run(n)}), flush=True)
