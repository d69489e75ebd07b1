"""cocotb on Icarus: the generated dispatcher of each strategy under constrained-random slice
streams, random valid gaps, random back-pressure and a randomly slow reduction."""


import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.golden.dispatch import STRATEGIES, lane_rotations
from dstar.golden.encoder import encode
from dstar.hw import layouts
from dstar.hw.dispatcher import make_dispatcher
from dstar.hw.generate import generate_block
from dstar.hw.geometry import Geometry
from dstar.paths import build_dir
from tests.hw.fixtures import need_iverilog, run_icarus

BUILD = build_dir("cocotb")


def case(geo, rng, probs):
    cfg = geo.cfg
    g_n, s_n = cfg.group, geo.slice_groups
    n, k = 24, 2 * cfg.k_tile
    d = rng.integers(-40, 40, size=(n, k)) * (rng.random((n, k)) < rng.random((n, 1)))
    d[0] = 0
    d[1] = rng.choice([-128, 127, 100, -77], size=k)
    d[2] = rng.integers(-40000, 40000, size=k)
    d[3, ::g_n] = 200
    enc = encode(d, g_n, cfg.e_max, cfg.tau)
    order = [(t, kt) for kt in range(k // cfg.k_tile) for t in range(n)]
    rots = dict(zip(order, lane_rotations(enc, cfg.k_tile, geo.rotation, order), strict=True))
    want = STRATEGIES[cfg.packing].streams(enc, cfg.k_tile, geo.rotation, rots)
    ops, masks = [], []
    for t, kt in order:
        lanes = want.get((t, kt), [[]] * g_n)
        masks.append(sum(1 << lane for lane in range(g_n) if lanes[lane]))
        for lane, lane_ops in enumerate(lanes):
            for idx, (nib, sh, row) in enumerate(lane_ops):
                ops.append([lane, nib, sh, row, rots[(t, kt)], kt & 1,
                            int(idx == len(lane_ops) - 1)])
    n_low, n_high = int((enc.cls == 1).sum()), 2 * int((enc.cls == 2).sum())
    return {
        "meta": np.array([[t, kt & 1] for t, kt in order]),
        "shifts": np.array([enc.shift[t, kt * s_n:(kt + 1) * s_n] for t, kt in order]),
        "codes": np.array([enc.q[t, kt * cfg.k_tile:(kt + 1) * cfg.k_tile] for t, kt in order]),
        "ops": np.array(ops, dtype=np.int64), "masks": np.array(masks, dtype=np.int64),
        "counts": np.array([n_low, n_high, len(ops) - n_low - n_high]),
        "probs": np.array(probs), "seed": np.array(int(rng.integers(1 << 30))),
        "psum_depth": np.array(geo.psum_depth),
    }


@pytest.mark.parametrize("packing", list(Packing))
def test_dispatcher_random_streams(packing):
    need_iverilog()
    cfg = preset("tiny").replace(packing=packing)
    geo = Geometry(cfg)
    out = BUILD / f"dispatcher-tiny-{packing}"
    lays = {"encoded_slice": layouts.encoded_slice_layout(geo),
            "lane_op": layouts.lane_op_layout(geo), "token": layouts.token_layout(geo)}
    generate_block(make_dispatcher(geo), "dstar_dispatcher", cfg, lays, out)
    np.savez(out / "cases.npz", **case(geo, np.random.default_rng(5), (0.7, 0.7, 0.25)))
    run_icarus(out, "dstar_dispatcher", "dstar.sim.tb_dispatcher",
               {"DSTAR_PARAMS": out / "dstar_dispatcher.json", "DSTAR_CASES": out / "cases.npz"})
