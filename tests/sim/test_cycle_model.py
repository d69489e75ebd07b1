"""The fast cycle model (``dstar.sim.cycle_model``, event times slice by slice, batched) against the
cycle-by-cycle reference (``dstar.sim.cycle_reference``): equal counters and idle-lane accounts on
random layers, strategies, queue depths and rotations. Both are checked against the RTL in
``tests/hw/test_linear.py`` and the cocotb tests."""

import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.golden.difflinear import encode_step
from dstar.sim.cycle_model import predict, predict_batch
from dstar.sim.cycle_reference import predict as predict_reference
from tests.hw.fixtures import drifting_targets


def _encodings(rng, cfg, n, k, steps=3):
    tg = drifting_targets(rng, cfg, n, k, steps, scale=float(rng.choice([5, 60, 400])),
                          drift=float(rng.choice([0.01, 0.1, 1.0])))
    xs = np.zeros((n, k), dtype=np.int64)
    encs = []
    for target in tg:
        enc, xs = encode_step(target, xs, cfg)
        encs.append(enc)
    return encs


@pytest.mark.parametrize("seed", range(6))
def test_fast_model_equals_reference(seed):
    rng = np.random.default_rng(100 + seed)
    odd = preset("tiny").replace(encoding="nibble", group=8, k_tile=24, m_tile=3, n_arrays=3,
                                 e_max=5, state_bits=12, max_k=48, max_m=18, max_tokens=7)
    for _ in range(6):
        base = preset("tiny", encoding="nibble") if rng.random() < 0.5 else odd
        cfg = base.replace(packing=str(rng.choice(list(Packing))),
                           lane_fifo_depth=int(rng.choice([2, 3, 4, 8])))
        g = cfg.group
        rot = int(rng.choice([r for r in (0, 1, 2, 4, 8, 16) if r == 0 or g % r == 0]))
        cfg = cfg.replace(lane_rotation=rot)
        n = int(rng.integers(1, cfg.max_tokens + 1))
        k = g * int(rng.integers(1, cfg.max_k // g + 1))
        m = int(rng.integers(1, cfg.max_m + 1))
        encs = _encodings(rng, cfg, n, k)
        encs[int(rng.integers(3))].cls[:] = 0                     # an all-ZERO step
        for enc, fast in zip(encs, predict_batch(cfg, encs, k, m), strict=True):
            ref = predict_reference(cfg, enc, k, m)
            assert fast.counters() == ref.counters(), (cfg.packing, n, k, m, rot)
            assert fast.account == ref.account, (cfg.packing, n, k, m, rot)


def test_uneven_lanes_and_tokens():
    """Half the tokens all HIGH, the others one busy lane per group: credit waits and starved
    lanes in both models."""
    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(7)
    n, k, m = 16, 64, 8
    base = rng.integers(-50, 50, size=(n, k))
    nxt = base.copy()
    nxt[: n // 2] += rng.choice([-120, 120], size=(n // 2, k))
    nxt[n // 2:, ::cfg.group] += 100
    enc, _ = encode_step(nxt - base, np.zeros_like(base), cfg)
    for packing in Packing:
        c = cfg.replace(packing=packing)
        fast, ref = predict(c, enc, k, m), predict_reference(c, enc, k, m)
        assert fast.counters() == ref.counters() and fast.account == ref.account
        assert fast.account["starved"] + fast.account["credit"] + fast.account["zero"] > 0


def test_batch_needs_one_shape():
    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(8)
    a, b = _encodings(rng, cfg, 4, 32, 1)[0], _encodings(rng, cfg, 5, 32, 1)[0]
    with pytest.raises(ValueError, match="different shapes"):
        predict_batch(cfg, [a, b], 32, 8)


def test_layer_cycles_follow_the_datapath():
    """``dstar.sim.layer_cycles`` runs the cycle model of the top ``cfg.datapath`` generates."""
    from dstar.sim import dense_cycles, layer_cycles

    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(9)
    n, k, m = 5, 64, 12
    enc = _encodings(rng, cfg, n, k, steps=1)[0]
    assert layer_cycles.predict(cfg, enc, k, m) == predict(cfg, enc, k, m)
    dense = cfg.replace(datapath="dense")
    assert layer_cycles.predict(dense, enc, k, m) == dense_cycles.predict(dense, n, k, m)


def test_bench_cycles_json_is_the_cycle_model(capsys):
    """``dstar bench cycles --json``: stdout is one JSON object whose figures are the cycle
    model's own (re-predicted here from the golden encoding), the text goes to stderr."""
    import json

    from dstar.cli import main
    from dstar.config import load_config
    from dstar.golden.difflinear import DiffLinear
    from dstar.sim.bench import BASELINE, dense_cycles
    from dstar.sim.cycle_model import predict
    from dstar.sim.traces import linear_inputs

    assert main(["bench", "cycles", "--steps", "2", "--blocks", "0", "--layers", "mlp.fc2",
                 "--packing", "compact", "lockstep", "--json"]) == 0
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert "== whole run: 2 layer-steps" in cap.err
    cfg = load_config(None, "default", encoding="nibble").replace(steps=2)
    xs, w, b = linear_inputs("blocks.0.mlp.fc2", steps=2)
    dl = DiffLinear(w, b, cfg)
    encs = [dl(x, s).enc for s, x in enumerate(xs)]
    k, m = w.shape[1], w.shape[0]
    dense = dense_cycles(cfg, BASELINE, xs.shape[1], k, m)
    total = rep["total"]
    assert rep["layer_steps"] == 2 and total["dense_cycles"] == 2 * dense
    for p in ("compact", "lockstep"):
        cycles = sum(predict(cfg.replace(packing=p), e, k, m).cycles for e in encs)
        got = total["strategies"][p]
        assert got["cycles"] == cycles
        assert got["speedup_vs_dense"] == 2 * dense / cycles
    assert rep["layers"]["blocks.0.mlp.fc2"] == total
