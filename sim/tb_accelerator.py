"""The cocotb testbench of the accelerator top (``dstar.v``), driven from the manifest's
``accelerator`` section by ``dstar.sim.accel_io``.

It reads ``DSTAR_ACC_PARAMS`` (the manifest JSON) and ``DSTAR_ACC_CASES`` (an ``.npz`` of cases,
``dstar.sim.case_files``). A case is a script of steps on one freshly reset design, step ``i``
under keys ``s{i}_*``: a linear step (``kind`` 0: ``target`` (N, K), ``key``, ``m`` and
optionally ``w_base`` (where its weights are: 0 if absent), ``w`` (weights to load there),
``state`` and ``y`` (a saved state and Y to restore);
expected ``y_out``, ``xs_out`` and the cycle model's ``counters``: cycles, stall_load, low,
high, zero, clipped and saturated groups) or an attention step (``kind`` 1: ``q``, ``k``,
``v``, ``m``, ``sh``, ``slot``, ``theta_q``, ``refresh``; expected ``o``, ``r``, ``mask``,
``key`` and ``counters``: cycles, QK^T tiles, PV tiles). Integers are compared with equality.
"""

import numpy as np

from dstar.sim.accel_io import AttentionStep, LinearStep, counters

__all__ = ["LINEAR_COUNTERS", "ATTENTION_COUNTERS", "run_case"]

#: The manifest's counters a linear / attention step's expected ``counters`` stand for.
LINEAR_COUNTERS = ("linear_cycles", "linear_stall_load", "linear_low", "linear_high",
                   "linear_zero", "linear_clipped_groups", "linear_saturated_groups")
ATTENTION_COUNTERS = ("attention_cycles", "attention_qk_tiles", "attention_pv_tiles")


async def run_case(io, man: dict, c: dict, log=None) -> list[str]:
    """Run the steps of case ``c`` (``{array name: array}``); returns the failures found."""
    fails = []
    n_steps = sum(1 for k in c if k.endswith("_kind"))
    for i in range(n_steps):
        s = {k.split("_", 1)[1]: v for k, v in c.items() if k.startswith(f"s{i}_")}
        if int(s["kind"]) == 0:
            n, k = s["target"].shape
            step = LinearStep(man, k, int(s["m"]), n)
            y, xs = await step.run(io, s["target"], key=bool(s["key"]), w_q=s.get("w"),
                                   w_base=int(s.get("w_base", 0)), state=s.get("state"),
                                   y=s.get("y"))
            cnt = await counters(io, man)
            got = [cnt[name] for name in LINEAR_COUNTERS]
            if not np.array_equal(y, s["y_out"]):
                fails.append(f"step {i}: Y differs in {int((y != s['y_out']).sum())} values")
            if not np.array_equal(xs, s["xs_out"]):
                fails.append(f"step {i}: state differs")
        else:
            step = AttentionStep(man, s["q"].shape[0])
            o, r, mask, cnt = await step.run(io, s["q"], s["k"], s["v"], s["m"], s["sh"],
                                             slot=int(s["slot"]), theta_q=int(s["theta_q"]),
                                             refresh=int(s["refresh"]))
            got = [cnt[name] for name in ATTENTION_COUNTERS]
            if bool(cnt["attention_key"]) != bool(s["key"]):
                fails.append(f"step {i}: key step {bool(cnt['attention_key'])}")
            for name, a, b in (("O", o, s["o"]), ("R", r, s["r"]), ("mask", mask, s["mask"])):
                if not np.array_equal(a, b):
                    fails.append(f"step {i}: {name} differs")
        if got != [int(x) for x in s["counters"]]:
            fails.append(f"step {i}: counters {got} != {list(s['counters'])}")
        if cnt["errors"]:
            fails.append(f"step {i}: {cnt['errors']} commands refused")
        if log is not None:
            log(f"step {i}: kind {int(s['kind'])} counters {got}")
    return fails


# ----- cocotb -----
try:
    import cocotb
    from cocotb.clock import Clock

    from dstar.sim.case_files import from_env
    from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
except ImportError:                         # the driver is usable without cocotb
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def test_cases(dut):
        """Every case of ``DSTAR_ACC_CASES`` on a freshly reset design."""
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        params, cases = from_env("DSTAR_ACC_PARAMS", "DSTAR_ACC_CASES")
        man = params["accelerator"]
        io = dut_io(dut)
        failures = []
        for name, c in cases:
            await reset(dut, io, man["ports"])
            failures += [f"{name} {f}" for f in await run_case(io, man, c, cocotb.log.info)]
        assert not failures, "; ".join(failures)
