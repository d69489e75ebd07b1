"""The FMDQ quantization unit (hw.fmdq.quant_unit) bit for bit against golden.fmdq, its sort
network against ``sorted``, and its cycle model (sim.fmdq_qu_cycles) against the RTL."""

import random

import numpy as np
import pytest
from amaranth import unsigned

from dstar.golden.fmdq import fmdq_encode
from dstar.hw.fmdq.quant_unit import QuantUnit
from dstar.hw.fmdq.sorter import BitonicSorter, bitonic_network
from dstar.sim.pysim_driver import simulate


# ----- expected streams from golden -----

def expected(d, qu):
    """Golden's groups and updates of one tile ``d`` (``(N, K)``, ``N <= tokens``) as the
    unit's payloads: (groups, updates), plain tuples."""
    T, S, W = qu.tokens, qu.per_beat, qu.window
    n, k = d.shape
    enc = fmdq_encode(d, T, qu.e_max, qu.tau)
    sched = enc.schedule(0, W)
    sl = enc.slices()
    groups = []
    for g in range(sched.groups):
        lanes = tuple((int(sched.channel[g, i]), int(sched.signed[g, i]),
                       int(sched.valid[g, i])) for i in range(4))
        act = tuple(tuple(int(sl[t, sched.channel[g, i], sched.slice[g, i]]) & 3
                          if t < n and sched.valid[g, i] else 0 for i in range(4))
                    for t in range(T))
        groups.append((int(sched.shift[g]), lanes, act, int(g == sched.groups - 1)))
    if not groups:                 # the unit's empty group: every tile ends with a last beat
        groups.append((0, ((0, 0, 0),) * 4, ((0,) * 4,) * T, 1))
    kp = -(-k // S) * S
    updates = []
    for c0 in range(0, kp, S):
        subs = []
        for c in range(c0, c0 + S):
            if c < k:
                q = tuple(int(enc.q[t, c]) if t < n else 0 for t in range(T))
                subs.append((int(enc.shift[0, c]), int(enc.width[0, c]),
                             int(enc.clipped[0, c]), int(enc.saturated[0, c]), q))
            else:
                subs.append((0, 0, 0, 0, (0,) * T))
        updates.append((c0, tuple(subs), int(c0 + S >= kp)))
    return groups, updates


def beats_of(d, qu):
    """Input beats of one tile: sub-channels padded to ``tokens`` and to a multiple of
    ``per_beat`` with zeros."""
    T, S = qu.tokens, qu.per_beat
    n, k = d.shape
    kp = -(-k // S) * S
    pad = np.zeros((T, kp), np.int64)
    pad[:n, :k] = d
    return [{"d": [[int(x) for x in pad[:, c]] for c in range(c0, c0 + S)],
             "last": int(c0 + S >= kp)} for c0 in range(0, kp, S)]


def group_of(p, T):
    return (int(p.shift), tuple((int(p.lane[i].channel), int(p.lane[i].signed),
                                 int(p.lane[i].valid)) for i in range(4)),
            tuple(tuple(int(p.act[t][i]) for i in range(4)) for t in range(T)),
            int(p.last))


def update_of(p, T, S):
    return (int(p.channel), tuple((int(s.shift), int(s.width), int(s.clipped),
                                   int(s.saturated), tuple(int(x) for x in s.q))
                                  for s in (p.sub[i] for i in range(S))), int(p.last))


def run_unit(qu, tiles, rng=None, p_valid=1.0, p_o=1.0, p_u=1.0):
    """Feed ``tiles`` through ``qu``; return (groups with their o.valid cycle, updates, the
    clipped/saturated counters at the end)."""
    rng = rng or random.Random(0)
    beats = [b for d in tiles for b in beats_of(d, qu)]
    n_groups = sum(len(expected(d, qu)[0]) for d in tiles)
    got_o, got_u, seen = [], [], []
    counters = []

    async def bench(ctx):
        i, cycle = 0, 0
        while len(got_o) < n_groups or len(got_u) < len(beats):
            assert cycle < 200 * (len(beats) + n_groups) + 500, "unit stalled"
            offer = i < len(beats) and rng.random() < p_valid
            if offer:
                ctx.set(qu.i.payload, beats[i])
            ctx.set(qu.i.valid, int(offer))
            ctx.set(qu.o.ready, int(rng.random() < p_o))
            ctx.set(qu.u.ready, int(rng.random() < p_u))
            (_, _, iv, ir, ov, orr, op, uv, ur, up) = await ctx.tick().sample(
                qu.i.valid, qu.i.ready, qu.o.valid, qu.o.ready, qu.o.payload,
                qu.u.valid, qu.u.ready, qu.u.payload)
            if ov:
                seen.append(cycle)
            if iv and ir:
                i += 1
            if ov and orr:
                got_o.append((group_of(op, qu.tokens), cycle))
            if uv and ur:
                got_u.append(update_of(up, qu.tokens, qu.per_beat))
            cycle += 1
        for _ in range(10):                  # nothing more may come out
            ctx.set(qu.i.valid, 0)
            ctx.set(qu.o.ready, 1)
            ctx.set(qu.u.ready, 1)
            _, _, ov, uv = await ctx.tick().sample(qu.o.valid, qu.u.valid)
            assert not ov and not uv, "a beat too many"
        counters.extend([ctx.get(qu.count_clipped), ctx.get(qu.count_saturated)])

    simulate(qu, bench)
    return got_o, got_u, counters


def check(qu, tiles, **kw):
    got_o, got_u, counters = run_unit(qu, tiles, **kw)
    want_o, want_u = [], []
    clipped = saturated = 0
    for d in tiles:
        g, u = expected(d, qu)
        want_o += g
        want_u += u
        enc = fmdq_encode(d, qu.tokens, qu.e_max, qu.tau)
        clipped += int(enc.clipped.sum())
        saturated += int(enc.saturated.sum())
    assert [g for g, _ in got_o] == want_o
    assert got_u == want_u
    assert counters == [clipped, saturated]
    return got_o
