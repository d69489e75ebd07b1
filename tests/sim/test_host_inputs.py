"""``BlockHost`` and ``GoldenEngine`` name a bad input's shape or value in one ``ValueError``
(the bad-input probe's H7-H26: NumPy broadcast messages, a ``KeyError`` for a block, a silent
broadcast of one sample's conditioning)."""

import numpy as np
import pytest

from dstar.config import load_config
from dstar.golden.dit import DiT
from dstar.golden.host import BlockHost, GoldenEngine, run_sync
from dstar.golden.softmax import logit_multiplier


@pytest.fixture(scope="module")
def setup():
    cfg = load_config(None, "tiny").replace(max_k=512, max_m=512)
    r = np.random.default_rng(0)
    h = r.standard_normal((2, 4, 128)).astype("f4")
    sc = r.standard_normal((2, 128)).astype("f4")
    return cfg, DiT.bundled(), h, sc


@pytest.mark.parametrize("args, named", [
    (lambda h, sc: (0, h[..., :127], sc), r"hidden=128.*got \(2, 4, 127\)"),          # H7
    (lambda h, sc: (0, h[0], sc), r"got \(4, 128\)"),                                  # H8
    (lambda h, sc: (0, h[:, :0], sc), r"got \(2, 0, 128\)"),                           # H9
    (lambda h, sc: (99, h, sc), "block 99 is not a block"),                           # H12
    (lambda h, sc: (-1, h, sc), "block -1 is not a block"),                           # H13
    (lambda h, sc: (0, h, sc[:1]), r"sc must be \(B=2, hidden=128\).*got \(1, 128\)"),  # H15
])
def test_a_block_step_names_a_bad_input(setup, args, named):
    cfg, model, h, sc = setup
    host = BlockHost(cfg, model, GoldenEngine(cfg))
    i, hh, scc = args(h, sc)
    with pytest.raises(ValueError, match=named):
        run_sync(host.step(i, hh, scc, 0))


def test_a_host_refuses_another_sequence_length_and_the_engine_bad_shapes(setup):
    cfg, model, h, sc = setup
    host = BlockHost(cfg, model, GoldenEngine(cfg))
    run_sync(host.step(0, h, sc, 0))
    with pytest.raises(ValueError, match=r"\(2, 3\), this host's steps had \(2, 4\)"):  # H16
        run_sync(host.step(0, h[:, :3], sc, 1))
    g = GoldenEngine(cfg)
    with pytest.raises(ValueError, match="targets of K=32 for weights of K=16"):         # H21
        run_sync(g.linear("n", np.ones((16, 16), np.int64), np.ones((2, 32), np.int64), True))
    q = np.random.default_rng(1).integers(-127, 128, (8, 32))
    m, s = logit_multiplier(np.full(8, 0.01), 6)
    with pytest.raises(ValueError, match=r"m and sh must have q's rows \(8,\), got \(2,\)"):
        run_sync(g.attention(0, q, q, q, m[:2], s[:2]))                                 # H26


def test_the_golden_engine_refuses_what_the_top_would_clip_or_cannot_hold(setup):
    cfg = setup[0]
    g = GoldenEngine(cfg)
    w = np.random.default_rng(2).integers(-127, 128, (32, 16))
    with pytest.raises(ValueError, match=r"targets hold 40000 at \(0, 0\), outside "):   # H17
        run_sync(g.linear("l", w, np.full((2, 32), 40000), True))
    with pytest.raises(ValueError, match=r"weights hold 1000 at \(0, 0\)"):                # H20
        run_sync(g.linear("m", np.full((32, 16), 1000), np.ones((2, 32), np.int64), True))
    run_sync(g.linear("p", w, np.ones((2, 32), np.int64), True))
    with pytest.raises(ValueError, match="a non-key step of 3 rows after steps of 2"):   # H23
        run_sync(g.linear("p", w, np.ones((3, 32), np.int64), False))
