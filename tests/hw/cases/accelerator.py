"""Cases of the accelerator top: scripts of linear and attention steps on one design, with the
golden model's results and the cycle models' counters, as ``dstar.sim.tb_accelerator`` reads
them."""

import numpy as np

from dstar.hw.geometry import AttentionGeometry
from dstar.sim.attention_cycles import predict as predict_attention
from tests.hw.cases.attention import int_calls, random_step
from tests.hw.cases.linear import expected_steps
from tests.hw.fixtures import drifting_targets, random_weights


def _linear(i, target, key, m, exp, w_base, w=None, state=None, y=None):
    xs, y_out, rep = exp
    out = {"kind": 0, "target": target, "key": int(key), "m": m, "y_out": y_out, "xs_out": xs,
           "w_base": w_base, "counters": np.array(list(rep.counters().values()), np.int64)}
    for name, v in (("w", w), ("state", state), ("y", y)):
        if v is not None:
            out[name] = v
    return {f"s{i}_{k}": np.asarray(v) for k, v in out.items()}


def _attention(i, cfg, call, e):
    n = np.asarray(call["q"]).shape[0]
    want = predict_attention(cfg, n, e["mask"], e["key"], call["theta_q"], e["picks"])
    out = {"kind": 1, **{k: call[k] for k in ("q", "k", "v", "m", "sh", "slot", "theta_q",
                                                "refresh")},
           "o": e["o"], "r": e["r"], "mask": e["mask"], "key": int(e["key"]),
           "counters": np.array(list(want.counters().values()), np.int64)}
    return {f"s{i}_{k}": np.asarray(v) for k, v in out.items()}


def interleaved(cfg, rng, n=8, k=64, ms=(16, 8), n_att=32):
    """Two layers' key steps, an attention key step and a reuse step of one head (which
    overwrite the arrays' accumulators), then each layer's delta step from its saved state and
    Y, on the weights its key step loaded (the first layer's at address 0, the others' at the
    end of the weight memory): one case of six steps."""
    ws = [random_weights(rng, k, m) for m in ms]
    tgs = [drifting_targets(rng, cfg, n, k, 2) for _ in ms]
    exps = [expected_steps(cfg, w, [(t[0], True), (t[1], False)])
            for w, t in zip(ws, tgs, strict=True)]
    calls, att = int_calls(cfg, [random_step(rng, n_att, cfg.head_dim, sink=4)
                                 for _ in range(2)], theta=0.5, refresh=2)
    lin = AttentionGeometry(cfg, shared=True).lin
    ends = np.cumsum([lin.n_kt(k) * lin.n_mt(m) * cfg.k_tile for m in ms[1:]])
    bases = [0, *(int(lin.weight_depth - e) for e in ends)]
    case, i = {}, 0
    for w, t, m, e, base in zip(ws, tgs, ms, exps, bases, strict=True):
        case.update(_linear(i, t[0], True, m, e[0], base, w=w))
        i += 1
    for c, e in zip(calls, att, strict=True):
        case.update(_attention(i, cfg, c, e))
        i += 1
    for t, m, e, base in zip(tgs, ms, exps, bases, strict=True):
        xs0, y0, _ = e[0]
        case.update(_linear(i, t[1], False, m, e[1], base, state=xs0, y=y0))
        i += 1
    return case
