"""The paper's sparse attention reuse (golden.sar): mask profiling and files (round trip,
refusals), cache and reuse step semantics, the integer invariants of the score cache, the host
side's skipped Q and K projections."""

import math

import numpy as np
import pytest

from dstar.config import Config, ConfigError
from dstar.golden.attention import (
    attention_head,
    expand_mask,
    quantize_per_head,
    quantize_per_token,
)
from dstar.golden.dit import DiTShape
from dstar.golden.sar import (
    MASK_FORMAT,
    MaskError,
    MaskSet,
    MassRecorder,
    QKSkip,
    SparseAttentionReuse,
    load_masks,
    masks_for,
    masks_from_bytes,
    sar_cache_step,
    sar_reuse_step,
    score_cache_bits,
    select_static,
)
from dstar.golden.softmax import logit_multiplier, normalize

NAMES = ["blocks.0.attn", "blocks.1.attn"]


def _meta(**over):
    m = {"format": MASK_FORMAT, "workload": "digits", "samples": 2, "seed": 1000, "steps": 5,
         "cfg_scale": 2.5, "theta": 0.6, "block_q": 4, "block_k": 4, "layers": 2, "heads": 2,
         "tokens": 16, "layer_names": NAMES}
    return {**m, **over}


def _maskset(seed=0, theta=0.6):
    rng = np.random.default_rng(seed)
    mass = rng.random((2, 2, 4, 4)) ** 4
    mass /= mass.sum(axis=-1, keepdims=True)
    return MaskSet(mask=select_static(mass, theta), mass=mass, meta=_meta(theta=theta))


def _qkv(rng, b=2, h=2, n=16, dh=8, sink=True):
    q, k, v = (rng.standard_normal((b, h, n, dh)) for _ in range(3))
    if sink:
        k[..., 0, :] = 3.0 * q.mean(axis=-2)      # a key most rows attend to
    return q, k, v


def _ints(q, k, v):
    q_int, s_q = quantize_per_token(q)
    k_int, s_k = quantize_per_head(k)
    v_int, s_v = quantize_per_head(v)
    m, sh = logit_multiplier(s_q * s_k[..., None] / math.sqrt(q.shape[-1]))
    return q_int, k_int, v_int, s_v, m, sh


# ----- masks -----
def test_select_static_keeps_the_smallest_prefix_with_the_largest_block():
    mass = np.array([[0.1, 0.5, 0.3, 0.1]])
    assert select_static(mass, 0.45).tolist() == [[False, True, False, False]]
    assert select_static(mass, 0.75).tolist() == [[False, True, True, False]]
    assert select_static(mass, 0.81).tolist() == [[True, True, True, False]]
    assert select_static(mass, 1.0).all()
    assert select_static(np.array([[0.0, 0.0, 1.0, 0.0]]), 0.01).tolist() == \
        [[False, False, True, False]]


def test_mass_recorder_rows_sum_to_one_and_output_is_float_attention():
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, n=10)
    rec = MassRecorder(4, 4)
    out = rec("blocks.0.attn", q, k, v, 0)
    rec("blocks.0.attn", q, k, v, 1)
    mass = rec.masses(["blocks.0.attn"])
    assert mass.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(mass.sum(axis=-1), 1.0, rtol=1e-12)
    z = q @ np.swapaxes(k, -1, -2) / math.sqrt(8)
    p = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-6)


def test_mask_file_round_trip_and_theta_reselection():
    ms = _maskset()
    back = masks_from_bytes(ms.to_bytes(), "x.npz")
    assert back.meta == ms.meta and back.source == "x.npz"
    assert np.array_equal(back.mask, ms.mask) and np.array_equal(back.mass, ms.mass)
    assert back.at(0.6) is back.mask
    assert np.array_equal(back.at(0.95), select_static(ms.mass, 0.95))
    assert back.at(0.95).sum() > back.mask.sum()


@pytest.mark.parametrize("field,value", [("layers", 3), ("heads", 4), ("tokens", 32),
                                         ("block_q", 8), ("block_k", 2)])
def test_mask_file_mismatch_is_refused_naming_it(field, value):
    want = {"layers": 2, "heads": 2, "tokens": 16, "block_q": 4, "block_k": 4, field: value}
    with pytest.raises(MaskError, match=rf"{field}=\d+, but the model/configuration has "
                                        rf"{field}={value}$"):
        _maskset().check(**want)


def test_bad_mask_files_are_refused_in_one_line(tmp_path):
    with pytest.raises(MaskError, match="does not exist"):
        load_masks(tmp_path / "none.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(MaskError, match="is not a .npz mask file"):
        load_masks(tmp_path / "junk.npz")
    ms = _maskset()
    bad = MaskSet(mask=ms.mask, mass=ms.mass, meta=_meta(format="other"))
    with pytest.raises(MaskError, match="is not in format"):
        masks_from_bytes(bad.to_bytes())
    short = MaskSet(mask=ms.mask[:1], mass=ms.mass[:1], meta=_meta())
    with pytest.raises(MaskError, match=r"mask has shape \(1, 2, 4, 4\)"):
        masks_from_bytes(short.to_bytes())
    empty = MaskSet(mask=np.zeros_like(ms.mask), mass=ms.mass, meta=_meta())
    with pytest.raises(MaskError, match="a kept block in every query block"):
        masks_from_bytes(empty.to_bytes())
    for e in (MaskError,):
        assert "\n" not in str(e("x"))


def test_masks_for_checks_workload_and_model(tmp_path):
    f = tmp_path / "m.npz"
    f.write_bytes(_maskset().to_bytes())
    shape = DiTShape(image_size=8, patch=2, hidden=16, depth=2, heads=2)     # 16 tokens
    cfg = Config(block_q=4, block_k=4, masks=str(f))
    assert masks_for(cfg, shape).meta["layers"] == 2
    with pytest.raises(MaskError, match="profiled on workload 'digits', the run is 'photos'"):
        masks_for(cfg.replace(workload="photos"), shape)
    with pytest.raises(MaskError, match="layers=2, but the model/configuration has layers=3"):
        masks_for(cfg, DiTShape(image_size=8, patch=2, hidden=16, depth=3, heads=2))


# ----- cache and reuse steps -----
def test_full_mask_cache_step_is_dense_integer_attention():
    rng = np.random.default_rng(2)
    q_int, k_int, v_int, _, m, sh = _ints(*_qkv(rng, n=14))
    full = np.ones((2, 4, 4), bool)
    o, w, lsum = sar_cache_step(q_int, k_int, v_int, m, sh, full, block_q=4, block_k=4)
    o_ref, w_ref, l_ref = attention_head(q_int, k_int, v_int, m, sh, None, block_q=4,
                                         block_k=4)
    assert np.array_equal(o, o_ref) and np.array_equal(w, w_ref) and np.array_equal(lsum, l_ref)


def test_score_cache_integer_invariants_and_reuse_arithmetic():
    rng = np.random.default_rng(3)
    q_int, k_int, v_int, _, m, sh = _ints(*_qkv(rng, n=16))
    mask = _maskset(4).mask[0]                                     # (H, 4, 4)
    o, w, lsum = sar_cache_step(q_int, k_int, v_int, m, sh, mask, block_q=4, block_k=4)
    el = expand_mask(mask, 16, 16, 4, 4)
    assert np.all(w[..., ~el] == 0) and w.max() <= 255 << 7 and w.min() >= 0
    assert np.array_equal(lsum, w.sum(axis=-1)) and np.all(lsum >= 255 << 7)
    # Every row's max over its kept keys gets exactly 255 << e_max.
    assert np.all(w.max(axis=-1) == 255 << 7)
    # Reuse with the cache step's own V reproduces its output exactly.
    assert np.array_equal(sar_reuse_step(w, lsum, v_int), o)
    # Reuse on new V: normalize(w V, l) with exact integer products.
    v2 = rng.integers(-127, 128, v_int.shape)
    acc = np.einsum("bhij,bhjd->bhid", w.astype(object), v2.astype(object)).astype(np.int64)
    assert np.array_equal(sar_reuse_step(w, lsum, v2), normalize(acc, lsum))


def _hook(refresh, masks, **over):
    cfg = Config(block_q=4, block_k=4, refresh_attn=refresh, **over)
    return SparseAttentionReuse(cfg, masks, NAMES)


def test_full_mask_refresh_every_step_equals_dense_integer_attention():
    rng = np.random.default_rng(5)
    hook = _hook(1, np.ones((2, 2, 4, 4), bool))
    for step in range(3):
        q, k, v = _qkv(rng)
        out = hook("blocks.1.attn", q, k, v, step)
        q_int, k_int, v_int, s_v, m, sh = _ints(q, k, v)
        o, _, _ = attention_head(q_int, k_int, v_int, m, sh, block_q=4, block_k=4)
        ref = (o * (s_v[..., None, None] / 256.0)).astype(np.float32)
        assert np.array_equal(out, ref)
    assert all(r["cache"] for r in hook.records)
    assert hook.stats()["work_vs_dense"] == 1.0


def test_reuse_step_never_reads_q_or_k():
    rng = np.random.default_rng(6)
    masks = _maskset(7).mask
    a, b = _hook(3, masks), _hook(3, masks)
    q, k, v = _qkv(rng)
    assert np.array_equal(a(NAMES[0], q, k, v, 0), b(NAMES[0], q, k, v, 0))
    q2, k2, v2 = _qkv(rng)
    nan = np.full_like(q2, np.nan)
    out = a(NAMES[0], q2, k2, v2, 1)
    assert np.array_equal(out, b(NAMES[0], nan, nan, v2, 1))
    assert np.array_equal(out, _hook(3, masks)(NAMES[0], q, k, v, 0) * 0 + out)
    c = _hook(3, masks)
    c(NAMES[0], q, k, v, 0)
    assert np.array_equal(c(NAMES[0], None, None, v2, 1), out)
    # ... and is P_cached . V: the cache step's weights on the new V.
    st = a.state[NAMES[0]]
    _, _, v_int, s_v, _, _ = _ints(q2, k2, v2)
    ref = sar_reuse_step(st["w"], st["l"], v_int) * (s_v[..., None, None] / 256.0)
    assert np.array_equal(out, ref.astype(np.float32))
    assert [r["cache"] for r in a.records] == [True, False]
    assert a.records[1]["qk"] == 0 and a.records[1]["softmax"] == 0


def test_reuse_starts_at_sar_reuse_from():
    """Every step before ``sar_reuse_from`` is a cache step (fresh Q and K: the outputs equal a
    refresh-1 run's); from it on the cadence is ``refresh_attn``'s, and the work counts it."""
    rng = np.random.default_rng(12)
    masks = _maskset(13).mask
    late, fresh = _hook(2, masks, sar_reuse_from=3), _hook(1, masks)
    lin = QKSkip(lambda name, x, w, b, step: x @ w.T, late)
    x, w = rng.standard_normal((5, 6)), rng.standard_normal((9, 6))
    for step in range(6):
        q, k, v = _qkv(rng)
        qkv = lin("blocks.0.attn.qkv", x, w, None, step)
        out = late(NAMES[0], q, k, v, step)
        ref = fresh(NAMES[0], q, k, v, step)
        assert np.array_equal(out, ref) == late.records[-1]["cache"]
        assert np.isnan(qkv[:, :6]).all() != late.records[-1]["cache"]
    assert [r["cache"] for r in late.records] == [True, True, True, False, True, False]
    kept = masks[0].mean()
    assert late.stats()["work_vs_dense"] == pytest.approx(kept * (4 + 2 * 0.5) / 6)
    with pytest.raises(ConfigError, match=r"^sar_reuse_from must be \[0, 1000\], got -1$"):
        Config(sar_reuse_from=-1)


def test_work_and_score_cache_counts():
    masks = _maskset(8).mask
    hook = _hook(2, masks)
    rng = np.random.default_rng(9)
    for step in range(4):
        hook(NAMES[step % 2], *_qkv(rng), step // 2 * 2 + step % 2)
    st = hook.stats()
    kept = masks.mean(axis=(1, 2, 3))
    # Cache steps (layer 0 at steps 0 and 2, layer 1 at its first call): QK^T and PV on the
    # kept blocks; reuse steps (layer 1 at step 3): PV only.
    assert [r["cache"] for r in hook.records] == [True, True, True, False]
    assert st["work_vs_dense_cache_steps"] == pytest.approx((2 * kept[0] + kept[1]) / 3)
    assert st["work_vs_dense_reuse_steps"] == pytest.approx(kept[1] / 2)
    bits = score_cache_bits(masks[0], 16, 4, 4, group=16, e_max=7)
    el = expand_mask(masks[0], 16, 16, 4, 4)
    assert bits == 8 * el.sum() + 3 * el.any(axis=-1).sum() + 22 * 2 * 16
    assert st["score_cache"]["bits_per_layer_max"] == max(
        score_cache_bits(mk, 16, 4, 4) for mk in masks)


def test_mismatched_masks_are_refused_by_the_hook():
    hook = _hook(2, np.ones((2, 2, 4, 4), bool))
    rng = np.random.default_rng(10)
    with pytest.raises(MaskError, match="masks of shape"):
        hook(NAMES[0], *_qkv(rng, n=20), 0)
    with pytest.raises(MaskError, match="no mask for attention layer 'blocks.7.attn'"):
        hook("blocks.7.attn", *_qkv(rng), 0)


def test_qk_skip_blanks_q_and_k_columns_on_reuse_steps_only():
    hook = _hook(2, np.ones((2, 2, 4, 4), bool))
    lin = QKSkip(lambda name, x, w, b, step: x @ w.T, hook)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((5, 6)), rng.standard_normal((9, 6))
    y0 = lin("blocks.0.attn.qkv", x, w, None, 0)
    assert np.isfinite(y0).all()
    hook(NAMES[0], *_qkv(rng), 0)                      # the cache step's state exists
    y1 = lin("blocks.0.attn.qkv", x, w, None, 1)
    assert np.isnan(y1[:, :6]).all() and np.allclose(y1[:, 6:], (x @ w.T)[:, 6:])
    assert np.isfinite(lin("blocks.0.mlp.fc1", x, w, None, 1)).all()
    assert np.isfinite(lin("blocks.0.attn.qkv", x, w, None, 2)).all()
    s = lin.stats()
    assert s["skipped_qk_macs"] == 5 * 6 * 6 and s["linear_macs"] == 4 * 5 * 6 * 9


def test_qk_skip_counts_dstar_passes_and_the_catch_up():
    from dstar.golden.encoder import encode
    from dstar.golden.hooks import DStarLinears
    from dstar.golden.sar import sar_hooks

    class Model:        # what sar_hooks reads of a DiT
        shape = DiTShape(image_size=8, patch=2, hidden=16, depth=2, heads=2)

        @staticmethod
        def attention_names():
            return NAMES

    cfg = Config(block_q=4, block_k=4, refresh_attn=2, encoding="nibble")   # v1's passes
    dl = DStarLinears(cfg, ("qkv",))
    hooks = sar_hooks(cfg, Model, dl, _maskset())
    lin = hooks["linear"]
    rng = np.random.default_rng(12)
    w = rng.standard_normal((48, 16))
    xs = []
    for step in range(3):
        lin("blocks.0.attn.qkv", rng.standard_normal((32, 16)), w, None, step)
        hooks["attention"](NAMES[0], *_qkv(rng), step)
        xs.append(dl.layers["blocks.0.attn.qkv"].xs.copy())
    c = dl.stats.total()
    s = lin.stats()
    assert s["linear_pass_work"] == c["passes"] * 48
    reuse_passes = dl.stats.total(step=1)["passes"]
    assert s["skipped_qk_pass_work"] == reuse_passes * 32
    assert s["catchup_qk_pass_work"] == encode(xs[2] - xs[0], 16, 7, 0).passes() * 32


def test_dstar_run_refuses_sar_reuse_from(capsys):
    """The engine's cache steps follow ``refresh_attn`` alone: a run that the golden reference
    would cache differently is refused in one line, before anything is built."""
    from dstar.cli import main

    assert main(["run", "--set", "attention=sar", "--set", "sar_reuse_from=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("dstar: error: sar_reuse_from=3 is the golden model's only (the engine's "
                   "cache steps follow refresh_attn): dstar run needs 0")
