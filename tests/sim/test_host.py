"""The host of a DiT block (``dstar.golden.host.BlockHost``, the one float pipeline of the
golden hooks and the accelerator's host): with the golden engine, a block of the bundled DiT
over a real sampling run equals the golden pipeline's block bit for bit
(``tests/golden/test_host.py`` pins both to the numbers before they shared their float side);
with the accelerator engine (the accelerator top on Amaranth's simulator), a whole block of a
small DiT (its four linears, every head's attention, two heads to a slot of the top) over a
linear and attention key step and two more steps equals it too."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.attention import AttentionReuse
from dstar.golden.dit import BLOCK_OPS, LINEAR_TYPES, DiT, DiTShape
from dstar.golden.hooks import DStarLinears
from dstar.golden.host import BlockHost, GoldenEngine, run_sync
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import manifest
from dstar.sim.block_run import (
    CheckedEngine,
    block_inputs,
    block_masks,
    check_fits,
    golden_block,
)
from dstar.sim.host import AcceleratorEngine
from dstar.sim.pysim_driver import io_adapter, simulate


class Tap(DiT):
    """A DiT that records block ``block``'s inputs and output at every forward pass."""

    def __init__(self, model: DiT, block: int):
        super().__init__(model.shape, model.w)
        self.block, self.records = block, []

    def block_ops(self, i, h, sc):
        out = yield from super().block_ops(i, h, sc)
        if i == self.block:
            self.records.append((h, sc, out))
        return out


def golden_records(cfg, model, block, steps, samples):
    """Block ``block``'s (input, conditioning, output) at each step of the golden pipeline's
    sampling run (DSTAR linears and attention reuse)."""
    tap = Tap(model, block)
    cfg = cfg.replace(steps=steps, samples=samples)
    labels = sample_labels(samples, model.shape.num_classes)
    ddim_sample(tap, labels, initial_noise(samples, model.shape, cfg.seed), steps,
                cfg.cfg_scale, linear=DStarLinears(cfg, LINEAR_TYPES),
                attention=AttentionReuse(cfg, measure=False))
    return tap.records


@pytest.mark.parametrize("fields", [{}, {"encoding": "fmdq", "fmdq_lattice": "layer"}],
                         ids=["default", "fmdq-layer-lattice"])
def test_the_golden_engine_reproduces_a_bundled_block(fields):
    """The host's float work is the golden pipeline's, whatever its key-step lattice."""
    cfg = preset("default").replace(**fields)
    model = DiT.bundled()
    recs = golden_records(cfg, model, 3, steps=4, samples=1)
    host = BlockHost(cfg, model, GoldenEngine(cfg))
    for s, (h, sc, want) in enumerate(recs):
        got = run_sync(host.step(3, h, sc, s))
        assert got.dtype == want.dtype and np.array_equal(got, want), f"step {s}"


def test_the_run_reference_is_the_pipelines_block():
    """``dstar run``'s inputs and reference outputs (``block_inputs``, ``golden_block``) are the
    golden pipeline's block inputs and outputs, and a cut to the first tokens is a block of
    its own (the same operations on fewer rows)."""
    cfg = preset("default").replace(steps=3)
    model = DiT.bundled()
    recs = golden_records(cfg, model, 2, steps=3, samples=1)
    inputs = block_inputs(cfg, model, 2, steps=3)
    for (h, sc), (h_r, sc_r, _) in zip(inputs, recs, strict=True):
        assert np.array_equal(h, h_r) and np.array_equal(sc, sc_r)
    for out, (_, _, want) in zip(golden_block(cfg, model, 2, inputs), recs, strict=True):
        assert np.array_equal(out, want)
    cut = block_inputs(cfg, model, 2, steps=2, tokens=8)
    assert [h.shape for h, _ in cut] == [(2, 8, 128)] * 2
    host = BlockHost(cfg, model, GoldenEngine(cfg))
    for s, ((h, sc), want) in enumerate(zip(cut, golden_block(cfg, model, 2, cut), strict=True)):
        assert np.array_equal(run_sync(host.step(2, h, sc, s)), want)


def test_a_block_that_does_not_fit_is_refused():
    shape = DiT.bundled().shape
    check_fits(preset("default"), shape)
    with pytest.raises(ValueError, match=r"max_m = 64 .* needs max_m >= 512"):
        check_fits(preset("tiny").replace(max_k=512, head_dim=32), shape)
    with pytest.raises(ValueError, match=r"max_tokens = 32 .* needs max_tokens >= 256"):
        check_fits(preset("tiny").replace(max_k=512, max_m=512, head_dim=32), shape)
    check_fits(preset("tiny").replace(max_k=512, max_m=512, head_dim=32), shape, tokens=16)


def test_a_wrong_engine_is_seen():
    """The comparison can fail: an engine one unit off in one accumulator changes the block."""
    cfg = preset("default")
    model = DiT.bundled()
    (h, sc, want), = golden_records(cfg, model, 0, steps=1, samples=1)

    class OffByOne(GoldenEngine):
        async def linear(self, name, w_q, target, key):
            y = await super().linear(name, w_q, target, key)
            if name.endswith("fc2"):
                y = y.copy()
                y[0, 0] += 1
            return y

    got = run_sync(BlockHost(cfg, model, OffByOne(cfg)).step(0, h, sc, 0))
    assert not np.array_equal(got, want)


def small_dit(seed=5) -> DiT:
    """A DiT of the bundled architecture at a size the ``tiny`` accelerator holds: 8 x 8
    images in 2 x 2 patches (16 tokens), hidden 32, 2 heads of 16, MLP ratio 2, random
    weights."""
    s = DiTShape(image_size=8, hidden=32, depth=1, heads=2, mlp_ratio=2.0, num_classes=2,
                 freq_dim=32)
    rng = np.random.default_rng(seed)
    h, m, p = s.hidden, s.mlp_hidden, s.patch
    shapes = {"x_embedder.proj": (h, s.in_channels, p, p), "t_embedder.mlp.0": (h, s.freq_dim),
              "t_embedder.mlp.2": (h, h), "final_layer.linear": (p * p * s.in_channels, h),
              "final_layer.adaLN_modulation.1": (2 * h, h),
              "blocks.0.attn.qkv": (3 * h, h), "blocks.0.attn.proj": (h, h),
              "blocks.0.mlp.fc1": (m, h), "blocks.0.mlp.fc2": (h, m),
              "blocks.0.adaLN_modulation.1": (6 * h, h)}
    w = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:]))
        w[f"{name}.weight"] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
        w[f"{name}.bias"] = (0.1 * rng.standard_normal(shape[0])).astype(np.float32)
    w["y_embedder.embedding_table.weight"] = rng.standard_normal(
        (s.num_classes + 1, h)).astype(np.float32)
    return DiT(s, w)


@pytest.fixture(scope="module")
def small_cfg():
    """``tiny`` with the small DiT's head size and its widest linear (qkv: 96 columns), and
    half as many attention slots as the block has heads (batch 2 x 2 heads), so that the host
    saves and restores slots."""
    return preset("tiny").replace(head_dim=16, max_m=96, attn_slots=2)


@pytest.mark.slow       # a whole block over three steps (11 min on a loaded machine)
def test_a_whole_block_on_the_accelerator_equals_the_golden_block(small_cfg):
    cfg, model = small_cfg, small_dit()
    recs = golden_records(cfg, model, 0, steps=3, samples=1)   # CFG: batch 2, 32 rows
    assert recs[0][0].shape == (2, 16, 32)
    dut = Accelerator(cfg)
    man = manifest(dut)
    got = []

    engine = None

    async def bench(ctx):
        nonlocal engine
        engine = CheckedEngine(AcceleratorEngine(io_adapter(ctx, dut), man, cfg), cfg)
        host = BlockHost(cfg, model, engine)
        for s, (h, sc, _) in enumerate(recs):
            engine.step = s
            got.append(await host.step(0, h, sc, s))
            engine.finish()

    simulate(dut, bench)
    for s, (g, (_, _, want)) in enumerate(zip(got, recs, strict=True)):
        assert np.array_equal(g, want), f"step {s}: {(g != want).sum()} values differ"
    # Every operation was checked on its own too: its integers against the golden model's,
    # the top's counters against the cycle models'.
    assert [(r["step"], r["op"]) for r in engine.ops] == [
        (s, op) for s in range(3) for op in BLOCK_OPS]
    for r in engine.ops:
        assert r["bit_exact"], r
        assert r["counters"] == r["predicted"], r
    assert [r["key"] for r in engine.ops if r["op"] == "attention"] == [True, False, True]


class Spy(GoldenEngine):
    """A golden engine that records what each head's attention step was handed."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.calls = []

    async def attention_heads(self, slots, q, k, v, m, sh, masks=None):
        lead = np.shape(slots)
        mk = None if masks is None else np.broadcast_to(masks, lead + np.shape(masks)[-2:])
        for idx in np.ndindex(lead):
            self.calls.append({"slot": int(slots[idx]), "q": q is not None,
                               "k": k is not None, "m": m is not None,
                               "mask": None if mk is None else mk[idx]})
        return await super().attention_heads(slots, q, k, v, m, sh, masks)


@pytest.mark.parametrize("encoding", ["nibble", "fmdq"])
def test_sar_host_equals_the_sar_pipelines_block(encoding):
    """With ``attention = "sar"`` (refresh 2: a cache, a reuse and a cache step) the host on
    the golden engine reproduces ``golden_block``'s SAR block on the first 40 tokens (3 x 3
    blocks of the mask file's masks, cut); cache steps hand each head its mask and Q, K and
    the logit multipliers, reuse steps V only."""
    cfg = preset("default").replace(steps=3, attention="sar", encoding=encoding)
    model = DiT.bundled()
    inputs = block_inputs(cfg, model, 2, steps=3, tokens=40)
    masks = block_masks(cfg, model, 2, tokens=40)
    assert masks.shape == (4, 3, 3) and not masks.all()
    want = golden_block(cfg, model, 2, inputs, masks)
    spy = Spy(cfg)
    host = BlockHost(cfg, model, spy, masks={"blocks.2.attn": masks})
    for s, ((h, sc), w) in enumerate(zip(inputs, want, strict=True)):
        assert np.array_equal(run_sync(host.step(2, h, sc, s)), w), f"step {s}"
    heads = 2 * 4                           # CFG's batch of two, four heads
    assert len(spy.calls) == 3 * heads
    for i, c in enumerate(spy.calls):
        cache = i // heads != 1
        assert c["q"] == c["k"] == c["m"] == cache, (i, c)
        assert (c["mask"] is not None) == cache
        if cache:
            assert np.array_equal(c["mask"], masks[c["slot"] % 4])
    # The comparison can fail: a reuse step on another head's cache changes the block.
    eng = GoldenEngine(cfg)
    swapped = BlockHost(cfg, model, eng, masks={"blocks.2.attn": masks})
    (h0, sc0), (h1, sc1) = inputs[:2]
    assert np.array_equal(run_sync(swapped.step(2, h0, sc0, 0)), want[0])
    eng.slots[0], eng.slots[1] = eng.slots[1], eng.slots[0]
    assert not np.array_equal(run_sync(swapped.step(2, h1, sc1, 1)), want[1])


def test_the_sar_run_reference_is_the_sar_pipelines_block():
    """With SAR, ``block_inputs`` and ``golden_block`` (the block alone on its layer's masks)
    are the block's inputs and outputs in the SAR pipeline of ``dstar analyze``
    (``golden.sar.sar_hooks``: the Q and K columns skipped on the reuse step)."""
    from dstar.golden.sar import sar_hooks

    cfg = preset("default").replace(steps=2, attention="sar", encoding="nibble")
    model = DiT.bundled()
    tap = Tap(model, 1)
    ddim_sample(tap, sample_labels(1, model.shape.num_classes),
                initial_noise(1, model.shape, cfg.seed), 2, cfg.cfg_scale,
                **sar_hooks(cfg, model, DStarLinears(cfg, LINEAR_TYPES)))
    inputs = block_inputs(cfg, model, 1, steps=2)
    outs = golden_block(cfg, model, 1, inputs, block_masks(cfg, model, 1))
    for (h, sc), out, (h_r, sc_r, want) in zip(inputs, outs, tap.records, strict=True):
        assert np.array_equal(h, h_r) and np.array_equal(sc, sc_r)
        assert np.array_equal(out, want)


def test_sar_block_masks_are_the_files_cut_to_the_tokens():
    """The whole block's masks are the file's at ``theta``; a cut keeps the first blocks and
    gives a query block left without keys its largest-mass block among the cut ones (block 0
    on 33 tokens: two such query blocks on the bundled masks)."""
    from dstar.golden.sar import masks_for

    cfg = preset("default").replace(attention="sar", theta=0.6)
    model = DiT.bundled()
    ms = masks_for(cfg, model.shape)
    assert np.array_equal(block_masks(cfg, model, 0), ms.at(0.6)[0])
    assert block_masks(cfg.replace(attention="residual"), model, 0) is None
    cut = block_masks(cfg, model, 0, tokens=33)          # 3 x 3 blocks
    full = ms.at(0.6)[0][:, :3, :3]
    emptied = ~full.any(axis=-1)
    assert cut.shape == (4, 3, 3) and cut.any(axis=-1).all() and emptied.sum() == 2
    assert np.array_equal(cut[~emptied], full[~emptied])
    for h, i in zip(*np.nonzero(emptied), strict=True):
        assert np.flatnonzero(cut[h, i]).tolist() == [int(np.argmax(ms.mass[0][h, i, :3]))]
