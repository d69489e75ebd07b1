# amaranth: UnusedElaboratable=no
# (Amaranth's per-file switch: a test builds a DSTAR top only to read its ports.)
"""The dense INT8 baseline (``hw.dense.DenseLinearLayer``) on the Amaranth simulator: ``Y_int``
bit-exact against the golden W8A8 reference on a real layer of the bundled DiT and on random and
extreme data, and measured cycles equal to ``dstar.sim.dense_cycles.predict``."""

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
from dstar.hw.dense import DenseLinearLayer
from dstar.hw.generate import generate, manifest
from dstar.hw.geometry import DenseGeometry
from dstar.hw.linear import LinearLayer
from dstar.sim.dense_cycles import predict
from dstar.sim.layer_io import LayerImage
from dstar.sim.pysim_driver import simulate


def run_dense(cfg, w_q, runs):
    """Load ``w_q`` once, then for each ``(N, K)`` INT8 activation matrix of ``runs``: load it,
    run, read ``Y``. Returns ``[(y, counters)]``."""
    dut = DenseLinearLayer(cfg)
    man = manifest(cfg, dut)
    k, m = w_q.shape
    out = []

    async def bench(ctx):
        for i, x in enumerate(runs):
            img = LayerImage(man, k, m, x.shape[0])
            if i == 0:
                for a, words in enumerate(img.weight_words(w_q)):
                    ctx.set(dut.host_w_we, 1 << a)
                    for addr, word in words.items():
                        ctx.set(dut.host_w_addr, addr)
                        ctx.set(dut.host_w_wdata, word)
                        await ctx.tick()
                ctx.set(dut.host_w_we, 0)
            ctx.set(dut.host_target_we, 1)
            for addr, word in img.row_words(x, "target").items():
                ctx.set(dut.host_row_addr, addr)
                ctx.set(dut.host_target_wdata, word)
                await ctx.tick()
            ctx.set(dut.host_target_we, 0)
            ctx.set(dut.n_tokens, img.n)
            ctx.set(dut.n_kt, img.n_kt)
            ctx.set(dut.n_mt, img.n_mt)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for _ in range(1_000_000):
                await ctx.tick()
                if not ctx.get(dut.busy):
                    break
            counters = {"cycles": ctx.get(dut.cycles), "stall_load": ctx.get(dut.stall_load)}
            words = [{} for _ in range(cfg.n_arrays)]
            for addr in img.y_addrs():
                ctx.set(dut.host_y_addr, addr)
                await ctx.tick()
                for a in range(cfg.n_arrays):
                    words[a][addr] = ctx.get(dut.host_y_rdata[a])
            out.append((img.y_from(words), counters))

    simulate(dut, bench)
    return out


def check(cfg, w_q, runs):
    """Every run: ``Y == X_int . W_q`` exactly and counters == the cycle model."""
    outs = run_dense(cfg, w_q, runs)
    k, m = w_q.shape
    for i, (x, (y, counters)) in enumerate(zip(runs, outs, strict=True)):
        assert np.array_equal(y, exact_matmul(x, w_q)), f"Y differs at run {i}"
        assert counters == predict(cfg, x.shape[0], k, m).counters(), f"cycles at run {i}"
    return outs


def dense(name="tiny", **kw):
    return preset(name).replace(datapath="dense", **kw)


def test_real_layer_w8a8():
    """The bundled DiT's block-3 fc1 (K = 128; the tiny preset's 32 tokens and 64 outputs) at
    two steps of a run, back to back (the second run must not add onto the first): the integer
    result, scaled, is ``dstar.golden.quant.w8a8_linear`` to the last bit."""
    from dstar.sim.traces import linear_inputs

    cfg = dense()
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


def test_extreme_values_partial_tiles():
    """INT8 extremes on both operands (-128 included), K and M not multiples of the tile."""
    cfg = dense()
    rng = np.random.default_rng(21)
    n, k, m = 5, 48, 12
    w = rng.choice([-128, 127, -1, 0, 1], size=(k, m))
    w[:, 0] = -128
    x = rng.choice([-128, 127, 0], size=(n, k))
    x[0] = -128                                   # -128 x -128 on every product of column 0
    check(cfg, w, [x, rng.integers(-128, 128, size=(n, k))])


def test_one_token_and_full_tokens():
    """One row over four K tiles (the same accumulator row rewritten every slice), then every
    token of the memory on one tile."""
    cfg = dense()
    rng = np.random.default_rng(22)
    w = rng.integers(-128, 128, size=(128, 8))
    check(cfg, w, [rng.integers(-128, 128, size=(1, 128))])
    w = rng.integers(-128, 128, size=(cfg.k_tile, 8))
    check(cfg, w, [rng.integers(-128, 128, size=(cfg.max_tokens, cfg.k_tile))])


def test_odd_geometry():
    """Far from the presets: 4 lanes of 8x8 (group 8), six chunks per slice, three arrays of
    three columns, full memories."""
    cfg = dense(group=8, k_tile=24, m_tile=3, n_arrays=3, max_k=48, max_m=18, max_tokens=7)
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


def test_same_top_and_ports_as_dstar(tmp_path):
    """``dstar_linear`` with a subset of DSTAR's ports (no state, key or lane-op counters), INT8
    target words, and byte-identical Verilog for the same config."""
    cfg = dense()
    a, b = generate(cfg, tmp_path / "a"), generate(cfg, tmp_path / "b")
    assert (tmp_path / "a" / "dstar_linear.v").read_bytes() == \
        (tmp_path / "b" / "dstar_linear.v").read_bytes()
    assert a == b and a["top"] == "dstar_linear"
    dstar = manifest(preset("tiny"), LinearLayer(preset("tiny")))
    assert set(a["ports"]) < set(dstar["ports"])
    assert "host_state_wdata" not in a["ports"] and "key" not in a["ports"]
    assert a["layouts"]["target_row"]["width"] == 8 * cfg.k_tile
    assert a["geometry"]["lanes"] * 2 == cfg.group
def test_dense_needs_an_even_group():
    with pytest.raises(ConfigError, match="group=3"):
        preset("tiny").replace(group=3, k_tile=33, max_k=129, datapath="dense")
    with pytest.raises(ConfigError, match="datapath 'dense'"):
        DenseGeometry(preset("tiny"))
