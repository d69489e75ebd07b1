"""Estimated register-to-register paths of an ECP5 netlist, in seconds instead of a routed run.

``python -m dstar.synth.ecp5_paths NETLIST.json [--top dstar] [--count 40] [--min-ns 0]
[--json]`` reads the JSON that Yosys writes after ``synth_ecp5`` (the ``ecp5_dsp_top`` flow's
``*.ecp5_dsp_top.json``, before placement) and prints the latest-arriving endpoints, one per
register (bits of one register are one line), each with its arrival in ns, its logic levels,
its start register and the chain of cells in between.

What the figure is: a static estimate, not a timing sign-off. Cell delays are nextpnr's for
speed grade 6 (``CELL_NS``: a block RAM's clock-to-output 5.61 ns without its output register,
a LUT4 0.24, a carry step 0.07, a MULT18X18D 4.0 without registers) and every net but a carry
chain costs ``ROUTE_NS`` plus ``FANOUT_NS`` per sink (at most 60). On the tiny accelerator top
at 18bbd08 it gave 34.19 ns for the path nextpnr routed at 34.21 ns; on a fuller device its
routing is optimistic (20.5 ns estimated against 24.4 ns placed), so it ranks paths and finds
cuts, and the routed run (``dstar synth --fmax``) stays the measure. Paths from the top's input
ports are left out: nextpnr does not time them out of context (``--out-of-context``).
docs/design/fmdq-hw.md ("A timing estimate between runs") says how it was used.
"""

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

__all__ = ["CELL_NS", "ROUTE_NS", "FANOUT_NS", "UNTIMED", "estimate", "main"]

#: Clock-to-output (sequential outputs) and input-to-output delays (ns), speed grade 6.
CELL_NS = {"ff_q": 0.52, "bram_q": 5.61, "mult_q": 3.0, "lut": 0.24, "pfumx": 0.26,
           "pfumx_sel": 0.30, "l6mux": 0.17, "l6mux_sel": 0.24, "ccu2_in": 0.45,
           "ccu2_carry": 0.07, "ccu2_sum": 0.44, "dpram_read": 0.5, "mult": 4.0}
ROUTE_NS = 1.0
FANOUT_NS = 0.01
#: Arrival of a net no cell drives (a top-level input port): such paths are not timed.
UNTIMED = -1000.0
_CLOCKS = {"CLK", "CLKA", "CLKB", "WCK"}


def _seq_out(cell: dict) -> float | None:
    """Clock-to-output of a sequential output, or ``None`` for a combinational one."""
    t, par = cell["type"], cell.get("parameters", {})
    if t == "TRELLIS_FF":
        return CELL_NS["ff_q"]
    if t == "DP16KD":
        return CELL_NS["bram_q"]
    if t == "MULT18X18D" and par.get("REG_OUTPUT_CLK", "NONE") != "NONE":
        return CELL_NS["mult_q"]
    return None


def _comb_inputs(cell: dict, port: str) -> list[tuple[str, float]]:
    """The input ports that reach output ``port`` of a combinational cell, with their delay."""
    t, conns = cell["type"], cell["connections"]
    if t == "LUT4":
        return [(q, CELL_NS["lut"]) for q in "ABCD" if q in conns]
    if t == "PFUMX":
        return [("ALUT", CELL_NS["pfumx"]), ("BLUT", CELL_NS["pfumx"]),
                ("C0", CELL_NS["pfumx_sel"])]
    if t == "L6MUX21":
        return [("D0", CELL_NS["l6mux"]), ("D1", CELL_NS["l6mux"]), ("SD", CELL_NS["l6mux_sel"])]
    if t == "CCU2C":
        low = [(q, CELL_NS["ccu2_in"]) for q in ("A0", "B0", "C0", "D0")]
        high = [(q, CELL_NS["ccu2_in"]) for q in ("A1", "B1", "C1", "D1")]
        if port == "COUT":
            return low + high + [("CIN", CELL_NS["ccu2_carry"])]
        if port == "S0":
            return low + [("CIN", CELL_NS["ccu2_sum"])]
        if port == "S1":
            return low + high + [("CIN", CELL_NS["ccu2_sum"])]
    if t == "TRELLIS_DPR16X4" and port.startswith("DO"):
        return [("RAD", CELL_NS["dpram_read"])]
    if t == "MULT18X18D":
        return [(q, CELL_NS["mult"]) for q in conns if q[0] in "AB" and q[1:].isdigit()]
    return []


def _is_endpoint(cell: dict) -> bool:
    t, par = cell["type"], cell.get("parameters", {})
    return t in ("TRELLIS_FF", "DP16KD", "TRELLIS_DPR16X4") or (
        t == "MULT18X18D" and par.get("REG_INPUTA_CLK", "NONE") != "NONE")


def _clean(name: str) -> str:
    """A cell's name without the suffixes Yosys' techmapping appends."""
    return re.split(r"_(?:LUT4|CCU2C|PFUMX|L6MUX21|TRELLIS_FF|DP16KD|MULT18X18D)(?:_|$)",
                    name)[0]


def estimate(netlist: dict, top: str, count: int = 40, min_ns: float = 0.0) -> list[dict]:
    """The ``count`` latest endpoints of module ``top`` (one per register, at least ``min_ns``),
    latest first: ``arrival_ns``, ``levels`` (cells on the path), ``end`` (cell.port),
    ``start`` (the first cell) and ``via`` (the cells' hierarchical prefixes, in order)."""
    cells = netlist["modules"][top]["cells"]
    drv, fan = {}, Counter()
    for name, c in cells.items():
        for p, bits in c["connections"].items():
            out = c["port_directions"].get(p) == "output"
            for b in bits:
                if isinstance(b, int):
                    if out:
                        drv[b] = (name, p)
                    else:
                        fan[b] += 1

    def wire(b, port):
        return 0.0 if port == "CIN" else ROUTE_NS + FANOUT_NS * min(fan[b], 60)

    arr, pred = {}, {}

    def arrival(b) -> float:
        stack = [b]
        while stack:
            x = stack[-1]
            if x in arr:
                stack.pop()
                continue
            if x not in drv:
                arr[x], pred[x] = UNTIMED, None
                stack.pop()
                continue
            cell = cells[drv[x][0]]
            q = _seq_out(cell)
            if q is not None:
                arr[x], pred[x] = q, None
                stack.pop()
                continue
            ins = [(ib, dl, p) for p, dl in _comb_inputs(cell, drv[x][1])
                   for ib in cell["connections"].get(p, []) if isinstance(ib, int)]
            todo = [ib for ib, _, _ in ins if ib not in arr]
            if todo:
                stack.extend(todo)
                continue
            best, bp = UNTIMED, None
            for ib, dl, p in ins:
                v = arr[ib] + wire(ib, p) + dl
                if v > best:
                    best, bp = v, ib
            arr[x], pred[x] = best, bp
            stack.pop()
        return arr[b]

    ends = []
    for name, c in cells.items():
        if not _is_endpoint(c):
            continue
        for p, bits in c["connections"].items():
            if c["port_directions"].get(p) != "input" or p in _CLOCKS:
                continue
            for b in bits:
                if isinstance(b, int):
                    a = arrival(b)
                    if a > UNTIMED / 2:
                        ends.append((a + wire(b, p), name, p, b))
    ends.sort(key=lambda e: (-e[0], e[1], e[2]))
    out, seen = [], set()
    for a, name, p, b in ends:
        if a < min_ns or len(out) >= count:
            break
        key = re.sub(r"\[\d+\]|\.\d+", "", _clean(name))
        if key in seen:
            continue
        seen.add(key)
        chain, x = [], b
        while x is not None:
            if x in drv:
                chain.append(_clean(drv[x][0]))
            x = pred.get(x)
        chain.reverse()
        via = []
        for ch in chain:
            k = ".".join(re.sub(r"\[\d+\]|\.\d+", "", ch).split(".")[:3])
            if not via or via[-1] != k:
                via.append(k)
        out.append({"arrival_ns": round(a, 2), "levels": len(chain), "end": f"{name}.{p}",
                    "start": chain[0] if chain else "?", "via": via})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dstar.synth.ecp5_paths",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("netlist", type=Path, help="Yosys JSON after synth_ecp5")
    ap.add_argument("--top", default="dstar", help="the module (default: dstar)")
    ap.add_argument("--count", type=int, default=40, help="endpoints to list (default: 40)")
    ap.add_argument("--min-ns", type=float, default=0.0, help="only endpoints at least this late")
    ap.add_argument("--json", action="store_true", help="print one JSON list")
    args = ap.parse_args(argv)
    try:
        netlist = json.loads(args.netlist.read_text())
    except (OSError, ValueError) as e:
        print(f"ecp5_paths: cannot read netlist {args.netlist}: {e}", file=sys.stderr)
        return 2
    if args.top not in netlist.get("modules", {}):
        print(f"ecp5_paths: no module {args.top!r} in {args.netlist}", file=sys.stderr)
        return 2
    paths = estimate(netlist, args.top, args.count, args.min_ns)
    if args.json:
        print(json.dumps(paths))
        return 0
    for p in paths:
        print(f"{p['arrival_ns']:6.2f} ns {p['levels']:3d} levels  {p['end']}\n"
              f"        from {p['start']}\n        via {' > '.join(p['via'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
