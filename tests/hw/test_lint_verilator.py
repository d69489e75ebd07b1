"""The lint gate (``dstar.sim.lint``): ``verilator --lint-only -Wall`` finds no warning outside
the waivers ``hw/lint.vlt`` in any generated top (``dstar_linear`` of every datapath,
``dstar_attention``, the accelerator ``dstar``) of the ``tiny`` and ``default`` presets (the
default preset's, minutes of generation, and two of tiny's in the ``slow`` tier: ``TINY``); a
warning the waivers do not cover fails it."""

import re

import pytest
from amaranth import Instance, Module, Signal
from amaranth.back import verilog

from dstar.config import Datapath, Encoding, preset
from dstar.hw.generate import ACCEL_TOP_NAME, ATTN_TOP_NAME, TOP_NAME
from dstar.sim.lint import (
    WAIVERS,
    LintError,
    lint,
    lint_config,
    lint_text,
    missing_verilator,
    top_names,
)


@pytest.fixture(autouse=True)
def _need_verilator():
    reason = missing_verilator()
    if reason is not None:
        pytest.skip(reason)


def check_clean(cfg, tops) -> None:
    found = lint_config(cfg, tops)
    assert sorted(found) == sorted(tops)
    report = "\n".join(f"{top}: {w}" for top, ws in found.items() for w in ws)
    assert not report, f"lint warnings outside {WAIVERS}:\n{report}"


#: The default tier's tops of the tiny preset: the accelerator of each encoding holds its
#: linear layer and the attention engine (its own PE arrays and host ports aside), so that
#: their stand-alone tops, which take as long again, wait for the slow tier.
TINY = [(Datapath.DENSE, TOP_NAME, Encoding.NIBBLE), (Datapath.INT8, TOP_NAME, Encoding.NIBBLE),
        (Datapath.DSTAR, ACCEL_TOP_NAME, Encoding.NIBBLE),
        (Datapath.DSTAR, ACCEL_TOP_NAME, Encoding.FMDQ)]


@pytest.mark.parametrize("datapath,top,encoding", TINY)
def test_tiny_tops_are_lint_clean(datapath, top, encoding):
    check_clean(preset("tiny", datapath=datapath, encoding=encoding), [top])


@pytest.mark.slow
def test_tiny_standalone_dstar_tops_are_lint_clean():
    check_clean(preset("tiny"), [TOP_NAME, ATTN_TOP_NAME])


@pytest.mark.slow
@pytest.mark.parametrize("datapath", list(Datapath))
def test_default_tops_are_lint_clean(datapath):
    cfg = preset("default").replace(datapath=datapath)
    check_clean(cfg, top_names(cfg))


BAD = """\
module bad(input [7:0] a, input [7:0] b, output [3:0] y);
  assign y = a + b;
endmodule
"""


def test_a_truncating_assignment_fails():
    """A truncation the waivers do not describe (they waive only Amaranth's shift idiom) is
    reported with its rule, file and line."""
    found = lint_text({"bad.v": BAD}, "bad")
    assert [(w.rule, w.file, w.line) for w in found] == [("WIDTHTRUNC", "bad.v", 2)]
    assert "ASSIGNW expects 4 bits" in found[0].message


def test_an_amaranth_instance_port_width_fails():
    """Amaranth cannot check an ``Instance``'s port widths against the module; lint does."""
    m = Module()
    a, y = Signal(8), Signal(8)
    m.submodules.sub = Instance("sub", i_a=a, o_y=y)
    top = verilog.convert(m, name="top", ports=[a, y], emit_src=False)
    sub = "module sub(input [3:0] a, output [3:0] y);\n  assign y = a;\nendmodule\n"
    found = lint_text({"top.v": top, "sub.v": sub}, "top")
    assert sorted((w.rule, w.file, w.message.split(" expects")[0]) for w in found) == [
        ("WIDTHTRUNC", "top.v", "Input port connection 'a'"),
        ("WIDTHTRUNC", "top.v", "Output port connection 'y'")]


def test_the_waivers_are_needed_and_commented(tmp_path):
    """Without the waivers Amaranth's idioms are reported (the waivers do the work); with them a
    top module not named like its file still is. Every waiver (or group) has its reason above
    it."""
    m = Module()
    count = Signal(4)
    m.d.sync += count.eq(count + 1)
    text = verilog.convert(m, name="counter", ports=[count], emit_src=False)
    (tmp_path / "counter.v").write_text(text)
    assert {w.rule for w in lint([tmp_path / "counter.v"], "counter", waivers=None)}
    assert lint([tmp_path / "counter.v"], "counter") == []
    (tmp_path / "other.v").write_text(text)
    assert [w.rule for w in lint([tmp_path / "other.v"], "counter")] == ["DECLFILENAME"]
    lines = WAIVERS.read_text().splitlines()
    assert lines[0] == "`verilator_config"
    for i, line in enumerate(lines):
        if line.startswith("lint_off"):
            assert re.match(r"-rule [A-Z]+", line.removeprefix("lint_off ")), line
            above = next(x for x in reversed(lines[:i]) if not x.startswith("lint_off"))
            assert above.startswith("//"), f"line {i + 1}: no reason above it"


def test_a_verilator_error_raises():
    with pytest.raises(LintError, match="syntax error"):
        lint_text({"broken.v": "module broken(;\nendmodule\n"}, "broken")


def test_dstar_lint(capsys):
    """``dstar lint``: the warnings on stdout (none here), a count per top on stderr."""
    from dstar.cli import main

    assert main(["lint", "--preset", "tiny", "--set", "datapath=int8"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"{TOP_NAME}: 0 warning(s)\n"
