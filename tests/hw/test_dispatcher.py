"""Both dispatcher strategies against golden.dispatch, under random gaps, back-pressure and
slow partial-sum reduction: every op arrives once, on its lane, in order, with its weight row."""

import numpy as np
import pytest

from dstar.config import Packing, preset
from dstar.golden.dispatch import STRATEGIES, lane_rotations
from dstar.golden.encoder import encode
from dstar.hw.dispatcher import make_dispatcher
from dstar.hw.geometry import Geometry
from dstar.sim.pysim_driver import simulate


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


def encoded(cfg, rng, n, k):
    d = rng.integers(-40, 40, size=(n, k)) * (rng.random((n, k)) < 0.45)
    d[0] = 0                                                    # all ZERO
    d[1] = rng.choice([-128, 127, 100, -77], size=k)            # all HIGH
    d[2, :cfg.group] = 3                                        # one busy group only
    d[3] = rng.integers(-40000, 40000, size=k)                  # large shifts
    d[4, ::cfg.group] = 200                                     # one element per group, lane 0
    return encode(d, cfg.group, cfg.e_max, cfg.tau)


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
    order = [(t, kt) for kt in range(k // cfg.k_tile) for t in range(n)]
    rots = dict(zip(order, lane_rotations(enc, cfg.k_tile, geo.rotation, order), strict=True))
    want = STRATEGIES[packing].streams(enc, cfg.k_tile, geo.rotation, rots)
    assert [(t, kt) for t, kt, _ in tokens] == order
    for lane in range(cfg.group):
        exp = []
        for t, kt in order:
            lane_ops = want.get((t, kt), [[]] * cfg.group)[lane]
            for idx, (nib, sh, row) in enumerate(lane_ops):
                exp.append((nib, sh, row, rots[(t, kt)], kt & 1,
                            int(idx == len(lane_ops) - 1)))
        assert ops[lane] == exp, f"lane {lane}"
    for t, kt, mask in tokens:
        lanes = want.get((t, kt), [[]] * cfg.group)
        assert mask == sum(1 << lane for lane in range(cfg.group) if lanes[lane])
    all_ops = [op for lanes in want.values() for lane in lanes for op in lane]
    assert counts[0] + counts[1] + counts[2] == len(all_ops)
    n_high = 2 * int((enc.cls == 2).sum())
    n_low = int((enc.cls == 1).sum())
    assert (counts[0], counts[1]) == (n_low, n_high)
    assert counts[2] == len(all_ops) - n_low - n_high           # idle ops (lockstep only)
