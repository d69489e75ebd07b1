"""Cases of the attention-reuse engine: heads (real and random integer steps, edge heads), the
engine's calls, and their golden steps (key, O, residual cache, mask) from
``dstar.golden.attention``; the ``.npz`` arrays of ``sim/tb_attention.py``."""

import math

import numpy as np

from dstar.config import Attention
from dstar.golden.attention import theta_fixed
from dstar.golden.host import GoldenEngine, HeadSteps, run_sync
from dstar.golden.softmax import logit_multiplier, softmax_groups
from dstar.sim.attention_cycles import predict


def head_calls(cfg, steps, theta, refresh, slot=0):
    """Golden steps of one slot for float ``(q, k, v)`` per step, and the engine's calls."""
    hs = HeadSteps(cfg.replace(theta=theta, refresh_attn=refresh))
    exp = [hs.step(*s) for s in steps]
    calls = [{**{k: e[k] for k in ("q", "k", "v", "m", "sh")}, "slot": slot,
              "theta_q": theta_fixed(theta), "refresh": refresh} for e in exp]
    return calls, exp


def int_calls(cfg, steps, theta, refresh, slot=0):
    """Like ``head_calls`` for integer steps ``(q, k, v, m, sh)`` (V given on its lattice): the
    golden slot of ``golden.host.GoldenEngine``."""
    eng = GoldenEngine(cfg.replace(theta=theta, refresh_attn=refresh,
                                   attention=Attention.RESIDUAL))
    exp = []
    for q, k, v, m, sh in steps:
        o, key = run_sync(eng.attention(0, q, k, v, m, sh))
        st = eng.slots[0]
        exp.append({"key": key, "o": o, "r": st["r"], "mask": st["mask"],
                    "picks": st["picks"] if key else None})
    calls = [{"q": q, "k": k, "v": v, "m": m, "sh": sh, "slot": slot,
              "theta_q": theta_fixed(theta), "refresh": refresh}
             for q, k, v, m, sh in steps]
    return calls, exp


def random_step(rng, n, dh, logit_std=1.0, sink=0):
    """A random INT8 step ``(q, k, v, m, sh)`` of ``n`` tokens with logits of about
    ``logit_std``; with ``sink``, the first ``sink`` keys share a direction most queries lean
    to (as attention sinks do), so that most rows have their maximum there and a mask can be
    sparse."""
    q = rng.integers(-127, 128, size=(n, dh))
    k = rng.integers(-127, 128, size=(n, dh))
    if sink:
        u = rng.choice([-127, 127], size=dh)
        k[:sink] = np.clip(u + rng.integers(-20, 21, size=(sink, dh)), -127, 127)
        q = np.clip(np.rint(0.6 * u + 0.4 * q), -127, 127).astype(np.int64)
    v = rng.integers(-127, 128, size=(n, dh))
    # A natural-log scale giving logits of about logit_std (INT8 dot products ~ 127**2 Dh / 3).
    scale = np.full(n, logit_std / (127 ** 2 * math.sqrt(dh / 3)))
    m, sh = logit_multiplier(scale * rng.uniform(0.5, 2.0, n))
    return q, k, v, m, sh


def group_shifts(cfg, q, k, m, sh):
    """The golden group shifts of a dense softmax of ``q k^T`` (the format the P memory holds)."""
    s_int = np.asarray(q, dtype=np.int64) @ np.asarray(k, dtype=np.int64).T
    return softmax_groups(s_int, m, sh, frac_bits=cfg.attn_frac_bits, group=cfg.group,
                          e_max=cfg.e_max)[1]


def theta1_step(rng, dh):
    """20 tokens where key 0 dominates every row: at theta = 1 the other key block has zero
    mass, yet is computed."""
    q = np.full((20, dh), 127)
    k = rng.integers(-3, 4, size=(20, dh))
    k[0] = 127
    v = rng.integers(-127, 128, size=(20, dh))
    m, sh = logit_multiplier(np.full(20, 1e-3))
    return q, k, v, m, sh


def all_equal_step(rng, dh):
    """All-equal logits (K = 0) over 32 tokens: two equal-mass key blocks."""
    z = np.zeros((32, dh), dtype=np.int64)
    mz, shz = logit_multiplier(np.full(32, 0.01))
    return (rng.integers(-127, 128, size=(32, dh)), z, rng.integers(-127, 128, size=(32, dh)),
            mz, shz)


def extreme_step(rng, dh):
    """Extreme logits over 20 tokens: +-127 everywhere (|S| = Dh * 127**2), V = +-127."""
    sgn = rng.choice([-127, 127], size=(3, 20, dh))
    me, she = logit_multiplier(np.full(20, 127.0 ** -2 / math.sqrt(dh) * 30))
    return sgn[0], sgn[1], sgn[2], me, she


def icarus_case(cfg, calls, exp):
    """The arrays of one case of ``sim/tb_attention.py``: the calls of one slot, their golden
    steps and the cycle model's counters."""
    n = calls[0]["q"].shape[0]
    tq = calls[0]["theta_q"]
    return {
        "n": np.array(n), "slot": np.array(calls[0]["slot"]), "theta_q": np.array(tq),
        "refresh": np.array(calls[0]["refresh"]),
        **{k: np.stack([np.asarray(c[k], dtype=np.int64) for c in calls])
           for k in ("q", "k", "v", "m", "sh")},
        "keys": np.array([e["key"] for e in exp], dtype=np.int64),
        "o": np.stack([e["o"] for e in exp]), "r": np.stack([e["r"] for e in exp]),
        "mask": np.stack([e["mask"] for e in exp]),
        "counters": np.array([list(predict(cfg, n, e["mask"], e["key"], tq, e["picks"])
                                   .counters().values()) for e in exp], dtype=np.int64),
    }


def edge_cases(cfg):
    """The edge cases of the Icarus tier at the preset's Dh (those of
    ``tests/hw/test_attention.py::test_edge_cases`` with other draws): theta = 1, a one-block
    sequence (key and reuse step), all-equal and extreme logits."""
    dh, rng, cases = cfg.head_dim, np.random.default_rng(19), {}
    calls, exp = int_calls(cfg, [theta1_step(rng, dh)] * 2, 1.0, 0, slot=2)
    assert exp[0]["mask"].all()
    cases["theta1"] = icarus_case(cfg, calls, exp)
    # One-block sequence (N <= Bq, Bk): key and reuse step.
    calls, exp = int_calls(cfg, [random_step(rng, 9, dh) for _ in range(2)], 0.9, 0, slot=3)
    cases["one_block9"] = icarus_case(cfg, calls, exp)
    # theta 0.5 takes key block 0 only of the two equal-mass ones.
    calls, exp = int_calls(cfg, [all_equal_step(rng, dh)], 0.5, 0)
    assert exp[0]["mask"].tolist() == [[True, False], [True, False]]
    cases["all_equal"] = icarus_case(cfg, calls, exp)
    calls, exp = int_calls(cfg, [extreme_step(rng, dh)], 0.8, 0, slot=1)
    cases["extreme"] = icarus_case(cfg, calls, exp)
    return cases
