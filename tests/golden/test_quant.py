"""Number formats at their edges: values the formats cannot represent are clipped where the
contract says so and refused where it does not, never wrapped."""

import numpy as np
import pytest

from dstar.golden.difflinear import DiffLinear
from dstar.golden.encoder import D_LIMIT, encode, round_shift
from dstar.golden.quant import (
    LATTICE_LIMIT,
    quantize_weights,
    to_lattice,
    token_lattice,
    w8a8_linear,
)


def test_to_lattice_clips_instead_of_wrapping():
    q = to_lattice(np.array([[1e17, -1e30, 3.0, 2.5]]), np.array([1e-300]))
    assert q[0, 0] == LATTICE_LIMIT and q[0, 1] == -LATTICE_LIMIT and q[0, 2] == LATTICE_LIMIT
    assert np.array_equal(to_lattice(np.array([[2.5, -2.5, 7.0]]), np.array([1.0])), [[2, -2, 7]])


def test_a_huge_activation_jump_keeps_its_sign_through_a_differential_layer(tiny_cfg):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, tiny_cfg.group * 2))
    layer = DiffLinear(w, None, tiny_cfg)
    x = rng.standard_normal((2, w.shape[1]))
    layer(x, 0)
    before = layer.xs[0, 0]
    jump = x.copy()
    jump[0, 0] = 1e17
    layer(jump, 1)
    # The jumped element's target saturates at +target_max, so the state moves up (it wrapped
    # to INT64_MIN and moved down before).
    assert layer.xs[0, 0] > before


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(bad):
    x = np.array([[1.0, bad]])
    for call in (lambda: token_lattice(x), lambda: to_lattice(x, np.ones(1)),
                 lambda: quantize_weights(x), lambda: w8a8_linear(x, np.ones((2, 1)), np.ones(1))):
        with pytest.raises(ValueError, match="non-finite"):
            call()
    with pytest.raises(ValueError, match="finite and > 0"):
        to_lattice(np.ones((1, 2)), np.array([bad]))


def test_empty_weights_are_refused():
    with pytest.raises(ValueError, match="not empty"):
        quantize_weights(np.zeros((4, 0)))


@pytest.mark.parametrize("d", [[2**63 - 1], [-2**63], [D_LIMIT + 1], [-D_LIMIT - 1]])
def test_encode_refuses_what_int64_arithmetic_cannot_hold(d):
    with pytest.raises(ValueError, match="beyond"):
        encode(np.array(d + [0] * 15, dtype=np.int64), 16, 7, 0)
    with pytest.raises(ValueError, match="beyond"):
        round_shift(np.array(d, dtype=np.int64), 1)


def test_encode_at_the_largest_accepted_values_saturates_correctly():
    for v in (D_LIMIT, -D_LIMIT, 2**40, -(2**31), 2**31):
        e = encode(np.array([v] + [0] * 15, dtype=np.int64), 16, 7, 0)
        assert e.saturated[0] and e.clipped[0] and e.shift[0] == 7
        assert e.q[0] == (127 if v > 0 else -128)
    uint = encode(np.full(16, 255, dtype=np.uint64), 16, 7, 0)
    assert (uint.q == 64).all() and uint.shift[0] == 2 and uint.clipped[0]   # as int64 would be
    with pytest.raises(ValueError, match="beyond"):
        encode(np.array([2**64 - 1] + [0] * 15, dtype=np.uint64), 16, 7, 0)


@pytest.mark.parametrize("kw", [dict(group=0), dict(e_max=-1), dict(e_max=63), dict(tau=-1)])
def test_encode_refuses_bad_parameters(kw):
    args = dict(group=16, e_max=7, tau=0) | kw
    with pytest.raises(ValueError, match="encode needs"):
        encode(np.zeros(16, dtype=np.int64), **args)


def test_encode_refuses_scalars_and_bools():
    with pytest.raises(ValueError, match="scalar"):
        encode(np.int64(5), 16, 7, 0)
    with pytest.raises(TypeError):
        encode(np.zeros(16, dtype=bool), 16, 7, 0)
