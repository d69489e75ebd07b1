"""Cases of the softmax unit and the normalizer: logit rows with their multipliers (random,
real, equal, extreme, exponent sweeps, group exponents, length clamping) and normalizer inputs;
the ``.npz`` arrays of ``sim/tb_softmax.py``, which computes the golden values from them (as the
simulator tier's ``dstar.sim.tb_softmax.check`` does)."""

import numpy as np

from dstar.golden.softmax import logit_multiplier
from dstar.sim.tb_softmax import octave_rows, real_rows


def random_rows(rng, lengths, logit_std, cfg, dh=32):
    """Logits of INT8 Q.K products (``dh`` terms) and the host's multiplier for a natural-log
    logit std of about ``logit_std`` (the simulator tier's draws)."""
    rows, scales = [], []
    for n in lengths:
        q = rng.integers(-127, 128, size=dh)
        k = rng.integers(-127, 128, size=(n, dh))
        s = k @ q
        rows.append(s.tolist())
        scales.append(logit_std / max(1.0, float(np.std(s)) if n > 1 else 3000.0))
    m, sh = logit_multiplier(np.array(scales), cfg.attn_frac_bits)
    return rows, m.tolist(), sh.tolist()


def icarus_random_rows(rng, lengths, std, frac_bits, dh=32):
    """Like ``random_rows`` with the Icarus tier's draws (K before Q, another one-key scale)."""
    rows, scales = [], []
    for n in lengths:
        s = rng.integers(-127, 128, size=(n, dh)) @ rng.integers(-127, 128, size=dh)
        rows.append(s)
        scales.append(std / max(1.0, float(np.std(s))) if n > 1 else 1e-4)
    m, sh = logit_multiplier(np.array(scales), frac_bits)
    return rows, m, sh


def normalizer_inputs(cfg, rng, n, acc_edge):
    """``n`` accumulators and row sums of the normalizer: random, the first six at the
    extremes (sums ``255``, ``255 << e_max``, the maximum twice, 256, 511; accumulators
    ``acc_edge``)."""
    lmax = (255 << cfg.e_max) * cfg.max_tokens
    lsum = rng.integers(255, lmax + 1, size=n)
    lsum[:6] = [255, 255 << cfg.e_max, lmax, lmax, 256, 511]
    acc = rng.integers(-128 * lsum, 128 * lsum + 1)
    acc[:6] = acc_edge
    return acc, lsum


def icarus_case(rows, m, sh, stall=(1.0, 1.0), seed=0, n_hdr=None):
    """The arrays of one row case of ``sim/tb_softmax.py``."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    return {"lengths": lengths, "logits": np.concatenate([np.asarray(r, np.int64) for r in rows]),
            "m": np.asarray(m, np.int64), "sh": np.asarray(sh, np.int64),
            "n_hdr": lengths if n_hdr is None else np.asarray(n_hdr, np.int64),
            "stall": np.array(stall, dtype=np.float64), "seed": np.array(seed)}


def tiny_cases(cfg):
    """The Icarus tier's row cases of a small configuration (rows up to ``max_tokens``)."""
    rng = np.random.default_rng(7)
    f, n = cfg.attn_frac_bits, cfg.max_tokens
    lengths = [1, n, 7, 16, 2, n - 1, 17, 5, n, 1, 1, 12, 3]
    rows, m, sh = icarus_random_rows(rng, lengths, 1.5, f)
    w = 23
    hi, lo = (1 << (w - 1)) - 1, -(1 << (w - 1))
    edge = [[5] * n, [hi] + [lo] * (n - 1), [lo] * (n - 1) + [hi], [hi, lo] * (n // 2), [hi],
            [lo], [0], [hi - 1, hi, hi, hi - 3]]
    edge_m = [40000, 65535, 65535, 1, 65535, 0, 32768, 65535]
    edge_sh = [20, 0, 0, 47, 47, 0, 0, 0]
    xs = list(range(1, ((cfg.e_max + 9) << f) + 8))
    sweep = [[0] + [-x for x in xs[i:i + n - 1]] for i in range(0, len(xs), n - 1)]
    return {
        "random": icarus_case(rows, m, sh),
        "random_stall": icarus_case(rows, m, sh, stall=(0.6, 0.5), seed=1),
        "random_ready": icarus_case(rows, m, sh, stall=(1.0, 0.2), seed=2),
        "edge": icarus_case(edge, edge_m, edge_sh),
        "edge_stall": icarus_case(edge, edge_m, edge_sh, stall=(0.5, 0.7), seed=3),
        "exp_sweep": icarus_case(sweep, [1] * len(sweep), [0] * len(sweep)),
        "groups": icarus_case(*octave_rows(cfg, [n, n, n // 2 + 1, n - 1, 1, n, 3], seed=2)),
        "groups_stall": icarus_case(*octave_rows(cfg, [n, 5, n - 3], seed=3), stall=(0.6, 0.6),
                                    seed=5),
        "clamp": icarus_case([[7], list(range(n)), [3, 4]], [30000] * 3, [12] * 3,
                             n_hdr=[0, 2 * n - 1, 2]),
    }


def default_cases(cfg):
    """The Icarus tier's row cases of the default configuration: real rows, maximum length."""
    f = cfg.attn_frac_bits
    rows, m, sh = real_rows(layer=2, head=1, rows=range(0, 256, 37), frac_bits=f)
    rng = np.random.default_rng(8)
    rrows, rm, rsh = icarus_random_rows(rng, [256, 1, 256, 16], 3.0, f, dh=128)
    return {
        "real": icarus_case(rows, m, sh),
        "real_stall": icarus_case(rows[:3], m[:3], sh[:3], stall=(0.7, 0.6), seed=4),
        "max_length": icarus_case(rrows, rm, rsh),
    }


def normalizer_cases(cfg):
    """The Icarus tier's normalizer cases: 200 beats without stalls, 80 with."""
    rng = np.random.default_rng(9)
    lmax = (255 << cfg.e_max) * cfg.max_tokens
    acc, lsum = normalizer_inputs(cfg, rng, 200, [128 * 255, -128 * 255, 128 * lmax,
                                                  -128 * lmax, 0, -1])
    return {"full": {"acc": acc, "lsum": lsum, "stall": np.array([1.0, 1.0]),
                     "seed": np.array(0)},
            "stall": {"acc": acc[:80], "lsum": lsum[:80], "stall": np.array([0.6, 0.5]),
                      "seed": np.array(1)}}
