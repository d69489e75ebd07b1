"""``dstar sweep``: grids refused in one line, points on a two-worker Dask cluster with a failed
point kept apart, figures equal to the report's roofline, rows written whole and resumed, the
Pareto front by hand, the plot. The configurations' mix is a synthetic one here (``fake_measure``,
or a seeded mix cache for the command line); the measured one is the slow test."""

import io
import json

import pytest

from dstar import sweep
from dstar.cli import main
from dstar.config import Encoding, load_config
from dstar.golden.dit_models import MODELS
from dstar.report_cost import run_model
from dstar.report_mix import Mix, mix_key
from dstar.sweep_plot import PANEL_W, pareto_image

from .test_report import fake_mix

pytestmark = pytest.mark.unit

MODELS_2 = ["dit-xl-256", "pixart-sigma-1024"]


def fake_measure(cfg, workload, mix_steps, synth, accuracy):
    """``sweep.measure_config``'s stand-in (runs on the workers): a synthetic mix whose FMDQ
    ratio falls with ``tau``, an area per MAC and a PSNR that grow and fall with it; ``tau = 3``
    fails."""
    if cfg.tau == 3:
        raise ValueError("synthetic failure at tau = 3")
    return {"mix": fake_mix(fmdq=0.45 - 0.1 * cfg.tau).rep,
            "area": {"um2_per_mac": 1000.0 + 100.0 * cfg.tau, "source": "test"},
            "accuracy": {"psnr_vs_fp32_db": 40.0 - 5.0 * cfg.tau} if accuracy else None}


@pytest.fixture(scope="module")
def cluster():
    with sweep.local_cluster(2) as c:
        yield c


def _lines(path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# -- the grid -----------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, word", [
    ("tau=-1", "tau='-1'"), ("token_tile=0", "token_tile='0'"), ("array=64y3", "'64y3'"),
    ("hbm_tbs=0", "hbm_tbs='0'"), ("hbm_tbs=fast", "'fast'"), ("speed=1", "'speed'"),
    ("tau=", "'tau='"), ("tau=1,1", "'1,1'"), ("fmdq_rule=big", "'big'"),
    ("encoding=fmdq", "'encoding'"), ("tau=1,,2", "'1,,2'")])
def test_bad_grid_refused_in_one_line_naming_the_value(spec, word, capsys, tmp_path):
    assert main(["sweep", "--grid", spec, "-o", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dstar: error: --grid") and word in err, err
    assert not (tmp_path / "s").exists()


def test_a_mix_without_a_reuse_step_refused(tmp_path, capsys):
    assert main(["sweep", "--mix-steps", "1", "-o", str(tmp_path / "s")]) == 2
    assert capsys.readouterr().err == ("dstar: error: --mix-steps 1: the mix needs at least 2 "
                                       "steps (a reuse step of attention besides the key step)\n")


def test_a_configuration_the_mix_cannot_run_refused(tmp_path, capsys):
    assert main(["sweep", "--preset", "tiny", "--grid", "tau=0,1", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the point tau=0:" in err and "max_tokens=32" in err, err


def test_too_many_points_and_two_axes_of_one_field_refused():
    with pytest.raises(sweep.SweepError, match="10201 points"):
        sweep.parse_grid(load_config(), [f"cores={','.join(map(str, range(1, 102)))}",
                                         f"sram_kb={','.join(map(str, range(101)))}"])
    with pytest.raises(sweep.SweepError, match="cannot be swept with cols"):
        sweep.parse_grid(load_config(), ["array=32,64", "cols=16"])


def test_grid_values_and_points():
    cfg = load_config()
    grid = sweep.parse_grid(cfg, ["array=32,64x16", "tau=0,2", "hbm_tbs=1.5"])
    assert grid == {"array": ["32x32", "64x16"], "tau": [0, 2], "hbm_tbs": [1.5]}
    pts = sweep.grid_points(cfg, grid)
    assert len(pts) == 4 and pts[1] == {"array": "32x32", "tau": 2, "hbm_tbs": 1.5}
    c, m = sweep.point_parts(cfg, pts[3], ["cores=8", "hbm_tbs=0.5"])
    assert (c.tau, m.rows, m.cols, m.cores, m.hbm_tbs) == (2, 64, 16, 8, 1.5)


# -- the sweep on a cluster ---------------------------------------------------------------------

def _run(cfg, grid, folder, scheduler, **kw):
    out = io.StringIO()
    rep = sweep.run(cfg, grid, folder, models=MODELS_2, scheduler=scheduler,
                    measure=fake_measure, progress=out, accuracy=True, **kw)
    return rep, out.getvalue()


def test_two_workers_keep_a_failed_point_apart_and_give_the_reports_figures(cluster, tmp_path):
    cfg = load_config()
    grid = sweep.parse_grid(cfg, ["tau=0,1,3", "hbm_tbs=0.5,1.5"])
    rep, bar = _run(cfg, grid, tmp_path / "s", cluster.scheduler_address)
    pts = rep["points"]
    assert [p["point"] for p in pts] == sweep.grid_points(cfg, grid)       # grid order
    failed = [p for p in pts if p["status"] == "failed"]
    assert rep["failed"] == 2 and {p["point"]["tau"] for p in failed} == {3}
    assert all("synthetic failure at tau = 3" in p["error"] for p in failed)
    assert "6/6 points, 2 failed" in bar.splitlines()[-1]
    assert sum("tau=3 hbm_tbs" in line and "failed: ValueError" in line
               for line in bar.splitlines()) == 2
    for p in (p for p in pts if p["status"] == "ok"):
        c, m = sweep.point_parts(cfg, p["point"])
        work = fake_measure(c, "digits", 50, False, True)
        want = run_model(MODELS["dit-xl-256"], "fmdq", Mix(work["mix"]), m)
        got = p["models"]["dit-xl-256"]
        assert got["latency_s"] == pytest.approx(want["latency_s"], rel=1e-12)
        assert got["energy_j"] == pytest.approx(want["energy_j"], rel=1e-12)
        assert p["area_mm2"] == pytest.approx(m.macs_per_cycle * work["area"]["um2_per_mac"]
                                              / 1e6)
        assert p["psnr_vs_fp32_db"] == 40.0 - 5.0 * p["point"]["tau"]
    assert json.loads((tmp_path / "s" / "sweep.json").read_text()) == json.loads(
        json.dumps(rep))
    assert (tmp_path / "s" / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(_lines(tmp_path / "s" / "rows.jsonl")) == 6


def test_an_interrupted_sweep_resumes_without_redoing_finished_points(cluster, tmp_path):
    cfg = load_config()
    grid = sweep.parse_grid(cfg, ["tau=0,1,3", "hbm_tbs=0.5,1.5"])
    first, _ = _run(cfg, grid, tmp_path / "s", cluster.scheduler_address)
    rows = tmp_path / "s" / "rows.jsonl"
    lines = _lines(rows)
    ok = [i for i, line in enumerate(lines) if json.loads(line)["status"] == "ok"]
    lost = json.loads(lines[ok[-1]])["key"]
    # Killed while writing a row: the last ok row half written, after the others.
    rows.write_bytes(b"".join(line for i, line in enumerate(lines) if i != ok[-1])
                     + lines[ok[-1]][:25])
    second, bar = _run(cfg, grid, tmp_path / "s", cluster.scheduler_address)
    assert second["resumed"] == 3 and second["failed"] == 2
    assert bar.startswith(f"sweep: 3 of 6 points already in {rows}; 3 to evaluate\n")
    again = {p["key"] for p in second["points"] if p["run"] == second["run"]}
    assert lost in again and len(again) == 3          # the lost row and the two failed points
    for p in second["points"]:
        if p["key"] not in again:
            assert p["run"] == first["run"]
    assert len(sweep.read_rows(rows)) == 6 and len(_lines(rows)) == 5 + 3
    # Nothing left to do: no cluster is contacted (this address has none).
    done = sweep.parse_grid(cfg, ["tau=0,1", "hbm_tbs=0.5,1.5"])
    third, _ = _run(cfg, done, tmp_path / "s", "tcp://127.0.0.1:9")
    assert third["resumed"] == 4 and third["failed"] == 0


def test_cli_on_a_local_two_worker_cluster(tmp_path, capsys):
    """The command as a user runs it, on a ``LocalCluster``, with the real configuration task
    and a mix seeded into the build folder's cache (measuring it takes minutes)."""
    build = tmp_path / "b"
    cfg = load_config().replace(encoding=Encoding.FMDQ)
    cache = build / "report" / f"mix-digits-{mix_key(cfg, 'digits', 50)}.json"
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(fake_mix().rep))
    code = main(["--build-dir", str(build), "sweep", "--grid",
                 "array=32x32,64x64", "--models", "dit-xl-256", "--workers", "2", "-o",
                 str(tmp_path / "s"), "--json", "--quiet"])
    assert code == 0
    rep = json.loads(capsys.readouterr().out)
    small, big = rep["points"]
    assert small["mix"]["source"] == big["mix"]["source"] == "synthetic"
    assert small["area_source"].startswith("estimated")
    assert big["area_mm2"] == pytest.approx(4 * small["area_mm2"])
    assert big["latency_s"] < small["latency_s"]
    assert rep["pareto"] == [0, 1]                    # smaller, or faster: neither dominates


# -- parts --------------------------------------------------------------------------------------

def _row(area, lat, en, psnr=None, status="ok"):
    return {"status": status, "area_mm2": area, "latency_s": lat, "energy_j": en,
            "psnr_vs_fp32_db": psnr, "point": {}}


def test_pareto_front_by_hand():
    rows = [_row(1, 5, 5, 30), _row(2, 4, 5, 30), _row(2, 5, 5, 30), _row(1, 5, 5, 30),
            _row(3, 6, 6, 40), _row(0, 0, 0, status="failed")]
    # 2 is dominated by 0 (and 1); 0 and 3 tie (neither dominates); 4 only without accuracy
    # is dominated; the failed row is never on it.
    assert sweep.pareto(rows, accuracy=True) == [0, 1, 3, 4]
    assert sweep.pareto(rows, accuracy=False) == [0, 1, 3]


def test_rows_file_cut_line_dropped_and_a_foreign_file_refused(tmp_path):
    path = tmp_path / "rows.jsonl"
    sweep.append_row(path, {"key": "a", "status": "ok"})
    sweep.append_row(path, {"key": "b", "status": "failed"})
    sweep.append_row(path, {"key": "b", "status": "ok"})
    path.write_bytes(path.read_bytes() + b'{"key": "c", "sta')
    assert {k: r["status"] for k, r in sweep.read_rows(path).items()} == {"a": "ok", "b": "ok"}
    assert path.read_bytes().endswith(b"\n")          # the next row starts a line
    sweep.append_row(path, {"key": "d", "x": [float("nan"), {"y": float("inf")}]})
    assert sweep.read_rows(path)["d"]["x"] == [None, {"y": None}]     # JSON, no NaN
    path.write_text("hello\n")
    with pytest.raises(sweep.SweepError, match="line 1 is not a sweep row"):
        sweep.read_rows(path)


def test_plot_has_a_panel_per_objective_and_marks_the_front():
    rows = [_row(1.0, 2e-3, 3e-3, 30.0), _row(2.0, 1e-3, 4e-3, 35.0)]
    summary = {"points": rows, "pareto": [0], "accuracy": True}
    img = pareto_image(summary)
    assert img.shape[1] == 3 * PANEL_W
    assert pareto_image({**summary, "accuracy": False}).shape[1] == 2 * PANEL_W
    assert (pareto_image({**summary, "pareto": [0, 1]}) != img).any()    # disc vs ring


def test_area_per_mac_estimated_or_synthesized(monkeypatch):
    """The FMDQ PE array's logic and weight window per MAC of its arrays: from the estimate, or
    from ``areas`` (Yosys) with ``synth`` (here a stand-in for the synthesis)."""
    from dstar.synth import fmdq_efficiency as fe
    cfg = load_config()                               # 2 arrays of 8 tokens x 8 columns
    est = fe.estimate(cfg)
    got = sweep.pe_area_per_mac(cfg)
    assert got["um2_per_mac"] == pytest.approx((est["pe_logic"] + est["weight_window"]) / 128)
    assert got["source"].startswith("estimated")
    parts = {k: 1000.0 for k in est} | {"pe_logic": 64000.0, "weight_window": 12800.0}
    monkeypatch.setattr(fe, "areas", lambda c: {"parts_um2": parts})
    got = sweep.pe_area_per_mac(cfg.replace(token_tile=4), synth=True)
    assert got == {"um2_per_mac": 76800.0 / 64, "source": got["source"]}
    assert got["source"].startswith("synthesized")


def test_progress_bar():
    out = io.StringIO()
    bar = sweep.Progress(4, 1, out)
    bar.update({"status": "failed", "point": {"tau": 3}, "error": "ValueError: no"})
    lines = out.getvalue().splitlines()
    assert lines[0] == "sweep: point tau=3 failed: ValueError: no"
    assert lines[1].startswith("sweep [" + "#" * 15 + "." * 15 + "] 2/4 points, 1 failed")


@pytest.mark.slow
def test_measured_sweep_on_the_bundled_dit(tmp_path, capsys):
    """The real configuration task: the mix measured on two steps of the bundled DiT (the
    default preset: the mix's attention needs its 256-token heads), the estimated area and a
    short accuracy run, on a two-worker local cluster (about 3 minutes)."""
    code = main(["--build-dir", str(tmp_path / "b"), "sweep", "--set", "steps=3", "--set",
                 "samples=1", "--mix-steps", "2", "--grid",
                 "hbm_tbs=0.5,1.5", "--models", "dit-xl-256", "--workers", "2", "--accuracy",
                 "-o", str(tmp_path / "s"), "--json", "--quiet"])
    assert code == 0
    rep = json.loads(capsys.readouterr().out)
    slow_bw, fast_bw = rep["points"]
    assert slow_bw["mix"]["source"].startswith("golden run of the bundled DiT (digits), 2 ")
    assert fast_bw["latency_s"] <= slow_bw["latency_s"]
    assert fast_bw["psnr_vs_fp32_db"] == slow_bw["psnr_vs_fp32_db"] > 10
