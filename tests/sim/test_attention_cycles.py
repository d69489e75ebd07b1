"""The attention cycle model's lane accounting (``AttentionCycles.busy``) against the MAC count of
dense attention, and ``dstar bench attention --json`` against the model it reports."""

import json

import numpy as np
import pytest

from dstar.config import load_config
from dstar.golden.attention import THETA_BITS
from dstar.sim.attention_cycles import dense_cycles, predict


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_busy_lane_cycles_of_dense_attention_are_its_mac_count(preset):
    cfg = load_config(None, preset)
    n = cfg.max_tokens
    nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
    c = predict(cfg, n, np.ones((nqb, nkb), dtype=bool), False, 1 << THETA_BITS)
    # QK^T and PV are N*N*Dh MACs each, two nibble ops per 8-bit operand, on G lanes of each of
    # m_tile * n_arrays columns.
    lane_ops = 2 * (2 * n * n * cfg.head_dim)
    assert c.busy * cfg.group * cfg.m_tile * cfg.n_arrays == lane_ops
    assert c.cycles == dense_cycles(cfg, n) and 0 < c.utilization < 1


def test_busy_counts_only_selected_tiles():
    cfg = load_config(None, "tiny")
    n = cfg.max_tokens
    nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
    full = predict(cfg, n, np.ones((nqb, nkb), dtype=bool), False, 1 << THETA_BITS)
    diag = predict(cfg, n, np.eye(nqb, nkb, dtype=bool), False, 1 << THETA_BITS)
    assert diag.busy * nkb == full.busy and diag.cycles < full.cycles


def test_bench_attention_json_matches_its_rows(capsys):
    from dstar.cli import main

    assert main(["bench", "attention", "--steps", "3", "--layers", "0", "--heads", "0", "1",
                 "--refresh", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    for key in ("theta", "refresh_attn", "key_ratio_vs_dense", "reuse_ratio_vs_dense",
                "run_ratio_vs_dense", "utilization"):
        assert key in rep
    key, reuse = rep["kinds"]["key"], rep["kinds"]["reuse"]
    assert (key["count"], reuse["count"]) == (4, 2)     # steps 0, 2 key; 1 reuse; two heads
    assert rep["key_ratio_vs_dense"] == key["mean_cycles"] / rep["dense_cycles"]
    mean = (key["mean_cycles"] * 4 + reuse["mean_cycles"] * 2) / 6
    assert rep["run_ratio_vs_dense"] == pytest.approx(mean / rep["dense_cycles"], rel=1e-12)
    assert 0 < rep["utilization"] < 1 and rep["measured_steps"] == rep["run_steps"] == 3
