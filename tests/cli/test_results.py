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
