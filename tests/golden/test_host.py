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
