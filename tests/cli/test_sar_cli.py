"""SAR on the command line (issue 29): dstar profile-masks and --masks, each bad input one line
with status 2; dstar generate of a SAR engine and a profile and a SAR sweep end to end (slow)."""

import json

import numpy as np
import pytest

from dstar.cli import main
from dstar.golden.sar import MASK_FORMAT, MaskSet, load_masks


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _bundled_like(path, **over):
    """A mask file with the bundled digits DiT's dimensions (6 layers, 4 heads, 256 tokens)."""
    meta = {"format": MASK_FORMAT, "workload": "digits", "samples": 1, "seed": 1000, "steps": 2,
            "cfg_scale": 2.5, "theta": 0.6, "block_q": 16, "block_k": 16, "layers": 6,
            "heads": 4, "tokens": 256, "layer_names": [f"blocks.{i}.attn" for i in range(6)],
            **over}
    shape = (meta["layers"], meta["heads"], -(-256 // meta["block_q"]),
             -(-256 // meta["block_k"]))
    path.write_bytes(MaskSet(mask=np.ones(shape, bool), mass=np.full(shape, 1.0 / shape[-1]),
                             meta=meta).to_bytes())
    return str(path)


def _one_line(code, err, pattern):
    assert code == 2 and err.count("\n") == 1 and pattern in err, err


def test_profile_masks_refuses_the_evaluation_seed(capsys, tmp_path):
    code, _, err = run(capsys, "profile-masks", "-o", str(tmp_path / "m.npz"), "--calib-seed",
                       "7", "--seed", "7")
    _one_line(code, err, "--calib-seed 7 is the evaluation's seed")
    assert not (tmp_path / "m.npz").exists()


def test_analyze_refuses_a_missing_or_mismatched_mask_file(capsys, tmp_path):
    code, _, err = run(capsys, "analyze", "--set", "attention=sar", "--masks",
                       str(tmp_path / "none.npz"), "--steps", "2", "--samples", "1", "--quiet")
    _one_line(code, err, "does not exist")
    bad = _bundled_like(tmp_path / "b.npz", block_q=8)
    code, _, err = run(capsys, "analyze", "--set", "attention=sar", "--masks", bad, "--steps",
                       "2", "--samples", "1", "--quiet", "--sweep", "theta=0.9")
    _one_line(code, err, "block_q=8, but the model/configuration has block_q=16")
    other = _bundled_like(tmp_path / "p.npz", workload="photos")
    code, _, err = run(capsys, "analyze", "--set", "attention=sar", "--masks", other, "--steps",
                       "2", "--samples", "1", "--quiet")
    _one_line(code, err, "profiled on workload 'photos', the run is 'digits'")


@pytest.mark.parametrize("cmd", [["run"], ["generate", "-o", "OUT"]])
def test_generate_and_run_check_the_masks(capsys, tmp_path, cmd):
    """Both refuse a mismatched mask file in one line; ``dstar run`` takes a matching one and
    goes on to its own checks (here a block the DiT does not have; the SAR runs themselves:
    ``tests/hw/test_run_sar.py``; ``dstar generate`` of SAR: ``test_generate_sar``)."""
    cmd = [str(tmp_path / "out") if a == "OUT" else a for a in cmd]
    if cmd[0] == "run":
        good = _bundled_like(tmp_path / "g.npz")
        code, _, err = run(capsys, *cmd, "--set", "attention=sar", "--masks", good,
                           "--block", "6")
        _one_line(code, err, "block must be in [0, 5], got 6")
    bad = _bundled_like(tmp_path / "h.npz", heads=2)
    code, _, err = run(capsys, *cmd, "--set", "attention=sar", "--masks", bad)
    _one_line(code, err, "heads=2, but the model/configuration has heads=4")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_generate_sar(capsys, tmp_path):
    """``dstar generate`` with SAR (tiny preset): the masks checked, the SAR engine written
    (its manifest's geometry says so, with the score cache's sizes)."""
    good = _bundled_like(tmp_path / "g.npz")
    out = tmp_path / "out"
    code, stdout, _ = run(capsys, "generate", "--preset", "tiny", "-o", str(out), "--set",
                          "attention=sar", "--set", "encoding=fmdq", "--masks", good)
    assert code == 0 and "wrote" in stdout
    geo = json.loads((out / "params.json").read_text())["attention"]["geometry"]
    assert geo["sar"] and geo["sc_depth"] > 0 and "res_depth" not in geo


@pytest.mark.slow
def test_profile_then_sar_sweep(capsys, tmp_path):
    f = tmp_path / "m.npz"
    code, out, _ = run(capsys, "profile-masks", "-o", str(f), "--steps", "2", "--calib-samples",
                       "1", "--theta", "0.8", "--quiet")
    assert code == 0 and f"wrote {f}" in out
    ms = load_masks(f)
    assert ms.meta["seed"] == 1000 and ms.meta["samples"] == 1 and ms.meta["steps"] == 2
    assert ms.mask.shape == (6, 4, 16, 16) and 0 < ms.mask.mean() < 1
    np.testing.assert_allclose(ms.mass.sum(axis=-1), 1.0, rtol=1e-9)
    code, out, _ = run(capsys, "analyze", "--set", "attention=sar", "--masks", str(f),
                       "--steps", "3", "--samples", "1", "--json", "--quiet", "--sweep",
                       "theta=0.8,1", "--sweep", "refresh_attn=1,2", "--workers", "2",
                       "--plot", str(tmp_path / "p.png"))
    assert code == 0
    pts = json.loads(out)["points"]
    work = {(p["theta"], p["refresh_attn"]): p["attention_work_vs_dense"] for p in pts}
    assert work[(1.0, 1)] == 1.0
    # Steps 0 and 2 are cache steps at refresh 2, step 1 a reuse step (PV only).
    assert work[(1.0, 2)] == pytest.approx((1 + 0.5 + 1) / 3)
    assert work[(0.8, 1)] < 1.0
    assert all(p["attention_kind"] == "sar" for p in pts)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
