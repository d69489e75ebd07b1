"""Committed area baselines: ``synth/baselines/<preset>.json``, one entry per Yosys version.

An entry records, for the configuration hash it was made from, the totals per target and the
per-instance counts per module of the ``METRICS``, and the same of the dense INT8 baseline
(``dense``, see ``dstar.synth.report``), which ``compare`` judges the same way. ``compare`` reports
every metric that grew by more than ``TOLERANCE`` (relative); shrinking is fine, but a shrink
beyond the tolerance is reported as a note so the baseline gets refreshed (``dstar
synth --preset tiny --target all --write-baseline``) and keeps catching growth.

Different Yosys versions map differently, so an entry only judges reports of its own version.
"""

import json
from pathlib import Path

from dstar.paths import package_data

__all__ = ["BASELINES", "METRICS", "TOLERANCE", "baseline_path", "load_baseline",
           "write_baseline", "compare"]

BASELINES = package_data("dstar.synth", "baselines")
#: Metrics a baseline holds: mapped cells, LUT cells, flip-flops, transistors (cmos).
METRICS = ("cells", "luts", "ffs", "transistors")
#: Allowed relative growth of any metric before the synth test fails (3 %).
TOLERANCE = 0.03


def baseline_path(preset: str) -> Path:
    return BASELINES / f"{preset}.json"


def load_baseline(preset: str, yosys_version: str) -> dict | None:
    """The entry for ``preset`` and ``yosys_version``, or ``None`` if there is none."""
    path = baseline_path(preset)
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("yosys", {}).get(yosys_version)


def _pick(res: dict) -> dict:
    return {m: res[m] for m in METRICS if m in res}


def _metrics(report: dict) -> dict:
    return {
        "config_hash": report["config_hash"],
        "targets": {t: _pick(v) for t, v in report["targets"].items()},
        "modules": {k: {"instances": m["instances"],
                        "targets": {t: _pick(v) for t, v in m["targets"].items()}}
                    for k, m in report["modules"].items()},
    }


def _entry(report: dict) -> dict:
    out = {**_metrics(report), "report_version": report["report_version"]}
    if report.get("dense_baseline"):
        out["dense"] = _metrics(report["dense_baseline"])
    return out


def _merge(old: dict, new: dict) -> None:
    old["targets"].update(new["targets"])
    for k, m in new["modules"].items():
        old["modules"].setdefault(k, m)["targets"].update(m["targets"])


def write_baseline(report: dict) -> Path:
    """Store ``report``'s metrics as the baseline of its preset and Yosys version (entries of
    other Yosys versions are kept; the targets of an existing entry are merged)."""
    path = baseline_path(report["preset"])
    data = json.loads(path.read_text()) if path.exists() else {
        "preset": report["preset"], "tolerance": TOLERANCE, "metrics": list(METRICS),
        "yosys": {}}
    new = _entry(report)
    old = data["yosys"].get(report["yosys_version"])
    if old and old["config_hash"] == new["config_hash"] \
            and old.get("report_version") == new["report_version"]:
        _merge(old, new)
        if "dense" in new:
            if old.get("dense", {}).get("config_hash") == new["dense"]["config_hash"]:
                _merge(old["dense"], new["dense"])
            else:
                old["dense"] = new["dense"]
    else:
        data["yosys"][report["yosys_version"]] = new
    BASELINES.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def compare(report: dict, base: dict, tolerance: float = TOLERANCE) -> tuple[list, list]:
    """``(growths, notes)``: growths beyond ``tolerance`` of the totals of every target both
    have, and notes (per-module growths, which point at the culprit, and shrinks beyond the
    tolerance). Each item is a one-line string naming target, metric, baseline and new value.
    """
    growths, notes = [], []

    def check(where, new, old, into):
        for m, b in old.items():
            v = new.get(m)
            if v is None or not b:
                continue
            rel = (v - b) / b
            line = f"{where} {m}: {b} -> {v} ({rel:+.1%})"
            if rel > tolerance:
                into.append(line)
            elif rel < -tolerance:
                notes.append(line + " (shrunk: refresh the baseline)")

    def check_all(rep, bas, prefix):
        for t, old in bas["targets"].items():
            if t in rep["targets"]:
                check(prefix + t, rep["targets"][t], old, growths)
        for k, mod in bas["modules"].items():
            new_mod = rep["modules"].get(k)
            if new_mod is None:
                continue
            for t, old in mod["targets"].items():
                if t in new_mod["targets"]:
                    check(f"{prefix}{k}/{t}", new_mod["targets"][t], old, notes)

    check_all(report, base, "")
    if base.get("dense") and report.get("dense_baseline"):
        check_all(report["dense_baseline"], base["dense"], "dense ")
    return growths, notes
