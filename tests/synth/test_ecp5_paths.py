"""``dstar.synth.ecp5_paths``: the estimate on a hand-built netlist (flip-flops, a block RAM, LUTs,
a carry chain, an input port), with the arrivals computed by hand from its delays."""

import json

import pytest

from dstar.synth.ecp5_paths import CELL_NS, FANOUT_NS, ROUTE_NS, estimate, main


def _cell(typ, ins: dict, outs: dict, **params):
    conns = {**ins, **outs}
    dirs = {**{p: "input" for p in ins}, **{p: "output" for p in outs}}
    return {"type": typ, "parameters": params, "connections": conns, "port_directions": dirs}


def _netlist():
    # nets: 2 port, 3 ff_a.Q, 4 lut1.Z, 5 lut2.Z, 6 bram DO0, 7 lut3.Z, 8 ccu S0/COUT chain,
    # 9 ccu2 S0, 10 lut from the port
    cells = {
        "ff_a": _cell("TRELLIS_FF", {"DI": [2], "CLK": [1]}, {"Q": [3]}),
        "lut1": _cell("LUT4", {"A": [3]}, {"Z": [4]}),
        "lut2": _cell("LUT4", {"A": [4], "B": [3]}, {"Z": [5]}),
        "ff_b": _cell("TRELLIS_FF", {"DI": [5], "CLK": [1]}, {"Q": [11]}),
        "ram": _cell("DP16KD", {"ADA0": [3], "CLKA": [1]}, {"DOA0": [6]}),
        "lut3": _cell("LUT4", {"A": [6]}, {"Z": [7]}),
        "ccu_a": _cell("CCU2C", {"A0": [7], "CIN": [0]}, {"S0": [12], "COUT": [8]}),
        "ccu_b": _cell("CCU2C", {"A0": [12], "CIN": [8]}, {"S0": [9]}),
        "ff_c": _cell("TRELLIS_FF", {"DI": [9], "CLK": [1]}, {"Q": [13]}),
        "lut_port": _cell("LUT4", {"A": [2]}, {"Z": [10]}),
        "ff_d": _cell("TRELLIS_FF", {"DI": [10], "CLK": [1]}, {"Q": [14]}),
    }
    return {"modules": {"top": {"cells": cells}}}


def wire(fanout):
    return ROUTE_NS + FANOUT_NS * fanout


def test_arrivals_by_hand():
    paths = {p["end"]: p for p in estimate(_netlist(), "top")}
    # ff_a.Q (fan-out 3: lut1, lut2, the RAM) -> lut1 -> lut2 -> ff_b
    b = CELL_NS["ff_q"] + wire(3) + CELL_NS["lut"] + wire(1) + CELL_NS["lut"] + wire(1)
    assert paths["ff_b.DI"]["arrival_ns"] == pytest.approx(b, abs=0.006)
    assert paths["ff_b.DI"]["levels"] == 3 and paths["ff_b.DI"]["start"] == "ff_a"
    # RAM -> lut3 -> ccu_a.A0 -> COUT (carry, no wire) -> ccu_b.S0 via CIN; S0 of ccu_a reaches
    # ccu_b.A0 later or earlier: the later of the two wins.
    base = CELL_NS["bram_q"] + wire(1) + CELL_NS["lut"] + wire(1)
    via_carry = base + CELL_NS["ccu2_in"] + CELL_NS["ccu2_sum"]
    via_sum = base + CELL_NS["ccu2_in"] + wire(1) + CELL_NS["ccu2_in"]
    assert via_sum > via_carry
    assert paths["ff_c.DI"]["arrival_ns"] == pytest.approx(via_sum + wire(1), abs=0.006)
    # the path from the input port is not timed; ff_a.DI (the port) neither
    assert "ff_d.DI" not in paths and "ff_a.DI" not in paths
    # the latest first
    arrivals = [p["arrival_ns"] for p in estimate(_netlist(), "top")]
    assert arrivals == sorted(arrivals, reverse=True) and arrivals[0] == paths["ff_c.DI"][
        "arrival_ns"]


def test_count_and_threshold():
    assert len(estimate(_netlist(), "top", count=1)) == 1
    assert [p["end"] for p in estimate(_netlist(), "top", min_ns=8.0)] == ["ff_c.DI"]


def test_cli(tmp_path, capsys):
    f = tmp_path / "n.json"
    f.write_text(json.dumps(_netlist()))
    assert main([str(f), "--top", "top", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["end"] == "ff_c.DI"
    assert main([str(f), "--top", "nope"]) == 2
    assert "no module 'nope'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read netlist" in capsys.readouterr().err
