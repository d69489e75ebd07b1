"""``dstar run`` end to end: the accelerator top generated, compiled for Verilator and run on
block 0 of the bundled DiT over the first three steps of a real sampling run (a linear and
attention key step, a reuse step, an attention key step), every operation bit-exact against the
golden model with the top's counters equal to the cycle models', the block's float output equal
to the golden pipeline's. All in the ``slow`` tier (each compiles the top for Verilator): the
``tiny`` tiles with memories that hold the bundled block on its first 2 tokens for one step
(with waveforms, which land in the run's build folder), its first 8 tokens over three steps,
and the default preset on the whole block (256 tokens), as ``dstar run`` does by default. The
refusals run in the default tier."""

import json

import pytest

from dstar.cli import main
from dstar.golden.dit import BLOCK_OPS
from dstar.paths import BUILD_DIR_ENV
from tests.conftest import BUILD
from tests.hw.fixtures import need_verilator

#: The tiny preset's tiles with memories that hold the bundled block (fc1: 128 x 512).
SMALL = ("--preset", "tiny", "--set", "max_k=512", "--set", "max_m=512", "--set", "head_dim=32")


def run(capsys, monkeypatch, *argv):
    monkeypatch.setenv(BUILD_DIR_ENV, str(BUILD / "dstar-run"))
    code = main(["run", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def check_report(rep, steps, tokens):
    assert rep["sim"] == "verilator" and rep["steps"] == steps and rep["tokens"] == tokens
    assert rep["bit_exact"] and rep["counters_equal"] and rep["outputs_equal"] == [True] * steps
    assert rep["cycles"] == rep["predicted_cycles"] > 0
    assert rep["clock_cycles"] > rep["cycles"]          # the host's loads and reads besides
    assert list(rep["per_op"]) == list(BLOCK_OPS)
    for d in rep["per_op"].values():
        assert d["runs"] == steps and d["cycles"] == d["predicted_cycles"] > 0
    assert sum(rep["per_op"][op]["cycles"] for op in rep["per_op"]) == rep["cycles"]
    assert abs(sum(rep["elements"].values()) - 1) < 1e-9 and rep["elements"]["zero"] > 0
    with open(rep["results"]) as f:
        assert json.load(f) == rep


@pytest.mark.slow
def test_dstar_run_on_verilator(capsys, monkeypatch):
    need_verilator()
    code, out, err = run(capsys, monkeypatch, *SMALL, "--tokens", "8", "--json")
    assert code == 0, err
    rep = json.loads(out)
    check_report(rep, 3, 8)
    assert rep["preset"] == "custom" and rep["batch"] == 2 and rep["waves"] is None
    # Progress as it went: each operation of each step.
    for s in range(3):
        for op in BLOCK_OPS:
            assert f"step {s} {op}" in err
    ops = json.loads((BUILD / "dstar-run" / "run" / rep["folder"].rsplit("/", 1)[-1]
                      / "ops.json").read_text())
    assert [r["key"] for r in ops if r["op"] == "attention"] == [True, False, True]
    assert [r["key"] for r in ops if r["op"] == "qkv"] == [True, False, False]


@pytest.mark.slow          # the Verilator compile of the top: 5-7 min of the default tier's 25
def test_waves_go_to_the_build_folder(capsys, monkeypatch, tmp_path):
    """``WAVES=1`` is the same switch as ``--waves``: an FST file in the run's folder, nothing
    in the working directory."""
    need_verilator()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WAVES", "1")
    code, out, err = run(capsys, monkeypatch, *SMALL, "--tokens", "2", "--steps", "1",
                         "--json", "--quiet")
    assert code == 0, err
    rep = json.loads(out)
    check_report(rep, 1, 2)
    waves = BUILD / "dstar-run" / "run" / rep["waves"].split("/run/", 1)[1]
    assert waves.name == "dump.fst" and waves.stat().st_size > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,msg", [
    (("--preset", "tiny"), "max_k = 128 cannot run the block: it needs max_k >= 512"),
    ((*SMALL,), "max_tokens = 32 cannot run the block: it needs max_tokens >= 256"),
    ((*SMALL, "--tokens", "300"), "tokens must be in [1, 256], got 300"),
    ((*SMALL, "--tokens", "8", "--block", "9"), "block must be in [0, 5], got 9"),
    ((*SMALL, "--tokens", "8", "--steps", "30"), "steps must be in [1, 20]"),
    (("--set", "datapath=int8"), "needs datapath=dstar"),
])
def test_what_cannot_run_is_one_line(capsys, monkeypatch, argv, msg):
    code, out, err = run(capsys, monkeypatch, *argv)
    assert code == 2 and out == ""
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.slow
def test_the_default_run_on_the_whole_block(capsys, monkeypatch):
    """``dstar run`` with its defaults: the default preset, the whole block (2 x 256 tokens),
    three steps."""
    need_verilator()
    code, out, err = run(capsys, monkeypatch, "--json")
    assert code == 0, err
    rep = json.loads(out)
    check_report(rep, 3, 256)
    assert rep["preset"] == "default" and rep["attention_blocks_computed"] < 1
