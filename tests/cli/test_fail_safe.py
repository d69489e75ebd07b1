"""The commands stop cleanly: SIGTERM reaches the tools they started, and huge requests are
refused or announced instead of running silent (issue 31's probe findings)."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
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
    (["--build-dir", "", "config", "--preset", "tiny"], "--build-dir '.'"),
    (["generate", "--preset", "tiny", "-o", "."], "output folder '.' is the working folder"),
])
def test_options_that_would_do_nothing_or_replace_the_working_folder_are_refused(
        tmp_path, monkeypatch, capsys, argv, named):
    from dstar.cli import main
    monkeypatch.chdir(tmp_path)
    # argparse's own errors exit (status 2); the commands' return it
    with pytest.raises(SystemExit) if argv[0] == "--build-dir" else contextlib.nullcontext():
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
