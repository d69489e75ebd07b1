"""Hardware geometry: sizes derive from the config; unbuildable choices say why."""

import pytest
from dstar.hw.geometry import Geometry

from dstar.config import ConfigError, preset

pytestmark = pytest.mark.unit


def test_sizes_follow_the_config():
    cfg = preset("default")
    geo = Geometry(cfg)
    assert geo.slice_groups == cfg.k_tile // cfg.group
    assert geo.n_kt_max * cfg.k_tile >= cfg.max_k
    assert geo.n_mt_max * cfg.m_tile * cfg.n_arrays >= cfg.max_m
    assert geo.rotation == 4                                 # compact: the default R
    assert Geometry(cfg.replace(lane_rotation=16)).rotation == 16
    assert Geometry(cfg.replace(group=6, k_tile=48, max_k=96)).rotation == 2
    assert Geometry(cfg.replace(packing="lockstep")).rotation == 1
    assert Geometry(cfg.replace(packing="lockstep", lane_rotation=16)).rotation == 1
    # A lane's partial sum holds its worst case: every element -128 at e_max, weight -128.
    worst = geo.slice_groups * 128 * (1 << cfg.e_max) * 128
    assert worst < 1 << (geo.psum_bits - 1)
    assert {geo.lane_element(lane, 3) for lane in range(cfg.group)} == set(range(cfg.group))


def test_unbuildable_geometries_say_why():
    with pytest.raises(ConfigError, match="k_tile"):
        Geometry(preset("tiny").replace(k_tile=16 * 9, max_k=16 * 9))
    with pytest.raises(ConfigError, match="lane_rotation"):
        Geometry(preset("tiny").replace(lane_rotation=3))
