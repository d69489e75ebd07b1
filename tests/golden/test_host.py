"""The one host pipeline (``dstar.golden.host``) pinned to the last bit: a block of the bundled
DiT over four drifting steps through ``BlockHost`` on the golden engine, and the same block
through the golden pipeline's hooks (``drive``), give one output, whose digest was recorded
before the host and the hooks shared their float side (``golden.host_side``); so are
``HeadSteps``' integer steps. Regenerate the digests only for an intended change of the
integer contract or of the host's float work: run this file with ``DSTAR_PRINT_PINS=1`` and
``-s`` and paste the printed digests."""

import os

import numpy as np
import pytest

from dstar.config import Attention, preset
from dstar.golden.attention import AttentionReuse, n_blocks
from dstar.golden.dit import LINEAR_TYPES, DiT, drive
from dstar.golden.hooks import DStarLinears
from dstar.golden.host import BlockHost, GoldenEngine, HeadSteps, run_sync
from dstar.golden.sar import SparseAttentionReuse
from tests.golden.test_pinned_run import _digest

BLOCK, STEPS, TOKENS = 2, 4, 40
NAME = f"blocks.{BLOCK}.attn"

#: case: (config fields, digest of the block's outputs over the steps)
PINS = {
    "default": ({}, "5439ec6c028b1e9c"),
    "refresh-3": ({"refresh_linear": 3, "refresh_attn": 3}, "d48e0874f11301c0"),
    "fmdq-layer": ({"encoding": "fmdq", "fmdq_lattice": "layer"}, "cc48eab78ac6e61d"),
    "sar-nibble": ({"attention": "sar", "encoding": "nibble"}, "9fe2c4cac9c9e95a"),
    "sar-fmdq": ({"attention": "sar", "encoding": "fmdq", "refresh_attn": 3},
                 "0f2e9e1329610e27"),
}
#: refresh: digest of ``HeadSteps``' steps
HEAD_PINS = {0: "ee5e756b75edb1c2", 2: "91735713c1dd8591"}


def _check(name, got, want):
    if os.environ.get("DSTAR_PRINT_PINS"):
        print(f"{name}: {got!r}")
    assert got == want, f"{name}: digest {got} != pinned {want}"


def _inputs(model, seed=11):
    """A drifting block input ``(2, TOKENS, D)`` and conditioning ``(2, D)`` per step."""
    rng = np.random.default_rng(seed)
    d = model.shape.hidden
    h = rng.standard_normal((2, TOKENS, d)).astype(np.float32)
    sc = rng.standard_normal((2, d)).astype(np.float32) * 0.5
    out = []
    for _ in range(STEPS):
        out.append((h.copy(), sc.copy()))
        h = h + (0.05 * rng.standard_normal(h.shape)).astype(np.float32)
        h[0, rng.integers(TOKENS), rng.integers(d)] += 8.0             # an outlier jump
    return out


def _masks(cfg, model, seed=4):
    """Random static SAR masks ``(H, nqb, nkb)``, every query block with a key block."""
    nqb, nkb = n_blocks(TOKENS, cfg.block_q), n_blocks(TOKENS, cfg.block_k)
    m = np.random.default_rng(seed).random((model.shape.heads, nqb, nkb)) < 0.5
    m[..., 0] |= ~m.any(axis=-1)
    return m


@pytest.mark.parametrize("case", sorted(PINS))
def test_the_host_and_the_golden_hooks_are_one_pinned_pipeline(case):
    fields, pin = PINS[case]
    cfg = preset("default").replace(**fields)
    model = DiT.bundled()
    sar = cfg.attention is Attention.SAR
    masks = _masks(cfg, model) if sar else None
    host = BlockHost(cfg, model, GoldenEngine(cfg), masks={NAME: masks} if sar else None)
    lin = DStarLinears(cfg, LINEAR_TYPES)
    att = (SparseAttentionReuse(cfg, masks[None], [NAME]) if sar
           else AttentionReuse(cfg, measure=False))
    outs = []
    for s, (h, sc) in enumerate(_inputs(model)):
        got = run_sync(host.step(BLOCK, h, sc, s))
        want = drive(model.block_ops(BLOCK, h, sc), lin, att, s)
        assert got.dtype == want.dtype and np.array_equal(got, want), f"step {s}"
        outs.append(got)
    _check(case, _digest(outs), pin)


@pytest.mark.parametrize("refresh", sorted(HEAD_PINS))
def test_head_steps_are_pinned(refresh):
    cfg = preset("default").replace(theta=0.8, refresh_attn=refresh, head_dim=32)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((5, 40, 32)).astype(np.float32) for _ in range(3))
    hs = HeadSteps(cfg)
    arrays = []
    for s in range(5):
        st = hs.step(q[s] + 0.1 * s, k[s], v[s] * (1 + 0.2 * s))
        arrays += [st[x] for x in ("q", "k", "v", "m", "sh", "o", "r", "mask")]
        arrays += [np.array([st["key"], st["s_v"]]),
                   np.asarray(st["picks"] if st["picks"] is not None else -1)]
    _check(f"head steps, refresh {refresh}", _digest(arrays), HEAD_PINS[refresh])


def test_the_golden_hooks_run_on_the_host(monkeypatch):
    """The golden pipeline's hooks are ``BlockHost``'s on a ``GoldenEngine``: a change of the
    host's linear or attention step shows in their outputs (so the path cannot fork again)."""
    cfg = preset("default")
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((24, 32)), rng.standard_normal((2 * 8, 32))
    q, k, v = (rng.standard_normal((2, 2, 16, 8)).astype(np.float32) for _ in range(3))
    masks = np.ones((2, 1, 1), bool)
    lin = DStarLinears(cfg, LINEAR_TYPES)
    att = AttentionReuse(cfg, measure=False)
    sar = SparseAttentionReuse(cfg.replace(attention="sar"), masks[None], ["a"])
    for hook in (lin, att, sar):
        assert isinstance(hook.host, BlockHost) and type(hook.host.engine) is GoldenEngine
    want = (lin("l.qkv", x, w, None, 0), att("a", q, k, v, 0), sar("a", q, k, v, 0))
    lin, att = DStarLinears(cfg, LINEAR_TYPES), AttentionReuse(cfg, measure=False)
    sar = SparseAttentionReuse(cfg.replace(attention="sar"), masks[None], ["a"])
    step, astep = BlockHost.linear_step, BlockHost.attention_step

    async def off_by_one(self, *a, **kw):
        res = await step(self, *a, **kw)
        return res._replace(y=res.y + 1)

    async def scaled(self, *a, **kw):
        res = await astep(self, *a, **kw)
        return res._replace(out=res.out * 2)

    monkeypatch.setattr(BlockHost, "linear_step", off_by_one)
    monkeypatch.setattr(BlockHost, "attention_step", scaled)
    got = (lin("l.qkv", x, w, None, 0), att("a", q, k, v, 0), sar("a", q, k, v, 0))
    for g, w_ in zip(got, want, strict=True):
        assert not np.array_equal(g, w_)


class _NoCommands:
    """An engine with only the top's commands (no ``refine``, no ``clear_slots``)."""

    async def linear(self, name, w_q, target, key):
        raise AssertionError("not reached")


def test_a_host_refuses_what_its_engine_cannot_do():
    cfg = preset("default")
    with pytest.raises(ValueError, match=r"^refine_max=2 needs an engine .*_NoCommands"):
        BlockHost(cfg.replace(refine_max=2), None, _NoCommands())
    with pytest.raises(ValueError, match=r"^sar_reuse_from=3 needs an engine .*clear_slots"):
        BlockHost(cfg.replace(attention="sar", sar_reuse_from=3), None, _NoCommands())
    BlockHost(cfg.replace(refine_max=2, attention="sar", sar_reuse_from=3), None,
              GoldenEngine(cfg))


def test_the_engine_and_the_host_name_a_layer_they_cannot_continue():
    cfg = preset("default")
    g = GoldenEngine(cfg)
    w = np.random.default_rng(2).integers(-127, 128, (32, 16))
    run_sync(g.linear("p", w, np.ones((2, 32), np.int64), True))
    with pytest.raises(ValueError, match="a non-key step on other weights"):
        run_sync(g.linear("p", w[::-1].copy(), np.ones((2, 32), np.int64), False))
    run_sync(g.linear("p", w[::-1].copy(), np.ones((2, 32), np.int64), True))   # a key step may
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 16, 8)) for _ in range(3))
    host = BlockHost(cfg, None, GoldenEngine(cfg))
    run_sync(host.attention("a", q, k, v, 0))
    with pytest.raises(ValueError, match=r"a: shape \(1, 2, 12, 8\) differs from the layer's"):
        run_sync(host.attention("a", q[:, :, :12], k[:, :, :12], v[:, :, :12], 1))
    # A second layer of more heads takes the slots after the first one's.
    q4, k4, v4 = (rng.standard_normal((1, 4, 16, 8)) for _ in range(3))
    run_sync(host.attention("b", q4, k4, v4, 0))
    assert [host.att[n][1] for n in ("a", "b")] == [0, 2] and sorted(host.engine.slots) == [
        0, 1, 2, 3, 4, 5]
    # Slots of one call at different step kinds are run apart, never mixed.
    eng = host.engine
    run_sync(eng.clear_slots([0]))
    qi = rng.integers(-127, 128, (2, 16, 8))
    m, sh = np.full((2, 16), 1 << 14), np.full((2, 16), 20)
    with pytest.raises(ValueError, match=r"slots \[0, 1\] are at different step kinds"):
        run_sync(eng.attention_heads(np.array([0, 1]), qi, qi, qi, m, sh))


def test_forced_cache_steps_clear_the_engines_slots():
    """``sar_reuse_from``: every step before it is a cache step; the host clears the slots
    the engine would run a reuse step on (the golden engine's ``clear_slots``)."""
    cfg = preset("default").replace(attention="sar", sar_reuse_from=3, refresh_attn=2)
    rng = np.random.default_rng(6)
    masks = np.ones((2, 1, 1), bool)
    hook = SparseAttentionReuse(cfg, masks[None], ["a"])
    for s in range(6):
        q, k, v = (rng.standard_normal((1, 2, 16, 8)).astype(np.float32) for _ in range(3))
        hook("a", q, k, v, s)
    assert [r["cache"] for r in hook.records] == [True, True, True, False, True, False]
