"""The encoder against a literal, element-by-element reading of spec section 3."""

import itertools

import numpy as np
import pytest

from dstar.golden.encoder import HIGH, LOW, ZERO, encode, round_shift, split_nibbles


def ref_encode_group(d, e_max, tau):
    """Spec section 3, one group, plain Python integers."""
    def rs(x, e):
        return x if e == 0 else (x + (1 << (e - 1))) >> e

    def fits(e):
        return all(-128 <= rs(x, e) <= 127 for x in d)

    tol = [e for e in range(e_max + 1) if (0 if e == 0 else 1 << (e - 1)) <= tau]
    ok = [e for e in tol if fits(e)]
    if ok:
        e, clipped, sat = min(ok), False, False
    else:
        anyfit = [e for e in range(e_max + 1) if fits(e)]
        e, clipped, sat = (min(anyfit), True, False) if anyfit else (e_max, True, True)
    q = [0 if abs(x) <= tau else max(-128, min(127, rs(x, e))) for x in d]
    cls = [ZERO if v == 0 else LOW if -8 <= v <= 7 else HIGH for v in q]
    return e, q, cls, clipped, sat


def check_against_ref(d, group, e_max, tau):
    d = np.asarray(d, dtype=np.int64).reshape(-1, group)
    enc = encode(d.reshape(1, -1), group, e_max, tau)
    for g, row in enumerate(d):
        e, q, cls, clipped, sat = ref_encode_group([int(x) for x in row], e_max, tau)
        assert enc.shift[0, g] == e, (row, e)
        assert list(enc.q[0, g * group:(g + 1) * group]) == q
        assert list(enc.cls[0, g * group:(g + 1) * group]) == cls
        assert bool(enc.clipped[0, g]) == clipped and bool(enc.saturated[0, g]) == sat
    return enc


def test_round_shift_is_half_up_and_arithmetic():
    assert round_shift(np.array([1, 2, 3, -1, -2, -3, 5]), 1).tolist() == [1, 1, 2, 0, -1, -1, 3]
    assert round_shift(np.array([6, -6, 10, -10]), 2).tolist() == [2, -1, 3, -2]  # ties up
    assert round_shift(np.array([-7]), 0).tolist() == [-7]


def test_every_single_value_every_shift_range():
    """Exhaustive over single-element groups: every D in the state's range edges and around
    every power-of-two boundary, for several e_max and tau."""
    vals = set(range(-300, 301))
    for e in range(16):
        for b in (127 << e, 128 << e):
            vals |= {b - 2, b - 1, b, b + 1, -b - 1, -b, -b + 1}
    vals |= {65470, -65470, 32767, -32768}
    vals = sorted(vals)
    for e_max, tau in [(0, 0), (3, 0), (7, 0), (7, 1), (7, 3), (15, 5)]:
        check_against_ref(vals, 1, e_max, tau)


@pytest.mark.parametrize("tau", [0, 1, 2, 5])
def test_random_groups(tau):
    rng = np.random.default_rng(tau)
    for scale in (3, 20, 200, 2000, 70000):
        d = rng.integers(-scale, scale + 1, size=(64 * 16))
        check_against_ref(d, 16, 7, tau)


def test_all_zero_all_max_and_mixed_groups():
    g = 16
    zero = np.zeros(g, np.int64)
    enc = check_against_ref(zero, g, 7, 0)
    assert (enc.cls == ZERO).all() and enc.group_cost.tolist() == [[0]]
    hi = np.full(g, 127)
    enc = check_against_ref(hi, g, 7, 0)
    assert (enc.cls == HIGH).all() and enc.shift.tolist() == [[0]]
    lo = np.full(g, -128)
    assert (check_against_ref(lo, g, 7, 0).q == -128).all()
    sat = np.full(g, 65470)
    enc = check_against_ref(sat, g, 7, 0)
    assert enc.saturated.all() and (enc.q == 127).all()
    mixed = np.array([0, 1, -1, 7, -8, 8, -9, 127, -128, 0, 0, 3, 0, 0, 0, 0])
    enc = check_against_ref(mixed, g, 7, 0)
    assert enc.cls.tolist()[0] == [0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 1, 0, 0, 0, 0]
    assert enc.group_cost.tolist() == [[2]]


def test_dead_zone():
    d = np.array([[-3, -2, -1, 0, 1, 2, 3, 4]])
    enc = encode(d, 8, 7, 2)
    assert enc.q.tolist() == [[-3, 0, 0, 0, 0, 0, 3, 4]]


def test_decode_error_bounded_by_tolerance_unless_clipped():
    rng = np.random.default_rng(7)
    for tau in (0, 1, 3, 8):
        d = rng.integers(-1500, 1500, size=(50, 64))
        enc = encode(d, 16, 7, tau)
        err = np.abs(enc.decode() - d)
        ok = ~np.repeat(enc.clipped, 16, axis=-1)
        assert err[ok].max(initial=0) <= tau
        # At this scale tau < 8 cannot hold every group: the test covers both branches.
        assert enc.clipped.any() == (tau < 8)


def test_nibble_split_exhaustive():
    q = np.arange(-128, 128)
    lo, hi = split_nibbles(q)
    assert ((lo >= 0) & (lo <= 15)).all() and ((hi >= -8) & (hi <= 7)).all()
    assert np.array_equal(lo + 16 * hi, q)


def test_shapes_and_errors():
    with pytest.raises(ValueError, match="multiple of the group"):
        encode(np.zeros((2, 20), np.int64), 16, 7, 0)
    with pytest.raises(TypeError, match="integer"):
        encode(np.zeros((2, 16)), 16, 7, 0)
    enc = encode(np.zeros((3, 4, 32), np.int64), 16, 7, 0)
    assert enc.shift.shape == (3, 4, 2) and enc.q.shape == (3, 4, 32)


def test_group_cost_matches_classes():
    rng = np.random.default_rng(3)
    for g, scale in itertools.product((2, 8, 16), (1, 10, 300)):
        d = rng.integers(-scale, scale + 1, size=(10, 4 * g))
        enc = encode(d, g, 7, 0)
        want = np.array([[max([0, 1, 2][c] for c in enc.cls[r, j * g:(j + 1) * g])
                          for j in range(4)] for r in range(10)])
        assert np.array_equal(enc.group_cost, want)
