"""The results page is generated from the stored JSON of the benchmark commands, never by hand."""

import json
from pathlib import Path

import pytest

from dstar import results
from dstar.results import RESULTS, Result

ROOT = Path(__file__).resolve().parents[2]


def test_committed_page_is_the_rendering_of_the_committed_json():
    page = ROOT / "docs" / "results.md"
    assert page.read_text() == results.render(ROOT), \
        "docs/results.md is stale or edited by hand: regenerate it with `dstar results`"


def test_every_committed_json_belongs_to_an_entry():
    for f in (ROOT / "docs" / "results").glob("*.json"):
        assert f.stem in RESULTS, f"{f.name} is not a results entry"
        stamped = json.loads(f.read_text())
        assert {"command", "commit", "date", "result"} <= set(stamped)
        assert stamped["command"] == "dstar " + " ".join(RESULTS[f.stem].argv)


def test_run_stores_the_commands_json_stamped_and_render_shows_it(tmp_path, monkeypatch):
    quick = Result("Quick", ("bench", "golden", "--json", "--steps", "1", "--samples", "1"),
                   results._golden_text)
    monkeypatch.setattr(results, "RESULTS", {"quick": quick, "never": quick})
    path = results.run("quick", tmp_path)
    assert path == tmp_path / "docs" / "results" / "quick.json"
    stamped = json.loads(path.read_text())
    assert stamped["command"] == "dstar bench golden --json --steps 1 --samples 1"
    assert stamped["result"]["steps"] == 1 and stamped["result"]["samples"] == 1
    page = results.render(tmp_path)
    assert "## Quick" in page and results._golden_text(stamped["result"]) in page
    assert "Not measured yet: `dstar results --run never`" in page
    assert not list(path.parent.glob(".*tmp")), "a temporary file was left behind"


def test_a_failing_command_writes_nothing(tmp_path, monkeypatch):
    bad = Result("Bad", ("bench", "golden", "--json", "--steps", "0"), results._golden_text)
    monkeypatch.setattr(results, "RESULTS", {"bad": bad})
    with pytest.raises(RuntimeError, match="failed"):
        results.run("bad", tmp_path)
    assert not (tmp_path / "docs" / "results" / "bad.json").exists()



def test_the_sweep_entry_writes_its_plot_beside_its_json_and_renders_unmeasured(tmp_path):
    entry = RESULTS["analyze_sweep"]
    argv = list(entry.argv)
    assert argv[0] == "analyze" and "--sweep" in argv and "--json" in argv
    assert entry.images == ("sweep.png",)
    assert argv[argv.index("--plot") + 1] == "docs/results/sweep.png"
    assert entry.text.__name__ == "text" and entry.about
    page = results.render(tmp_path)          # nothing measured: the entry says how to run it
    assert f"## {entry.title}" in page
    assert "Not measured yet: `dstar results --run analyze_sweep`" in page
    assert "sweep.png" not in page.split("## " + entry.title)[1].split("\n## ")[0].replace(
        "--plot docs/results/sweep.png", "")


def test_the_workloads_table_puts_each_reports_figures_in_its_column():
    def rep(z, psnr):
        return {"per_layer_type": {"fc1": {"zero_fraction": z, "low_fraction": 0.5,
                                           "high_fraction": 0.5 - z}},
                "ops_ratio_vs_w8a8": 3.0 + z, "w8a8": {"psnr_vs_fp32_db": psnr}}
    table = results.workloads_table({"digits": rep(0.25, 47.5), "photos": rep(0.125, 40.0)})
    lines = table.splitlines()
    assert lines[0] == "| figure | digits | photos |"
    assert "| fc1: ZERO / LOW / HIGH | 0.250 / 0.500 / 0.250 | 0.125 / 0.500 / 0.375 |" in lines
    assert "| qkv: ZERO / LOW / HIGH | - / - / - | - / - / - |" in lines
    assert "| nibble passes vs W8A8, element-level ideal | 3.25 | 3.12 |" in lines
    assert "| PSNR vs FP32, W8A8 (dB) | 47.50 | 40.00 |" in lines


def _stepped(zero_by_step, blocks_by_step):
    """An analyze-like report of ``len(zero_by_step)`` steps: fc1's ZERO fraction per step and
    the attention blocks computed per step (None: a key step)."""
    n = len(zero_by_step)
    return {"steps": n,
            "per_step": [{"step": s, "per_layer_type": {"fc1": {"zero_fraction": z}}}
                         for s, z in enumerate(zero_by_step)],
            "per_layer_type": {"fc1": {"zero_fraction": sum(zero_by_step) / n}},
            "attention": {"per_step": [{"step": s, "key": b is None,
                                        "blocks_computed": 1.0 if b is None else b}
                                       for s, b in enumerate(blocks_by_step)],
                          "blocks_computed_fraction_reuse_steps": 0.5}}


def test_the_temporal_table_averages_each_phase_of_the_run():
    # 9 steps: step 0, then quarters 1-2, 3-4, 5-6, 7-8
    rep = _stepped([0.0, 0.5, 0.7, 0.4, 0.2, 0.1, 0.3, 0.0, 0.2],
                   [None, 0.5, None, 0.25, None, 0.5, None, 0.75, None])
    lines = results.temporal_table({"digits": rep}).splitlines()
    assert lines[0] == ("| figure | workload | step 0 | steps 1-2 | steps 3-4 | steps 5-6 | "
                        "steps 7-8 | all steps |")
    assert "| fc1 ZERO | digits | 0.000 | 0.600 | 0.300 | 0.200 | 0.100 | 0.267 |" in lines
    assert "| qkv ZERO | digits | - | - | - | - | - | - |" in lines
    # only the reuse steps count for attention; step 0 has none
    assert ("| attention blocks computed, reuse steps | digits | - | 0.500 | 0.250 | 0.500 | "
            "0.750 | 0.500 |") in lines


def test_the_temporal_plot_draws_each_workloads_panel_from_its_report():
    from dstar import plot_steps
    reps = {"digits": _stepped([0.0, 1.0, 1.0, 1.0], [None] * 4),
            "photos": _stepped([0.0, 0.0, 0.0, 0.0], [None] * 4)}
    img = plot_steps.steps_image(reps)
    assert img.shape == (plot_steps.HEIGHT, 2 * plot_steps.PANEL_WIDTH)
    value = plot_steps.STYLES["fc1"][0]
    top = plot_steps.to_pixel(4, 2, 1.0)          # digits: the line at 100 % over steps 1-3
    assert img[top[1], top[0]] == value
    assert img[top[1], top[0] + plot_steps.PANEL_WIDTH] != value     # photos: at 0 %
    low = plot_steps.to_pixel(4, 2, 0.0)
    assert img[low[1], low[0] + plot_steps.PANEL_WIDTH] == value
    assert plot_steps.steps_png(json.loads(json.dumps(reps))) == plot_steps.steps_png(reps)


def test_write_page_writes_the_summary_plot_once_both_workloads_are_measured(tmp_path,
                                                                             monkeypatch):
    import dataclasses
    monkeypatch.setattr(results, "RESULTS", {n: dataclasses.replace(r, text=lambda rep: "-")
                                             for n, r in RESULTS.items()})
    d = results.results_dir(tmp_path)
    d.mkdir(parents=True)
    rep = _stepped([0.0, 0.5, 0.5], [None, 0.5, None])
    (d / "analyze.json").write_text(json.dumps({"command": "x", "commit": "c", "date": "d",
                                                "result": rep}))
    results.write_page(tmp_path)
    assert not (tmp_path / "docs" / results.TEMPORAL_IMAGE).exists()   # photos not measured
    assert "## Both workloads side by side" not in (tmp_path / "docs" / "results.md").read_text()
    (d / "analyze_photos.json").write_text(json.dumps({"command": "x", "commit": "c",
                                                       "date": "d", "result": rep}))
    results.write_page(tmp_path)
    page = (tmp_path / "docs" / "results.md").read_text()
    assert "### Temporal statistics" in page and results.TEMPORAL_IMAGE in page
    png = (tmp_path / "docs" / results.TEMPORAL_IMAGE).read_bytes()
    assert png.startswith(b"\x89PNG")


def test_results_refuses_a_folder_outside_a_dstar_checkout(tmp_path, monkeypatch, capsys):
    from dstar.cli import main
    other = tmp_path / "other"
    (other / "docs").mkdir(parents=True)
    (other / "pyproject.toml").write_text('[project]\nname = "other"\n')
    (other / "docs" / "results.md").write_text("# My results\n")
    monkeypatch.chdir(other)
    assert main(["results"]) == 2
    err = capsys.readouterr().err
    assert "not inside a dstar checkout" in err and str(other) in err and len(err.splitlines()) == 1
    assert (other / "docs" / "results.md").read_text() == "# My results\n"
    sub = tmp_path / "mine" / "sub"          # a dstar checkout is found from a folder inside it
    sub.mkdir(parents=True)
    (tmp_path / "mine" / "pyproject.toml").write_text('[project]\nname = "dstar"\n')
    assert results.checkout_root(sub) == tmp_path / "mine"
    assert main(["results", "--root", str(other)]) == 0      # an explicit folder is the user's
    assert (other / "docs" / "results.md").read_text().startswith("# Results")


@pytest.mark.parametrize("stored, named", [
    ("{", "not a readable stored result"),
    ('{"command": "x"}', "has no 'commit', 'date', 'result'"),
    ('{"command":"x","commit":"c","date":"d","result":{"foo":1}}', "KeyError"),
])
def test_a_damaged_stored_result_is_one_line_and_writes_nothing(tmp_path, capsys, stored, named):
    from dstar.cli import main
    d = results.results_dir(tmp_path)
    d.mkdir(parents=True)
    (d / "bench_golden.json").write_text(stored)
    assert main(["results", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert named in err and "bench_golden.json" in err and "--run bench_golden" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "docs" / "results.md").exists()
