"""MaskSelector on Amaranth's simulator against ``golden.attention.select_blocks``, by equality:
random masses and thresholds, ties, all-zero and saturated masses, one candidate, theta = 1 and
the smallest theta, fewer candidates than blocks, masses that settle only after ``start``; the
cycles per selection as documented."""

import numpy as np

from dstar.config import preset
from dstar.golden.attention import select_blocks, theta_fixed
from dstar.hw.attention import MaskSelector
from dstar.hw.geometry import AttentionGeometry
from dstar.sim.pysim_driver import simulate


def _cases(ag, rng):
    nkb, top = ag.nkb, (1 << ag.mass_bits) - 1
    cases = [
        (np.zeros(nkb, dtype=np.int64), 0.6),
        (np.full(nkb, 1000), 0.5),                          # ties: lower index first
        (np.full(nkb, top), 0.9),                           # the widest sums
        (np.arange(nkb) * 7, 1.0),                          # theta = 1: every block
        (np.arange(nkb)[::-1] * 3 + 1, 1 / 65536),          # the smallest theta
        (np.array([5] + [0] * (nkb - 1)), 0.99),
        (np.array([0] * (nkb - 1) + [5]), 0.99),
        (np.array([3]), 0.6),                               # one candidate
        (rng.integers(0, top + 1, size=3), 0.75),           # fewer candidates than blocks
    ]
    for _ in range(40):
        n = int(rng.integers(1, nkb + 1))
        mass = rng.integers(0, int(rng.choice([4, 100, top])) + 1, size=n)
        cases.append((mass, float(rng.choice([rng.uniform(0.01, 1.0), 0.5, 0.9, 1.0]))))
    return cases


def test_mask_selector_matches_golden():
    cfg = preset("tiny").replace(max_tokens=128)
    ag = AttentionGeometry(cfg)
    assert ag.nkb == 8
    dut = MaskSelector(ag)
    cases = _cases(ag, np.random.default_rng(5))
    got = []

    async def bench(ctx):
        garbage = (1 << ag.mass_bits) - 1              # masses past n_blocks are ignored
        for mass, theta in cases:
            # As the softmax feed's: the masses are complete only from the cycle after start.
            for j in range(ag.nkb):
                ctx.set(dut.mass[j], garbage)
            ctx.set(dut.n_blocks, len(mass))
            ctx.set(dut.theta_q, theta_fixed(theta))
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for j in range(ag.nkb):
                ctx.set(dut.mass[j], int(mass[j]) if j < len(mass) else garbage)
            cycles = 0
            while True:
                assert ctx.get(dut.busy)
                cycles += 1
                if ctx.get(dut.done):
                    got.append((ctx.get(dut.mask), cycles))
                    await ctx.tick()
                    break
                await ctx.tick()
                assert cycles < 1000
            assert not ctx.get(dut.busy)

    simulate(dut, bench)
    assert len(got) == len(cases)
    for (mass, theta), (word, cycles) in zip(cases, got, strict=True):
        want = select_blocks(mass, theta)
        bits = [(word >> j) & 1 for j in range(ag.nkb)]
        n = len(mass)
        if theta_fixed(theta) == 1 << 16:
            assert bits == [1] * ag.nkb and cycles == 1
            continue
        assert bits[:n] == [int(b) for b in want], (mass, theta)
        assert not any(bits[n:]), (mass, theta)
        assert cycles == int(want.sum()) * (-(-n // MaskSelector.SCAN) + 1), (mass, theta)
