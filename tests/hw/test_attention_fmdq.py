"""AttentionEngine on the FMDQ arrays (``encoding = "fmdq"``: QK^T and PV as 2-bit-sliced 8-bit
units, ``FmdqTileRunner``) on Amaranth's simulator against ``dstar.golden.attention``: the same
cases as v1's engine (``tests.hw.test_attention``), outputs, residual cache and masks bit-exact,
every step's cycles and tile counts equal to ``dstar.sim.attention_cycles``."""

import numpy as np
import pytest

from dstar.config import ConfigError, preset
from dstar.hw.attention import AttentionGeometry
from dstar.sim.attention_cycles import dense_cycles
from tests.hw.cases.attention import head_calls, int_calls, random_step
from tests.hw.test_attention import check


@pytest.fixture(scope="module")
def fmdq_cfg():
    return preset("tiny").replace(encoding="fmdq", head_dim=16)


@pytest.mark.slow
def test_real_head_key_and_two_reuse_steps(real_head):
    """The first 32 tokens of a real head: key step (sparse mask), two reuse steps (slow tier:
    70 s; the default tier keeps the ragged head here, on Icarus and in the accelerator)."""
    cfg = preset("tiny").replace(encoding="fmdq")
    steps = [tuple(a[:cfg.max_tokens] for a in s) for s in real_head]
    calls, exp = head_calls(cfg, steps, 0.5, 3)
    assert [e["key"] for e in exp] == [True, False, False] and not exp[0]["mask"].all()
    check(cfg, calls, exp)


def test_random_ragged_and_extreme(fmdq_cfg):
    """N = 27 (ragged query and key blocks, a partial token tile), theta 0.5, key and reuse
    steps, then extreme logits."""
    rng = np.random.default_rng(5)
    steps = [random_step(rng, 27, fmdq_cfg.head_dim, 2.0, sink=4) for _ in range(2)]
    calls, exp = int_calls(fmdq_cfg, steps, 0.5, 2)
    assert [e["key"] for e in exp] == [True, False] and not exp[0]["mask"].all()
    check(fmdq_cfg, calls, exp)


def test_geometry_refusals():
    base = preset("tiny").replace(encoding="fmdq")
    for bad, field in [(dict(token_tile=6), "token_tile"), (dict(head_dim=64), "head_dim"),
                       (dict(block_q=12, token_tile=8), "block_q")]:
        with pytest.raises(ConfigError, match=field):
            AttentionGeometry(base.replace(**bad))
    assert AttentionGeometry(base).fmdq and AttentionGeometry(base, shared=True).fmdq


def test_dense_cycles_match_v1():
    """QK^T and PV take the same issue cycles on both arrays at equal peak (the load and the
    write-out differ): the FMDQ engine's dense step is within a few percent of v1's."""
    cfg = preset("tiny")
    v1, v2 = dense_cycles(cfg, 32), dense_cycles(cfg.replace(encoding="fmdq"), 32)
    assert abs(v2 - v1) / v1 < 0.1, (v1, v2)
