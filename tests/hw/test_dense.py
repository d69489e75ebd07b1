# amaranth: UnusedElaboratable=no
# (Amaranth's per-file switch: a test builds a DSTAR top only to read its ports.)
"""The dense INT8 datapaths (``hw.dense.DenseLinearLayer``, the lean ``hw.int8.Int8LinearLayer``)
on the Amaranth simulator: ``Y_int`` bit-exact against the golden W8A8 reference on a real layer
of the bundled DiT and on random and extreme data, and measured cycles equal to their cycle
models (``dstar.sim.dense_cycles``, ``dstar.sim.int8_cycles``)."""

import numpy as np
import pytest

from dstar.config import ConfigError, preset
from dstar.golden.quant import (
    exact_matmul,
    quantize_weights,
    to_lattice,
    token_lattice,
    w8a8_linear,
)
from dstar.hw.generate import generate, manifest
from dstar.hw.geometry import DenseGeometry
from dstar.hw.linear import LinearLayer
from dstar.sim import int8_cycles
from dstar.sim.dense_cycles import predict
from dstar.sim.layer_cycles import SHAPE_MODELS
from dstar.sim.pysim_driver import run_layer_pysim

DATAPATHS = pytest.mark.parametrize("datapath", list(SHAPE_MODELS), ids=str)


def check(cfg, w_q, runs):
    """Load ``w_q`` once, then run each ``(N, K)`` INT8 activation matrix of ``runs`` on
    ``cfg``'s top: ``Y == X_int . W_q`` exactly and counters == the cycle model, every run."""
    outs = run_layer_pysim(cfg, w_q, [(x, True) for x in runs])
    k, m = w_q.shape
    for i, (x, out) in enumerate(zip(runs, outs, strict=True)):
        assert np.array_equal(out.y, exact_matmul(x, w_q)), f"Y differs at run {i}"
        want = SHAPE_MODELS[cfg.datapath](cfg, x.shape[0], k, m).counters()
        assert out.counters == want, f"cycles at run {i}"
    return [(out.y, out.counters) for out in outs]


def dense(name="tiny", datapath="dense", **kw):
    return preset(name, encoding="nibble").replace(datapath=datapath, **kw)


@DATAPATHS
def test_real_layer_w8a8(datapath):
    """The bundled DiT's block-3 fc1 (K = 128; the tiny preset's 32 tokens and 64 outputs) at
    two steps of a run, back to back (the second run must not add onto the first): the integer
    result, scaled, is ``dstar.golden.quant.w8a8_linear`` to the last bit."""
    from dstar.sim.traces import linear_inputs

    cfg = dense(datapath=datapath)
    xs, w, _ = linear_inputs("blocks.3.mlp.fc1", steps=20, take=3)
    w_q, s_w = quantize_weights(w[:cfg.max_m])
    runs, lattices = [], []
    for x in (xs[0][:cfg.max_tokens], xs[2][:cfg.max_tokens]):
        d = token_lattice(x)
        runs.append(np.clip(to_lattice(x, d), -127, 127))
        lattices.append((x, d))
    outs = check(cfg, w_q, runs)
    for (x, d), (y, _) in zip(lattices, outs, strict=True):
        assert np.array_equal(y * d[:, None] * s_w[None, :], w8a8_linear(x, w_q, s_w))


@DATAPATHS
def test_extreme_values_partial_tiles(datapath):
    """INT8 extremes on both operands (-128 included), K and M not multiples of the tile."""
    cfg = dense(datapath=datapath)
    rng = np.random.default_rng(21)
    n, k, m = 5, 48, 12
    w = rng.choice([-128, 127, -1, 0, 1], size=(k, m))
    w[:, 0] = -128
    x = rng.choice([-128, 127, 0], size=(n, k))
    x[0] = -128                                   # -128 x -128 on every product of column 0
    check(cfg, w, [x, rng.integers(-128, 128, size=(n, k))])


@DATAPATHS
def test_one_token_and_full_tokens(datapath):
    """One row over four K tiles (the same accumulator row rewritten every slice), then every
    token of the memory on one tile."""
    cfg = dense(datapath=datapath)
    rng = np.random.default_rng(22)
    w = rng.integers(-128, 128, size=(128, 8))
    check(cfg, w, [rng.integers(-128, 128, size=(1, 128))])
    w = rng.integers(-128, 128, size=(cfg.k_tile, 8))
    check(cfg, w, [rng.integers(-128, 128, size=(cfg.max_tokens, cfg.k_tile))])


@DATAPATHS
def test_odd_geometry(datapath):
    """Far from the presets: 4 lanes of 8x8 (group 8), six chunks per slice, three arrays of
    three columns, full memories."""
    cfg = dense(datapath=datapath, group=8, k_tile=24, m_tile=3, n_arrays=3, max_k=48, max_m=18,
                max_tokens=7)
    assert DenseGeometry(cfg).chunks == 6
    rng = np.random.default_rng(23)
    check(cfg, rng.integers(-128, 128, size=(48, 18)), [rng.integers(-128, 128, size=(7, 48))])


def test_lane_ram_weight_store():
    """Per-lane weight memories: INT8 extremes over several weight tiles (both buffers), and
    the odd geometry (six chunks per slice: a non-power-of-two key range)."""
    cfg = dense(weight_store="lane_ram")
    rng = np.random.default_rng(24)
    w = rng.choice([-128, 127, -1, 0, 1], size=(96, 12))
    check(cfg, w, [rng.choice([-128, 127, 0], size=(5, 96)), rng.integers(-128, 128, (5, 96))])
    cfg = dense(group=8, k_tile=24, m_tile=3, n_arrays=3, max_k=48, max_m=18, max_tokens=7,
                weight_store="lane_ram")
    check(cfg, rng.integers(-128, 128, size=(48, 18)), [rng.integers(-128, 128, size=(7, 48))])


def test_cycle_model_is_a_real_prediction():
    """The model is not a tautology: it charges the first tile's load and the drain, and the
    loads of later tiles hide behind long passes but not short ones."""
    cfg = dense()
    long = predict(cfg, 32, 128, 64)
    chunks = cfg.k_tile // (cfg.group // 2)
    assert long.passes == 4 * 8 and long.chunks == long.passes * 32 * chunks
    assert long.stall_load == cfg.k_tile + 1 and long.cycles == long.chunks + cfg.k_tile + 4
    short = predict(cfg, 1, 128, 64)
    assert short.stall_load > short.passes * (cfg.k_tile - chunks)
    assert predict(cfg, 0, 128, 64).cycles == 0


def test_int8_cycle_model_is_a_real_prediction():
    """The lean datapath's model charges the first chunk's load (``lanes`` rows) and the drain;
    later chunks' loads hide behind ``lanes + 1`` tokens or more, and not behind fewer."""
    cfg = dense(datapath="int8")
    lanes, chunks = cfg.group // 2, cfg.k_tile // (cfg.group // 2)
    long = int8_cycles.predict(cfg, 32, 128, 64)
    assert long.passes == 4 * 8 and long.chunks == long.passes * 32 * chunks
    assert long.stall_load == lanes + 1 and long.cycles == long.chunks + lanes + 4
    edge = int8_cycles.predict(cfg, lanes + 1, 128, 64)
    assert edge.stall_load == lanes + 1
    short = int8_cycles.predict(cfg, lanes, 128, 64)
    assert short.stall_load == lanes + 1 + long.passes * chunks - 1
    assert int8_cycles.predict(cfg, 0, 128, 64).cycles == 0
    with pytest.raises(ValueError, match="int8"):
        int8_cycles.predict(dense(), 4, 128, 64)


@DATAPATHS
def test_same_top_and_ports_as_dstar(tmp_path, datapath):
    """``dstar_linear`` with a subset of DSTAR's ports (no state, key or lane-op counters), INT8
    target words, and byte-identical Verilog for the same config."""
    cfg = dense(datapath=datapath)
    a, b = generate(cfg, tmp_path / "a"), generate(cfg, tmp_path / "b")
    assert (tmp_path / "a" / "dstar_linear.v").read_bytes() == \
        (tmp_path / "b" / "dstar_linear.v").read_bytes()
    assert a == b and a["top"] == "dstar_linear"
    v1 = preset("tiny", encoding="nibble")
    dstar = manifest(LinearLayer(v1))
    assert set(a["ports"]) < set(dstar["ports"])
    assert "host_state_wdata" not in a["ports"] and "key" not in a["ports"]
    assert a["layouts"]["target_row"]["width"] == 8 * cfg.k_tile
    assert a["geometry"]["lanes"] * 2 == cfg.group


def test_dense_needs_an_even_group():
    with pytest.raises(ConfigError, match="group=3"):
        preset("tiny", encoding="nibble").replace(group=3, k_tile=33, max_k=129, datapath="dense")
    with pytest.raises(ConfigError, match="datapath 'int8' needs an even group"):
        preset("tiny", encoding="nibble").replace(group=3, k_tile=33, max_k=129, datapath="int8")
    with pytest.raises(ConfigError, match="datapath 'dense'"):
        DenseGeometry(preset("tiny", encoding="nibble"))
