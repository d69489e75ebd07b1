"""Generation: byte-identical Verilog across runs, string-hash seeds and working directories,
and a manifest that agrees with it."""

import json
import os
import re
import shutil
import subprocess
import sys

from dstar.config import preset
from dstar.hw.generate import ACCEL_TOP_NAME, ATTN_TOP_NAME, OUTPUTS, TOP_NAME, generate


def _generate_apart(tmp_path, argv, seeds=("1", "2")) -> list:
    """``dstar generate argv -o out`` in one process per hash seed (``PYTHONHASHSEED``), all at
    once, each in a working directory of its own and writing there (a relative ``-o``);
    returns the output folders."""
    runs = []
    for seed in seeds:
        cwd = tmp_path / f"cwd_{seed}"
        cwd.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed}
        runs.append((cwd / "out", subprocess.Popen(
            [sys.executable, "-m", "dstar.cli", "generate", *argv, "-o", "out"], cwd=cwd,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for _, proc in runs:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out
    return [out for out, _ in runs]


def test_generate_is_deterministic_and_manifest_matches(tmp_path):
    """Two processes with different string-hash seeds, in different folders, write the same
    bytes in every file (the accelerator top's included)."""
    cfg = preset("tiny", encoding="nibble").replace(packing="lockstep")
    a, b = _generate_apart(tmp_path, ["--preset", "tiny", "--set", "encoding=nibble",
                                      "--packing", "lockstep", "--accelerator"])
    assert sorted(p.name for p in a.iterdir()) == sorted(OUTPUTS)
    for name in OUTPUTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    va = a / f"{TOP_NAME}.v"
    attn_a = a / f"{ATTN_TOP_NAME}.v"
    text = va.read_text()
    for v in (va, attn_a, a / f"{ACCEL_TOP_NAME}.v"):            # no source paths
        assert str(tmp_path) not in v.read_text() and "src =" not in v.read_text()
    man = json.loads((a / "params.json").read_text())
    man.pop("accelerator")
    assert man["config"] == cfg.hardware() and man["derived"] == cfg.derived()
    unused = cfg.unused()               # another encoding's fields reach no hardware
    assert unused and not unused.keys() & {**man["config"], **man["run"]}.keys()
    assert {**man["config"], **man["run"], **unused} == cfg.to_dict()
    # Every manifest port is a top-level port of that width and direction, and vice versa.
    assert _ports(text, TOP_NAME) == man["ports"]
    att = man["attention"]
    assert att["verilog"] == attn_a.name and att["config"] == cfg.hardware()
    # The default softmax (auto): 4 keys per cycle, 4 quotient bits per division step.
    assert att["softmax"]["lanes"] == cfg.softmax_keys_per_cycle == 4
    assert att["softmax"]["div_steps"] == 6
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
    assert json.loads((c / "params.json").read_text()) == man_c
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
