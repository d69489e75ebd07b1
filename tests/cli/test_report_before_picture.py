"""A picture that cannot be written (a full disk) does not lose the report beside it: the report
is written first and the error line says where (issue 31's probe, E17)."""

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_grid_on_a_full_disk_keeps_the_report(tmp_path, monkeypatch, capsys):
    from dstar import analyze
    from dstar.cli import main

    def quick(cfg, quality=False, progress=None, workers=None):      # no sampling run
        img = np.zeros((1, 1, 4, 4), np.float32)
        return {"psnr": 1.5}, {"fp32": img, "w8a8": img, "dstar": img}
    monkeypatch.setattr(analyze, "run_bundled", quick)
    out = tmp_path / "r.json"
    assert main(["analyze", "--preset", "tiny", "--json", "--png", "/dev/full",
                 "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "'/dev/full'" in err and "No space left" in err and repr(str(out)) in err, err
    assert json.loads(out.read_text()) == {"psnr": 1.5, "png": "/dev/full"}


def test_without_a_failure_both_are_written(tmp_path, monkeypatch, capsys):
    from dstar import analyze
    from dstar.cli import main

    def quick(cfg, quality=False, progress=None, workers=None):
        img = np.zeros((1, 1, 4, 4), np.float32)
        return {"psnr": 1.5}, {"fp32": img, "w8a8": img, "dstar": img}
    monkeypatch.setattr(analyze, "run_bundled", quick)
    out = tmp_path / "r.json"
    assert main(["analyze", "--preset", "tiny", "--json", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["png"] == str(tmp_path / "r_samples.png")
    assert (tmp_path / "r_samples.png").read_bytes().startswith(b"\x89PNG")
