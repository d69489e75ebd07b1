"""Generation: byte-identical Verilog across runs, and a manifest that agrees with it."""

import json
import re
import shutil

from dstar.config import preset
from dstar.hw.generate import ATTN_TOP_NAME, TOP_NAME, generate


def test_generate_is_deterministic_and_manifest_matches(tmp_path):
    cfg = preset("tiny").replace(packing="lockstep")
    a, b = tmp_path / "a", tmp_path / "b"
    man = generate(cfg, a)
    generate(cfg, b)
    va, vb = (d / f"{TOP_NAME}.v" for d in (a, b))
    assert va.read_bytes() == vb.read_bytes()
    attn_a, attn_b = (d / f"{ATTN_TOP_NAME}.v" for d in (a, b))
    assert attn_a.read_bytes() == attn_b.read_bytes()
    assert (a / "params.json").read_bytes() == (b / "params.json").read_bytes()
    text = va.read_text()
    assert str(a) not in text and "src =" not in text             # no source paths
    assert json.loads((a / "params.json").read_text()) == man
    assert man["config"] == cfg.hardware() and man["derived"] == cfg.derived()
    assert {**man["config"], **man["run"]} == cfg.to_dict()
    # Every manifest port is a top-level port of that width and direction, and vice versa.
    assert _ports(text, TOP_NAME) == man["ports"]
    att = man["attention"]
    assert att["verilog"] == attn_a.name and att["config"] == cfg.hardware()
    # The default softmax (auto): 4 keys per cycle, 4 quotient bits per division step.
    assert att["softmax"]["lanes"] == cfg.softmax_keys_per_cycle == 4
    assert att["softmax"]["div_steps"] == 5
    assert _ports(attn_a.read_text(), ATTN_TOP_NAME) == att["ports"]
    # Layout field lists tile their vectors exactly.
    for name, lay in [*man["layouts"].items(), *att["layouts"].items()]:
        covered = sorted((f["offset"], f["offset"] + f["width"]) for f in lay["fields"])
        assert covered[0][0] == 0 and covered[-1][1] == lay["width"], name
        assert all(x[1] == y[0] for x, y in zip(covered, covered[1:], strict=False)), name
    # The linear wrapper's Verilog does not depend on the attention engine being generated.
    # Into a folder of an earlier run: the engine it no longer makes is removed, files that are
    # not generate's stay.
    c = tmp_path / "c"
    shutil.copytree(a, c)
    (c / "cases.npz").write_text("a testbench's")
    man_c = generate(cfg, c, attention=False)
    assert sorted(p.name for p in c.iterdir()) == ["cases.npz", f"{TOP_NAME}.v", "params.json"]
    assert (c / f"{TOP_NAME}.v").read_bytes() == va.read_bytes()
    assert "attention" not in man_c and {**man_c, "attention": att} == man


def _ports(text, top_name):
    decl = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):0\]\s+)?"
                      r"\\?([\w$]+)\s*;", re.M)
    top = text[text.index(f"module {top_name}("):]
    top = top[:top.index("endmodule")]
    ports = {name: {"dir": "in" if d == "input" else "out", "width": int(msb or 0) + 1}
             for d, msb, name in decl.findall(top)}
    ports.pop("clk")
    ports.pop("rst")
    return ports
