"""FmdqLinear (the FMDQ linear datapath: quantization unit, group memory, SIMD-4 PE arrays) on
Amaranth's simulator: bit-exact ``Y`` and state against ``golden.fmdq_pe.linear_step`` and
every counter equal to ``sim.fmdq_cycles.linear_cycles``, on real layers of the bundled DiT and
adversarial data."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.hw.fmdq.linear import FmdqLinear
from dstar.sim.fmdq_linear_io import COUNTERS, FmdqImage, run_fmdq_step
from dstar.sim.pysim_driver import io_adapter, simulate
from tests.hw.cases import fmdq_linear as cases


def run_cases(cfg, named: dict) -> dict:
    """Run every case of ``named`` on one design, in order; per case the list of step
    outcomes."""
    dut = FmdqLinear(cfg)
    geo = dut.geometry.to_dict()
    outs = {}

    async def bench(ctx):
        io = io_adapter(ctx, dut)
        for name, c in named.items():
            n, k, m = (int(x) for x in c["shape"])
            img = FmdqImage(geo, cfg.state_bits, cfg.max_k, k, m, n)
            outs[name] = []
            for s in range(len(c["keys"])):     # the host keeps the state between steps
                outs[name].append(await run_fmdq_step(
                    io, img, c["targets"][s], key=bool(c["keys"][s]),
                    w_q=c["w_q"] if s == 0 else None,
                    state=c.get("state0") if s == 0 else outs[name][-1].state))

    simulate(dut, bench)
    return outs


def mismatches(outs, named) -> list[str]:
    bad = []
    for name, c in named.items():
        for s, o in enumerate(outs[name]):
            if not np.array_equal(o.y, c["y"][s]):
                bad.append(f"{name} step {s}: Y differs in {np.count_nonzero(o.y != c['y'][s])}")
            if not np.array_equal(o.state, c["xs"][s]):
                bad.append(f"{name} step {s}: state differs")
            want = dict(zip(COUNTERS, (int(x) for x in c["counters"][s]), strict=True))
            if o.counters != want:
                bad.append(f"{name} step {s}: counters {o.counters} != model {want}")
    return bad


def gap_case(cfg, seed=4):
    """A key step, then a delta step changing only the third of four windows' channels: the
    first window issues its empty groups, the second and fourth nothing (no bank, no replay),
    the third takes the bank after the first's (the two banks' hand-over across an empty
    window)."""
    rng = np.random.default_rng(seed)
    w_ = cfg.sort_window
    n, k, m = 7, 4 * w_, 12
    t0 = rng.integers(-127, 128, size=(n, k))         # lossless: no residual
    t1 = t0.copy()
    t1[:, 2 * w_:3 * w_] += rng.integers(1, 9, size=(n, w_))
    w = rng.integers(-128, 128, size=(k, m))
    return cases.expected(cfg, w, [t0, t1], [1, 0])


@pytest.fixture(scope="module")
def small():
    cfg = cases.small_config()
    named = {"random": cases.random_case(cfg), "adversarial": cases.adversarial_case(cfg),
             "zero": cases.zero_case(cfg), "gap": gap_case(cfg)}
    return cfg, named, run_cases(cfg, named)


def test_small_cases(small):
    """Random, adversarial (zero tile, every width, the largest shift, saturation, extreme
    weights, twice-range differences) and all-zero steps; K not a multiple of the window, short
    last tiles, a partial column block: bit-exact, counters equal to the model."""
    cfg, named, outs = small
    assert mismatches(outs, named) == []
    adv = named["adversarial"]
    assert adv["counters"][0][COUNTERS.index("count_saturated")] > 0
    zero = named["zero"]
    assert zero["counters"][1][COUNTERS.index("count_groups")] == 2     # the empty groups
    assert (zero["xs"][1] == zero["targets"][1]).all()
    gap = named["gap"]          # 2 tiles: the first window's empty groups and the third's
    assert gap["counters"][1][COUNTERS.index("count_units")] == 4


def test_checks_can_fail(small):
    """The comparison sees a one-off Y, a one-off state and a cycle off by one."""
    cfg, named, outs = small
    for field, idx in (("y", (0, 3, 1)), ("xs", (1, 2, 0)), ("counters", (0, 0))):
        bad = {k: dict(v) for k, v in named.items()}
        arr = bad["random"][field].copy()
        arr[idx] += 1
        bad["random"][field] = arr
        assert len(mismatches(outs, bad)) == 1


def test_real_layer():
    """The bundled DiT's block-0 fc1 (K = 128) on a small FMDQ datapath (T = 8, window 16, 2
    arrays of 2 columns): 13 tokens (a short second tile), two column blocks, the key step and
    a delta step."""
    cfg = preset("tiny").replace(encoding="fmdq", token_tile=8, sort_window=16, m_tile=2,
                                 max_tokens=16, max_m=8)
    named = {"fc1": cases.real_case(cfg, n=13, m=8)}
    assert mismatches(run_cases(cfg, named), named) == []


@pytest.mark.slow
def test_real_layer_tiny():
    """The tiny preset's FMDQ datapath (its token_tile and sort_window, 2 arrays of 4
    columns) on the bundled DiT's block-0 fc1: 20 tokens (a short last tile at T = 8 or 16),
    K = 128, two column blocks, the key step and a delta step."""
    cfg = preset("tiny").replace(encoding="fmdq")
    named = {"fc1": cases.real_case(cfg, n=20, m=16)}
    assert mismatches(run_cases(cfg, named), named) == []


@pytest.mark.slow
def test_real_layers_tiny_full():
    """Every token the tiny preset holds (32) and its every column (64) of the block-0 fc1 and
    the block-1 qkv."""
    cfg = preset("tiny").replace(encoding="fmdq")
    named = {"fc1": cases.real_case(cfg, m=64),
             "qkv": cases.real_case(cfg, m=64, layer="blocks.1.attn.qkv")}
    assert mismatches(run_cases(cfg, named), named) == []
