"""The commands stop cleanly: SIGTERM reaches the tools they started, and huge requests are
refused or announced instead of running silent (issue 31's probe findings)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_sigterm_to_dstar_alone_ends_the_tools_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys
        from dstar import cli
        def tool(args):       # a command running a tool that has children of its own (make)
            subprocess.run(["sh", "-c", "sleep 300 & echo $! > {pidfile}; wait"])
            return 0
        cli.cmd_config = tool
        sys.exit(cli.main(["config"]))
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    for _ in range(300):
        if pidfile.is_file() and pidfile.read_text().strip():
            break
        time.sleep(0.05)
    grandchild = int(pidfile.read_text())
    try:
        p.send_signal(signal.SIGTERM)            # to dstar only, as `kill PID` does
        _, err = p.communicate(timeout=30)
        assert p.returncode == 128 + 15 and err.strip() == "dstar: terminated", err
        for _ in range(100):
            if not _alive(grandchild):
                break
            time.sleep(0.05)
        assert not _alive(grandchild), "the tool's child outlived dstar"
    finally:
        if _alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_a_huge_sweep_is_refused_at_once_naming_its_size(capsys):
    from dstar.cli import main
    big = ",".join(map(str, range(1000)))
    t0 = time.perf_counter()
    assert main(["analyze", "--preset", "tiny", "--samples", "1", "--steps", "2", "--quiet",
                 "--sweep", f"tau={big}", "--sweep", f"refresh_attn={big}"]) == 2
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err
    assert "1000000 points (1000 tau x 1000 refresh_attn)" in err and len(err.splitlines()) == 1


def test_a_sweep_says_how_many_points_it_runs(monkeypatch, capsys):
    from dstar import analyze
    from dstar.cli import main

    def run_sweep(cfg, grid, progress=None, **options):
        raise KeyboardInterrupt          # the announcement comes before the runs
    monkeypatch.setattr(analyze, "run_sweep", run_sweep)
    assert main(["analyze", "--preset", "tiny", "--samples", "1", "--steps", "2",
                 "--sweep", "theta=0.5,0.7", "--sweep", "tau=0,1,2"]) == 130
    assert "sweep of 6 points: 8 sampling runs" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["analyze", "--preset", "tiny", "--sweep", "theta=0.5", "--png", "x.png"], "--png 'x.png'"),
    (["--build-dir", "", "config", "--preset", "tiny"], "--build-dir: empty path ''"),
    (["--build-dir", ".", "config", "--preset", "tiny"], "--build-dir '.'"),
    (["generate", "--preset", "tiny", "-o", "."], "output folder '.' is the working folder"),
    (["generate", "--preset", "tiny", "-o", ""], "-o/--output: empty path ''"),     # O29
])
def test_options_that_would_do_nothing_or_replace_the_working_folder_are_refused(
        tmp_path, monkeypatch, capsys, argv, named):
    from dstar.cli import main
    monkeypatch.chdir(tmp_path)
    # argparse's own errors exit (status 2); the commands' return it
    with pytest.raises(SystemExit) if argv[0] == "--build-dir" or "" in argv else \
            contextlib.nullcontext():
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_waves_false_means_no_waveforms(monkeypatch):
    from dstar.sim.simulators import waves_requested
    for off in ("0", "false", "No", "OFF", ""):
        monkeypatch.setenv("WAVES", off)
        assert not waves_requested()
    monkeypatch.setenv("WAVES", "1")
    assert waves_requested()


def test_a_closed_stdout_is_one_line_before_any_work(tmp_path):
    p = subprocess.run(["sh", "-c", f"'{sys.executable}' -m dstar.cli generate --preset tiny "
                        "-o g >&-"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip() == (
        "dstar: error: the standard output is closed; redirect it (> FILE or >/dev/null) "
        "instead")
    assert not (tmp_path / "g").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_help_to_a_full_disk_says_so():
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "dstar.cli", "--help"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 2 and "cannot write the standard output" in p.stderr


def _one_line(err: str, *parts: str) -> None:
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


@pytest.mark.parametrize("value", [256, 1 << 20])
def test_max_tokens_too_large_for_the_accumulators_is_named_with_its_fix(capsys, value):
    """C28 / O9: the refusal names ``max_tokens`` and the largest value that fits."""
    from dstar.cli import main
    assert main(["config", "--preset", "tiny", "--set", f"max_tokens={value}"]) == 2
    _one_line(capsys.readouterr().err, f"max_tokens={value} with e_max=7",
              "30-bit accumulators", "max_tokens <= 128 fits")


def test_train_help_names_dstar_train(capsys):
    """O22."""
    pytest.importorskip("torch")
    from dstar.cli import main
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: dstar train ")


def _stub_build(monkeypatch, during=None):
    """``dstar generate``'s build replaced by a quick one (``during()`` runs inside it)."""
    from dstar.hw import generate

    def build(cfg, attention=True, accelerator=False):
        if during is not None:
            during()
        return {"dstar_linear.v": "// new\n", "params.json": "{}\n"}, {}
    monkeypatch.setattr(generate, "build", build)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers need the main thread")
def test_a_ctrl_c_python_swallows_still_writes_nothing(tmp_path, monkeypatch, capsys):
    """O34: a ``KeyboardInterrupt`` raised inside a finalizer (Amaranth's ``MustUse.__del__``)
    is dropped by Python; the folder is still left as it was."""
    from dstar.cli import main

    def swallowed():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):      # the handler runs between bytecodes
                pass
        except KeyboardInterrupt:        # dropped, as Python does in a __del__
            pass
    out = tmp_path / "g"
    out.mkdir()
    (out / "dstar_linear.v").write_text("// old\n")
    _stub_build(monkeypatch, swallowed)
    assert main(["generate", "--preset", "tiny", "-o", str(out)]) == 130
    assert capsys.readouterr().err == "dstar: interrupted\n"
    assert [p.name for p in out.iterdir()] == ["dstar_linear.v"]
    assert (out / "dstar_linear.v").read_text() == "// old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]        # no lock, no temporary
    from dstar.outputs import interrupted, write_atomic
    assert not interrupted.is_set()      # cleared for library calls after the command
    write_atomic(tmp_path / "x.txt", "x")


def test_a_huge_generation_announces_itself(tmp_path, capsys, monkeypatch):
    """O11: ``attn_slots = 4096`` is within the size limit but takes minutes and gigabytes:
    said before the work starts."""
    from dstar.cli import main
    from dstar.config import preset
    from dstar.hw.generate import check_buildable

    def stop():
        raise KeyboardInterrupt
    _stub_build(monkeypatch, stop)
    assert main(["generate", "--preset", "tiny", "--set", "attn_slots=4096", "-o",
                 str(tmp_path / "hs")]) == 130
    err = capsys.readouterr().err.splitlines()
    words = check_buildable(preset("tiny").replace(attn_slots=4096))["memory_words"]
    assert words > 500_000
    assert err[0].startswith(f"dstar generate: {words} memory words (the largest: attention "
                             "residual cache") and "Ctrl-C stops it" in err[0]
    assert err[1:] == ["dstar: interrupted"] and list(tmp_path.iterdir()) == []
    _stub_build(monkeypatch)
    assert main(["generate", "--preset", "tiny", "-o", str(tmp_path / "t")]) == 0
    assert capsys.readouterr().err == ""                  # a usual size: nothing said


def test_two_reports_name_their_own_sample_grids(tmp_path, monkeypatch, capsys):
    """O68: with ``--output`` and no ``--png`` the grid is named after the report."""
    from dstar import analyze, png
    from dstar.cli import main
    seeds = iter(range(2))
    monkeypatch.setattr(analyze, "run_bundled", lambda cfg, **kw: (
        {"seed": next(seeds)}, {"fp32": 0, "w8a8": 0, "dstar": 0}))
    monkeypatch.setattr(png, "image_grid", lambda images: images)
    monkeypatch.setattr(png, "png_bytes", lambda grid: b"grid")
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        assert main(["analyze", "--preset", "tiny", "--json", "--quiet", "--output",
                     f"{name}.json"]) == 0
    reps = [json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab"]
    assert [r["png"] for r in reps] == ["a_samples.png", "b_samples.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.json", "a_samples.png", "b.json", "b_samples.png"]


def test_a_trace_whose_layers_differ_in_rows_reports_each(tmp_path, capsys):
    """O57: no single ``rows_per_linear`` (the first layer's) for layers of 8 and 4 rows."""
    import numpy as np

    from dstar.cli import main
    r = np.random.default_rng(0)
    arrays = {"format": np.array("dstar-trace/1"), "steps": np.array(2)}
    for name, n, k, m in (("blk.fc1", 8, 32, 16), ("blk.fc2", 4, 16, 32)):
        arrays[f"linear/{name}/x"] = r.standard_normal((2, n, k)).astype("f4")
        arrays[f"linear/{name}/weight"] = r.standard_normal((m, k)).astype("f4")
    np.savez(tmp_path / "t.npz", **arrays)
    assert main(["analyze", "--preset", "tiny", "--trace", str(tmp_path / "t.npz"), "--json",
                 "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rows_per_linear"] is None and rep["tokens"] is None and rep["batch"] is None
    assert rep["rows_per_layer"] == {"blk.fc1": 8, "blk.fc2": 4}
