"""cocotb testbench of the generated precision dispatcher alone: constrained-random encoded
slices with random valid gaps, random back-pressure on the reduction's slice stream and a
randomly slow reduction returning partial-sum credits.

Inputs (set by ``tests/hw/test_dispatcher_icarus.py``): ``DSTAR_PARAMS`` (the block's ``.json``:
ports and layouts) and ``DSTAR_CASES`` (``.npz``: the slices, the expected per-lane op lists
from ``dstar.golden.dispatch``, the expected masks and op counts, and the probabilities). The test
checks that every lane receives exactly its expected ops in order, every accepted slice comes
with its reduction entry and mask, and no lane closes more partial sums than its credits.
"""

import json
import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from dstar.sim.layer_io import pack_named, unpack_named


@cocotb.test()
async def test_random_streams(dut):
    with open(os.environ["DSTAR_PARAMS"]) as f:
        man = json.load(f)
    with np.load(os.environ["DSTAR_CASES"]) as z:
        c = {k: z[k] for k in z.files}
    lay = man["layouts"]
    g_n = man["config"]["group"]
    psum_depth = int(c["psum_depth"])
    p_valid, p_ready, p_reduce = (float(x) for x in c["probs"])
    rnd = random.Random(int(c["seed"]))
    port = {name: getattr(dut, name) for name in man["ports"]}
    Clock(dut.clk, 10, unit="ns").start()
    for name, p in man["ports"].items():
        if p["dir"] == "in":
            port[name].value = 0
    dut.rst.value = 1
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    slices = []
    s_n = c["shifts"].shape[1]
    for i in range(len(c["meta"])):
        vals = {"meta.token": int(c["meta"][i][0]), "meta.bank": int(c["meta"][i][1])}
        for j in range(s_n):
            vals[f"groups[{j}].shift"] = int(c["shifts"][i][j])
            for lane in range(g_n):
                vals[f"groups[{j}].q[{lane}]"] = int(c["codes"][i][j * g_n + lane])
        slices.append(pack_named(vals, lay["encoded_slice"]))
    got = [[] for _ in range(g_n)]
    masks = []
    level = [0] * g_n
    pending = []
    i = guard = 0
    while i < len(slices) or pending or any(level):
        guard += 1
        assert guard < 60 * len(slices) + 300, "dispatcher stalled"
        await FallingEdge(dut.clk)
        offer = i < len(slices) and rnd.random() < p_valid
        port["i__valid"].value = int(offer)
        if offer:
            port["i__payload"].value = slices[i]
        port["o_token__ready"].value = int(rnd.random() < p_ready)
        pop = 0
        if pending and rnd.random() < p_reduce:
            if all(level[lane] for lane in range(g_n) if pending[0] >> lane & 1):
                pop = pending.pop(0)
        port["i_pop"].value = pop
        await ReadOnly()
        # What the next rising edge will capture.
        took = offer and int(port["i__ready"].value)
        tok = int(port["o_token__valid"].value) and int(port["o_token__ready"].value)
        assert bool(took) == bool(tok), "slice and reduction entry must transfer together"
        if took:
            mask = unpack_named(int(port["o_token__payload"].value), lay["token"])["mask"]
            masks.append(mask)
            pending.append(mask)
            i += 1
        for lane in range(g_n):
            level[lane] -= pop >> lane & 1
            if int(port[f"o_op__{lane}__valid"].value):
                op = unpack_named(int(port[f"o_op__{lane}__payload"].value), lay["lane_op"])
                got[lane].append([op["nib"], op["shift"], op["row"], op["rot"], op["bank"],
                                  op["close"]])
                level[lane] += op["close"]
                assert level[lane] <= psum_depth, f"lane {lane} overran its credits"
    await FallingEdge(dut.clk)
    for lane in range(g_n):
        want = c["ops"][c["ops"][:, 0] == lane][:, 1:].tolist()
        assert got[lane] == want, f"lane {lane}: op stream differs"
    assert masks == c["masks"].tolist()
    counts = [int(port[n].value) for n in ("count_low", "count_high", "count_zero")]
    assert counts == c["counts"].tolist()
