"""Fixtures shared by the hardware tests."""

import pytest

from dstar.sim.bench_attention import attention_inputs


@pytest.fixture(scope="module")
def real_head():
    """Layer 0, head 3 of the bundled DiT, steps 0..2 of a 20-step run: float (q, k, v) (a head
    whose first 32 tokens give a sparse mask at theta 0.5, row maxima included)."""
    q, k, v = attention_inputs(0, 20, 3)
    return [(q[s, 3], k[s, 3], v[s, 3]) for s in range(3)]
