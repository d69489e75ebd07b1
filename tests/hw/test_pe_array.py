"""PEArray: nibble lanes, per-lane partial sums and the in-order read-modify-write reduction,
driven with golden.dispatch op streams (lanes running freely within their credits)."""

import numpy as np

from dstar.config import preset
from dstar.golden.dispatch import lane_streams
from dstar.golden.encoder import encode
from dstar.hw.geometry import Geometry
from dstar.hw.pe_array import PEArray
from dstar.sim.pysim_driver import simulate


def test_pe_array_reduction():
    cfg = preset("tiny")
    geo = Geometry(cfg)
    g_n, k_tile, m_n = cfg.group, cfg.k_tile, cfg.m_tile
    rng = np.random.default_rng(7)
    n = 14
    d = rng.integers(-300, 300, size=(n, k_tile)) * (rng.random((n, k_tile)) < 0.5)
    d[3] = 0                                                   # a slice with no ops
    d[5] = rng.integers(-40000, 40000, size=k_tile)            # large shifts
    enc = encode(d, g_n, cfg.e_max, cfg.tau)
    streams = lane_streams(enc, k_tile, geo.rotation)
    w = rng.integers(-127, 128, size=(2, k_tile, m_n))
    w[1, 0] = -128                                             # extreme weight row
    y_addr = [t % 3 if t < 10 else 2 for t in range(n)]        # repeats, back to back at end
    over = [int(t in (0, 1, 2, 7)) for t in range(n)]
    bank = [t % 2 for t in range(n)]

    # Expected accumulators (every row's first slice overwrites; token 7 overwrites again).
    y = np.zeros((3, m_n), dtype=np.int64)
    for t in range(n):
        s = np.zeros(m_n, dtype=np.int64)
        for lane, ops in enumerate(streams.get((t, 0), [[]] * g_n)):
            i = geo.lane_element(lane, t % geo.rotation)
            for nib, sh, row in ops:
                s += (nib * w[bank[t], row * g_n + i]) << sh
        y[y_addr[t]] = s if over[t] else y[y_addr[t]] + s

    dut = PEArray(geo)
    got = {}

    async def bench(ctx):
        # Load both weight buffers.
        for b in range(2):
            for k in range(k_tile):
                ctx.set(dut.i_wrow.valid, 1)
                ctx.set(dut.i_wrow.payload, {"bank": b, "row": k,
                                             "w": [int(x) for x in w[b, k]]})
                await ctx.tick()
        ctx.set(dut.i_wrow.valid, 0)
        lane_ops = [[] for _ in range(g_n)]
        for t in range(n):
            for lane, ops in enumerate(streams.get((t, 0), [[]] * g_n)):
                for idx, (nib, sh, row) in enumerate(ops):
                    lane_ops[lane].append({"nib": nib, "shift": sh, "row": row,
                                           "rot": t % geo.rotation, "bank": bank[t],
                                           "close": int(idx == len(ops) - 1)})
        tokens = []
        for t in range(n):
            mask = sum(1 << lane for lane, ops in enumerate(streams.get((t, 0), [[]] * g_n))
                       if ops)
            tokens.append({"mask": mask, "meta": {"token": t, "bank": bank[t],
                                                  "y_addr": y_addr[t], "overwrite": over[t],
                                                  "last": int(t == n - 1)}})
        credit = [geo.psum_depth] * g_n
        pos = [0] * g_n
        ti, done, guard = 0, False, 0
        while not done:
            guard += 1
            assert guard < 2000
            for lane in range(g_n):
                go = pos[lane] < len(lane_ops[lane]) and rng.random() < 0.7
                op = lane_ops[lane][pos[lane]] if go else None
                if go and op["close"] and credit[lane] == 0:
                    go = False
                ctx.set(dut.i_op[lane].valid, int(go))
                if go:
                    ctx.set(dut.i_op[lane].payload, op)
                    pos[lane] += 1
                    credit[lane] -= op["close"]
            offer = ti < n and rng.random() < 0.6
            ctx.set(dut.i_token.valid, int(offer))
            if offer:
                ctx.set(dut.i_token.payload, tokens[ti])
            _, _, tr, pop, pd = await ctx.tick().sample(dut.i_token.ready, dut.o_pop,
                                                        dut.o_pass_done)
            if offer and tr:
                ti += 1
            for lane in range(g_n):
                credit[lane] += pop >> lane & 1
            done = bool(pd)
        for lane in range(g_n):
            ctx.set(dut.i_op[lane].valid, 0)
        for a in range(3):
            ctx.set(dut.host_y_addr, a)
            await ctx.tick()
            got[a] = [int(x) for x in ctx.get(dut.host_y_rdata)]

    simulate(dut, bench)
    for a in range(3):
        assert got[a] == y[a].tolist(), f"row {a}"
