"""``dstar regress`` on Verilator, short, for each encoding's accelerator top: the ``tiny`` top
compiled once, then a minute of constrained-random cases (``dstar.sim.regress``; FMDQ's linear
steps ``dstar.sim.fmdq_regress``) in one simulation, every case bit-exact against the golden
model and the cycle models, coverage recorded in the JSON report; then, on the same build, two
cases with the second one's expectation made wrong: the run reports that case, exits 1 and
prints the line that reruns it. FMDQ's top (the default, no ``--set``) runs in the default tier,
v1's (``--set encoding=nibble``) behind ``-m slow``: each needs its own compile. The build root
is the default one, so that the compiled model is the one ``dstar regress`` in this checkout
uses (its build is keyed by the Verilog: compiled once)."""

import json

import pytest

from dstar.cli import main
from tests.hw.fixtures import need_verilator

SEED = 2026
#: ``--set`` of each top's runs (FMDQ: the default) and the bins a minute of it reaches.
TOPS = {
    "fmdq": ((), ("lin.run.full_rate", "lin.run.din_gap", "data.width.8")),
    "nibble": (("--set", "encoding=nibble"), ("stream.din_gap",)),
}
ENCODINGS = ["fmdq", pytest.param("nibble", marks=pytest.mark.slow)]


def regress(capsys, *argv):
    code = main(["regress", "--seed", str(SEED), *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_random_cases_match_the_golden_model_and_cover_the_bins(capsys, tmp_path, encoding):
    need_verilator()
    path = tmp_path / "regress.json"
    sets, reached = TOPS[encoding]
    code, out, err = regress(capsys, *sets, "--minutes", "1", "-o", str(path))
    assert f"seed {SEED}" in err
    rep = json.loads(path.read_text())
    assert code == 0, out
    assert rep["config"].get("encoding", "nibble") == encoding
    assert rep["seed"] == SEED and rep["mismatches"] == 0 and rep["failures"] == []
    assert rep["cases"] >= 3
    cov = rep["coverage"]
    assert cov["bins"] == len(rep["hits"]) and cov["hit"] == sum(1 for n in rep["hits"].values()
                                                                 if n)
    # The streams, opcodes and refusals every run of this length reaches.
    for name in ("op.RUN_LINEAR", "op.RUN_ATTENTION", "op.LOAD", "op.READ",
                 "stream.dout_backpressure", "lin.key", "att.key", *reached):
        assert rep["hits"][name] > 0, name
    assert cov["percent"] >= 70, cov["missed"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_wrong_expectation_is_reported_with_its_rerun_line(capsys, encoding):
    need_verilator()
    sets, _ = TOPS[encoding]
    code, out, err = regress(capsys, *sets, "--cases", "2", "--inject-mismatch", "1")
    assert code == 1
    assert "mismatches: 1 cases" in out
    assert f"seed {SEED} case 1: op " in out and "differs" in out
    # The default (no preset) is tiny; the rerun line carries the --set that chose the top.
    assert (f"rerun: dstar regress --preset tiny {' '.join(sets)}{' ' if sets else ''}"
            f"--seed {SEED} --case 1" in out)
