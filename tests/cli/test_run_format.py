"""``dstar run``'s table (``dstar.run.format_run``): each encoding's element mix in its own
terms; the results page's stored run renders."""

import json
from pathlib import Path

from dstar.run import format_run, format_summary

RUN = Path(__file__).resolve().parents[2] / "docs" / "results" / "run.json"


def _report(encoding: str | None) -> dict:
    op = {"runs": 3, "cycles": 10, "predicted_cycles": 10, "bit_exact": True,
          "counters_equal": True}
    rep = {"preset": "tiny", "sim": "icarus", "block": 0, "steps": 3, "batch": 2, "tokens": 12,
           "per_op": {"qkv": op}, "cycles": 10, "predicted_cycles": 10, "clock_cycles": 12,
           "elements": {"zero": 0.25, "low": 0.5, "high": 0.25},
           "attention_blocks_computed": 0.5, "outputs_equal": [True], "bit_exact": True,
           "seconds": {"build": 1, "simulation": 2, "total": 3}}
    return rep if encoding is None else {**rep, "encoding": encoding}


def test_each_encoding_names_its_element_mix():
    fmdq = format_run(_report("fmdq"), paths=False)
    assert "(fmdq linears, residual attention)" in fmdq
    assert ("linear elements: 25.0% in skipped sub-channels, 50.0% in 2- or 4-bit ones, "
            "25.0% in 6- or 8-bit ones") in fmdq
    for v1 in (format_run(_report("nibble"), paths=False), format_run(_report(None),
                                                                        paths=False)):
        assert "linear elements: 25.0% skipped (ZERO), 50.0% 4-bit (LOW), 25.0% 8-bit" in v1


def test_the_stored_run_renders_with_its_encoding():
    rep = json.loads(RUN.read_text())["result"]
    text = format_summary(rep)
    assert text.startswith(f"dstar run: preset {rep['preset']}")
    if rep.get("encoding") == "fmdq":
        assert "sub-channels" in text and "(ZERO)" not in text
