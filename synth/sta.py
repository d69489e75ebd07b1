"""Pre-layout static timing of a mapped netlist with OpenSTA (Debian ``opensta``, ``sta``).

Ref: shared/research/liberty-flow.md section 2.3.

``run_sta`` reads the Liberty and the gate-level Verilog that the ``osu018`` flow writes
(``dstar.synth.flows``), clocks the module's ``clk`` port at ``PERIOD_NS`` with input and
output delays of 0 and reports two worst setup paths: over every path (``critical``: from an
input port or a register, to a register or an output port) and register to register only
(``reg2reg``). Each path names its start and end point (a port, or a register by the RTL
name of its output net), its data arrival time and the
library's setup time at the end; its minimum period is their sum (an output port has no setup)
and ``fmax_mhz`` its inverse.

What the figure is: pre-layout, no wires (the OSU library has no wire-load model), an ideal
clock, typical corner, and a block's ports driven ideally (0 ns input delay: the driving
register's clock-to-Q is not counted). It ranks blocks and paths; it is not sign-off.
"""

import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["STA", "PERIOD_NS", "have_sta", "run_sta", "parse_path", "register_names"]

STA = "sta"
#: The clock period of the constraints: long enough that every path shows positive slack
#: (the figures are the paths' delays, not the slack).
PERIOD_NS = 100.0


def have_sta() -> bool:
    return shutil.which(STA) is not None


def parse_path(text: str) -> dict | None:
    """The first path of an OpenSTA ``report_checks`` text: ``start``, ``end`` (names, without
    the ``(rising edge-triggered ...)`` note), ``start_kind``/``end_kind`` (``port`` or
    ``register``), ``arrival_ns``, ``setup_ns`` (0 at an output port), ``period_ns`` (their
    sum) and ``fmax_mhz``; ``None`` if the text has no path."""
    start = re.search(r"^Startpoint:\s*(\S+)(.*)$", text, re.M)
    end = re.search(r"^Endpoint:\s*(\S+)(.*)$", text, re.M)
    arrival = re.search(r"^\s*(-?[\d.]+)\s+data arrival time", text, re.M)
    if not (start and end and arrival):
        return None
    setup = re.search(r"^\s*(-?[\d.]+)\s+-?[\d.]+\s+library setup time", text, re.M)
    arr = float(arrival.group(1))
    su = abs(float(setup.group(1))) if setup else 0.0
    period = arr + su

    def kind(note: str) -> str:
        return "register" if "edge-triggered" in note else "port"

    return {"start": start.group(1), "start_kind": kind(start.group(2)),
            "end": end.group(1), "end_kind": kind(end.group(2)),
            "arrival_ns": round(arr, 3), "setup_ns": round(su, 3),
            "period_ns": round(period, 3),
            "fmax_mhz": round(1e3 / period, 1) if period > 0 else None}


def register_names(netlist: str) -> dict[str, str]:
    """``{instance: the net on its Q pin}`` of the flip-flops of a gate-level netlist (Yosys
    names the cells ``_123_``; their Q nets keep the RTL register's name, e.g. ``acc[3]``)."""
    out = {}
    for m in re.finditer(r"^\s*\w*DFF\w*\s+(\S+)\s*\((.*?)\);", netlist, re.M | re.S):
        q = re.search(r"\.Q\(\s*(.*?)\s*\)\s*(,|$)", m.group(2), re.S)
        if q:
            out[m.group(1).lstrip("\\")] = q.group(1).lstrip("\\").replace(" [", "[")
    return out


def run_sta(liberty: Path, netlist: Path, top: str, workdir: Path, stem: str) -> dict:
    """Time ``top`` of ``netlist`` (module docstring) in ``workdir``; writes ``<stem>.sta.tcl``
    and ``<stem>.sta.log``. Returns ``{"critical": path, "reg2reg": path or None, "clock":
    bool}`` (``parse_path``); a module without a ``clk`` port gets only its port-to-port path.
    Raises ``RuntimeError`` (naming the log) when ``sta`` fails or reports no path."""
    workdir = Path(workdir)
    text = Path(netlist).read_text()
    head = re.search(r"^module\s+\\?" + re.escape(top) + r"\s*\((.*?)\);", text, re.M | re.S)
    clocked = bool(head and re.search(r"(^|[\s,])clk([\s,]|$)", head.group(1)))
    mark = "#### dstar reg2reg"
    tcl = [f"read_liberty {Path(liberty).resolve()}",
           f"read_verilog {Path(netlist).resolve()}",
           f"link_design {{{top}}}"]
    if clocked:
        tcl += [f"create_clock -name clk -period {PERIOD_NS} [get_ports clk]",
                "set_input_delay 0 -clock clk [delete_from_list [all_inputs] "
                "[get_ports clk]]",
                "set_output_delay 0 -clock clk [all_outputs]"]
    else:
        tcl += [f"set_max_delay {PERIOD_NS} -from [all_inputs] -to [all_outputs]"]
    tcl += ["report_checks -path_delay max -digits 3"]
    if clocked:
        tcl += [f"puts \"{mark}\"",
                "report_checks -path_delay max -digits 3 -from [all_registers -clock_pins] "
                "-to [all_registers -data_pins]"]
    (workdir / f"{stem}.sta.tcl").write_text("\n".join(tcl) + "\n")
    log = workdir / f"{stem}.sta.log"
    res = subprocess.run([STA, "-no_splash", "-exit", f"{stem}.sta.tcl"], cwd=workdir,
                         capture_output=True, text=True)
    log.write_text(res.stdout + res.stderr)
    first, _, second = res.stdout.partition(mark)
    crit = parse_path(first)
    if res.returncode or crit is None or re.search(r"^Error", res.stdout + res.stderr, re.M):
        raise RuntimeError(f"sta failed (rc {res.returncode}) or found no path, see {log}")
    regs = register_names(text)
    paths = {"critical": crit, "reg2reg": parse_path(second) if clocked else None}
    for p in paths.values():     # a register by the RTL name of its output net
        for side in ("start", "end"):
            if p and p[f"{side}_kind"] == "register":
                p[side] = regs.get(p[side], p[side])
    return {**paths, "clock": clocked}
