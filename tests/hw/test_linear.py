"""LinearLayer (whole layer steps) on the Amaranth simulator: bit-exact Y_int and state against
the golden model, and measured cycles and op counts equal to sim.cycle_model's prediction."""

import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.golden.dispatch import STRATEGIES
from tests.hw.cases.linear import expected_steps, extreme_key, uneven_targets
from tests.hw.fixtures import drifting_targets, random_weights, run_layer_pysim


def check(cfg, w_q, steps, state=None):
    """Run ``steps`` = [(target, key)] and compare every step; returns the cycle reports."""
    outs = run_layer_pysim(cfg, w_q, steps, state=state)
    exp = expected_steps(cfg, w_q, steps, state)
    for i, (out, (xs, y, rep)) in enumerate(zip(outs, exp, strict=True)):
        assert np.array_equal(out.state, xs), f"state differs at step {i}"
        assert np.array_equal(out.y, y), f"Y differs at step {i}"
        assert out.counters == rep.counters(), f"cycle model differs at step {i}"
    return [rep for _, _, rep in exp]


@pytest.mark.parametrize("packing", list(Packing))
def test_drifting_layer(packing):
    cfg = preset("tiny", encoding="nibble").replace(packing=packing)
    rng = np.random.default_rng(11)
    n, k, m = 12, 64, 16
    tg = drifting_targets(rng, cfg, n, k, 3)
    reps = check(cfg, random_weights(rng, k, m), [(tg[0], True), (tg[1], False), (tg[2], False)])
    assert reps[1].cycles < reps[0].cycles        # delta steps are cheaper than the key step


@pytest.mark.parametrize("packing", list(Packing))
def test_adversarial_values(packing):
    """All-HIGH and saturated key rows, an all-ZERO delta step, maximum-shift jumps."""
    cfg = preset("tiny", encoding="nibble").replace(packing=packing)
    rng = np.random.default_rng(12)
    n, k, m = 6, 64, 8
    key = extreme_key(rng, cfg, n, k)
    flip = -key                                                # D up to 2 * target_max
    w = random_weights(rng, k, m)
    w[:, 0] = 127
    w[:, 1] = -127
    check(cfg, w, [(key, True), (key, False), (flip, False), (flip, False)])


def test_one_token_layer():
    """One row over four K tiles of one column block: same accumulator row back to back."""
    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(13)
    k, m = 128, 8
    tg = drifting_targets(rng, cfg, 1, k, 2, scale=3000.0, drift=0.2)
    check(cfg, random_weights(rng, k, m), [(tg[0], True), (tg[1], False)])


@pytest.mark.parametrize("packing", list(Packing))
def test_one_tile_full_tokens(packing):
    cfg = preset("tiny", encoding="nibble").replace(packing=packing)
    rng = np.random.default_rng(14)
    n, k, m = cfg.max_tokens, cfg.k_tile, 8
    tg = drifting_targets(rng, cfg, n, k, 2)
    check(cfg, random_weights(rng, k, m), [(tg[0], True), (tg[1], False)])


def test_uneven_load():
    """Half the tokens idle, half all-HIGH; within tokens one channel per group busy: lanes
    and tokens as unequal as they get (credit stalls, long idle stretches)."""
    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(15)
    n, k, m = 16, 64, 8
    base, nxt = uneven_targets(rng, cfg, n, k)
    reps = check(cfg, random_weights(rng, k, m), [(base, True), (nxt, False)])
    assert reps[1].account["starved"] + reps[1].account["credit"] > 0


def test_partial_tiles_tau_preloaded_state():
    """K and M not multiples of the tile, tau = 1, and a state that did not come from a key."""
    cfg = preset("tiny", encoding="nibble").replace(tau=1)
    rng = np.random.default_rng(16)
    n, k, m = 5, 48, 12
    state = rng.integers(-2000, 2000, size=(n, k))
    tg = drifting_targets(rng, cfg, n, k, 2, scale=1500.0)
    check(cfg, random_weights(rng, k, m), [(tg[0], False), (tg[1], False)], state=state)


@pytest.mark.parametrize("lane_rotation", [1, 16])
def test_lane_rotation_variants(lane_rotation):
    """The static split (R = 1) and full rotation (R = G) are as exact as the default."""
    cfg = preset("tiny", encoding="nibble")
    rng = np.random.default_rng(17)
    n, k, m = 9, 64, 8
    tg = drifting_targets(rng, cfg, n, k, 2)
    check(cfg.replace(lane_rotation=lane_rotation), random_weights(rng, k, m),
          [(tg[0], True), (tg[1], False)])


@pytest.mark.parametrize("packing", list(Packing))
def test_lane_ram_weight_store(packing):
    """Per-lane weight memories (``weight_store = "lane_ram"``) are as exact as the shared
    register tile, over several weight tiles (both buffers) and with full rotation."""
    cfg = preset("tiny", encoding="nibble").replace(packing=packing, weight_store="lane_ram")
    rng = np.random.default_rng(23)
    n, k, m = 7, 96, 20
    tg = drifting_targets(rng, cfg, n, k, 2)
    check(cfg, random_weights(rng, k, m), [(tg[0], True), (tg[1], False)])
    if STRATEGIES[packing].rotates:
        tg = drifting_targets(rng, cfg, 3, 64, 2)
        check(cfg.replace(lane_rotation=16), random_weights(rng, 64, 8),
              [(tg[0], True), (tg[1], False)])


@pytest.mark.slow
@pytest.mark.parametrize("packing", list(Packing))
def test_default_preset_real_layer_sample(packing):
    """Default preset, the bundled DiT's block-3 MLP fc1 (all 256 tokens, K = 128, one column
    block), key step and two delta steps of a 20-step run (about a minute per strategy)."""
    from dstar.golden.quant import quantize_weights, to_lattice, token_lattice
    from dstar.sim.traces import linear_inputs

    cfg = preset("default", encoding="nibble").replace(packing=packing)
    xs, w, _ = linear_inputs("blocks.3.mlp.fc1", steps=20, take=3)
    w_q, _ = quantize_weights(w)
    w_q = w_q[:, :cfg.m_tile * cfg.n_arrays]
    d = token_lattice(xs[0])                  # the lattice is fixed at the key step
    targets = [np.clip(to_lattice(x, d), -cfg.target_max, cfg.target_max) for x in xs[:3]]
    check(cfg, w_q, [(targets[0], True), (targets[1], False), (targets[2], False)])


@pytest.mark.parametrize("packing", list(Packing))
def test_odd_geometry(packing):
    """A configuration far from the presets: 8-lane groups, three groups per slice, three arrays
    of three columns, narrow state, small shift range, two-deep queues, full memories."""
    cfg = preset("tiny").replace(encoding="nibble", group=8, k_tile=24, m_tile=3, n_arrays=3,
                                 e_max=5, state_bits=12, lane_fifo_depth=2, max_k=48, max_m=18,
                                 max_tokens=7, packing=packing)
    rng = np.random.default_rng(18)
    n, k, m = 7, 48, 18
    tg = drifting_targets(rng, cfg, n, k, 3, scale=400.0, drift=0.1)
    tg[1][0] = cfg.target_max
    tg[2][0] = -cfg.target_max
    check(cfg, random_weights(rng, k, m), [(tg[0], True), (tg[1], False), (tg[2], False)])
