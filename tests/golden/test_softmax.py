"""Fixed-point softmax (golden.softmax): exhaustive LUT/exp checks, an independent pure-Python
reference of the integer pipeline, edge cases and error bounds against float softmax."""

import math

import numpy as np
import pytest

from dstar.golden.softmax import (
    DEFAULT_E_MAX,
    EXP_EXTRA_BITS,
    exp2_fixed,
    exp_lut,
    logit_multiplier,
    normalize,
    reciprocal,
    softmax_error,
    softmax_exp,
    softmax_exp_float,
    softmax_groups,
)

E = DEFAULT_E_MAX
TOP = 255 << E          # the applied weight of a row's max



# ----- independent scalar reference (Python ints, written from ATTENTION.md) -----
def ref_lut(f, frac_bits):
    return math.floor(255 * 256 * 2.0 ** (-f / (1 << frac_bits)) + 0.5)


def ref_rshift(v, s):
    return v if s == 0 else (v + (1 << (s - 1))) >> s


def ref_row(s_row, m, sh, valid, frac_bits, group=16, e_max=E):
    """Applied weights ``w`` of one row and their sum, key by key in Python ints."""
    smax = max(s for s, ok in zip(s_row, valid, strict=True) if ok)
    xs = [ref_rshift((smax - s) * m, sh) if ok else None
          for s, ok in zip(s_row, valid, strict=True)]
    w = []
    for j, x in enumerate(xs):
        if x is None:
            w.append(0)
            continue
        g0 = j - j % group
        e = min([e_max] + [xo >> frac_bits for xo in xs[g0:g0 + group] if xo is not None])
        xi, f = x >> frac_bits, x % (1 << frac_bits)
        w.append(ref_rshift(ref_lut(f, frac_bits), xi - e + 8) << (e_max - e))
    return w, sum(w)


def ref_normalize(acc, lsum, ob):
    big_l = lsum.bit_length()
    r = ((1 << (big_l + 16)) - 1) // lsum
    return ref_rshift(acc * r, big_l + 16 - ob)


def int_logits(rng, shape, dh, std=1.0):
    """INT8 Q (per row) and K (per head) logits with their natural-log scale per row."""
    q = rng.normal(size=shape[:-1] + (dh,)) * std
    k = rng.normal(size=shape[:-2] + (shape[-1], dh))
    sq = np.abs(q).max(-1) / 127
    sk = np.abs(k).max((-1, -2)) / 127
    qi = np.rint(q / sq[..., None]).astype(np.int64)
    ki = np.rint(k / sk[..., None, None]).astype(np.int64)
    return qi @ np.swapaxes(ki, -1, -2), sq * sk[..., None] / math.sqrt(dh)


# ----- LUT and exponent -----
@pytest.mark.parametrize("frac_bits", [1, 4, 6, 7, 8])
def test_lut_contents(frac_bits):
    lut = exp_lut(frac_bits)
    assert lut.shape == (1 << frac_bits,)
    assert lut.tolist() == [ref_lut(f, frac_bits) for f in range(1 << frac_bits)]
    assert lut[0] == 255 << EXP_EXTRA_BITS
    assert np.all(np.diff(lut) < 0)
    assert lut.min() > 255 << (EXP_EXTRA_BITS - 1) and lut.max() < 1 << 16


@pytest.mark.parametrize("frac_bits", [4, 6, 7])
def test_exp2_exhaustive(frac_bits):
    x = np.arange(12 << frac_bits)
    p = exp2_fixed(x, frac_bits)
    want = [ref_rshift(ref_lut(v % (1 << frac_bits), frac_bits), (v >> frac_bits) + 8)
            for v in x.tolist()]
    assert p.tolist() == want
    assert p[0] == 255
    assert np.all(np.diff(p) <= 0)                        # monotone
    assert np.all(p[x >= 9 << frac_bits] == 0) and np.all(p[x < 9 << frac_bits] >= 1)
    # LUT edges: x = 2**F (one octave) is exactly LUT[0] / 2 rounded, 128
    assert p[1 << frac_bits] == 128 and p[(1 << frac_bits) - 1] >= 128
    # single rounding of a value with a 0.5-LSB/256 LUT error
    assert np.abs(p - 255 * np.exp2(-x / (1 << frac_bits))).max() <= 0.5 + 0.5 / 256 + 1e-9


def test_exp2_rejects_negative():
    with pytest.raises(ValueError):
        exp2_fixed(np.array([-1]))


# ----- multiplier -----
def test_logit_multiplier_normal_range():
    c = np.geomspace(1e-7, 50.0, 2001)
    m, sh = logit_multiplier(c, 6)
    assert np.all((m >= 1 << 15) & (m < 1 << 16)) and np.all((sh >= 0) & (sh <= 47))
    rel = np.abs(m / np.exp2(sh) - c * math.log2(math.e) * 64) / (c * math.log2(math.e) * 64)
    assert rel.max() <= 2.0 ** -16


def test_logit_multiplier_clamps():
    m, sh = logit_multiplier(np.array([0.0, 1e6, 1e-30]), 6)
    assert (m[0], sh[0]) == (0, 0)
    assert (m[1], sh[1]) == ((1 << 16) - 1, 0)
    assert sh[2] == 47 and m[2] < 1 << 15
    with pytest.raises(ValueError):
        logit_multiplier(np.array([-1.0]))


# ----- softmax_exp -----
@pytest.mark.parametrize("frac_bits, group, e_max",
                         [(4, 16, 7), (6, 16, 7), (6, 4, 7), (6, 3, 2), (6, 1, 15), (6, 5, 0)])
def test_softmax_exp_matches_reference(frac_bits, group, e_max):
    rng = np.random.default_rng(1)
    s, scale = int_logits(rng, (3, 9, 37), 16, std=3.0)
    m, sh = logit_multiplier(scale, frac_bits)
    valid = rng.random(s.shape) < 0.7
    valid[..., 0] = True
    valid[0, :, 8:16] = False               # whole groups without a valid key
    w, lsum = softmax_exp(s, m, sh, valid, frac_bits, group, e_max)
    for idx in np.ndindex(s.shape[:-1]):
        rw, rl = ref_row(s[idx].tolist(), int(m[idx]), int(sh[idx]), valid[idx].tolist(),
                         frac_bits, group, e_max)
        assert w[idx].tolist() == rw and lsum[idx] == rl
    p, shift, lsum2 = softmax_groups(s, m, sh, valid, frac_bits, group, e_max)
    assert shift.shape == s.shape[:-1] + (-(-37 // group),)
    assert np.all((p >= 0) & (p <= 255)) and np.all((shift >= 0) & (shift <= e_max))
    assert np.array_equal(np.left_shift(p, np.repeat(shift, group, -1)[..., :37]), w)
    assert np.array_equal(lsum2, lsum)
    # a group's largest valid key keeps 8 significant bits unless its exponent is clamped
    for idx in np.ndindex(s.shape[:-1]):
        for g in range(shift.shape[-1]):
            sl = slice(g * group, (g + 1) * group)
            if valid[idx][sl].any() and shift[idx][g] > 0:
                assert p[idx][sl].max() >= 128


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_exp_float_is_softmax_exp_bit_for_bit(dtype):
    """The float-domain pipeline of the attention hot path against the integer one, on ragged
    groups, masks with empty groups, every exponent range and logit scales that clamp."""
    rng = np.random.default_rng(5)
    for _ in range(150):
        n, nk = int(rng.integers(1, 40)), int(rng.integers(1, 70))
        group, e_max = int(rng.choice([1, 3, 16, 40])), int(rng.integers(0, 16))
        frac_bits = int(rng.integers(1, 11))
        s, scale = int_logits(rng, (2, n, nk), int(rng.choice([1, 8, 32])),
                              std=float(rng.choice([0.1, 1.0, 5.0, 30.0])))
        m, sh = logit_multiplier(scale * float(rng.choice([1e-3, 1.0, 1e3])), frac_bits)
        valid = None
        if rng.integers(0, 2):
            valid = rng.random(s.shape) < 0.3
            valid[..., int(rng.integers(0, nk))] = True
        w, lsum = softmax_exp(s, m, sh, valid, frac_bits, group, e_max)
        wf, lf = softmax_exp_float(s.astype(dtype), m, sh, None if valid is None else ~valid,
                                   frac_bits, group, e_max)
        assert wf.dtype == np.float64 and lf.dtype == np.float64
        assert np.array_equal(wf, w) and np.array_equal(lf, lsum)


def test_softmax_exp_float_needs_float_logits():
    with pytest.raises(TypeError, match="float logits"):
        softmax_exp_float(np.zeros((1, 3), np.int64), [40000], [20])


def test_e_max_zero_is_one_exponent_per_row():
    rng = np.random.default_rng(11)
    s, scale = int_logits(rng, (5, 40), 32, std=2.0)
    m, sh = logit_multiplier(scale)
    w0, _ = softmax_exp(s, m, sh, group=16, e_max=0)
    w1, _ = softmax_exp(s, m, sh, group=40, e_max=0)
    assert np.array_equal(w0, w1) and w0.max() == 255


def test_group_arguments_checked():
    s = np.zeros((1, 4), dtype=np.int64)
    m, sh = logit_multiplier(np.array([0.1]))
    with pytest.raises(ValueError, match="group"):
        softmax_exp(s, m, sh, group=0)
    with pytest.raises(ValueError, match="e_max"):
        softmax_exp(s, m, sh, e_max=16)


def test_all_equal_logits():
    s = np.full((4, 37), 1234, dtype=np.int64)
    m, sh = logit_multiplier(np.full(4, 0.01))
    w, lsum = softmax_exp(s, m, sh)
    assert np.all(w == TOP) and np.all(lsum == TOP * 37)


def test_extreme_logits():
    dh = 128
    big = dh * 127 * 127
    s = np.array([[big, -big, -big, big - 1, 0], [-big, -big, -big, -big, -big]], dtype=np.int64)
    m, sh = logit_multiplier(np.array([100.0, 100.0]))    # scale far beyond any real DiT
    p, lsum = softmax_exp(s, m, sh)
    assert p[0].tolist() == [TOP, 0, 0, 0, 0] and lsum[0] == TOP
    assert p[1].tolist() == [TOP] * 5
    p, lsum = softmax_exp(s, m, sh, group=1)     # far keys alone in their group: still 0
    assert p[0].tolist() == [TOP, 0, 0, 0, 0] and lsum[0] == TOP
    m, sh = logit_multiplier(np.array([1e-12, 1e-12]))    # scale ~0: uniform
    p, _ = softmax_exp(s, m, sh)
    assert np.all(p == TOP)
    m, sh = np.array([(1 << 16) - 1] * 2), np.array([0, 47])   # widest multiplier, both shifts
    p, _ = softmax_exp(s, m, sh)
    assert p[0].tolist() == [TOP, 0, 0, 0, 0]


def test_one_element_rows():
    s = np.array([[-5], [0], [16129]], dtype=np.int64)
    p, lsum = softmax_exp(s, *logit_multiplier(np.array([0.1, 1.0, 10.0])))
    assert p.ravel().tolist() == [TOP] * 3 and lsum.tolist() == [TOP] * 3


def test_row_properties_random():
    rng = np.random.default_rng(2)
    s, scale = int_logits(rng, (6, 32, 64), 32, std=1.5)
    m, sh = logit_multiplier(scale)
    p, lsum = softmax_exp(s, m, sh)
    assert np.all(p[np.arange(6)[:, None], np.arange(32)[None], s.argmax(-1)] == TOP)
    assert np.all((p >= 0) & (p <= TOP)) and np.array_equal(lsum, p.sum(-1))
    assert np.all((lsum >= TOP) & (lsum <= TOP * 64))
    # monotone within a group: a larger logit never gets a smaller weight
    sg, pg = s.reshape(6, 32, 4, 16), p.reshape(6, 32, 4, 16)
    order = np.argsort(sg, axis=-1, kind="stable")
    assert np.all(np.diff(np.take_along_axis(pg, order, axis=-1), axis=-1) >= 0)


def test_invalid_keys_excluded():
    s = np.array([[100, 5, 4]], dtype=np.int64)
    m, sh = logit_multiplier(np.array([0.05]))
    p, lsum = softmax_exp(s, m, sh, valid=np.array([[False, True, True]]))
    assert p[0, 0] == 0 and p[0, 1] == TOP and lsum[0] == p[0].sum()
    with pytest.raises(ValueError):
        softmax_exp(s, m, sh, valid=np.zeros((1, 3), bool))
    with pytest.raises(TypeError):
        softmax_exp(s.astype(float), m, sh)


# ----- reciprocal and normalization -----
def test_reciprocal_exhaustive():
    lsum = np.arange(1, 1 << 20)
    r, big_l = reciprocal(lsum)
    assert np.all((r >= 1 << 16) & (r < 1 << 17))
    top = np.left_shift(1, big_l + 16) - 1
    assert np.all(r * lsum <= top) and np.all((r + 1) * lsum > top)
    assert np.all((lsum >= np.left_shift(1, big_l - 1)) & (lsum < np.left_shift(1, big_l)))


@pytest.mark.parametrize("ob", [0, 4, 8])
def test_normalize_reference_and_bound(ob):
    rng = np.random.default_rng(3)
    lsum = rng.integers(255, 255 * 4096, size=3000)
    acc = (rng.uniform(-1, 1, size=3000) * 127 * lsum).astype(np.int64)
    acc[:3] = [127 * lsum[0], -127 * lsum[1], 0]
    out = normalize(acc[:, None], lsum, ob)[:, 0]
    assert out.tolist() == [ref_normalize(int(a), int(lv), ob)
                            for a, lv in zip(acc, lsum, strict=True)]
    assert np.abs(out - acc * 2.0 ** ob / lsum).max() < 1.0
    assert out[0] == 127 << ob and out[1] == -(127 << ob)


# ----- error against float softmax (stated bounds, see docs/design/attention.md) -----
def exponent_bound(frac_bits, e_max=E):
    """|p - 255 exp(z - zmax) 2**e_g| bound in mantissa LSB: exponent rounding 2**-(F+1) plus
    2**-16 relative multiplier error over the ``e_max + 9`` octaves where p > 0, then LUT and
    final rounding."""
    octaves = e_max + 9
    return 255 * (2.0 ** (2.0 ** -(frac_bits + 1) + octaves * 2.0 ** -16) - 1) + 0.5 + 0.5 / 256


@pytest.mark.parametrize("frac_bits", [4, 6, 8])
@pytest.mark.parametrize("e_max", [0, 7])
def test_unnormalized_error_bound(frac_bits, e_max):
    rng = np.random.default_rng(4)
    s, scale = int_logits(rng, (4, 64, 64), 32, std=2.0)
    m, sh = logit_multiplier(scale, frac_bits)
    w, _ = softmax_exp(s, m, sh, frac_bits=frac_bits, e_max=e_max)
    _, shift, _ = softmax_groups(s, m, sh, frac_bits=frac_bits, e_max=e_max)
    unit = np.exp2(np.repeat(shift, 16, axis=-1)).astype(np.float64)   # one mantissa LSB
    z = s * scale[..., None]
    ideal = (255 << e_max) * np.exp(z - z.max(-1, keepdims=True))
    assert np.all(np.abs(w - ideal) <= exponent_bound(frac_bits, e_max) * unit)


def test_probability_error_vs_float():
    rng = np.random.default_rng(5)
    s, scale = int_logits(rng, (4, 64, 256), 32, std=1.0)
    err = softmax_error(s, scale)
    # measured 0.0116 mean row L1 (ideal 8-bit unnormalized rounding: 0.0108)
    assert err["mean_row_l1"] < 0.015
    assert err["max_abs_rel_to_rowmax_lsb"] < 4.0
    assert err["max_abs"] < 0.01
