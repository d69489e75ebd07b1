"""The simulators' build options: Verilator builds see the top's ports only (the rest of the
design is left to Verilator's optimizer); ``dstar regress``'s Verilator test runs a whole top
through them."""

import pytest

from dstar.sim.simulators import _without_public_flat_rw, top_ports


def test_top_ports_reads_both_header_styles():
    amaranth = "module \\dstar.sub (a, b);\nendmodule\nmodule dstar(clk, rst, \\x$1 , y);\n"
    assert top_ports(amaranth, "dstar") == ["clk", "rst", "x$1", "y"]
    assert top_ports(amaranth, "dstar.sub") == ["a", "b"]
    ansi = "module dstar(input clk, input [7:0] din,\n  output reg [15:0] acc);\nendmodule\n"
    assert top_ports(ansi, "dstar") == ["clk", "din", "acc"]
    with pytest.raises(ValueError, match="no module 'top'"):
        top_ports(ansi, "top")


def test_the_verilator_build_drops_public_flat_rw_only():
    cmds = [["verilator", "-cc", "--vpi", "--public-flat-rw", "top.v"], ["make", "-j", "2"]]
    assert _without_public_flat_rw(cmds) == [["verilator", "-cc", "--vpi", "top.v"],
                                             ["make", "-j", "2"]]
