"""Cases of the precision dispatcher: encoded slice streams and, from ``golden.dispatch``, every
lane's expected ops, every slice's lane mask and the op counters."""

import numpy as np

from dstar.golden.dispatch import STRATEGIES, lane_rotations
from dstar.golden.encoder import encode


def encoded(cfg, rng, n, k):
    """Random deltas of ``n`` tokens by ``k`` channels with adversarial rows (the simulator's
    stimulus), encoded."""
    d = rng.integers(-40, 40, size=(n, k)) * (rng.random((n, k)) < 0.45)
    d[0] = 0                                                    # all ZERO
    d[1] = rng.choice([-128, 127, 100, -77], size=k)            # all HIGH
    d[2, :cfg.group] = 3                                        # one busy group only
    d[3] = rng.integers(-40000, 40000, size=k)                  # large shifts
    d[4, ::cfg.group] = 200                                     # one element per group, lane 0
    return encode(d, cfg.group, cfg.e_max, cfg.tau)


def encoded_mixed(cfg, rng, n, k):
    """Deltas of a random density per token with adversarial rows (the Icarus stimulus),
    encoded."""
    d = rng.integers(-40, 40, size=(n, k)) * (rng.random((n, k)) < rng.random((n, 1)))
    d[0] = 0
    d[1] = rng.choice([-128, 127, 100, -77], size=k)
    d[2] = rng.integers(-40000, 40000, size=k)
    d[3, ::cfg.group] = 200
    return encode(d, cfg.group, cfg.e_max, cfg.tau)


def expected(geo, enc, k):
    """The golden dispatch of ``enc`` (``k`` channels): the slice ``order`` ((token, K tile),
    K tile outermost), each slice's lane rotation ``rots``, the ``ops`` as (lane, nib, shift,
    row, rot, bank, close) in slice then lane order, each slice's lane ``masks`` and the
    ``counts`` (low, high, idle) the dispatcher's counters end at."""
    cfg = geo.cfg
    n = enc.q.shape[0]
    order = [(t, kt) for kt in range(k // cfg.k_tile) for t in range(n)]
    rots = dict(zip(order, lane_rotations(enc, cfg.k_tile, geo.rotation, order), strict=True))
    want = STRATEGIES[cfg.packing].streams(enc, cfg.k_tile, geo.rotation, rots)
    ops, masks = [], []
    for t, kt in order:
        lanes = want.get((t, kt), [[]] * cfg.group)
        masks.append(sum(1 << lane for lane in range(cfg.group) if lanes[lane]))
        for lane, lane_ops in enumerate(lanes):
            for idx, (nib, sh, row) in enumerate(lane_ops):
                ops.append((lane, nib, sh, row, rots[(t, kt)], kt & 1,
                            int(idx == len(lane_ops) - 1)))
    n_low, n_high = int((enc.cls == 1).sum()), 2 * int((enc.cls == 2).sum())
    return {"order": order, "rots": rots, "ops": ops, "masks": masks,
            "counts": (n_low, n_high, len(ops) - n_low - n_high)}


def icarus_case(geo, rng, probs):
    """The ``cases.npz`` arrays of ``sim/tb_dispatcher.py``: 24 tokens over two K tiles, the
    golden ops, masks and counts, the stall probabilities ``probs`` and a seed."""
    cfg = geo.cfg
    s_n = geo.slice_groups
    k = 2 * cfg.k_tile
    enc = encoded_mixed(cfg, rng, 24, k)
    want = expected(geo, enc, k)
    order = want["order"]
    return {
        "meta": np.array([[t, kt & 1] for t, kt in order]),
        "shifts": np.array([enc.shift[t, kt * s_n:(kt + 1) * s_n] for t, kt in order]),
        "codes": np.array([enc.q[t, kt * cfg.k_tile:(kt + 1) * cfg.k_tile] for t, kt in order]),
        "ops": np.array([list(op) for op in want["ops"]], dtype=np.int64),
        "masks": np.array(want["masks"], dtype=np.int64),
        "counts": np.array(want["counts"]),
        "probs": np.array(probs), "seed": np.array(int(rng.integers(1 << 30))),
        "psum_depth": np.array(geo.psum_depth),
    }
