"""FMDQ's integer contract (``golden.fmdq``, spec 7.2), its statistics (``golden.fmdq_stats``)
and ``DiffLinear`` with ``encoding = "fmdq"``: every property checked against a brute-force
restatement or an independent product, on random and adversarial differences."""

import numpy as np
import pytest

from dstar.config import ConfigError, Encoding, FmdqRule, preset
from dstar.golden import linear_state
from dstar.golden.difflinear import DiffLinear, InvariantError
from dstar.golden.encoder import round_shift
from dstar.golden.fmdq import (
    LANES,
    WIDTHS,
    FmdqEncoded,
    apply_schedule,
    fmdq_encode,
    slice_codes,
)
from dstar.golden.fmdq_stats import FMDQ_FIELDS, FmdqStats, count_fmdq

RULES = [FmdqRule.LOSSLESS, FmdqRule.MAGNITUDE]


def _fits(q, w):
    return w > 0 and q.max() <= (1 << (w - 1)) - 1 and q.min() >= -(1 << (w - 1))


def _sub_channels(enc: FmdqEncoded, d):
    """(tile, k, d of the sub-channel, its codes) for every sub-channel."""
    for t in range(enc.n_tiles):
        rows = enc.tile_rows(t)
        for k in range(d.shape[1]):
            yield t, k, d[rows, k], enc.q[rows, k]


def _mixed(rng, n, k, scale=200):
    """Differences spanning every width: per channel a magnitude from 0 to ``scale``."""
    mag = rng.choice([0, 1, 2, 5, 20, scale, 4000], size=k)
    return np.rint(rng.normal(size=(n, k)) * mag / 2).astype(np.int64)


def _brute_lossless_shift(dk, e_max):
    for e in range(e_max + 1):
        q = round_shift(dk, e)
        if q.max() <= 127 and q.min() >= -128:
            return e, False
    return e_max, True


@pytest.mark.parametrize("tau", [0, 1, 3])
def test_lossless_shift_width_and_closed_loop_by_brute_force(tau):
    rng = np.random.default_rng(tau)
    d = _mixed(rng, 37, 23)                     # K and N multiples of nothing; last tile of 5
    enc = fmdq_encode(d, 8, 7, tau)
    assert enc.n_tiles == 5 and enc.q.shape == d.shape
    e_tol = max(e for e in range(8) if e == 0 or (1 << (e - 1)) <= tau)
    widths = set()
    for t, k, dk, qk in _sub_channels(enc, d):
        p, sat = _brute_lossless_shift(dk, 7)
        assert enc.shift[t, k] == p and enc.saturated[t, k] == sat
        assert enc.clipped[t, k] == (p > e_tol or sat)
        want = np.where(np.abs(dk) <= tau, 0, np.clip(round_shift(dk, p), -128, 127))
        assert np.array_equal(qk, want)
        b = enc.width[t, k]
        widths.add(int(b))
        # The smallest width holding every code.
        assert (b == 0) == (not qk.any())
        assert b == 0 or _fits(qk, b) and not _fits(qk, b - 2)
        err = np.abs(dk - (qk << p))
        if not enc.clipped[t, k]:
            assert err.max() <= tau
    # A dead zone of 2 or more leaves no 2-bit code ([-2, 1]) at shift 0.
    assert widths == set(WIDTHS) - ({2} if tau >= 2 else set())


def test_magnitude_rule_by_brute_force():
    rng = np.random.default_rng(7)
    d = _mixed(rng, 40, 19)
    for thr0, tau in ((2, 0), (4, 0), (8, 2), (3, 1)):
        enc = fmdq_encode(d, 16, 7, tau, FmdqRule.MAGNITUDE, thr0)
        for t, k, dk, qk in _sub_channels(enc, d):
            live = np.where(np.abs(dk) > tau, dk, 0)
            a = np.abs(live).max()
            want = 2 + 2 * sum(int(a > thr0 * 4 ** n) for n in range(3))
            p = enc.shift[t, k]
            if not a:
                assert enc.width[t, k] == 0 and p == 0
                continue
            # The smallest shift at which the live values fit the first width >= want that any
            # shift fits.
            for w in range(want, 9, 2):
                fit = [e for e in range(8) if _fits(round_shift(live, e), w)]
                if fit:
                    assert p == fit[0] and enc.width[t, k] <= w, (thr0, tau, w)
                    break
            else:
                assert enc.saturated[t, k] and p == 7
            assert np.array_equal(qk, np.where(np.abs(dk) <= tau, 0,
                                               np.clip(round_shift(dk, p), -128, 127)))
            if not enc.saturated[t, k]:
                assert np.abs(dk - (qk << p)).max() <= max(tau, (1 << p) >> 1)


def test_decode_and_slices_identities():
    rng = np.random.default_rng(3)
    d = _mixed(rng, 29, 13)
    for rule in RULES:
        enc = fmdq_encode(d, 16, 7, 0, rule)
        per_row = np.repeat(enc.shift, 16, axis=0)[:29]
        assert np.array_equal(enc.decode(), enc.q << per_row)
        sl = enc.slices()
        assert np.array_equal((sl * 4 ** np.arange(4)).sum(axis=-1), enc.q)
        n = np.repeat(enc.width, 16, axis=0)[:29] // 2
        for j in range(4):
            top, below = j == n - 1, j < n - 1
            assert sl[..., j][below].min(initial=0) >= 0 and sl[..., j][below].max(initial=0) <= 3
            assert sl[..., j][top].min(initial=-2) >= -2 and sl[..., j][top].max(initial=1) <= 1
            assert not sl[..., j][j >= n].any()
    assert slice_codes(np.array([-128, 127, -1, 5]), 8).tolist() == [
        [0, 0, 0, -2], [3, 3, 3, 1], [3, 3, 3, -1], [1, 1, 0, 0]]


def test_zero_tiles_are_skipped_and_cost_no_group():
    d = np.zeros((24, 10), np.int64)
    d[8:16, 3] = 5                      # only tile 1, channel 3
    enc = fmdq_encode(d, 8, 7, 0)
    assert enc.width[0].tolist() == [0] * 10 and enc.width[2].tolist() == [0] * 10
    assert enc.width[1, 3] == 4 and np.count_nonzero(enc.width) == 1
    assert enc.groups_per_tile(4).tolist() == [0, 2, 0]
    assert enc.stats(4)["skipped"] == 29 and enc.stats(4)["padding"] == 6


def test_saturation_at_the_largest_shift():
    d = np.array([[40000, -40000, 255, -257, 100]] * 3, np.int64)
    enc = fmdq_encode(d, 4, 7, 0)
    assert enc.shift[0].tolist() == [7, 7, 2, 1, 0]     # 255 >> 1 rounds to 128: shift 2
    assert enc.saturated[0].tolist() == [True, True, False, False, False]
    assert enc.q[0].tolist() == [127, -128, 64, -128, 100]
    assert enc.width[0].tolist() == [8, 8, 8, 8, 8]
    m = fmdq_encode(d, 4, 7, 0, FmdqRule.MAGNITUDE, 4)
    assert m.saturated[0].tolist() == [True, True, False, False, False]


def test_a_tile_with_fewer_tokens_than_t():
    d = np.array([[3, 0, -9], [1, 0, 2]], np.int64)
    enc = fmdq_encode(d, 16, 7, 0)
    assert enc.n_tiles == 1 and enc.shift.shape == (1, 3)
    assert enc.width[0].tolist() == [4, 0, 6] and np.array_equal(enc.decode(), d)


def _adversarial(rng):
    """Every channel at an extreme of its width and shift: codes -2**(b-1) and 2**(b-1) - 1."""
    k = 41
    d = np.zeros((12, k), np.int64)
    for c in range(k):
        b, p = WIDTHS[1 + c % 4], c % 8
        d[:, c] = rng.choice([-(1 << (b - 1)), (1 << (b - 1)) - 1, 0], size=12) << p
    return d


@pytest.mark.parametrize("window", [1, 4, 16, 64])
def test_the_schedule_computes_decode_times_w(window):
    rng = np.random.default_rng(window)
    cases = [_mixed(rng, 21, 37), _adversarial(rng)]
    for d in cases:
        w_q = rng.integers(-127, 128, size=(d.shape[1], 9))
        for rule in RULES:
            enc = fmdq_encode(d, 8, 7, 0, rule)
            assert np.array_equal(apply_schedule(enc, w_q, window), enc.decode() @ w_q)
            groups = enc.groups_per_tile(window)
            for t in range(enc.n_tiles):
                sched = enc.schedule(t, window)
                assert groups[t] == sched.groups
                assert sched.valid.sum() == enc.width[t].sum() // 2
    # The comparison is not vacuous: another decode gives another product.
    enc = fmdq_encode(cases[0], 8, 7, 0)
    w_q = rng.integers(1, 128, size=(cases[0].shape[1], 3))
    assert not np.array_equal(apply_schedule(enc, w_q, window),
                              (enc.decode() + (enc.decode() == 0)) @ w_q)


def test_concat_of_whole_tiles_equals_one_encoding():
    d = _mixed(np.random.default_rng(5), 40, 7)
    whole = fmdq_encode(d, 8, 7, 1)
    parts = FmdqEncoded.concat([fmdq_encode(d[:16], 8, 7, 1), fmdq_encode(d[16:], 8, 7, 1)])
    for f in ("q", "shift", "width", "clipped", "saturated"):
        assert np.array_equal(getattr(whole, f), getattr(parts, f)), f
    with pytest.raises(ValueError, match="whole tiles"):
        FmdqEncoded.concat([fmdq_encode(d[:12], 8, 7, 1), fmdq_encode(d[12:], 8, 7, 1)])


def test_counts_and_summary():
    d = _mixed(np.random.default_rng(9), 32, 20)
    enc = fmdq_encode(d, 16, 7, 0)
    c = dict(zip(FMDQ_FIELDS, count_fmdq(enc, 8).tolist(), strict=True))
    assert c["sub_channels"] == 40 and c["dense_groups"] == 40
    assert c["width_bits"] == int(enc.width.sum()) and c["slices"] * 2 == c["width_bits"]
    assert c["groups"] == int(enc.groups_per_tile(8).sum())
    assert c["padding"] == LANES * c["groups"] - c["slices"]
    assert sum(c[f"width_{w}"] for w in WIDTHS) == 40
    st = FmdqStats(["fc1", "fc2"])
    st.add(0, "fc1", enc, 8)
    st.add(1, "fc2", enc, 8)
    tot = st.total()
    assert tot["groups"] == 2 * c["groups"] and st.total(layer_type="fc2")["groups"] == c["groups"]
    s = FmdqStats.summary(tot)
    assert s["mean_width_bits"] == c["width_bits"] / 40
    assert s["speedup_vs_int8"] == 40 / c["groups"]
    assert FmdqStats.summary({f: 0 for f in FMDQ_FIELDS})["speedup_vs_int8"] is None


def _fmdq_cfg(**kw):
    return preset("default").replace(encoding="fmdq", token_tile=16, **kw)


def _steps(rng, n, k, steps, scale=0.05):
    x = rng.normal(size=(n, k)) * rng.choice([0.0, 0.1, 1.0, 5.0], size=k)
    for _ in range(steps):
        yield x
        x = x + scale * rng.normal(size=x.shape) * (rng.random(size=(1, k)) < 0.7)


@pytest.mark.parametrize("rule,tau,refresh", [("lossless", 0, 3), ("lossless", 2, 0),
                                              ("magnitude", 1, 4)])
def test_difflinear_keeps_the_invariant(rule, tau, refresh):
    cfg = _fmdq_cfg(fmdq_rule=rule, tau=tau, refresh_linear=refresh, sort_window=16)
    rng = np.random.default_rng(tau + refresh)
    # 300 rows of K=72, M=256: several row chunks (each of whole tiles) and a partial last tile.
    w = rng.normal(size=(256, 72))
    layer = DiffLinear(w, None, cfg, "blocks.0.mlp.fc1")
    keys = []
    for s, x in enumerate(_steps(rng, 300, 72, 7)):
        xs_old = None if layer.xs is None else layer.xs.copy()
        res = layer(x, s)
        keys.append(res.key)
        assert np.array_equal(layer.y_int, layer.xs @ layer.w_q)
        enc = res.enc
        assert isinstance(enc, FmdqEncoded) and enc.n_tiles == 19
        assert np.array_equal(layer.xs - (0 if res.key else xs_old), enc.decode())
        err = np.abs(res.target - layer.xs)
        assert err[~np.repeat(enc.clipped, 16, axis=0)[:300]].max(initial=0) <= tau
        assert np.array_equal(res.counts, count_fmdq(enc, 16))
    assert keys == [s == 0 or (refresh > 0 and s % refresh == 0) for s in range(7)]


def test_difflinear_catches_a_wrong_fmdq_decode(monkeypatch):
    real = linear_state.ENCODINGS[Encoding.FMDQ]

    def off_by_one(diff, cfg):
        enc, dec = real.encode(diff, cfg)
        dec = dec.copy()
        dec[0, 0] += 1                     # a decode that misses its difference
        return enc, dec

    cfg = _fmdq_cfg(lattice_bits=0)        # every value fits INT8: nothing is clipped
    DiffLinear(np.ones((8, 32)), None, cfg)(np.full((20, 32), 0.5), 0)
    bad = linear_state.Coding(off_by_one, real.lossy, real.count, real.stats, real.parts,
                            real.rows)
    monkeypatch.setitem(linear_state.ENCODINGS, Encoding.FMDQ, bad)
    with pytest.raises(InvariantError, match="closed-loop error exceeds tau=0"):
        DiffLinear(np.ones((8, 32)), None, cfg)(np.full((20, 32), 0.5), 0)


def test_nibble_and_fmdq_agree_on_y_when_lossless_and_unclipped():
    # tau = 0 on W8A8's lattice: every key-step value fits INT8, both encodings are exact.
    rng = np.random.default_rng(2)
    w, x = rng.normal(size=(24, 64)), rng.normal(size=(32, 64))
    a = DiffLinear(w, None, preset("default").replace(lattice_bits=0))(x, 0)
    b = DiffLinear(w, None, _fmdq_cfg(lattice_bits=0))(x, 0)
    assert np.array_equal(a.y, b.y) and not b.enc.clipped.any()


@pytest.mark.parametrize("field,value,words", [
    ("encoding", "v3", "^encoding must be one of nibble, fmdq, got 'v3'$"),
    ("fmdq_rule", "paper", "^fmdq_rule must be one of lossless, magnitude, got 'paper'$"),
    ("token_tile", 0, r"^token_tile must be \[1, 4096\], got 0$"),
    ("sort_window", 0, r"^sort_window must be \[1, 65536\], got 0$"),
    ("fmdq_thr0", 0, r"^fmdq_thr0 must be \[1, 16384\], got 0$"),
])
def test_bad_fmdq_fields_are_named_in_one_line(field, value, words):
    with pytest.raises(ConfigError, match=words):
        preset("default").replace(**{field: value})


def test_token_tile_must_fit_max_tokens_only_for_fmdq():
    preset("tiny", encoding="nibble").replace(token_tile=64)     # v1 does not read it
    for datapath in ("int8", "dense"):                           # nor do the dense tops
        preset("tiny", encoding="fmdq", datapath=datapath, token_tile=64)
    with pytest.raises(ConfigError, match=r"^token_tile=64 must be <= max_tokens=32 "):
        preset("tiny").replace(token_tile=64, encoding="fmdq")


def test_fmdq_fields_reach_the_hardware_only_with_fmdq():
    v1 = preset("default", encoding="nibble")
    assert "token_tile" not in v1.hardware() and "encoding" not in v1.hardware()
    assert v1.replace(token_tile=8, sort_window=4).hardware() == v1.hardware()
    f = v1.replace(encoding="fmdq")
    assert {"encoding", "token_tile", "sort_window", "fmdq_rule", "fmdq_thr0"} <= set(f.hardware())
    assert f.replace(token_tile=16).hardware() != f.hardware()
    assert {**f.hardware(), **f.run_params()} == f.to_dict() and not f.unused()


def test_the_layer_lattice_is_one_step_for_every_row_and_fmdq_only():
    rng = np.random.default_rng(4)
    w, x = rng.normal(size=(16, 32)), rng.normal(size=(40, 32)) * rng.random(size=(40, 1))
    layer = DiffLinear(w, None, _fmdq_cfg(fmdq_lattice="layer", lattice_bits=2))
    for s in range(3):
        layer(x + 0.01 * s, s)
        assert np.array_equal(layer.y_int, layer.xs @ layer.w_q)
    assert np.all(layer.d == np.abs(x).max() / (127 * 4))
    v1 = DiffLinear(w, None, preset("default", encoding="nibble", fmdq_lattice="layer"))
    v1(x, 0)
    assert np.allclose(v1.d, np.abs(x).max(axis=1) / 254)       # v1 keeps its token lattice
