"""cocotb on Icarus: the generated dispatcher of each strategy under constrained-random slice
streams, random valid gaps, random back-pressure and a randomly slow reduction."""

import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.hw import layouts
from dstar.hw.dispatcher import make_dispatcher
from dstar.hw.generate import generate_block
from dstar.hw.geometry import Geometry
from dstar.paths import build_dir
from tests.hw.cases.dispatcher import icarus_case
from tests.hw.fixtures import need_iverilog, run_icarus

BUILD = build_dir("cocotb")


@pytest.mark.parametrize("packing", list(Packing))
def test_dispatcher_random_streams(packing):
    need_iverilog()
    cfg = preset("tiny").replace(packing=packing)
    geo = Geometry(cfg)
    out = BUILD / f"dispatcher-tiny-{packing}"
    lays = {"encoded_slice": layouts.encoded_slice_layout(geo),
            "lane_op": layouts.lane_op_layout(geo), "token": layouts.token_layout(geo)}
    generate_block(make_dispatcher(geo), "dstar_dispatcher", cfg, lays, out)
    np.savez(out / "cases.npz", **icarus_case(geo, np.random.default_rng(5), (0.7, 0.7, 0.25)))
    run_icarus(out, "dstar_dispatcher", "dstar.sim.tb_dispatcher",
               {"DSTAR_PARAMS": out / "dstar_dispatcher.json", "DSTAR_CASES": out / "cases.npz"})
