"""``dstar run`` refuses what it cannot run in one line before any progress line, and its
integer options name their minimum (issue 31's probe, R2 and R17)."""

import pytest

T = ["run", "--preset", "tiny", "--set", "max_k=512", "--set", "max_m=512"]


def test_an_unbuildable_top_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from dstar import run
    from dstar.cli import main

    def never(*args, **kwargs):
        raise AssertionError("the run started")
    monkeypatch.setattr(run, "block_inputs", never)
    monkeypatch.setattr(run, "build_accelerator", never)
    monkeypatch.chdir(tmp_path)         # a build folder made on the way lands here
    assert main([*T, "--set", "refine_max=1", "--tokens", "1", "--sim", "icarus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dstar: error: refine_max=1: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["-1", "0"])
def test_tokens_below_one_names_the_minimum(capsys, value):
    from dstar.cli import main
    with pytest.raises(SystemExit):
        main([*T, "--tokens", value])
    err = capsys.readouterr().err
    assert f"argument --tokens: expected an integer >= 1, got {value}" in err, err
    assert "Traceback" not in err
