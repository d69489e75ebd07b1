"""``dstar.sim.block_run.summarize``: the figures of ``dstar run`` from its operation records
(per operation and per attention step kind), and the verdicts that can fail (an operation off
the golden model, counters off the cycle models, a block output off the golden pipeline's)."""

import copy

from dstar.sim.block_run import summarize


def records():
    lin = {"step": 0, "op": "qkv", "key": True, "rows": 4, "bit_exact": True,
           "counters": {"linear_cycles": 100, "linear_low": 8},
           "predicted": {"linear_cycles": 100, "linear_low": 8},
           "elements": {"zero": 2, "low": 5, "high": 1}}
    att = {"step": 1, "op": "attention", "key": False, "kind": "reuse", "heads": 2,
           "bit_exact": True,
           "counters": {"attention_cycles": 50, "attention_qk_tiles": 3,
                        "attention_pv_tiles": 3},
           "predicted": {"attention_cycles": 50, "attention_qk_tiles": 3,
                         "attention_pv_tiles": 3}, "tiles": 8}
    return [lin, att]


def test_the_figures():
    rep = summarize(records(), [True, True])
    assert rep["steps"] == 2 and rep["cycles"] == rep["predicted_cycles"] == 150
    assert rep["per_op"]["qkv"] == {"cycles": 100, "predicted_cycles": 100, "runs": 1,
                                    "bit_exact": True, "counters_equal": True}
    assert rep["bit_exact"] and rep["counters_equal"]
    assert rep["elements"] == {"zero": 0.25, "low": 0.625, "high": 0.125}
    assert rep["attention_blocks_computed"] == 3 / 8
    assert rep["attention_steps"] == {"reuse": {"runs": 1, "cycles": 50,
                                                "predicted_cycles": 50,
                                                "blocks_computed": 3 / 8}}


def test_the_figures_per_sar_step_kind():
    """SAR: cache and reuse steps apart (a reuse step runs PV on the kept blocks, no QK^T)."""
    lin, reuse = records()
    cache = {**reuse, "step": 0, "key": True, "kind": "cache",
             "counters": {"attention_cycles": 90, "attention_qk_tiles": 3,
                          "attention_pv_tiles": 3},
             "predicted": {"attention_cycles": 90, "attention_qk_tiles": 3,
                           "attention_pv_tiles": 3}}
    reuse = {**reuse, "counters": {**reuse["counters"], "attention_qk_tiles": 0},
             "predicted": {**reuse["predicted"], "attention_qk_tiles": 0}}
    rep = summarize([lin, cache, lin, reuse, lin, cache], [True] * 3)
    assert rep["attention_steps"] == {
        "cache": {"runs": 2, "cycles": 180, "predicted_cycles": 180, "blocks_computed": 3 / 8},
        "reuse": {"runs": 1, "cycles": 50, "predicted_cycles": 50, "blocks_computed": 3 / 8}}
    assert rep["per_op"]["attention"]["cycles"] == 230 and rep["counters_equal"]


def test_each_verdict_can_fail():
    recs = records()
    recs[0]["bit_exact"] = False
    assert not summarize(recs, [True, True])["bit_exact"]
    recs = records()
    recs[1]["counters"]["attention_cycles"] += 1
    rep = summarize(recs, [True, True])
    assert rep["bit_exact"] and not rep["counters_equal"]
    assert rep["cycles"] == rep["predicted_cycles"] + 1
    assert not summarize(copy.deepcopy(records()), [True, False])["bit_exact"]
