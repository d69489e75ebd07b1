"""``dstar run``'s folder: the accelerator top is generated again unless the folder's Verilog is
this configuration's and was made by these sources (a ``dstar.v`` of an earlier dstar with
another address rule would fail every run)."""

import json

from dstar import run
from dstar.config import preset
from dstar.hw.sources import source_digest


def test_the_verilog_is_reused_only_for_the_same_config_and_generator(tmp_path, monkeypatch):
    made = []

    def build(cfg):         # the real generator takes a minute; its output is tested elsewhere
        made.append(cfg)
        man = {"accelerator": {"config": cfg.hardware()}}
        return {"dstar.v": f"// {len(made)}\n", "params.json": json.dumps(man)}, man

    monkeypatch.setattr(run, "build_accelerator", build)
    said = []
    cfg = preset("tiny")
    run._generate(cfg, tmp_path, said.append)
    run._generate(cfg, tmp_path, said.append)
    assert len(made) == 1 and said[-1].startswith("reusing")
    stamp = tmp_path / "generator.sha256"
    assert stamp.read_text().split() == [source_digest(), run._files_digest(tmp_path)]
    (tmp_path / "dstar.v").write_text("// 1")         # damaged (truncated): made again (R31)
    run._generate(cfg, tmp_path, said.append)
    assert len(made) == 2 and (tmp_path / "dstar.v").read_text() == "// 2\n"
    stamp.write_text("0" * 64 + "\n")                   # made by another version
    run._generate(cfg, tmp_path, said.append)
    assert len(made) == 3 and (tmp_path / "dstar.v").read_text() == "// 3\n"
    run._generate(cfg.replace(max_tokens=64), tmp_path, said.append)
    assert len(made) == 4
    stamp.unlink()                                      # a folder from before the stamps
    run._generate(cfg.replace(max_tokens=64), tmp_path, said.append)
    assert len(made) == 5


def _refused_before_generating(monkeypatch, tmp_path, build_root, match, capsys):
    """``dstar run`` with the build root ``build_root``: one line matching ``match``, exit 2,
    and the generator never called."""
    from dstar.cli import main
    from dstar.sim import simulators

    def build(cfg):
        raise AssertionError("generated before the build folder was checked")

    monkeypatch.setattr(run, "build_accelerator", build)
    monkeypatch.setattr(simulators, "missing", lambda sim: None)
    monkeypatch.chdir(tmp_path)
    argv = ["--build-dir", str(build_root), "run", "--preset", "tiny", "--set", "max_k=512",
            "--set", "max_m=512", "--tokens", "1", "--steps", "1", "--sim", "icarus"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and match in err, err


def test_a_file_as_build_folder_is_refused_before_generating(tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("")
    _refused_before_generating(monkeypatch, tmp_path, tmp_path / "f", "is a file", capsys)


def test_a_second_run_of_one_configuration_is_refused_while_the_first_holds_it(
        tmp_path, monkeypatch, capsys):
    from dstar.outputs import locked_dir
    monkeypatch.setenv("DSTAR_BUILD_DIR", str(tmp_path / "b"))
    with locked_dir(run.run_folder(preset("tiny").replace(max_k=512, max_m=512))):
        _refused_before_generating(monkeypatch, tmp_path, tmp_path / "b",
                                   "another dstar command is using", capsys)


def test_a_folder_files_cannot_be_created_in_is_refused(tmp_path, monkeypatch):
    import os

    import pytest

    from dstar.outputs import OutputError, check_work_dir
    ro = tmp_path / "ro"
    ro.mkdir()
    def no_files(*a, **k):       # what a read-only file system does, for root too
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr("tempfile.mkstemp", no_files)
    with pytest.raises(OutputError, match="Read-only file system"):
        check_work_dir(ro)
    with pytest.raises(OutputError, match="Read-only file system"):
        check_work_dir(ro / "new" / "run")
    assert os.listdir(ro) == []


def test_a_simulator_that_cannot_compile_is_one_line_naming_its_log(tmp_path, monkeypatch,
                                                                      capsys):
    """R31: a compile failure (a damaged ``dstar.v``) is one line pointing at build.log."""
    import numpy as np

    from dstar.cli import main
    from dstar.sim import simulators

    def build(cfg):
        man = {"accelerator": {"config": cfg.hardware()}}
        return {"dstar.v": "module dstar(\n", "params.json": json.dumps(man)}, man

    def compile_(*args, **kwargs):
        raise RuntimeError("Command failed with return code: 2")

    monkeypatch.setattr(run, "build_accelerator", build)
    monkeypatch.setattr(run, "block_inputs",
                        lambda *a: [(np.zeros((1, 1, 4)), np.zeros((1, 4)))])
    monkeypatch.setattr(run, "golden_block", lambda *a: [])
    monkeypatch.setattr(simulators, "missing", lambda sim: None)
    monkeypatch.setattr(simulators, "build", compile_)
    monkeypatch.chdir(tmp_path)
    argv = ["--build-dir", "b", "run", "--preset", "tiny", "--set", "max_k=512", "--set",
            "max_m=512", "--tokens", "1", "--steps", "1", "--sim", "icarus", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "icarus could not compile" in err, err
    assert err.endswith("build.log'") and "Traceback" not in err
