"""Hardware geometry: sizes derive from the config; unbuildable choices say why; the module
imports no Amaranth (the cycle models use it)."""

import subprocess
import sys

import pytest

from dstar.config import ConfigError, preset
from dstar.hw.geometry import AttentionGeometry, DenseGeometry, Geometry, SoftmaxGeometry


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


def test_geometry_imports_no_amaranth():
    code = ("import sys; import dstar.hw.geometry, dstar.sim.attention_cycles, "
            "dstar.sim.softmax_cycles, dstar.sim.dense_cycles, dstar.sim.cycle_model; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'amaranth'))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.strip()
    assert out == "[]"


def test_attention_widths_follow_the_output_format():
    ag = AttentionGeometry(preset("default"))
    assert (ag.out_bits, ag.res_bits) == (18, 17)           # golden/ATTENTION.md at 8 bits
    assert ag.mass_bits == 16 + 4 and ag.total_bits == ag.mass_bits + 4
    assert ag.softmax.out_bits == 17 and ag.softmax.max_row == ag.n_max
    narrow = AttentionGeometry(preset("default").replace(attn_out_frac_bits=4))
    assert narrow.out_bits == 14 and narrow.res_bits == 13
    # |R| <= 255 * 2**f + 2 and |O_sel + R| <= 383 * 2**f + 3 fit (two's complement).
    for f in range(9):
        g = AttentionGeometry(preset("default").replace(attn_out_frac_bits=f))
        assert (255 << f) + 2 < 1 << (g.res_bits - 1)
        assert (383 << f) + 3 < 1 << (g.out_bits - 1)


def test_softmax_and_dense_geometry():
    cfg = preset("tiny")
    assert SoftmaxGeometry(cfg.replace(softmax_lanes=0)).lanes == 4     # auto: 4 keys per cycle
    sg = SoftmaxGeometry(cfg.replace(softmax_lanes=1))
    assert sg.max_row == cfg.max_tokens and sg.DIV_CYCLES == 17 and sg.EXP_STAGES == 7
    assert (sg.lanes, sg.row_words, sg.div_bits, sg.div_steps, sg.overlap) == (1, 32, 1, 17, False)
    wide = [SoftmaxGeometry(cfg.replace(softmax_lanes=p), max_row=20) for p in (4, 8, 16)]
    assert [(g.row_words, g.div_bits, g.div_steps) for g in wide] == [(5, 3, 6), (3, 3, 6),
                                                                      (2, 3, 6)]
    assert AttentionGeometry(cfg.replace(softmax_lanes=8)).softmax.lanes == 8   # 8 columns
    with pytest.raises(ConfigError, match=r"^softmax_lanes=16 must divide m_tile \* n_arrays=8 "):
        AttentionGeometry(cfg.replace(softmax_lanes=16))
    with pytest.raises(ConfigError, match="max_row"):
        SoftmaxGeometry(cfg, max_row=0)
    dg = DenseGeometry(cfg.replace(datapath="dense"))
    assert dg.chunks == 2 * Geometry(cfg).slice_groups
    assert dg.n_passes(cfg.k_tile + 1, 1) == 2
    with pytest.raises(ConfigError, match="dense"):
        DenseGeometry(cfg)
