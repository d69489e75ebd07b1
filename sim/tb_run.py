"""The cocotb testbench of ``dstar run``: one DiT block on the accelerator top (``dstar.v``),
step after step, through ``dstar.golden.host.BlockHost`` with a
``dstar.sim.block_run.CheckedEngine``.

It reads the folder ``DSTAR_RUN_DIR``: ``params.json`` (the manifest), ``plan.json`` (``config``:
the full configuration, ``block``, ``workload``) and ``inputs.npz`` (``h{s}``, ``sc{s}`` per
step ``s``: ``block_run.block_inputs``; with ``attention = "sar"`` ``mask``, the block's
static masks: ``block_run.block_masks``). It writes there, each file whole: ``progress.log``
(a line per operation, as it goes), ``ops.json`` (``CheckedEngine.ops``), ``clock.json`` (the
plan's cycles, host traffic included) and ``outputs.npz``
(the block's output ``out{s}`` per step). The comparison with the golden pipeline's outputs is
the caller's (``dstar run``); the test fails if any operation differed from the golden model or
the cycle models.
"""

import json
import os
from pathlib import Path

import numpy as np

from dstar.config import Config
from dstar.golden.dit import DiT
from dstar.outputs import write_atomic

from .block_run import CheckedEngine, run_cycles
from .host import AcceleratorEngine, BlockHost

__all__ = ["run_plan", "describe"]


def describe(rec: dict) -> str:
    """One progress line of an operation record."""
    cyc, pred = run_cycles(rec["counters"]), run_cycles(rec["predicted"])
    if rec["op"] == "attention":
        kind, what = rec["kind"], f"{rec['heads']} heads"
    else:
        kind, what = "key" if rec["key"] else "delta", f"{rec['rows']} rows"
    ok = "bit-exact" if rec["bit_exact"] else "DIFFERS from the golden model"
    same = "=" if rec["counters"] == rec["predicted"] else "!="
    return (f"step {rec['step']} {rec['op']:<9} ({kind}, {what}): "
            f"{cyc} cycles {same} model {pred}, {ok}")


async def run_plan(io, folder: Path, log=print, clock=None) -> list[dict]:
    """Run the plan of ``folder`` on the design behind ``io`` (reset); returns the records.
    ``clock()``: the simulator's cycle count, for ``clock.json`` (``clock_cycles``: every cycle
    of the plan, the runs' and the host traffic's)."""
    with open(folder / "params.json") as f:
        man = json.load(f)["accelerator"]
    with open(folder / "plan.json") as f:
        plan = json.load(f)
    cfg = Config(**plan["config"])
    with np.load(folder / "inputs.npz") as z:
        inputs = {k: z[k] for k in z.files}
    steps = sum(1 for k in inputs if k.startswith("h"))
    model = DiT.bundled(plan["workload"])
    progress = open(folder / "progress.log", "a", buffering=1)

    def on_op(rec):
        line = describe(rec)
        progress.write(line + "\n")
        log(line)

    start = clock() if clock is not None else None
    engine = CheckedEngine(AcceleratorEngine(io, man, cfg), cfg, on_op=on_op)
    masks = ({model.attention_names()[plan["block"]]: inputs["mask"]} if "mask" in inputs
             else None)
    host = BlockHost(cfg, model, engine, masks)
    outs = {}
    try:
        for s in range(steps):
            engine.step = s
            outs[f"out{s}"] = await host.step(plan["block"], inputs[f"h{s}"], inputs[f"sc{s}"], s)
            engine.finish()
    finally:
        progress.close()
    if clock is not None:
        write_atomic(folder / "clock.json",
                     json.dumps({"clock_cycles": int(clock() - start)}) + "\n")
    write_atomic(folder / "ops.json", json.dumps(engine.ops, indent=1) + "\n")
    tmp = folder / "outputs.tmp.npz"
    np.savez(tmp, **outs)
    os.replace(tmp, folder / "outputs.npz")
    return engine.ops


# ----- cocotb -----
try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.utils import get_sim_time

    from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
except ImportError:                         # the runner is usable without cocotb
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def test_block(dut):
        """The plan of ``DSTAR_RUN_DIR`` on a freshly reset design; fails if an operation's
        integers or counters differ from the golden model's and the cycle models'."""
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        folder = Path(os.environ["DSTAR_RUN_DIR"])
        with open(folder / "params.json") as f:
            ports = json.load(f)["accelerator"]["ports"]
        io = dut_io(dut)
        await reset(dut, io, ports)
        ops = await run_plan(io, folder, cocotb.log.info,
                             clock=lambda: get_sim_time("ns") // CLOCK_NS)
        bad = [describe(r) for r in ops if not r["bit_exact"] or r["counters"] != r["predicted"]]
        assert not bad, "; ".join(bad)
