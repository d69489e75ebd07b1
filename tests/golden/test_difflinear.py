import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.difflinear import DiffLinear, InvariantError, lattice_refinements
from dstar.golden.quant import quantize_weights, to_lattice, token_lattice, w8a8_linear


def drift(rng, n, k, steps, scale=0.02):
    x = rng.normal(size=(n, k))
    for _ in range(steps):
        yield x
        x = x + scale * rng.normal(size=x.shape)


def test_weight_and_token_quantization():
    w = np.array([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]])
    w_q, s_w = quantize_weights(w)
    assert w_q.shape == (3, 2) and w_q[:, 0].tolist() == [64, -127, 32] and s_w[1] == 1.0
    assert (w_q[:, 1] == 0).all()
    x = np.array([[0.0, 0.0], [1.27, -2.54]])
    d = token_lattice(x)
    assert d[0] == 1.0 and np.isclose(d[1], 0.02)
    assert to_lattice(x, d)[1].tolist() == [64, -127]


@pytest.mark.parametrize("tau", [0, 2])
@pytest.mark.parametrize("refresh", [0, 3])
def test_invariant_and_closed_loop_on_random_drift(tau, refresh):
    # The spec's INT8 lattice: every key-step value fits a code, so no group needs a shift and
    # the reconstruction tracks each target within tau (a finer lattice: ``test_finer_lattice``).
    cfg = preset("default", encoding="nibble", tau=tau, refresh_linear=refresh, lattice_bits=0)
    rng = np.random.default_rng(tau + 10 * refresh)
    w = rng.normal(size=(48, 64))
    layer = DiffLinear(w, rng.normal(size=48), cfg)
    keys = []
    for s, x in enumerate(drift(rng, 20, 64, 8)):
        res = layer(x, s)
        keys.append(res.key)
        # Invariant, independently: Y_int equals W_q^T . Xs_int computed here in int64.
        assert np.array_equal(layer.y_int, layer.xs @ layer.w_q)
        assert np.abs(res.target - layer.xs).max() <= tau
    assert keys == [s == 0 or (refresh > 0 and s % refresh == 0) for s in range(8)]


def test_tau0_matches_w8a8_on_the_key_step_and_tracks_later():
    cfg = preset("default", encoding="nibble").replace(lattice_bits=0)   # W8A8's lattice
    rng = np.random.default_rng(1)
    w = rng.normal(size=(32, 64))
    layer = DiffLinear(w, None, cfg)
    w_q, s_w = quantize_weights(w)
    xs = list(drift(rng, 16, 64, 5, scale=0.01))
    y0 = layer(xs[0], 0).y
    assert np.allclose(y0, w8a8_linear(xs[0], w_q, s_w), rtol=0, atol=1e-9)
    for s, x in enumerate(xs[1:], 1):
        y = layer(x, s).y
        ref = x @ w.T
        # Same lattice resolution as W8A8: the error stays at the INT8 quantization level.
        assert np.abs(y - ref).max() < 0.05 * np.abs(ref).max()


def test_state_saturation_is_clipped_not_overflowed():
    cfg = preset("default", encoding="nibble").replace(state_bits=10, e_max=3)
    rng = np.random.default_rng(2)
    w = rng.normal(size=(8, 16))
    layer = DiffLinear(w, None, cfg)
    x = rng.normal(size=(4, 16))
    layer(x, 0)
    res = layer(x * 1000.0, 1)              # far outside the key step's lattice
    assert np.abs(layer.xs).max() <= cfg.state_max
    assert np.abs(res.target).max() == cfg.target_max
    assert np.array_equal(layer.y_int, layer.xs @ layer.w_q)


def test_invariant_violation_is_detected():
    cfg = preset("default", encoding="nibble")
    layer = DiffLinear(np.ones((4, 16)), None, cfg)
    layer(np.ones((2, 16)), 0)
    y = layer.y_int
    y[0, 0] += 1
    layer.y_int = y                         # corrupt the accumulator
    with pytest.raises(InvariantError, match="Y_int"):
        layer(np.ones((2, 16)), 1)


def test_bad_shapes():
    cfg = preset("default", encoding="nibble")
    with pytest.raises(ValueError, match="multiple of group"):
        DiffLinear(np.ones((4, 20)), None, cfg)
    layer = DiffLinear(np.ones((4, 16)), None, cfg)
    with pytest.raises(ValueError, match=r"input must be \(N, 16\)"):
        layer(np.ones((2, 8)), 0)
    layer(np.ones((2, 16)), 0)
    with pytest.raises(ValueError, match="3 rows"):
        layer(np.ones((3, 16)), 1)


def test_finer_lattice():
    """``lattice_bits`` scales the key step's lattice by ``2**-lattice_bits``; the invariant and
    the closed loop hold, and the reconstructed activations are closer to float than on the
    INT8 lattice (after the key step, whose groups beyond INT8 take a shift)."""
    rng = np.random.default_rng(5)
    w = rng.normal(size=(32, 64))
    xs = list(drift(rng, 12, 64, 4))
    errs = []
    for lb in (0, 2):
        layer = DiffLinear(w, None, preset("default", encoding="nibble").replace(lattice_bits=lb))
        err = 0.0
        for s, x in enumerate(xs):
            layer(x, s)
            if s:
                err += float(((layer.xs * layer.d[:, None] - x) ** 2).sum())
        assert np.allclose(layer.d, token_lattice(xs[0]) / (1 << lb))
        assert np.abs(layer.xs).max() > 127 * (1 << lb) // 2
        errs.append(err)
    assert errs[1] < errs[0] / 8


def test_lattice_refinements_rule():
    """Halvings while the peak times ``2**k`` stays within ``refine_at`` of the key range, up to
    ``refine_max`` since the key step, within the state's range; zero rows keep their lattice."""
    cfg = preset("default", encoding="nibble").replace(lattice_bits=0, refine_max=3, refine_at=0.5)
    limit = 0.5 * 127
    peak = np.array([127.0, limit, limit + 0.1, limit / 2, limit / 64, 0.0, limit / 8])
    refined = np.array([0, 0, 0, 0, 0, 0, 2])
    xs_peak = np.zeros(7, np.int64)
    k = lattice_refinements(peak, refined, xs_peak, cfg)
    assert k.tolist() == [0, 1, 0, 2, 3, 0, 1]
    # The doubled state must fit: a state peak of state_max // 2 allows one halving, not two.
    big = np.array([cfg.state_max // 2, cfg.state_max // 2 + 1])
    assert lattice_refinements(np.array([1.0, 1.0]), np.zeros(2, np.int64), big,
                               cfg).tolist() == [1, 0]
    assert not lattice_refinements(peak, refined, xs_peak, cfg.replace(refine_max=0)).any()


def test_refinement_is_exact_and_follows_shrinking_tokens():
    """A token whose values shrink gets a finer lattice by powers of two: the invariant holds
    on every step (also checked inside), the state tracks the targets exactly (tau 0, groups
    not clipped), the float output stays that of the reconstruction, and the shrunk tokens'
    reconstruction is closer to float than on the fixed lattice; tokens that do not shrink
    keep their lattice."""
    rng = np.random.default_rng(7)
    w = rng.normal(size=(24, 32))
    x0 = rng.normal(size=(6, 32))
    shrink = np.array([1.0, 1.0, 0.5, 0.3, 0.1, 0.02])      # per token, by the last step
    xs = [x0 * (1 + (shrink[:, None] - 1) * s / 4) + 0.01 * rng.normal(size=x0.shape)
          for s in range(5)]
    errs = {}
    for rmax in (0, 4):
        cfg = preset("default", encoding="nibble", lattice_bits=0, refine_max=rmax,
                     refine_at=0.85)
        layer = DiffLinear(w, None, cfg)
        total = []
        for s, x in enumerate(xs):
            res = layer(x, s)
            assert np.array_equal(layer.y_int, layer.xs @ layer.w_q)
            # tau 0: exact wherever a group needed no shift beyond INT8 (clipped groups round).
            err = (res.target - layer.xs).reshape(len(x), -1, cfg.group)
            assert not err[~res.enc.clipped].any()
            # The output is the reconstruction's, on the (refined) lattice.
            ref = (layer.xs * layer.d[:, None]) @ (layer.w_q * layer.s_w).astype(np.float64)
            assert np.allclose(res.y, ref, rtol=1e-12, atol=1e-12)
            if s == 0 or not rmax:
                assert not res.refine.any()
            total.append(float(((layer.xs * layer.d[:, None] - x)[3:] ** 2).sum()))
        errs[rmax] = sum(total[1:])
        if rmax:
            assert layer.refined[:2].tolist() == [0, 0] and (layer.refined[3:] > 0).all()
            assert layer.refined.max() <= rmax
            assert np.allclose(layer.d, token_lattice(xs[0]) / 2.0 ** layer.refined)
    assert errs[4] < errs[0] / 4
