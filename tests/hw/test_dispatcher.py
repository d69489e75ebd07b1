"""Both dispatcher strategies against golden.dispatch, under random gaps, back-pressure and
slow partial-sum reduction: every op arrives once, on its lane, in order, with its weight row."""

import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.hw.dispatcher import make_dispatcher
from dstar.hw.geometry import Geometry
from dstar.sim.pysim_driver import simulate
from tests.hw.cases.dispatcher import encoded, expected


def run_dispatcher(geo, enc, rng, p_valid, p_tok_ready, p_reduce):
    cfg = geo.cfg
    dut = make_dispatcher(geo)
    g_n, s_n = cfg.group, geo.slice_groups
    n, k = enc.q.shape
    slices = [(t, kt) for kt in range(k // cfg.k_tile) for t in range(n)]
    ops = [[] for _ in range(g_n)]          # per lane: (nib, shift, row, rot, close)
    tokens = []                             # accepted (token, kt, mask)
    result = {}

    async def bench(ctx):
        level = [0] * g_n
        pending = []                        # masks awaiting reduction
        i = guard = 0
        while i < len(slices) or pending or any(level):
            guard += 1
            assert guard < 50 * len(slices) + 200, "dispatcher stalled"
            offer = i < len(slices) and rng.random() < p_valid
            if offer:
                t, kt = slices[i]
                grps = [{"shift": int(enc.shift[t, kt * s_n + j]),
                         "q": [int(x) for x in enc.q[t, (kt * s_n + j) * g_n:
                                                    (kt * s_n + j + 1) * g_n]]}
                        for j in range(s_n)]
                ctx.set(dut.i.payload, {"meta": {"token": t, "bank": kt & 1}, "groups": grps})
            ctx.set(dut.i.valid, int(offer))
            ctx.set(dut.o_token.ready, int(rng.random() < p_tok_ready))
            pop = 0
            if pending and rng.random() < p_reduce:
                mask = pending[0]
                if all(level[lane] for lane in range(g_n) if mask >> lane & 1):
                    pop = mask
                    pending.pop(0)
            ctx.set(dut.i_pop, pop)
            sampled = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o_token.valid, dut.o_token.ready,
                dut.o_token.payload, *[dut.o_op[lane].valid for lane in range(g_n)],
                *[dut.o_op[lane].payload for lane in range(g_n)])
            iv, ir, tv, tr, tp = sampled[2:7]
            valids, payloads = sampled[7:7 + g_n], sampled[7 + g_n:]
            if iv and ir:
                assert tv and tr, "a slice entered without its reduction entry"
                tokens.append((*slices[i], int(tp.mask)))
                pending.append(int(tp.mask))
                i += 1
            else:
                assert not (tv and tr), "a reduction entry without its slice"
            for lane in range(g_n):
                level[lane] -= pop >> lane & 1
                if valids[lane]:
                    p = payloads[lane]
                    ops[lane].append((int(p.nib), int(p.shift), int(p.row), int(p.rot),
                                      int(p.bank), int(p.close)))
                    level[lane] += int(p.close)
                    assert level[lane] <= geo.psum_depth, "partial-sum credit overrun"
        result["counts"] = (ctx.get(dut.count_low), ctx.get(dut.count_high),
                            ctx.get(dut.count_zero))

    simulate(dut, bench)
    return ops, tokens, result["counts"]


@pytest.mark.parametrize("packing", list(Packing))
@pytest.mark.parametrize("p_valid,p_tok_ready,p_reduce",
                         [(1.0, 1.0, 1.0), (0.7, 0.6, 0.3), (0.9, 0.9, 0.1)])
def test_dispatcher_ops(packing, p_valid, p_tok_ready, p_reduce):
    cfg = preset("tiny").replace(packing=packing)
    geo = Geometry(cfg)
    rng = np.random.default_rng(int(p_reduce * 10) + len(packing))
    n, k = 12, 2 * cfg.k_tile
    enc = encoded(cfg, rng, n, k)
    ops, tokens, counts = run_dispatcher(geo, enc, rng, p_valid, p_tok_ready, p_reduce)
    want = expected(geo, enc, k)
    order = want["order"]
    assert [(t, kt) for t, kt, _ in tokens] == order
    for lane in range(cfg.group):
        exp = [op[1:] for op in want["ops"] if op[0] == lane]
        assert ops[lane] == exp, f"lane {lane}"
    for (_, _, mask), want_mask in zip(tokens, want["masks"], strict=True):
        assert mask == want_mask
    n_low, n_high, n_idle = want["counts"]
    assert counts[0] + counts[1] + counts[2] == len(want["ops"])
    assert (counts[0], counts[1]) == (n_low, n_high)
    assert counts[2] == n_idle                                  # idle ops (lockstep only)
