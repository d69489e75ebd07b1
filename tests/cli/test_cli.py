import json

import numpy as np
import pytest
from dstar.golden.trace import Trace, save_trace

from dstar.cli import main

pytestmark = pytest.mark.unit


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_config_prints_resolved_and_derived(capsys):
    code, out, _ = run(capsys, "config", "--preset", "tiny", "--tau", "3")
    assert code == 0
    d = json.loads(out)
    assert d["config"]["tau"] == 3 and d["derived"]["e_tol"] == 2


@pytest.mark.parametrize("argv,msg", [
    (["config", "--preset", "huge"], "unknown preset 'huge'"),
    (["analyze", "--trace", "/no/such.npz", "--quiet"], "does not exist"),
    (["config", "--config", "/no/such.toml"], "does not exist"),
    (["analyze", "--sweep", "thet=1"], "cannot sweep 'thet'"),
    (["analyze", "--sweep", "theta=1.5"], "theta must be in (0, 1], got 1.5"),
    (["analyze", "--sweep", "refresh_attn=x"], "bad value in 'refresh_attn=x'"),
    (["analyze", "--sweep", "theta"], "expects FIELD=V1,V2"),
    (["analyze", "--sweep", "tau=0", "--sweep", "tau=1"], "'tau' given twice"),
    (["analyze", "--sweep", "linears=int4"], "linears must be one of dstar, w8a8, float"),
])
def test_bad_input_is_one_line(capsys, argv, msg):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_dense_packing_points_to_the_datapath(capsys, tmp_path):
    f = tmp_path / "old.toml"
    f.write_text('preset = "tiny"\npacking = "dense"\n')
    code, _, err = run(capsys, "config", "--config", str(f))
    assert code == 2 and err.count("\n") == 1
    assert 'packing = "dense" is not a packing' in err and 'use datapath = "dense"' in err
    f.write_text('preset = "tiny"\ndatapath = "dense"\n')
    code, out, _ = run(capsys, "config", "--config", str(f))
    assert code == 0 and json.loads(out)["config"]["datapath"] == "dense"


def test_bad_cli_values_are_rejected(capsys):
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--tau", "-2"])
    assert e.value.code == 2
    assert "--tau: expected an integer >= 0, got -2" in capsys.readouterr().err


def test_analyze_trace_json(capsys, tmp_path):
    rng = np.random.default_rng(0)
    tr = Trace(steps=2)
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    tr.linear_x["l.fc1"], tr.linear_w["l.fc1"], tr.linear_b["l.fc1"] = x, x[0, :3], None
    f = tmp_path / "t.npz"
    save_trace(f, tr)
    code, out, _ = run(capsys, "analyze", "--trace", str(f), "--json", "--quiet")
    assert code == 0
    rep = json.loads(out)
    assert rep["steps"] == 2 and rep["tokens"] == 4 and 0 <= rep["dstar"]["zero_fraction"] <= 1
    # group 16 does not divide K = 16? it does; K = 12 would not:
    tr.linear_x["l.fc1"] = x[..., :12]
    tr.linear_w["l.fc1"] = x[0, :3, :12]
    save_trace(f, tr)
    code, _, err = run(capsys, "analyze", "--trace", str(f), "--quiet")
    assert code == 2 and "K=12 is not a multiple of group=16" in err


def test_analyze_bundled_json_keys(capsys, tmp_path):
    png = tmp_path / "grid.png"
    code, out, _ = run(capsys, "analyze", "--preset", "tiny", "--steps", "3", "--samples", "1",
                       "--json", "--quiet", "--png", str(png))
    assert code == 0
    rep = json.loads(out)
    for key in ("workload", "steps", "tokens", "ops_ratio_vs_w8a8", "lockstep_ops_ratio_vs_w8a8"):
        assert key in rep
    for key in ("low_bit_fraction", "zero_fraction", "mean_passes", "psnr_vs_fp32_db"):
        assert isinstance(rep["dstar"][key], float)
    assert isinstance(rep["w8a8"]["psnr_vs_fp32_db"], float)
    assert 0 < rep["attention"]["blocks_computed_fraction"] <= 1
    assert rep["steps"] == 3 and rep["tokens"] == 256
    assert rep["ops_ratio_vs_w8a8"] == pytest.approx(2.0 / rep["dstar"]["mean_passes"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_sweep(capsys):
    code, out, _ = run(capsys, "analyze", "--steps", "3", "--samples", "1", "--json", "--quiet",
                       "--sweep", "theta=0.3,1", "--sweep", "refresh_attn=2")
    assert code == 0
    rep = json.loads(out)
    pts = rep["points"]
    assert [(p["theta"], p["refresh_attn"]) for p in pts] == [(0.3, 2), (1.0, 2)]
    # theta = 1 computes every block; a low theta computes fewer on the reuse step (step 1).
    assert pts[1]["blocks_computed_fraction"] == 1.0
    assert pts[0]["blocks_computed_fraction_reuse_steps"] < 1.0
    for p in pts:
        assert p["psnr_gap_vs_w8a8_db"] == pytest.approx(
            rep["w8a8"]["psnr_vs_fp32_db"] - p["psnr_vs_fp32_db"])
        assert p["meets_target"] == (p["psnr_gap_vs_w8a8_db"] <= 1.0
                                     and p["blocks_computed_fraction_reuse_steps"] <= 0.5)


def test_analyze_sweep_modes(capsys):
    """One mechanism at a time: W8A8 linears with float attention is the W8A8 run itself."""
    code, out, _ = run(capsys, "analyze", "--steps", "2", "--samples", "1", "--json", "--quiet",
                       "--sweep", "linears=w8a8,float", "--sweep", "attention=float")
    assert code == 0
    rep = json.loads(out)
    w8a8, flt = rep["points"]
    assert w8a8["psnr_vs_fp32_db"] == rep["w8a8"]["psnr_vs_fp32_db"]
    assert flt["psnr_vs_fp32_db"] is None                 # identical to FP32: infinite PSNR
    assert not w8a8["meets_target"] and w8a8["ops_ratio_vs_w8a8"] is None
