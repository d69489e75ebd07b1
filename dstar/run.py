"""``dstar run``: a configuration's accelerator top generated, compiled for an HDL simulator
and run on one block of the bundled DiT over the first steps of a real sampling run, every
operation checked against the golden model and the cycle models (``dstar.sim.block_run``,
``dstar.sim.tb_run``). With ``attention = "sar"`` the block's static masks come from the
configuration's mask file (cut to ``tokens``) and go into ``inputs.npz`` (``mask``), which the
testbench hands to the top at each head's cache step.

Everything goes to one folder under the build root, ``run/<config hash>``: the Verilog and
manifest (generated once per configuration and version of the generator: the output is
deterministic), the simulator's build (its own make decides what to recompile), the plan and
results of the last run (``plan.json``, ``inputs.npz``, ``progress.log``, ``ops.json``,
``outputs.npz``, ``run.json``), the tools' logs and, with ``waves``, the waveforms.
"""

import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from dstar.golden.dit import DiT
from dstar.hw.generate import ACCEL_TOP_NAME, build_accelerator
from dstar.hw.sources import source_digest
from dstar.outputs import locked_dir, write_atomic
from dstar.paths import build_dir
from dstar.sim import simulators
from dstar.sim.block_run import (
    block_inputs,
    block_masks,
    check_fits,
    check_request,
    golden_block,
    summarize,
)
from dstar.sim.simulators import Simulator
from dstar.synth.report import config_hash, preset_name

__all__ = ["run_block", "run_folder", "format_run", "format_summary", "ToolError"]

TESTBENCH = "dstar.sim.tb_run"


class ToolError(Exception):
    """The simulator failed to compile or run the generated top: the message names the
    folder's log (reported in one line)."""


def run_folder(cfg) -> Path:
    return build_dir("run", config_hash(cfg))


#: The generated files of a run folder, whose digest the stamp holds.
_GENERATED = (f"{ACCEL_TOP_NAME}.v", "params.json")


def _files_digest(folder: Path) -> str:
    """A digest of the folder's generated files (``_GENERATED``) as they are now."""
    h = hashlib.sha256()
    for name in _GENERATED:
        h.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return h.hexdigest()


def _generate(cfg, folder: Path, say) -> None:
    """``dstar.v`` and ``params.json`` in ``folder`` unless they are already this
    configuration's, made by these sources and unchanged since (``generator.sha256``: the
    generator's digest, then the files'; a truncated or edited ``dstar.v`` is made again)."""
    params, digest = folder / "params.json", source_digest()
    stamp = folder / "generator.sha256"
    if all((folder / name).is_file() for name in _GENERATED) and stamp.is_file():
        try:
            if (json.loads(params.read_text())["accelerator"]["config"] == cfg.hardware()
                    and stamp.read_text().split() == [digest, _files_digest(folder)]):
                say(f"reusing {folder / ACCEL_TOP_NAME}.v")
                return
        except (ValueError, KeyError):
            pass
    say("generating the accelerator top (about 2 minutes on the default preset) ...")
    t0 = time.perf_counter()
    files, _ = build_accelerator(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for name, text in files.items():
        write_atomic(folder / name, text)
    write_atomic(stamp, f"{digest}\n{_files_digest(folder)}\n")
    say(f"wrote {folder / ACCEL_TOP_NAME}.v in {time.perf_counter() - t0:.0f} s")


def _follow(path: Path, stop: threading.Event, say) -> None:
    """Print the lines ``path`` gets until ``stop`` is set (the testbench's progress)."""
    pos = 0
    while True:
        done = stop.wait(0.5)
        if path.is_file():
            with open(path) as f:
                f.seek(pos)
                text = f.read()
            end = text.rfind("\n") + 1
            for line in text[:end].splitlines():
                say(line)
            pos += len(text[:end].encode())
        if done:
            return


def run_block(cfg, *, sim: Simulator, steps: int = 3, block: int = 0,
              tokens: int | None = None, waves: bool = False, say=print) -> dict:
    """Run block ``block`` of the bundled DiT of ``cfg.workload`` on ``cfg``'s accelerator top
    on ``sim`` over steps ``0 .. steps - 1`` (``tokens``: the first tokens only; ``waves``, or
    ``WAVES=1``: with waveforms, in the run's folder); returns the
    report (``summarize``'s, with the run's settings, its folder and files and wall time).
    ``say`` gets the progress lines. ``ValueError`` for a configuration that cannot run it
    (``golden.sar.MaskError``: a SAR mask file that does not fit the model)."""
    t_start = time.perf_counter()
    waves = simulators.waves_requested(waves)
    model = DiT.bundled(cfg.workload)
    check_request(cfg, model.shape, block, steps, tokens)
    check_fits(cfg, model.shape, tokens)
    masks = block_masks(cfg, model, block, tokens)
    reason = simulators.missing(sim)
    if reason is not None:
        raise ValueError(f"--sim {sim}: {reason}")
    # Checked and locked before anything is generated: a file or read-only build folder fails
    # in one line, and a second run of this configuration does not mix its files with ours.
    with locked_dir(run_folder(cfg), "build folder") as folder:
        return _run_in(cfg, model, folder, sim=sim, steps=steps, block=block, tokens=tokens,
                       masks=masks, waves=waves, say=say, t_start=t_start)


def _run_in(cfg, model, folder: Path, *, sim, steps, block, tokens, masks, waves, say,
            t_start) -> dict:
    """``run_block``'s work in its locked ``folder`` (``masks``: ``block_masks``')."""
    _generate(cfg, folder, say)
    say("computing the block's inputs and the golden outputs ...")
    inputs = block_inputs(cfg, model, block, steps, tokens)
    want = golden_block(cfg, model, block, inputs, masks)
    write_atomic(folder / "plan.json", json.dumps(
        {"config": cfg.to_dict(), "block": block, "workload": str(cfg.workload.value)}) + "\n")
    arrays = {**{f"h{s}": h for s, (h, _) in enumerate(inputs)},
              **{f"sc{s}": sc for s, (_, sc) in enumerate(inputs)},
              **({} if masks is None else {"mask": masks})}
    _savez(folder / "inputs.npz", arrays)
    for stale in ("progress.log", "ops.json", "clock.json", "outputs.npz", "run.json"):
        (folder / stale).unlink(missing_ok=True)
    build = folder / (f"{sim}-waves" if waves else str(sim))
    say(f"compiling for {sim} in {build} (log: build.log; minutes the first time) ...")
    t0 = time.perf_counter()
    try:
        runner = simulators.build(sim, folder / f"{ACCEL_TOP_NAME}.v", ACCEL_TOP_NAME, build,
                                  waves=waves, log_file=folder / "build.log")
    except (RuntimeError, subprocess.CalledProcessError) as e:
        raise ToolError(f"{sim} could not compile {str(folder / ACCEL_TOP_NAME)!r}.v ({e}); "
                        f"see {str(folder / 'build.log')!r}") from None
    t_build = time.perf_counter() - t0
    say(f"compiled in {t_build:.0f} s; running {steps} steps of block {block} "
        f"({inputs[0][0].shape[0]} x {inputs[0][0].shape[1]} tokens) ...")
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(folder / "progress.log", stop, say))
    follower.start()
    t0 = time.perf_counter()
    try:
        simulators.test(runner, ACCEL_TOP_NAME, TESTBENCH, build, folder,
                        {"DSTAR_RUN_DIR": folder}, waves=waves, log_file=folder / "sim.log")
    except (RuntimeError, subprocess.CalledProcessError) as e:
        raise ToolError(f"the {sim} simulation failed ({e}); see "
                        f"{str(folder / 'sim.log')!r}") from None
    finally:
        stop.set()
        follower.join()
    t_sim = time.perf_counter() - t0
    if not (folder / "outputs.npz").is_file():
        raise RuntimeError(f"the simulation ended without results; see {folder / 'sim.log'}")
    ops = json.loads((folder / "ops.json").read_text())
    with np.load(folder / "outputs.npz") as z:
        got = [z[f"out{s}"] for s in range(steps)]
    equal = [bool(g.dtype == w.dtype and np.array_equal(g, w))
             for g, w in zip(got, want, strict=True)]
    rep = {"preset": preset_name(cfg), "sim": str(sim), "block": block,
           "encoding": str(cfg.encoding), "attention": str(cfg.attention),
           "tokens": int(inputs[0][0].shape[1]), "batch": int(inputs[0][0].shape[0]),
           **summarize(ops, equal),
           # Every simulated cycle of the steps: the runs' and the host's loads and reads.
           "clock_cycles": json.loads((folder / "clock.json").read_text())["clock_cycles"],
           "folder": str(folder), "results": str(folder / "run.json"),
           "waves": (str(simulators.waves_file(sim, ACCEL_TOP_NAME, build, folder))
                     if waves else None),
           "seconds": {"build": round(t_build, 1), "simulation": round(t_sim, 1),
                       "total": round(time.perf_counter() - t_start, 1)}}
    write_atomic(folder / "run.json", json.dumps(rep, indent=1) + "\n")
    return rep


def _savez(path: Path, arrays: dict) -> None:
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def format_summary(rep: dict) -> str:
    """``format_run`` without the run's file paths (for the results page)."""
    return format_run(rep, paths=False)


def format_run(rep: dict, paths: bool = True) -> str:
    """The report as a table: cycles per operation beside the cycle models'."""
    # The results page's stored report may predate the encoding and attention entries.
    attention = rep.get("attention", "residual")
    what = f" ({rep['encoding']} linears, {attention} attention)" if "encoding" in rep else ""
    lines = [f"dstar run: preset {rep['preset']}{what}, {rep['sim']}, block {rep['block']}, "
             f"{rep['steps']} steps, batch {rep['batch']} x {rep['tokens']} tokens",
             f"{'operation':<10} {'runs':>5} {'cycles':>12} {'model':>12}  result"]
    for op, d in rep["per_op"].items():
        same = "=" if d["counters_equal"] else "counters differ"
        ok = "bit-exact" if d["bit_exact"] else "DIFFERS"
        lines.append(f"{op:<10} {d['runs']:>5} {d['cycles']:>12,} {d['predicted_cycles']:>12,}"
                     f"  {ok}, {same}")
    lines.append(f"{'total':<10} {'':>5} {rep['cycles']:>12,} {rep['predicted_cycles']:>12,}")
    lines.append(f"cycles are the runs'; with the host's loads and reads the steps took "
                 f"{rep['clock_cycles']:,} cycles")
    el = rep["elements"]
    if rep.get("encoding") == "fmdq":
        lines.append(f"linear elements: {el['zero']:.1%} in skipped sub-channels, {el['low']:.1%}"
                     f" in 2- or 4-bit ones, {el['high']:.1%} in 6- or 8-bit ones")
    else:
        lines.append(f"linear elements: {el['zero']:.1%} skipped (ZERO), {el['low']:.1%} 4-bit "
                     f"(LOW), {el['high']:.1%} 8-bit (HIGH)")
    if "attention_steps" in rep:
        lines.append(f"attention ({attention}) per step kind: runs, cycles, the model's, blocks "
                     "computed (of a dense pass's)")
        for kind, d in rep["attention_steps"].items():
            lines.append(f"  {kind:<8}{d['runs']:>5} {d['cycles']:>12,} "
                         f"{d['predicted_cycles']:>12,}  {d['blocks_computed']:.1%}")
    elif rep["attention_blocks_computed"] is not None:      # a report from before SAR's run
        lines.append(f"attention blocks computed on reuse steps: "
                     f"{rep['attention_blocks_computed']:.1%}")
    same = "equal to" if all(rep["outputs_equal"]) else "DIFFERENT from"
    lines.append(f"block output at every step {same} the golden pipeline's; "
                 f"{'bit-exact' if rep['bit_exact'] else 'NOT bit-exact'}")
    sec = rep["seconds"]
    lines.append(f"time: compile {sec['build']:.0f} s, simulation {sec['simulation']:.0f} s, "
                 f"total {sec['total']:.0f} s")
    if paths:
        lines.append(f"results: {rep['results']}")
        if rep["waves"]:
            lines.append(f"waveforms: {rep['waves']}")
    return "\n".join(lines)
