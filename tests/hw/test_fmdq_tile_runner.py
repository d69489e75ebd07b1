"""FmdqTileRunner on FMDQ PE arrays: QK^T logits and PV sums of a query block, exact against
the integer matmuls (``golden.fmdq_attention``'s units), with the tile phase's cycles."""

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Mux
from amaranth.lib.memory import Memory

from dstar.config import preset
from dstar.hw.attention.fmdq_tile_runner import FmdqTileRunner
from dstar.hw.fmdq.geometry import FmdqGeometry
from dstar.hw.fmdq.pe_array import FmdqPEArray
from dstar.hw.geometry import AttentionGeometry
from dstar.sim.attention_cycles import fmdq_tile_cycles
from dstar.sim.pysim_driver import simulate

CFG = preset("tiny").replace(encoding="fmdq")
AG = AttentionGeometry(CFG)
FG = FmdqGeometry(CFG)
T, MT, NA, BC = FG.tokens, CFG.m_tile, CFG.n_arrays, AG.block_cols
G, DH, BQ, BK = CFG.group, CFG.head_dim, CFG.block_q, CFG.block_k
Y_DEPTH = 4 << AG.bank_bits


class Harness(Elaboratable):
    """The runner, ``n_arrays`` arrays and the engine's memories, filled from NumPy: ``q``
    ``(N, Dh)``, ``kt`` ``(Dh, N)``, ``v`` ``(N, Dh)``, the block's P words ``p`` ``(bq, N)``
    and shifts ``s`` ``(bq, N / G)``."""

    def __init__(self, q, kt, v, p, s):
        self.tr = FmdqTileRunner(AG, tokens=T, window=FG.window, channel_bits=FG.channel_bits,
                                 y_depth=Y_DEPTH)
        self.arrays = [FmdqPEArray(tokens=T, columns=MT, window=FG.window, e_max=CFG.e_max,
                                   channel_bits=FG.channel_bits, y_depth=Y_DEPTH,
                                   y_bits=FG.y_bits, token_shifts=True, y_steps=True)
                       for _ in range(NA)]
        n = q.shape[0]
        n_cg = DH // 4
        qw = [[[int(q[tt * T + t, c * 4 + i]) if tt * T + t < n else 0 for i in range(4)]
               for t in range(T)] for tt in range(-(-AG.n_max // T)) for c in range(n_cg)]
        self.q_init = [[[x & 0xff for x in row] for row in w] for w in qw]
        self.kt_init, self.v_init = [], []
        for a in range(NA):
            kt_w = [[0] * MT for _ in range(AG.kt_depth)]
            for d in range(DH):
                for kc in range(AG.n_kc):
                    for e in range(MT):
                        key = kc * BC + a * MT + e
                        kt_w[d * AG.n_kc + kc][e] = int(kt[d, key]) if key < n else 0
            v_w = [[0] * MT for _ in range(AG.v_depth)]
            for j in range(min(n, AG.n_kg * G)):
                for cp in range(AG.n_cp):
                    for e in range(MT):
                        dd = cp * BC + a * MT + e
                        v_w[j * AG.n_cp + cp][e] = int(v[j, dd]) if dd < DH else 0
            self.kt_init.append(kt_w)
            self.v_init.append(v_w)
        self.p_init = [[(0, [0] * G)] * (BQ // T * AG.n_kg) for _ in range(T)]
        for i in range(BQ):
            for kg in range(AG.n_kg):
                word = [int(x) for x in p[i, kg * G:(kg + 1) * G]]
                word += [0] * (G - len(word))
                self.p_init[i % T][i // T * AG.n_kg + kg] = (int(s[i, kg]), word)

    def elaborate(self, platform):
        m = Module()
        tr = m.submodules.tr = self.tr
        lay = tr.q_data.shape()
        qm = m.submodules.q = Memory(shape=lay, depth=len(self.q_init),
                                     init=[lay.const([[x - 256 if x > 127 else x for x in r]
                                                      for r in w]) for w in self.q_init])
        q_rd = qm.read_port()
        m.d.comb += [q_rd.addr.eq(tr.q_addr), q_rd.en.eq(tr.rd_en), tr.q_data.eq(q_rd.data)]
        p_lay = tr.p_data.shape().elem_shape
        for t in range(T):
            pm = m.submodules[f"p{t}"] = Memory(
                shape=p_lay, depth=len(self.p_init[t]),
                init=[p_lay.const({"shift": sh, "p": w}) for sh, w in self.p_init[t]])
            rd = pm.read_port()
            m.d.comb += [rd.addr.eq(tr.p_addr), rd.en.eq(tr.rd_en), tr.p_data[t].eq(rd.data)]
        ready = 1
        for a, arr in enumerate(self.arrays):
            m.submodules[f"arr{a}"] = arr
            w_lay = arr.i_wrow.payload.w.shape()
            km = m.submodules[f"kt{a}"] = Memory(shape=w_lay, depth=AG.kt_depth,
                                                 init=[w_lay.const(r) for r in self.kt_init[a]])
            vm = m.submodules[f"v{a}"] = Memory(shape=w_lay, depth=AG.v_depth,
                                                init=[w_lay.const(r) for r in self.v_init[a]])
            k_rd, v_rd = km.read_port(), vm.read_port()
            m.d.comb += [k_rd.addr.eq(tr.weight_addr), v_rd.addr.eq(tr.weight_addr),
                         arr.i_wrow.valid.eq(tr.wrow_valid),
                         arr.i_wrow.payload.bank.eq(tr.wrow_bank),
                         arr.i_wrow.payload.row.eq(tr.wrow_row),
                         arr.i_op.valid.eq(tr.o_group.valid),
                         arr.i_op.payload.eq(tr.o_group.payload)]
            m.d.comb += arr.i_wrow.payload.w.eq(Mux(tr.pv, v_rd.data, k_rd.data))
            ready = arr.i_op.ready & ready
        m.d.comb += [tr.o_group.ready.eq(ready), tr.unit_done.eq(self.arrays[0].o_unit_done)]
        return m


def run_phase(h, *, pv, blk, sel, lens, rows, y_base):
    """One phase of query block ``blk``; returns the Y rows of every array side by side
    (``(Y_DEPTH, BC)``) and the phase's cycles (start to ``idle`` after ``last``)."""
    out = {}
    tr = h.tr

    async def bench(ctx):
        ctx.set(tr.sel_j, list(sel) + [0] * (AG.nkb - len(sel)))
        ctx.set(tr.sel_len, list(lens) + [0] * (AG.nkb - len(lens)))
        ctx.set(tr.n_sel, len(sel))
        ctx.set(tr.base_i, blk * BQ)
        ctx.set(tr.base_t, blk * BQ // T)
        ctx.set(tr.rows, rows)
        ctx.set(tr.y_base, y_base)
        ctx.set(tr.start, 1)
        ctx.set(tr.start_pv, pv)
        await ctx.tick()
        ctx.set(tr.start, 0)
        ctx.set(tr.active, 1)
        cycles, seen_last = 1, False
        while True:
            seen_last |= bool(ctx.get(tr.last))
            if seen_last and ctx.get(tr.idle) and not ctx.get(tr.last):
                break
            await ctx.tick()
            cycles += 1
        ctx.set(tr.active, 0)
        out["cycles"] = cycles
        y = np.zeros((Y_DEPTH, BC), np.int64)
        for r in range(Y_DEPTH):
            for arr in h.arrays:
                ctx.set(arr.host_y_addr, r)
            await ctx.tick()
            for a, arr in enumerate(h.arrays):
                y[r, a * MT:(a + 1) * MT] = [int(x) for x in ctx.get(arr.host_y_rdata)]
        out["y"] = y

    simulate(h, bench)
    return out


def case(n, seed, extreme=False):
    rng = np.random.default_rng(seed)
    if extreme:
        q = np.full((n, DH), -128)
        kt = np.full((DH, n), -128)
        v = np.full((n, DH), -128)
        p = np.full((BQ, n), 255)
        s = np.full((BQ, -(-n // G)), CFG.e_max)
    else:
        q, kt = rng.integers(-128, 128, (n, DH)), rng.integers(-128, 128, (DH, n))
        v = rng.integers(-128, 128, (n, DH))
        p = rng.integers(0, 256, (BQ, n))
        s = rng.integers(0, CFG.e_max + 1, (BQ, -(-n // G)))
    return q, kt, v, p, s


@pytest.mark.parametrize("n, blk, sel, extreme", [(32, 1, [0, 1], False), (27, 1, [1], False),
                                                  (32, 0, [0, 1], True)])
def test_qk_logits(n, blk, sel, extreme):
    """QK^T of query block ``blk`` over the selected key blocks: the logits of every row and
    selected key (rows past ``N`` absent; a ragged last block)."""
    q, kt, v, p, s = case(n, n + blk, extreme)
    h = Harness(q, kt, v, p, s)
    rows = min(BQ, n - blk * BQ)
    lens = [min(BK, n - j * BK) for j in sel]
    out = run_phase(h, pv=0, blk=blk, sel=sel, lens=lens, rows=rows, y_base=0)
    logits = q[blk * BQ:blk * BQ + rows] @ kt
    for i in range(rows):
        for j, ln in zip(sel, lens, strict=True):
            for k in range(j * BK, j * BK + ln):
                kc, e = divmod(k, BC)
                assert out["y"][i * AG.n_kc + kc, e] == logits[i, k], (i, k)
    chunks = sum(-(-ln // BC) for ln in lens)
    assert out["cycles"] == fmdq_tile_cycles(CFG, rows, [DH] * chunks, pv=False)


@pytest.mark.parametrize("n, blk, sel, extreme", [(32, 0, [0, 1], False), (27, 1, [1], False),
                                                  (32, 1, [0, 1], True), (32, 0, [1], False)])
def test_pv_sums(n, blk, sel, extreme):
    """PV of query block ``blk`` over the selected key blocks: ``sum (p << s) V`` per row and
    dimension, every column pass."""
    q, kt, v, p, s = case(n, 7 * n + blk, extreme)
    h = Harness(q, kt, v, p, s)
    rows = min(BQ, n - blk * BQ)
    lens = [min(BK, n - j * BK) for j in sel]
    y_base = 2 << AG.bank_bits
    out = run_phase(h, pv=1, blk=blk, sel=sel, lens=lens, rows=rows, y_base=y_base)
    w = p << np.repeat(s, G, axis=1)[:, :n]
    keys = np.concatenate([np.arange(j * BK, j * BK + ln) for j, ln in zip(sel, lens,
                                                                            strict=True)])
    want = w[:rows][:, keys] @ v[keys]
    got = np.array([[out["y"][y_base + i * AG.n_cp + d // BC, d % BC] for d in range(DH)]
                    for i in range(rows)])
    assert np.array_equal(got, want)
    assert out["cycles"] == fmdq_tile_cycles(CFG, rows, lens * AG.n_cp, pv=True)
