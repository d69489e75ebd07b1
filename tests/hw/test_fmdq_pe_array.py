"""FmdqPEArray: the SIMD-4 PE array against its golden twin (``golden.fmdq_pe``) and the cycle
model (``sim.fmdq_cycles``), on groups made by ``golden.fmdq.fmdq_encode``."""

import numpy as np
import pytest

from dstar.golden.fmdq import fmdq_encode, schedule_tile
from dstar.golden.fmdq_pe import acc_bits, horner_steps, pe_array_y, run_unit
from dstar.hw.fmdq.pe_array import FmdqPEArray
from dstar.sim.fmdq_cycles import array_cycles
from dstar.sim.pysim_driver import simulate

T, M, W, E_MAX = 4, 3, 8, 7
CH_BITS = 6
Y_DEPTH, Y_BITS = 16, 40


def make_dut(weights="memory"):
    return FmdqPEArray(tokens=T, columns=M, window=W, e_max=E_MAX, channel_bits=CH_BITS,
                       y_depth=Y_DEPTH, y_bits=Y_BITS, weights=weights)


def run_ops(enc, window=W):
    """The array's units of ``enc`` (windows outer, tiles inner): per unit a list of group
    payloads, its window and (groups, bubbles, tokens); a first-window unit without slices is
    one empty group (it overwrites the tile's rows)."""
    sl = enc.slices()
    k = enc.q.shape[1]
    units = []
    for j, c in enumerate(range(0, k, window)):
        for t in range(enc.n_tiles):
            rows = enc.tile_rows(t)
            sched = schedule_tile(enc.shift[t, c:c + window], enc.width[t, c:c + window], window)
            n_tok = rows.stop - rows.start
            ops = []
            for g in range(sched.groups):
                ch = sched.channel[g] + c
                act = np.zeros((T, 4), np.int64)
                act[:n_tok] = (sl[rows][:, ch, sched.slice[g]] * sched.valid[g]) & 3
                ops.append({"group": {
                    "shift": int(sched.shift[g]),
                    "lane": [{"channel": int(ch[i]) if sched.valid[g][i] else 0,
                              "signed": int(sched.signed[g][i]),
                              "valid": int(sched.valid[g][i])} for i in range(4)],
                    "act": [[int(a) for a in row] for row in act],
                    "last": int(g == sched.groups - 1)}})
            bub = int(horner_steps(sched.shift)[1].sum()) if sched.groups else 0
            if not ops:
                if j:
                    continue
                ops = [{"group": {"shift": 0, "lane": [{"channel": 0, "signed": 0, "valid": 0}] * 4,
                                  "act": [[0] * 4] * T, "last": 1}}]
            for op in ops:
                op.update(bank=j % 2, y_addr=rows.start, n_tok=n_tok, overwrite=int(j == 0))
            units.append((j, ops, (len(ops), bub, n_tok)))
    return units


def simulate_runs(runs, *, stall=None, seed=0, weights="memory"):
    """Simulate ``runs`` (``(enc, w_q)`` each, in order on one array; the first two windows'
    weights loaded before a run, later ones when the run reaches them); returns ``Y`` rows
    ``0 .. N-1`` after the last run and, per run, the cycles from its first accepted group to
    its last ``o_unit_done`` (None if the run paused for weights; ``stall``: probability of an
    idle source cycle)."""
    dut = make_dut(weights)
    rng = np.random.default_rng(seed)
    out = {"cycles": []}
    n_rows = max(enc.q.shape[0] for enc, _ in runs)
    st = {"cycle": 0, "done": 0}

    async def tick(ctx):
        st["done"] += ctx.get(dut.o_unit_done)
        await ctx.tick()
        st["cycle"] += 1

    async def load(ctx, w_q, j):
        for r in range(W):
            c = j * W + r
            row = w_q[c] if c < w_q.shape[0] else np.zeros(M, np.int64)
            ctx.set(dut.i_wrow.valid, 1)
            ctx.set(dut.i_wrow.payload, {"bank": j % 2, "row": r, "w": [int(x) for x in row]})
            await tick(ctx)
        ctx.set(dut.i_wrow.valid, 0)

    async def bench(ctx):
        for enc, w_q in runs:
            units = run_ops(enc)
            windows = sorted({j for j, _, _ in units})
            for j in windows[:2]:
                await load(ctx, w_q, j)
            loaded, paused, first = set(windows[:2]), False, None
            st["done"] = 0
            for j, ops, _ in units:
                if j not in loaded:
                    ctx.set(dut.i_op.valid, 0)
                    await load(ctx, w_q, j)
                    loaded.add(j)
                    paused = True
                for op in ops:
                    while stall and rng.random() < stall:
                        ctx.set(dut.i_op.valid, 0)
                        await tick(ctx)
                    ctx.set(dut.i_op.payload, op)
                    ctx.set(dut.i_op.valid, 1)
                    while not ctx.get(dut.i_op.ready):
                        await tick(ctx)
                    if first is None:
                        first = st["cycle"]
                    await tick(ctx)
            ctx.set(dut.i_op.valid, 0)
            while st["done"] < len(units):
                await tick(ctx)
            last = st["cycle"] - 1              # the cycle of the last o_unit_done
            out["cycles"].append(None if paused else last - first + 1)
        y = np.zeros((n_rows, M), np.int64)
        for r in range(n_rows):
            ctx.set(dut.host_y_addr, r)
            await ctx.tick()
            y[r] = [int(v) for v in ctx.get(dut.host_y_rdata)]
        out["y"] = y

    simulate(dut, bench)
    return out


def expected_y(enc, w_q):
    return pe_array_y(enc, w_q, W, E_MAX)


def mismatches(got, want) -> int:
    return int(np.count_nonzero(np.asarray(got) != np.asarray(want)))


def model_cycles(enc):
    units = run_ops(enc)
    g, b, n = (np.array([u[2][i] for u in units]) for i in range(3))
    return array_cycles(g, b, n)


def random_case(rng, n, k, scale=3000, density=0.5):
    d = rng.integers(-scale, scale + 1, size=(n, k)) * (rng.random((n, k)) < density)
    w = rng.integers(-127, 128, size=(k, M))
    return d, w


def test_golden_twin_is_the_product():
    rng = np.random.default_rng(3)
    for _ in range(4):
        d, w = random_case(rng, 13, 29, scale=40000)
        enc = fmdq_encode(d, T, E_MAX, 0)
        assert (expected_y(enc, w) == enc.decode() @ w).all()


def test_random_and_overwrite_with_back_pressure():
    """Two runs on one array (the second's first window overwrites the first's rows), the
    source idle at random; K not a multiple of the window, the last tile short."""
    rng = np.random.default_rng(11)
    d1, w1 = random_case(rng, 11, 20)
    d2, w2 = random_case(rng, 11, 20, scale=20000, density=0.7)
    e1, e2 = fmdq_encode(d1, T, E_MAX, 0), fmdq_encode(d2, T, E_MAX, 0)
    out = simulate_runs([(e1, w1), (e2, w2)], stall=0.3, seed=5)
    assert mismatches(out["y"], expected_y(e2, w2)) == 0


@pytest.mark.parametrize("weights", ["memory", "registers"])
def test_adversarial(weights):
    """All-zero tiles, every width 0/2/4/6/8, the largest shift, saturated sub-channels,
    extreme weights; checked with the source never idle, cycles against the model; both
    weight windows."""
    k, n = 16, 12
    d = np.zeros((n, k), np.int64)
    rng = np.random.default_rng(2)
    for c, lim in enumerate((0, 1, 7, 31, 127)):            # widths 0, 2, 4, 6, 8 at p = 0
        d[4:8, c] = rng.integers(-lim - 1, lim + 1, size=4)
        d[4, c] = -lim - 1 if lim else 0
    d[4:8, 5] = [127 << E_MAX, -(128 << E_MAX), 5 << E_MAX, 0]     # shift e_max, width 8
    d[4:8, 6] = [1 << 20, -(1 << 20), 3, -7]                       # saturated at e_max
    d[4:8, 8:12] = rng.integers(-(1 << 14), 1 << 14, size=(4, 4))
    d[8:12, :] = rng.integers(-2, 2, size=(4, k))                  # a dense tile of 2-bit
    d[8:12, 9] = [1 << 16, 1, -(1 << 16), 0]
    enc = fmdq_encode(d, T, E_MAX, 0)                              # rows 0..3: all zero
    assert enc.saturated.any() and (enc.shift == E_MAX).any()
    assert {0, 2, 4, 6, 8} <= set(np.unique(enc.width).tolist())
    w = np.where(rng.random((k, M)) < 0.5, 127, -127)
    w[0] = -128
    out = simulate_runs([(enc, w)], weights=weights)
    assert mismatches(out["y"], expected_y(enc, w)) == 0
    assert out["cycles"][-1] == model_cycles(enc)


def test_checks_can_fail():
    """The comparison sees a one-off error, and a corrupted slice changes the RTL's result
    away from the golden model."""
    rng = np.random.default_rng(8)
    d, w = random_case(rng, 8, 8, density=0.9)
    enc = fmdq_encode(d, T, E_MAX, 0)
    want = expected_y(enc, w)
    bad = want.copy()
    bad[3, 1] += 1
    assert mismatches(want, bad) == 1
    q = enc.q.copy()
    k = int(np.flatnonzero(enc.width[0] >= 4)[0])
    enc.q[1, k] ^= 1                                  # the array now sees a different code
    out = simulate_runs([(enc, w)])
    enc.q = q
    assert mismatches(out["y"], want) > 0


def test_accumulator_bound():
    """The worst unit (every channel at e_max, saturated codes, weights -128) fits
    ``acc_bits`` and the golden run raises on a narrower accumulator."""
    acts = np.full((4, T, 4), -2, np.int64)                      # top slices of -128
    w_rows = np.full((4, 4, M), -128, np.int64)
    shifts = np.array([E_MAX + 6] * 2 + [0] * 2)
    acc, _ = run_unit(acts, w_rows, shifts, acc_bits(W, E_MAX))
    with pytest.raises(OverflowError):
        run_unit(acts, w_rows, shifts, 12)
    assert acc.shape == (T, M)


def attn_op(unit, g, **meta):
    """Group ``g`` of a ``golden.fmdq_attention`` unit as an op payload."""
    return {"group": {"shift": int(unit.shift[g]),
                      "lane": [{"channel": int(unit.channel[g][i]),
                                "signed": int(unit.signed[g][i]),
                                "valid": int(unit.valid[g][i])} for i in range(4)],
                      "act": [[int(a) for a in row] for row in unit.raw[g]],
                      "last": int(g == unit.groups - 1)},
            "tok_shift": [int(s) for s in unit.tok_shift], **meta}


def test_attention_options():
    """``token_shifts``, ``y_steps`` and a read port: a ``Q K^T`` unit overwriting rows at a
    step of 3, then two ``P V`` units adding with per-row shifts at a step of 2, read back
    through ``rd_data``; equal to the golden twin (``golden.fmdq_attention``)."""
    from dstar.golden.fmdq_attention import pv_unit, qk_unit, run_attn_unit
    dut = FmdqPEArray(tokens=T, columns=M, window=W, e_max=E_MAX, channel_bits=CH_BITS,
                      y_depth=Y_DEPTH, y_bits=Y_BITS, token_shifts=True, y_steps=True,
                      readers=1)
    rng = np.random.default_rng(4)
    q, kt = rng.integers(-128, 128, (3, W)), rng.integers(-128, 128, (W, M))
    p, s = rng.integers(0, 256, (2, T, W)), rng.integers(0, E_MAX + 1, (2, T))
    v = rng.integers(-128, 128, (W, M))
    u_qk = qk_unit(q, T)
    u_pv = [pv_unit(p[i], s[i], T, W - 3 * i) for i in range(2)]
    want = np.zeros((Y_DEPTH, M), np.int64)
    want[[1, 4, 7]] = run_attn_unit(u_qk, kt, acc_bits(W, E_MAX))[:3]
    want[[0, 2, 4, 6]] = 0                      # the first P V unit overwrites (row 4 too)
    for u in u_pv:
        want[[0, 2, 4, 6]] += run_attn_unit(u, v, acc_bits(W, E_MAX))
    got = np.zeros_like(want)

    async def bench(ctx):
        for bank, rows in ((0, kt), (1, v)):
            for r in range(W):
                ctx.set(dut.i_wrow.valid, 1)
                ctx.set(dut.i_wrow.payload, {"bank": bank, "row": r,
                                             "w": [int(x) for x in rows[r]]})
                await ctx.tick()
        ctx.set(dut.i_wrow.valid, 0)
        units = [(u_qk, dict(bank=0, y_addr=1, n_tok=3, overwrite=1, y_step=3))]
        units += [(u, dict(bank=1, y_addr=0, n_tok=T, overwrite=int(i == 0), y_step=2))
                  for i, u in enumerate(u_pv)]
        done = 0
        for u, meta in units:
            for g in range(u.groups):
                ctx.set(dut.i_op.payload, attn_op(u, g, **meta))
                ctx.set(dut.i_op.valid, 1)
                while not ctx.get(dut.i_op.ready):
                    done += ctx.get(dut.o_unit_done)
                    await ctx.tick()
                done += ctx.get(dut.o_unit_done)
                await ctx.tick()
        ctx.set(dut.i_op.valid, 0)
        while done < len(units):
            done += ctx.get(dut.o_unit_done)
            await ctx.tick()
        await ctx.tick()
        for r in range(Y_DEPTH):
            ctx.set(dut.rd_addr[0], r)
            await ctx.tick()
            got[r] = [int(x) for x in ctx.get(dut.rd_data[0])]

    simulate(dut, bench)
    assert mismatches(got[:8], want[:8]) == 0
