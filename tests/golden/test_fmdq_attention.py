"""Attention's units on the FMDQ array (``golden.fmdq_attention``): exact against the integer
matmuls, on random and extreme operands."""

import numpy as np
import pytest

from dstar.golden.fmdq_attention import int8_slices, pv_unit, qk_unit, run_attn_unit
from dstar.golden.fmdq_pe import acc_bits

T, W, E_MAX = 8, 32, 7
BITS = acc_bits(W, E_MAX)


def test_slices_recompose():
    x = np.arange(-128, 128)
    sl = int8_slices(x)
    assert np.array_equal((sl << np.array([0, 2, 4, 6])).sum(-1), x)
    assert sl[..., 3].min() == -2 and sl[..., 3].max() == 1
    p = np.arange(256)
    assert np.array_equal((int8_slices(p, False) << np.array([0, 2, 4, 6])).sum(-1), p)


@pytest.mark.parametrize("n_tok, dh", [(8, 32), (3, 16), (1, 4)])
def test_qk_unit_is_the_product(n_tok, dh):
    rng = np.random.default_rng(n_tok)
    for q, kt in [(rng.integers(-128, 128, (n_tok, dh)), rng.integers(-128, 128, (dh, 5))),
                  (np.full((n_tok, dh), -128), np.full((dh, 5), -128)),
                  (np.full((n_tok, dh), 127), np.full((dh, 5), -128))]:
        u = qk_unit(q, T)
        assert u.groups == dh
        got = run_attn_unit(u, kt, BITS)
        assert np.array_equal(got[:n_tok], q @ kt)
        assert not got[n_tok:].any()


@pytest.mark.parametrize("n_tok, live", [(8, 16), (5, 11), (2, 1)])
def test_pv_unit_is_the_weighted_sum(n_tok, live):
    rng = np.random.default_rng(live)
    g = 16
    for p, s, v in [(rng.integers(0, 256, (n_tok, g)), rng.integers(0, E_MAX + 1, n_tok),
                     rng.integers(-128, 128, (g, 6))),
                    (np.full((n_tok, g), 255), np.full(n_tok, E_MAX), np.full((g, 6), -128))]:
        u = pv_unit(p, s, T, live)
        assert u.groups == g and not u.signed.any()
        got = run_attn_unit(u, v, BITS)
        want = (p[:, :live] << s[:, None]) @ v[:live]
        assert np.array_equal(got[:n_tok], want)


def test_a_wrong_shift_is_caught():
    p, v = np.full((2, 16), 3), np.ones((16, 2), np.int64)
    u = pv_unit(p, [1, 2], T, 16)
    u.tok_shift[1] = 1
    assert not np.array_equal(run_attn_unit(u, v, BITS)[:2], (p << np.array([[1], [2]])) @ v)
