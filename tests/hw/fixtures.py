"""Shared helpers of the hardware tests: the golden step, test data generators, the
Amaranth-simulator step driver (re-exported from ``sim.pysim_driver``) and the cocotb-on-Icarus
build-and-run steps."""

import numpy as np
import pytest

from dstar.golden.difflinear import encode_step
from dstar.golden.quant import exact_matmul
from dstar.sim import simulators
from dstar.sim.pysim_driver import run_layer_pysim
from dstar.sim.simulators import Simulator, missing, verilator_path

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
    reason = missing(Simulator.ICARUS)
    if reason is not None:
        pytest.skip(reason)


def need_verilator() -> None:
    """Skip the calling test when the pinned Verilator is not installed."""
    reason = missing(Simulator.VERILATOR)
    if reason is not None:
        pytest.skip(reason)


def _run(sim, out, top, test_module, env, build, testcase):
    runner = simulators.build(sim, out / f"{top}.v", top, out / build)
    simulators.test(runner, top, test_module, out / build, out, env, testcase=testcase)


def run_verilator(out, top: str, test_module: str, env: dict, *, build: str = "verilator",
                  testcase: str | None = None) -> None:
    """``run_icarus`` on Verilator (``dstar.sim.simulators``)."""
    _run(Simulator.VERILATOR, out, top, test_module, env, build, testcase)


def run_icarus(out, top: str, test_module: str, env: dict, *, build: str = "icarus",
               testcase: str | None = None) -> None:
    """Compile ``out/{top}.v`` with Icarus in ``out/{build}`` and run the cocotb tests of
    ``test_module`` (all, or those matching ``testcase``) on it, in ``out``, with the
    environment variables ``env`` (name -> path) set for the testbench
    (``dstar.sim.simulators``). A failing cocotb test fails the calling test (the runner
    exits)."""
    _run(Simulator.ICARUS, out, top, test_module, env, build, testcase)


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
