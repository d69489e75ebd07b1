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

