"""SoftmaxUnit on Amaranth's simulator against ``golden.softmax`` (mantissas, group shifts, ``l``,
``r``, ``L`` by equality): random, equal, extreme, one-element and maximum-length rows, every
``x`` of the exponent table, groups of different and clamped exponents, short last groups,
``e_max = 0`` and other group sizes, length clamping, random valid gaps and back-pressure, with
``P = softmax_lanes`` of 1, 2, 4 and 8 keys per beat (the last beat's unused lanes filled with the
largest logit); with no stalls, every handshake at the cycle model's cycle."""

import numpy as np
import pytest
from amaranth.lib import data

from dstar.config import preset
from dstar.golden.softmax import normalize, reciprocal
from dstar.hw.softmax import Normalizer, SoftmaxUnit
from dstar.sim.pysim_driver import simulate
from dstar.sim.softmax_cycles import row_latency, row_period, schedule
from dstar.sim.tb_softmax import check, octave_rows, real_rows, run_rows
from tests.hw.cases.softmax import normalizer_inputs, random_rows


class PysimIO:
    """The adapter ``dstar.sim.tb_softmax.run_rows`` needs, on the component's stream members."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut

    def _s(self, stream):
        return getattr(self.dut, stream)

    def put(self, stream, values):
        self.ctx.set(self._s(stream).payload, values)

    def set_valid(self, stream, v):
        self.ctx.set(self._s(stream).valid, int(v))

    def set_ready(self, stream, v):
        self.ctx.set(self._s(stream).ready, int(v))

    def ready(self, stream):
        return bool(self.ctx.get(self._s(stream).ready))

    def valid(self, stream):
        return bool(self.ctx.get(self._s(stream).valid))

    def payload(self, stream):
        sig = self._s(stream).payload
        v = self.ctx.get(sig)
        return {name: [int(x) for x in getattr(v, name)]
                if isinstance(field.shape, data.ArrayLayout) else int(getattr(v, name))
                for name, field in sig.shape()}

    async def settle(self):
        pass                                # ctx.get returns settled values

    async def tick(self):
        await self.ctx.tick()


def run_unit(cfg, rows, m, sh, *, max_row=None, logit_bits=None, n_hdr=None, p_valid=1.0,
             p_ready=1.0, seed=0):
    kw = {} if logit_bits is None else {"logit_bits": logit_bits}
    dut = SoftmaxUnit(cfg, max_row=max_row, **kw)
    out = []

    async def bench(ctx):
        out.append(await run_rows(PysimIO(ctx, dut), rows, m, sh, dut.max_row, lanes=dut.lanes,
                                  pad=(1 << (dut.logit_bits - 1)) - 1, n_hdr=n_hdr,
                                  p_valid=p_valid, p_ready=p_ready, seed=seed))

    simulate(dut, bench)
    return out[0]


def fmt(cfg):
    """The golden model's format arguments of ``dstar.sim.tb_softmax.check`` for ``cfg``."""
    return cfg.attn_frac_bits, cfg.group, cfg.e_max


def assert_unit(cfg, rows, m, sh, *, p_valid=1.0, p_ready=1.0, **kw):
    res = run_unit(cfg, rows, m, sh, p_valid=p_valid, p_ready=p_ready, **kw)
    sched = schedule([len(r) for r in rows], cfg.softmax_keys_per_cycle) \
        if p_valid == 1.0 and p_ready == 1.0 else None
    fails = check(res, rows, m, sh, *fmt(cfg), sched)
    assert not fails, "\n".join(fails[:8])
    return res


#: Keys per beat the tests run (``tiny``: G = 16).
LANES = [1, 2, 4, 8]


def tiny(lanes=1, **kw):
    return preset("tiny").replace(softmax_lanes=lanes, **kw)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("p_valid,p_ready", [(1.0, 1.0), (0.6, 0.5), (1.0, 0.25), (0.3, 1.0)])
def test_random_rows(p_valid, p_ready, lanes):
    cfg = tiny(lanes)
    rng = np.random.default_rng(int(p_valid * 10 + p_ready * 100))
    lengths = [1, 32, 7, 16, 2, 31, 17, 5, 32, 1, 1, 12]
    rows, m, sh = random_rows(rng, lengths, rng.choice([0.5, 1.0, 2.0, 4.0]), cfg)
    res = assert_unit(cfg, rows, m, sh, p_valid=p_valid, p_ready=p_ready, seed=3)
    assert any(0 < x < 255 for r in res.p for x in r)        # exercised more than 0 / 255


@pytest.mark.parametrize("lanes", LANES)
def test_equal_extreme_and_single(lanes):
    cfg = tiny(lanes)
    w = 23
    smax, smin = (1 << (w - 1)) - 1, -(1 << (w - 1))
    rows = [
        [5] * 32,                                   # all equal: every p is 255
        [smin] * 32,
        [smax] + [smin] * 31,                       # d = 2**23 - 1: saturates
        [smin] * 31 + [smax],
        [smax, smin] * 16,
        [smax],                                     # one-element rows
        [smin],
        [0],
        [smax - 1, smax, smax, smax - 3],           # ties at the max
        [smax] + [smin] * 31,
        list(range(-16, 16)),
    ]
    m = [40000, 40000, 65535, 65535, 1, 65535, 0, 32768, 65535, 0, 32768]
    sh = [20, 20, 0, 0, 47, 47, 0, 0, 0, 0, 13]
    assert_unit(cfg, rows, m, sh)
    assert_unit(cfg, rows, m, sh, p_valid=0.7, p_ready=0.4, seed=11)


@pytest.mark.parametrize("lanes", [1, 4])
def test_every_exponent_input(lanes):
    """``m = 1, sh = 0`` makes ``x = d``: rows ``[0, -x, ...]`` cover every ``x`` of the
    exponent table and beyond its saturation point ``(e_max + 9) * 2**F``."""
    cfg = tiny(lanes)
    xs = list(range(1, ((cfg.e_max + 9) << cfg.attn_frac_bits) + 40))
    rows = [[0] + [-x for x in xs[i:i + 31]] for i in range(0, len(xs), 31)]
    assert_unit(cfg, rows, [1] * len(rows), [0] * len(rows))


def test_rounding_ties():
    """``d * m`` exactly half an LSB above a step of ``x``: round half up."""
    cfg = preset("tiny")
    # m = 3, sh = 1: x = (3d + 1) >> 1, ties at every odd d.
    rows = [[0] + [-d for d in range(1, 32)], [0] + [-d for d in range(32, 63)]]
    assert_unit(cfg, rows, [3, 3], [1, 1])


@pytest.mark.parametrize("frac_bits", [3, 8])
def test_frac_bits(frac_bits):
    cfg = preset("tiny").replace(attn_frac_bits=frac_bits)
    rng = np.random.default_rng(frac_bits)
    rows, m, sh = random_rows(rng, [32, 9, 1, 20], 2.0, cfg)
    assert_unit(cfg, rows, m, sh)


@pytest.mark.parametrize("lanes", [1, 4])
def test_max_length_default_config(lanes):
    """Rows of ``max_tokens = 256`` keys with the default configuration's widths."""
    cfg = preset("default").replace(softmax_lanes=lanes)
    rng = np.random.default_rng(5)
    rows, m, sh = random_rows(rng, [256, 3, 256], 1.0, cfg, dh=128)
    res = assert_unit(cfg, rows, m, sh, p_ready=0.8, seed=2)
    assert res.sums[0][0] > (255 << cfg.e_max) * 20


@pytest.mark.parametrize("lanes", LANES)
def test_length_clamp(lanes):
    """``n = 0`` reads as 1; ``n > max_row`` reads as ``max_row``."""
    cfg = tiny(lanes)
    rows = [[7], list(range(32)), [3, 4]]
    res = run_unit(cfg, rows, [30000] * 3, [12] * 3, n_hdr=[0, 63, 2])
    assert not check(res, rows, [30000] * 3, [12] * 3, *fmt(cfg))


def test_checker_catches_errors():
    """The comparison is not vacuous: a wrong multiplier or a wrong schedule is reported."""
    cfg = tiny(1)
    rows = [[0, -100, -200, 5], [1, 2]]
    m, sh = [50000, 50000], [14, 14]
    res = run_unit(cfg, rows, m, sh)
    assert not check(res, rows, m, sh, *fmt(cfg), schedule([4, 2]))
    assert check(res, rows, [60000, 50000], sh, *fmt(cfg))
    assert check(res, rows, m, sh, *fmt(cfg), schedule([4, 3]))
    assert check(res, rows, m, sh, cfg.attn_frac_bits, cfg.group, 0)     # wrong format


def test_checker_catches_shift_errors():
    """A wrong group size or e_max (same mantissa rule, other groups) is reported."""
    cfg = preset("tiny")
    rows = [[0] * 4 + [-1000 - 40 * j for j in range(28)]]
    res = run_unit(cfg, rows, [1], [0])
    assert not check(res, rows, [1], [0], *fmt(cfg))
    assert check(res, rows, [1], [0], cfg.attn_frac_bits, 8, cfg.e_max)
    assert check(res, rows, [1], [0], cfg.attn_frac_bits, cfg.group, 6)


def test_checker_catches_lane_errors():
    """With four lanes a wrong schedule (one lane's, or one row longer) is reported."""
    cfg = tiny(4)
    rows = [[0, -100, -200, 5, 9], [1, 2]]
    m, sh = [50000, 50000], [14, 14]
    res = run_unit(cfg, rows, m, sh)
    assert not check(res, rows, m, sh, *fmt(cfg), schedule([5, 2], 4))
    assert check(res, rows, m, sh, *fmt(cfg), schedule([5, 2], 1))
    assert check(res, rows, m, sh, *fmt(cfg), schedule([5, 5], 4))
    res.pad[0][0] = 3
    assert check(res, rows, m, sh, *fmt(cfg)) == ["row 0: lanes past the row's end carry p "
                                                  "[3, 0, 0]"]


def test_cycle_model_figures():
    assert [row_latency(n) for n in (1, 16, 32, 256)] == [2 * n + 29 for n in (1, 16, 32, 256)]
    assert [row_period(n) for n in (1, 11, 12, 16, 32, 256)] == [19, 20, 21, 25, 41, 265]
    # P > 1: the loader's W + 3, the divider's D + 1 (D = 9, 6, 6), or two rows in (W + 9)
    # cycles; a lone row takes 2 W + 12 + D.
    assert [row_period(n, lanes=4) for n in (1, 16, 32, 64, 256)] == [7, 7, 11, 19, 67]
    assert [row_period(n, lanes=2) for n in (1, 16, 256)] == [10, 11, 131]
    assert [row_period(n, lanes=8) for n in (1, 16, 32, 256)] == [7, 7, 7, 35]
    assert [row_latency(n, lanes=4) for n in (1, 16, 256)] == [20, 26, 146]
    # A 16-row query block of 256 keys: about 16 * 256 / P.
    assert [schedule([256] * 16, p).cycles for p in (1, 2, 4, 8)] == [4516, 2242, 1151, 607]
    with pytest.raises(ValueError, match="lanes must be a power of two >= 1, got 3"):
        schedule([4], 3)


@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_short_rows_back_to_back(lanes):
    """Rows of one group (16 keys) and shorter, back to back: the row sets and the divider
    alternate at the model's cycles."""
    cfg = tiny(lanes)
    rng = np.random.default_rng(lanes)
    rows, m, sh = random_rows(rng, [16] * 10 + [3, 16, 1, 1, 16, 9], 2.0, cfg)
    assert_unit(cfg, rows, m, sh)
    assert_unit(cfg, rows, m, sh, p_valid=0.9, p_ready=0.7, seed=lanes)


def test_real_head_rows():
    """Rows of real attention logits of the bundled DiT (256 keys, default configuration)."""
    cfg = preset("default")
    rows, m, sh = real_rows(layer=2, head=1, rows=[0, 77, 255], frac_bits=cfg.attn_frac_bits)
    res = assert_unit(cfg, rows, m, sh)
    assert len(set(res.p[0])) > 20                  # a dense, non-trivial row


def run_normalizer(cfg, acc, lsum, p_valid, p_ready, seed):
    dut = Normalizer(cfg)
    r, big_l = reciprocal(lsum)
    rng = np.random.default_rng(seed)
    got = []

    async def bench(ctx):
        i, held, offer = 0, None, False
        for _ in range(40 * len(acc) + 50):
            if not offer and i < len(acc) and rng.random() < p_valid:
                offer = True
                ctx.set(dut.i.payload, {"acc": int(acc[i]), "r": int(r[i]),
                                        "big_l": int(big_l[i])})
            ctx.set(dut.i.valid, int(offer))
            rdy = rng.random() < p_ready
            ctx.set(dut.o.ready, int(rdy))
            if offer and ctx.get(dut.i.ready):
                i += 1
                offer = False
            if ctx.get(dut.o.valid):
                o = int(ctx.get(dut.o.payload).o)
                assert held is None or held == o, "payload changed while waiting"
                held = None if rdy else o
                if rdy:
                    got.append(o)
            else:
                assert held is None, "valid dropped before the beat was taken"
            await ctx.tick()

    simulate(dut, bench)
    return got


@pytest.mark.parametrize("p_valid,p_ready", [(1.0, 1.0), (0.5, 0.5)])
def test_normalizer(p_valid, p_ready):
    cfg = preset("default")
    rng = np.random.default_rng(17)
    n = 300
    lmax = (255 << cfg.e_max) * cfg.max_tokens
    acc, lsum = normalizer_inputs(cfg, rng, n, [128 * 255, -128 * (255 << cfg.e_max),
                                                128 * lmax, -128 * lmax, 0, -1])
    acc[6:20] = lsum[6:20] // 2 * rng.choice([-1, 1], size=14)      # |O| about 128
    got = run_normalizer(cfg, acc, lsum, p_valid, p_ready, seed=int(p_ready * 10))
    want = normalize(acc[:, None], lsum, cfg.attn_out_frac_bits)[:, 0]
    assert got == want.tolist()


@pytest.mark.parametrize("lanes", LANES)
def test_odd_sizes(lanes):
    """A memory of a non-power-of-two ``max_row`` (not a multiple of 8) and narrow logits at
    their extremes."""
    cfg = tiny(lanes)
    hi, lo = 2047, -2048
    rows = [[hi] + [lo] * 19, [lo, hi, 0], [7], list(range(-10, 10)), [hi] * 20]
    m, sh = [65535, 30000, 1, 50000, 0], [0, 9, 0, 14, 0]
    assert_unit(cfg, rows, m, sh, max_row=20, logit_bits=12)
    assert_unit(cfg, rows, m, sh, max_row=20, logit_bits=12, p_valid=0.8, p_ready=0.6, seed=4)


@pytest.mark.parametrize("lanes", LANES)
def test_group_exponents(lanes):
    """Groups of different exponents in a row, exponents clamped at ``e_max``, keys cut to 0,
    short last groups (lengths not multiples of ``G``)."""
    cfg = tiny(lanes)
    rows, m, sh = octave_rows(cfg, [32, 32, 17, 20, 31, 1, 16, 32, 5], seed=1)
    e7 = (cfg.e_max << cfg.attn_frac_bits)
    rows += [
        [0] * 16 + [-e7 - 5 - k for k in range(16)],          # group 1 clamped at e_max
        [0] + [-e7 - 64 * k for k in range(31)],              # ... its keys past 9 octaves: 0
        [-3 * 64 - k for k in range(16)] + [0] * 3,           # short last group holds the max
        [0] * 16 + [-5 * 64 - 7],                             # a last group of one key
    ]
    m, sh = m + [1] * 4, sh + [0] * 4
    res = assert_unit(cfg, rows, m, sh)
    shifts = {s for r in res.shift for s in r}
    assert {0, cfg.e_max} <= shifts and len(shifts) >= 4
    assert_unit(cfg, rows, m, sh, p_valid=0.7, p_ready=0.5, seed=5)


@pytest.mark.parametrize("std", [3.0, 8.0])
def test_large_logit_scale(std):
    """Random rows scaled large: the logits spread over many octaves."""
    cfg = preset("tiny")
    rng = np.random.default_rng(int(std))
    rows, m, sh = random_rows(rng, [32, 20, 32, 9, 32, 32, 32], std, cfg)
    res = assert_unit(cfg, rows, m, sh)
    assert len({s for r in res.shift for s in r}) >= 3


@pytest.mark.parametrize("group,e_max,lanes", [(16, 0, 1), (4, 12, 1), (8, 1, 1), (16, 0, 8),
                                               (4, 12, 4), (8, 1, 2), (16, 0, 16)])
def test_other_formats(group, e_max, lanes):
    """``e_max = 0`` (one exponent per row), small groups with wide shifts, and ``e_max = 1``;
    with lanes, ``P = G`` and the smallest sums (``l = 255``, ``L = 8``) at 8 quotient bits per
    cycle."""
    cfg = preset("tiny").replace(group=group, e_max=e_max, softmax_lanes=lanes)
    rng = np.random.default_rng(group + e_max)
    rows, m, sh = random_rows(rng, [32, 7, 1, 30, 32], 6.0, cfg)
    orows, om, osh = octave_rows(cfg, [32, 13, 32, 3], seed=group)
    res = assert_unit(cfg, rows + orows, m + om, sh + osh)
    assert max(s for r in res.shift for s in r) <= e_max
    assert res.sums[0][0] >= 255 << e_max
    assert_unit(cfg, orows, om, osh, p_valid=0.6, p_ready=0.6, seed=7)
