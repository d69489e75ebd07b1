"""Benchmark of the linear datapath on the bundled DiT: cycles, PE-lane utilization and the cycle
ratio versus the same layer on the lean dense INT8 datapath (``datapath = "int8"``,
``dstar.sim.int8_cycles``) of the same tiles, arrays and peak 8-bit throughput, for v1's
packings (``encoding = "nibble"``, whatever the configuration says).

``dstar bench cycles [--preset default] [--steps 50] [--blocks 0 1 ...] [--layers mlp.fc1 ...]
[--packing compact lockstep] [--every N] [--lane-rotation R ...] [--rtl N] [--per-step]
[--area [PRESET]]`` runs ``run``.

By default it covers the whole sampling run: every step of a ``--steps``-step DDIM run, every
linear layer of every block (fc1, fc2, qkv, proj of the 6 blocks). For each layer it encodes
every step with the golden model (``DiffLinear``, tau from the config) and predicts the cycles
of every strategy with the exact cycle model (``dstar.sim.cycle_model.predict_batch``). ``--rtl N``
also runs ``N`` layer-steps spread over the run (the key step and delta steps, of
``--rtl-layer``, one column block, all tokens) on the Amaranth simulator and checks measured
cycles, op counts, ``Y`` and state against the model and the golden model.

Figures:

* element mix (ZERO / LOW / HIGH) and ``ideal`` = dense nibble passes / element passes (every
  lane busy with useful ops);
* per strategy: cycles, ``x dense`` (the lean INT8 datapath's cycles / cycles), the fraction of
  ``ideal`` reached, lane utilization (useful lane cycles / all lane cycles) and the idle lane
  cycles by cause (``dstar.sim.cycle_model``: load, fill, drain, credit, starved, zero);
* per layer, per step (``--per-step``; aggregated over the layers) and over the whole run;
* the model's speed in layer-steps per second.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from dstar.config import Datapath, Encoding, Packing, Workload
from dstar.golden.difflinear import DiffLinear, encode_step
from dstar.golden.dispatch import STRATEGIES
from dstar.golden.quant import exact_matmul
from dstar.sim.cycle_model import ACCOUNTS, predict, predict_batch
from dstar.sim.layer_cycles import SHAPE_MODELS
from dstar.sim.traces import linear_inputs

__all__ = ["LAYERS", "DEFAULT_PACKINGS", "RTL_LAYER", "BASELINE", "dense_cycles",
           "all_layers", "run_model", "run", "format_report"]

#: The linear layers of a DiT block (``--layers``).
LAYERS = ("mlp.fc1", "mlp.fc2", "attn.qkv", "attn.proj")
#: The strategies compared by default (``--packing``).
DEFAULT_PACKINGS = (Packing.COMPACT, Packing.LOCKSTEP)
#: The layer of the RTL sample (``--rtl-layer``).
RTL_LAYER = "blocks.3.mlp.fc1"
#: The datapath every ratio is measured against: the lean dense INT8 one.
BASELINE = Datapath.INT8


def dense_cycles(base, datapath: Datapath, n_tokens: int, k: int, m: int) -> int:
    """Cycles of one ``n_tokens`` x ``K`` x ``M`` layer run on ``base``'s tiles and arrays with a
    dense INT8 ``datapath`` (``dstar.sim.layer_cycles.SHAPE_MODELS``)."""
    return SHAPE_MODELS[datapath](base.replace(datapath=datapath), n_tokens, k, m).cycles


def all_layers(blocks=None, layers=LAYERS, workload=Workload.DIGITS) -> list[str]:
    """Names of the ``layers`` of DiT ``blocks`` (None: every block of ``workload``'s bundled
    DiT)."""
    if blocks is None:
        from dstar.golden.dit import load_weights
        blocks = list(range(load_weights(workload=workload)[0].depth))
    return [f"blocks.{blk}.{name}" for blk in blocks for name in layers]


@dataclass
class Tally:
    """Sums over layer-steps: ideal passes, the baseline's (lean INT8) cycles and each
    strategy's cycles."""
    elems: int = 0
    passes: int = 0
    dense: int = 0
    mix: np.ndarray = field(default_factory=lambda: np.zeros(3, dtype=np.int64))
    strat: dict = field(default_factory=dict)

    def add_step(self, enc, dense, n_mt):
        """``n_mt``: column blocks, the times each element is run (weights the ideal)."""
        counts = np.bincount(enc.cls.ravel(), minlength=3)
        self.mix += counts
        self.elems += n_mt * enc.cls.size
        self.passes += n_mt * int(counts[1] + 2 * counts[2])
        self.dense += dense

    def add_rep(self, label, rep):
        t = self.strat.setdefault(label, {"cycles": 0, "useful": 0, "lanes": 0,
                                          **dict.fromkeys(ACCOUNTS, 0)})
        t["cycles"] += rep.cycles
        t["useful"] += rep.useful
        t["lanes"] += rep.lanes * rep.cycles
        for a in ACCOUNTS:
            t[a] += rep.account[a]

    @property
    def ideal(self):
        """Dense over element passes; ``None`` when no element needs a pass (no work)."""
        return 2 * self.elems / self.passes if self.passes else None

    def line(self, label, breakdown=False):
        t = self.strat[label]
        sp = self.dense / t["cycles"]
        of_ideal = f"{sp / self.ideal:4.0%} of ideal" if self.ideal else "no work"
        out = (f"{label:12s} x{sp:5.2f} ({of_ideal}) "
               f"util {t['useful'] / t['lanes']:.3f}")
        if breakdown:
            idle = " ".join(f"{a} {t[a] / t['lanes']:.3f}" for a in ACCOUNTS)
            out += f"  cycles {t['cycles']}  idle lane fractions: {idle}"
        return out

    def to_dict(self) -> dict:
        """The tally as JSON figures: element mix, ideal, dense cycles and per strategy cycles,
        ``speedup_vs_dense``, ``fraction_of_ideal``, ``utilization`` and idle lane fractions."""
        f = self.mix / max(1, self.mix.sum())
        out = {"mix": {"zero": float(f[0]), "low": float(f[1]), "high": float(f[2])},
               "ideal": self.ideal, "dense_cycles": self.dense, "strategies": {}}
        for label, t in self.strat.items():
            sp = self.dense / t["cycles"]
            out["strategies"][label] = {
                "cycles": t["cycles"], "speedup_vs_dense": sp,
                "fraction_of_ideal": sp / self.ideal, "utilization": t["useful"] / t["lanes"],
                "idle": {a: t[a] / t["lanes"] for a in ACCOUNTS}}
        return out

    def head(self):
        f = self.mix / max(1, self.mix.sum())
        ideal = f"x{self.ideal:5.2f}" if self.ideal else "no work"
        return f"mix {f[0]:.2f}/{f[1]:.2f}/{f[2]:.2f} ideal {ideal}"


def _strategies(packings, rotations):
    out = []
    for p in map(Packing, packings):
        if STRATEGIES[p].rotates:
            out += [(f"{p}/R{r}" if len(rotations) > 1 else str(p), p, r) for r in rotations]
        else:
            out.append((str(p), p, 0))
    return out


def _strategy_config(base, packing, rotation):
    """``base`` with a strategy of ``_strategies`` (rotation 0: the config's own)."""
    return base.replace(packing=packing, lane_rotation=rotation or base.lane_rotation)


def run_model(base, strategies, layers, steps, every, say=print):
    """Model every chosen step of every layer (a line per layer to ``say``); returns (total,
    per layer, per step, speed, layer-steps)."""
    total, per_layer, per_step = Tally(), {}, {}
    secs = dict.fromkeys([s[0] for s in strategies], 0.0)
    n_ls = 0
    for layer in layers:
        xs, w, b = linear_inputs(layer, steps=steps, workload=base.workload)
        dl = DiffLinear(w, b, base)
        k, m = w.shape[1], w.shape[0]
        encs = [dl(x, s).enc for s, x in enumerate(xs)]
        chosen = [s for s in range(len(encs)) if s % every == 0]
        dense = dense_cycles(base, BASELINE, xs.shape[1], k, m)
        n_mt = -(-m // (base.m_tile * base.n_arrays))
        lt = per_layer[layer] = Tally()
        for s in chosen:
            for t in (total, lt, per_step.setdefault(s, Tally())):
                t.add_step(encs[s], dense, n_mt)
        n_ls += len(chosen)
        for label, p, rot in strategies:
            t0 = time.perf_counter()
            reps = predict_batch(_strategy_config(base, p, rot), [encs[s] for s in chosen], k,
                                 m)
            secs[label] += time.perf_counter() - t0
            for s, rep in zip(chosen, reps, strict=True):
                for t in (total, lt, per_step[s]):
                    t.add_rep(label, rep)
        say(f"{layer:20s} K{k:4d} M{m:4d} {lt.head()} | "
            + " | ".join(lt.line(lab) for lab, _, _ in strategies), flush=True)
    return total, per_layer, per_step, {lab: n_ls / s for lab, s in secs.items()}, n_ls


def run_rtl(base, strategies, layer, steps, n_rtl, say=print):
    """``n_rtl`` layer-steps of ``layer`` (key step first, the rest spread over the run) on the
    Amaranth simulator, one column block: measured counters vs the model, Y and state vs
    golden. Returns the number of mismatches."""
    from dstar.sim.pysim_driver import run_layer_pysim

    xs, w, b = linear_inputs(layer, steps=steps, workload=base.workload)
    dl = DiffLinear(w, b, base)
    targets, states = [], []
    for s, x in enumerate(xs):
        states.append(dl.xs if s else None)
        targets.append(dl(x, s).target)
    sample = sorted({int(round(v)) for v in np.linspace(0, len(xs) - 1, n_rtl)})
    cols = base.m_tile * base.n_arrays
    w_q = dl.w_q[:, :cols]
    k = w_q.shape[0]
    bad = 0
    for label, p, rot in strategies:
        cfg = _strategy_config(base, p, rot)
        t0 = time.time()
        for s in sample:
            key = s == 0
            state = None if key else states[s]
            out = run_layer_pysim(cfg, w_q, [(targets[s], key)], state=state)[0]
            enc_s, xs_g = encode_step(targets[s], np.zeros_like(targets[s]) if key else state,
                                      cfg)
            y_g = exact_matmul(enc_s.decode(), w_q)
            model = predict(cfg, enc_s, k, cols)
            same = model.counters() == out.counters
            exact = np.array_equal(out.y, y_g) and np.array_equal(out.state, xs_g)
            bad += (not same) + (not exact)
            say(f"RTL {layer}[:, :{cols}] {label:12s} step {s:2d}: measured "
                  f"{out.counters['cycles']:6d} cycles, model {model.cycles:6d} "
                  f"({'equal' if same else 'DIFFERENT'}), util {model.utilization:.3f}, "
                  f"Y and state {'bit-exact' if exact else 'DIFFERENT'}", flush=True)
        say(f"  ({time.time() - t0:.0f}s of Amaranth simulation)")
    return bad


def run(base, *, blocks=None, layers=LAYERS, packings=DEFAULT_PACKINGS, every: int = 1,
        lane_rotations=(0,), per_step: bool = False, rtl: int = 0,
        rtl_layer: str = RTL_LAYER, say=print) -> tuple[list, dict]:
    """The cycle figures of ``layers`` of DiT ``blocks`` (None: all) over every ``every``-th
    step of a ``base.steps``-step run, for each of ``packings`` (``compact`` once per lane
    rotation of ``lane_rotations``), printed (``say``) per layer, per step (``per_step``) and over
    the run; with ``rtl`` also that many layer-steps of ``rtl_layer`` on the Amaranth
    simulator (a mismatch with the model or the golden model is printed). Returns the
    strategies ``[(label, packing, lane_rotation)]`` and the report: ``total`` and ``layers``
    (``Tally.to_dict``), ``model_speed`` (layer-steps per second) and ``rtl_mismatches``.
    The packings are v1's, so ``base`` runs with ``encoding = "nibble"`` whatever it says
    (FMDQ's cycles: ``dstar bench efficiency``)."""
    base = base.replace(encoding=Encoding.NIBBLE)
    steps = base.steps
    strategies = _strategies(packings, lane_rotations)
    layers = all_layers(blocks, layers, base.workload)
    total, per_layer, per_steps, speed, n_ls = run_model(base, strategies, layers, steps, every,
                                                         say)
    if per_step:
        say("== per step, over the layers ==")
        for s, t in sorted(per_steps.items()):
            say(f"step {s:2d} {t.head()} | "
                + " | ".join(t.line(lab) for lab, _, _ in strategies))
    say(f"== whole run: {n_ls} layer-steps ({len(layers)} layers x "
        f"{n_ls // max(1, len(layers))} steps of {steps}), cycle model ==")
    say(f"{total.head()}, lean dense INT8 {total.dense} cycles")
    for label, _, _ in strategies:
        say(total.line(label, breakdown=True))
    say("model speed: " + ", ".join(f"{lab} {v:.1f} layer-steps/s" for lab, v in speed.items()))
    report = {"bench": "cycles", "workload": str(base.workload), "baseline": str(BASELINE),
              "steps": steps, "every": every, "layer_steps": n_ls,
              "layers": {name: t.to_dict() for name, t in per_layer.items()},
              "total": total.to_dict(), "model_speed": speed}
    if per_step:
        report["per_step"] = {s: t.to_dict() for s, t in sorted(per_steps.items())}
    if rtl:
        bad = run_rtl(base, strategies, rtl_layer, steps, rtl, say)
        say(f"RTL sample: {'model == RTL and bit-exact' if not bad else f'{bad} MISMATCHES'}")
        report["rtl_mismatches"] = bad
    return strategies, report


def format_report(rep: dict) -> str:
    """``run``'s report as text: the whole run and each layer, one line per strategy."""
    # Reports from before the int8 baseline measured against a dense pass on the same lanes.
    base = ("lean dense INT8" if rep.get("baseline") == Datapath.INT8.value
            else "dense pass on the same lanes")

    def lines(t, indent=""):
        mix = t["mix"]
        out = [f"{indent}mix {mix['zero']:.2f}/{mix['low']:.2f}/{mix['high']:.2f} ideal "
               f"x{t['ideal']:.2f}, {base} {t['dense_cycles']} cycles"]
        for label, v in t["strategies"].items():
            idle = " ".join(f"{a} {f:.3f}" for a, f in v["idle"].items())
            out.append(f"{indent}  {label:12s} x{v['speedup_vs_dense']:5.2f} "
                       f"({v['fraction_of_ideal']:4.0%} of ideal) util {v['utilization']:.3f}"
                       f"  cycles {v['cycles']}  idle lane fractions: {idle}")
        return out

    which = "every step" if rep["every"] == 1 else f"every {rep['every']}-th step"
    out = [f"whole run: {rep['layer_steps']} layer-steps of {len(rep['layers'])} layers, "
           f"{which} of {rep['steps']} (cycle model, exact against the RTL)"]
    out += lines(rep["total"])
    for name, t in rep["layers"].items():
        out += [name, *lines(t, "  ")]
    return "\n".join(out)
