"""How long the README's test command takes: ``dstar bench tests``.

Runs ``python -m pytest`` (the command CI runs, with the project's default options: the default
tier on every core, the 15 slowest tests printed) and reports its wall time, the outcome counts
and the slowest tests. With ``--clone`` it measures what CI measures: a fresh ``git clone`` of
the checkout's ``HEAD`` in a temporary folder, ``scripts/setup.sh`` there (timed apart), then the
test command in the clone. The machine's core count and load average before and after are part
of the report, since a loaded machine's figure says little.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["run_tests", "format_report", "main"]

_SUMMARY = re.compile(r"^=* ?(.*) in ([\d.]+)s\b")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")
_DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)")


class TestBenchError(RuntimeError):
    """A checkout that cannot be measured (not a git checkout, set-up failed)."""


def _checkout_root() -> Path:
    here = Path(__file__).resolve().parent
    res = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, text=True,
                         capture_output=True)
    if res.returncode:
        raise TestBenchError(f"{here} is not in a git checkout: `dstar bench tests` measures a "
                             "checkout's test command")
    return Path(res.stdout.strip())


def _parse(out: str) -> dict:
    counts, reported = {}, None
    for line in out.splitlines():
        m = _SUMMARY.search(line)
        if m and _COUNT.search(m.group(1)):
            reported = float(m.group(2))
            counts = {k.rstrip("s") if k.startswith("error") else k: int(n)
                      for n, k in _COUNT.findall(m.group(1))}
    slowest = [{"seconds": float(m.group(1)), "when": m.group(2), "test": m.group(3)}
               for m in map(_DURATION.match, out.splitlines()) if m]
    return {"counts": counts, "pytest_reported_s": reported, "slowest": slowest[:15]}


def run_tests(clone: bool = False, pytest_args: tuple[str, ...] = ()) -> dict:
    """Run the test command (in a fresh clone of ``HEAD`` with ``clone``) and return the
    report; the test command's own output is not kept."""
    root = _checkout_root()
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, text=True,
                          capture_output=True, check=True).stdout.strip()
    rep = {"commit": head, "clone": clone, "cores": os.cpu_count(),
           "load_before": [round(x, 2) for x in os.getloadavg()], "setup_s": None}
    with tempfile.TemporaryDirectory(prefix="dstar-bench-tests-") as tmp:
        where, python = root, sys.executable
        if clone:
            where = Path(tmp) / "checkout"
            subprocess.run(["git", "clone", "--quiet", str(root), str(where)], check=True)
            t0 = time.monotonic()
            res = subprocess.run(["bash", "scripts/setup.sh"], cwd=where, text=True,
                                 capture_output=True)
            if res.returncode:
                tail = (res.stderr or res.stdout).strip().splitlines()[-1:]
                raise TestBenchError(f"scripts/setup.sh failed in the clone: {tail}")
            rep["setup_s"] = round(time.monotonic() - t0, 1)
            python = str(where / ".venv" / "bin" / "python")
        t0 = time.monotonic()
        res = subprocess.run([python, "-m", "pytest", *pytest_args], cwd=where, text=True,
                             capture_output=True)
        rep["pytest_wall_s"] = round(time.monotonic() - t0, 1)
    rep["exit_code"] = res.returncode
    rep["load_after"] = [round(x, 2) for x in os.getloadavg()]
    rep.update(_parse(res.stdout))
    return rep


def format_report(rep: dict) -> str:
    where = "a fresh clone (set-up " + f"{rep['setup_s']:.0f} s)" if rep["clone"] \
        else "the checkout"
    counts = ", ".join(f"{n} {k}" for k, n in rep["counts"].items()) or "no summary"
    lines = [f"`python -m pytest` in {where} at {rep['commit']}: {rep['pytest_wall_s'] / 60:.1f} "
             f"min wall ({rep['pytest_wall_s']:.0f} s), exit {rep['exit_code']}: {counts}",
             f"{rep['cores']} cores; load average (1, 5, 15 min) before "
             f"{', '.join(map(str, rep['load_before']))}, after "
             f"{', '.join(map(str, rep['load_after']))}",
             "", "slowest tests:"]
    lines += [f"{s['seconds']:8.1f} s  {s['when']:<8} {s['test']}" for s in rep["slowest"]]
    return "\n".join(lines)


def main(clone: bool, as_json: bool, pytest_args: tuple[str, ...] = ()) -> int:
    rep = run_tests(clone, pytest_args)
    text = format_report(rep)
    if as_json:
        print(text, file=sys.stderr)
        print(json.dumps(rep, indent=1, sort_keys=True))
    else:
        print(text)
    return 0 if rep["exit_code"] == 0 else 1
