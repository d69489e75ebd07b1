"""The FMDQ quantization unit (hw.fmdq.quant_unit) bit for bit against golden.fmdq, its sort
network against ``sorted``, and its cycle model (sim.fmdq_qu_cycles) against the RTL."""

import itertools
import random

import numpy as np
import pytest
from amaranth import unsigned

from dstar.golden.fmdq import LANES, SLICE_BITS, Schedule, fmdq_encode, schedule_tile
from dstar.hw.fmdq.bucket import BucketOrder
from dstar.hw.fmdq.quant_unit import DESCENDING, QuantUnit, default_buffers
from dstar.hw.fmdq.sorter import BitonicSorter, SortNetwork, network, network_depth, register_stages
from dstar.sim.fmdq_qu_cycles import Window, predict, windows_of
from dstar.sim.pysim_driver import simulate

# ----- expected streams from golden -----

def schedule_ref(shift, width, window, descending):
    """``golden.fmdq.schedule_tile`` with either order of total shifts (ties by channel), for
    the unit's other sort direction (checked equal to golden's in golden's direction)."""
    lanes = []
    for c0 in range(0, len(shift), window):
        pairs = sorted(((int(shift[c]) + SLICE_BITS * j) * (-1 if descending else 1), c, j)
                       for c in range(c0, min(c0 + window, len(shift)))
                       for j in range(int(width[c]) // SLICE_BITS))
        run = []
        for key, c, j in pairs + [(None, 0, 0)]:
            if run and (key != run[0][0] or len(run) == LANES):
                pad = LANES - len(run)
                lanes.append((abs(run[0][0]), [(c_, j_, j_ == width[c_] // SLICE_BITS - 1, 1)
                                               for _, c_, j_ in run] + [(c0, 0, 0, 0)] * pad))
                run = []
            run.append((key, c, j))
    if not lanes:
        e = np.zeros((0, LANES), np.int64)
        return Schedule(e, e, e.astype(bool), np.zeros(0, np.int64), e.astype(bool))
    arr = np.array([[ln for ln in g] for _, g in lanes], np.int64)     # (groups, LANES, 4)
    return Schedule(arr[..., 0], arr[..., 1], arr[..., 3].astype(bool),
                    np.array([s for s, _ in lanes], np.int64), arr[..., 2].astype(bool))


def expected(d, qu, tau=None, descending=None, windows=None):
    """Golden's groups and updates of one tile ``d`` (``(N, K)``, ``N <= tokens``) as the
    unit's payloads: (groups, updates), plain tuples; ``last`` on each window's last group, an
    empty first window as one empty group (as ``tests/hw/test_fmdq_pe_array.py``'s units),
    windows in the order ``windows`` (their first channels; default ascending). The unit's sort
    direction is golden's (``DESCENDING``) or, for the other one, ``schedule_ref``'s; ``tau``
    and ``descending`` override the unit's (a mutant's expectation)."""
    T, S, W = qu.tokens, qu.per_beat, qu.window
    tau = qu.tau if tau is None else tau
    descending = qu.descending if descending is None else descending
    n, k = d.shape
    enc = fmdq_encode(d, T, qu.e_max, tau)
    sl = enc.slices()
    groups, updates = [], []
    for c0 in (range(0, k, W) if windows is None else windows):
        sh, wd = enc.shift[0, c0:c0 + W], enc.width[0, c0:c0 + W]
        sched = (schedule_tile(sh, wd, W) if descending == DESCENDING
                 else schedule_ref(sh, wd, W, descending))
        for g in range(sched.groups):
            ch = sched.channel[g] + c0
            lanes = tuple((int(ch[i]), int(sched.signed[g, i]), int(sched.valid[g, i]))
                          for i in range(4))
            act = tuple(tuple(int(sl[t, ch[i], sched.slice[g, i]]) & 3
                              if t < n and sched.valid[g, i] else 0 for i in range(4))
                        for t in range(T))
            groups.append((int(sched.shift[g]), lanes, act, int(g == sched.groups - 1)))
        if not sched.groups and c0 == 0:  # an empty first window: one empty group
            groups.append((0, ((0, 0, 0),) * 4, ((0,) * 4,) * T, 1))
        end = min(c0 + W, k)
        for b0 in range(c0, end, S):
            subs = []
            for c in range(b0, b0 + S):
                if c < k:
                    q = tuple(int(enc.q[t, c]) if t < n else 0 for t in range(T))
                    subs.append((int(enc.shift[0, c]), int(enc.width[0, c]),
                                 int(enc.clipped[0, c]), int(enc.saturated[0, c]), q))
                else:
                    subs.append((0, 0, 0, 0, (0,) * T))
            updates.append((b0, tuple(subs), int(b0 + S >= end)))
    return groups, updates


def beats_of(d, qu, windows=None):
    """Input beats of one tile: sub-channels padded to ``tokens`` and to a multiple of
    ``per_beat`` with zeros, window by window (``windows``: their first channels, default
    ascending), ``last`` on each window's last beat."""
    T, S, W = qu.tokens, qu.per_beat, qu.window
    n, k = d.shape
    kp = -(-k // S) * S
    pad = np.zeros((T, kp), np.int64)
    pad[:n, :k] = d
    out = []
    for c0 in (range(0, k, W) if windows is None else windows):
        end = min(c0 + W, kp)
        out += [{"d": [[int(x) for x in pad[:, c]] for c in range(b0, b0 + S)],
                 "channel": b0, "last": int(b0 + S >= end)} for b0 in range(c0, end, S)]
    return out


def group_of(p, T):
    return (int(p.shift), tuple((int(p.lane[i].channel), int(p.lane[i].signed),
                                 int(p.lane[i].valid)) for i in range(4)),
            tuple(tuple(int(p.act[t][i]) for i in range(4)) for t in range(T)),
            int(p.last))


def update_of(p, T, S):
    return (int(p.channel), tuple((int(s.shift), int(s.width), int(s.clipped),
                                   int(s.saturated), tuple(int(x) for x in s.q))
                                  for s in (p.sub[i] for i in range(S))), int(p.last))


def _items(tiles):
    """``tiles``: each a tile ``d`` (all its windows in order) or ``(d, windows)`` (the windows
    with those first channels)."""
    return [t if isinstance(t, tuple) else (t, None) for t in tiles]


def run_unit(qu, tiles, rng=None, p_valid=1.0, p_o=1.0, p_u=1.0):
    """Feed ``tiles`` (see ``_items``) through ``qu``; return (groups and updates with the cycle
    each was taken, the clipped/saturated counters at the end)."""
    rng = rng or random.Random(0)
    beats = [b for d, w in _items(tiles) for b in beats_of(d, qu, w)]
    n_groups = sum(len(expected(d, qu, windows=w)[0]) for d, w in _items(tiles))
    got_o, got_u = [], []
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
            if iv and ir:
                i += 1
            if ov and orr:
                got_o.append((group_of(op, qu.tokens), cycle))
            if uv and ur:
                got_u.append((update_of(up, qu.tokens, qu.per_beat), cycle))
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


def check(qu, tiles, want=None, **kw):
    """Run ``tiles`` and compare every group, update and counter with golden (``want``:
    ``expected``'s overrides); returns the cycles the groups and the updates were taken."""
    want = want or {}
    got_o, got_u, counters = run_unit(qu, tiles, **kw)
    want_o, want_u = [], []
    clipped = saturated = 0
    for d, windows in _items(tiles):
        g, u = expected(d, qu, windows=windows, **want)
        want_o += g
        want_u += u
        enc = fmdq_encode(d, qu.tokens, qu.e_max, want.get("tau", qu.tau))
        fed = np.zeros(d.shape[1], bool)
        for c0 in (range(0, d.shape[1], qu.window) if windows is None else windows):
            fed[c0:c0 + qu.window] = True
        clipped += int(enc.clipped[0, fed].sum())
        saturated += int(enc.saturated[0, fed].sum())
    assert [g for g, _ in got_o] == want_o
    assert [u for u, _ in got_u] == want_u
    assert counters == [clipped, saturated]
    return [c for _, c in got_o], [c for _, c in got_u]


# ----- test data -----

def mixed_tile(rng, n, k, diff_bits, zero_frac=0.2):
    """A tile whose channels span every width: per channel a magnitude from 0 to the diff range
    (some channels all zero, some constant, some one-signed)."""
    top = (1 << (diff_bits - 1)) - 1
    scales = np.array([0, 1, 2, 3, 8, 31, 127, 128, 300, 1000, top])
    d = np.zeros((n, k), np.int64)
    for c in range(k):
        if rng.random() < zero_frac:
            continue
        s = int(rng.choice(scales))
        kind = rng.integers(4)
        if kind == 0:
            col = rng.integers(-s, s + 1, size=n)
        elif kind == 1:
            col = np.full(n, rng.integers(-s, s + 1))
        elif kind == 2:
            col = rng.integers(0, s + 1, size=n)
        else:
            col = -rng.integers(0, s + 1, size=n)
        d[:, c] = np.clip(col, -top - 1, top)
    return d


def adversarial_tiles(T, W, diff_bits, e_max, tau=0):
    """All-zero, every width at shift 0, every shift, the largest shift, saturation, exact
    fitting edges, empty windows first, in the middle and last."""
    top = (1 << (diff_bits - 1)) - 1
    k = 2 * W + 3
    tiles = [np.zeros((T, k), np.int64)]                          # no group at all
    widths = np.zeros((T, 2 * W), np.int64)
    for c, v in enumerate([1, -2, 7, -8, 31, -32, 127, -128, -1, 2, 8, -9, 32, -33, 0, 3]):
        widths[:, c % (2 * W)] = v if c < 2 * W else widths[:, c % (2 * W)]
    tiles.append(widths)                                          # INT2, 4, 6, 8 at shift 0
    big = np.zeros((T, k), np.int64)
    big[0, :] = top                                               # saturated at e_max
    big[-1, 1::2] = -top - 1
    hi = 255 * (1 << (e_max - 1)) - 1 if e_max else 127           # fits exactly at e_max
    big[:, 2] = hi
    big[:, 3] = hi + 1
    big[:, 4] = -(257 * (1 << (e_max - 1)) if e_max else 128)
    tiles.append(np.clip(big, -top - 1, top))
    rng = np.random.default_rng(T * W + e_max)
    shifts = np.zeros((T, k), np.int64)
    for c in range(k):                                            # shift c % (e_max + 1)
        s = c % (e_max + 1)
        shifts[:, c] = rng.integers(-(127 << s), (127 << s) + 1, size=T)
        shifts[0, c] = (255 << s >> 1) - 1 if s else 127
    tiles.append(np.clip(shifts, -top - 1, top))
    sparse = np.zeros((T, k), np.int64)
    sparse[:, W] = 5 + tau                                             # only the middle window
    tiles.append(sparse)
    first = np.zeros((T, k), np.int64)
    first[:, 0] = -3 - tau                                             # last windows empty
    tiles.append(first)
    last = np.zeros((T, k), np.int64)
    last[:, k - 1] = 100                                          # first windows empty
    tiles.append(last)
    return tiles


CONFIGS = {
    "base": dict(tokens=4, window=8, e_max=3, tau=0, diff_bits=12, channel_bits=5),
    "tau": dict(tokens=3, window=6, e_max=4, tau=5, diff_bits=11, channel_bits=5, per_beat=3),
    "wide": dict(tokens=2, window=8, e_max=7, tau=0, diff_bits=17, channel_bits=6,
                 per_beat=2, reg_every=3),
    "one": dict(tokens=1, window=1, e_max=0, tau=1, diff_bits=9, channel_bits=3),
    "tight": dict(tokens=4, window=8, e_max=5, tau=2, diff_bits=12, channel_bits=6,
                  per_beat=2, buffers=2),
}


#: Every ordering stage of the unit: the two sort networks and the bucket stage.
ORDERS = list(SortNetwork)


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
@pytest.mark.parametrize("name", CONFIGS)
def test_quant_unit_matches_golden(name, order):
    """Random and adversarial tiles, one after the other (K not a multiple of the window nor of
    a beat, tiles with fewer tokens than T), every output stream checked bit for bit."""
    kw = dict(CONFIGS[name], network=order)
    qu = QuantUnit(**kw)
    rng = np.random.default_rng(sum(map(ord, name)))
    T, W, db = kw["tokens"], kw["window"], kw["diff_bits"]
    tiles = adversarial_tiles(T, W, db, kw["e_max"], kw["tau"])
    for k in (W, 2 * W + 1, 3 * W - 1, 1):
        tiles.append(mixed_tile(rng, T, k, db))
    tiles.append(mixed_tile(rng, max(1, T - 1), W + 1, db))      # a short tile
    if kw["tau"]:
        tiles.append(rng.integers(-2 * kw["tau"], 2 * kw["tau"] + 1, size=(T, 2 * W)))
    dense = np.full((T, 4 * W), 100)
    dense[0] = -128                                               # INT8 at shift 0: G = K
    tiles.append(dense)
    same = np.full((T, 2 * W + 3), min(300, (1 << (db - 1)) - 1))    # every channel one shift
    same[0] = -same[0]
    tiles += [same, np.full((T, W), (1 << (db - 1)) - 1)]         # all width 8, saturated
    groups, updates = check(qu, tiles)
    # The cycle model, cycle for cycle (inputs without gaps, outputs always ready).
    assert (qu.buffers <= qu.order_capacity) == (name != "one" or not order.is_network)
    if qu.buffers <= qu.order_capacity:
        pred = predict([windows_of(d, T, qu.e_max, qu.tau, W, qu.per_beat) for d in tiles],
                       qu.sort_latency, qu.buffers, qu.order_capacity)
        assert groups == pred.groups
        assert updates == pred.updates


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
def test_quant_unit_window_major(order):
    """The PE array's order (every tile of one window, then the next window): windows of two
    tiles interleaved, the last partial, each a unit ending in ``last``."""
    kw = dict(CONFIGS["base"], network=order)
    qu = QuantUnit(**kw)
    rng = np.random.default_rng(17)
    a, b = mixed_tile(rng, 4, 19, 12), mixed_tile(rng, 3, 19, 12)
    check(qu, [(a, [0]), (b, [0]), (a, [8]), (b, [8]), (b, [16]), (a, [16])])


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
@pytest.mark.parametrize("name", ["base", "wide"])
def test_quant_unit_back_pressure(name, order):
    """Random gaps on the input and random back-pressure on both outputs, with the fewest code
    buffers (2): no beat lost, duplicated or reordered."""
    kw = dict(CONFIGS[name], buffers=2, network=order)
    qu = QuantUnit(**kw)
    rng = np.random.default_rng(7)
    T, W, db = kw["tokens"], kw["window"], kw["diff_bits"]
    tiles = adversarial_tiles(T, W, db, kw["e_max"])[:4]
    tiles += [mixed_tile(rng, T, k, db) for k in (2 * W + 1, W - 1)]
    check(qu, tiles, rng=random.Random(name), p_valid=0.7, p_o=0.5, p_u=0.6)


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
def test_quant_unit_other_direction(order):
    """The sort direction is one parameter: the unit built for the other order of total shifts
    matches the reference schedule of that order."""
    kw = dict(CONFIGS["base"], descending=not DESCENDING, network=order)
    qu = QuantUnit(**kw)
    rng = np.random.default_rng(11)
    check(qu, [mixed_tile(rng, 4, k, 12) for k in (8, 19)] + adversarial_tiles(4, 8, 12, 3)[1:3])


def test_schedule_ref_is_golden():
    """The test's reference schedule equals golden's in golden's direction."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        k, w = int(rng.integers(1, 20)), int(rng.integers(1, 9))
        shift = rng.integers(0, 4, size=k)
        width = rng.choice([0, 2, 4, 6, 8], size=k)
        a, b = schedule_tile(shift, width, w), schedule_ref(shift, width, w, DESCENDING)
        for f in ("channel", "slice", "valid", "shift", "signed"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: o.value)
def test_mutants_are_detected(order):
    """The checks can fail: a unit sorting the other way, or with another dead zone, differs
    from golden on ordinary data."""
    rng = np.random.default_rng(13)
    tiles = [mixed_tile(rng, 4, 8, 12, zero_frac=0)]
    flipped = QuantUnit(**dict(CONFIGS["base"], descending=not DESCENDING, network=order))
    with pytest.raises(AssertionError):
        check(flipped, tiles, want={"descending": DESCENDING})
    dead = QuantUnit(**dict(CONFIGS["base"], tau=3, network=order))
    with pytest.raises(AssertionError):
        check(dead, [np.array([[1, 2, 3, 4, -2, 9, 0, 1]] * 4)], want={"tau": 0})


@pytest.mark.parametrize("n,reg_every,presorted,kind",
                         [(1, 1, 1, "bitonic"), (3, 1, 1, "bitonic"), (8, 2, 1, "bitonic"),
                          (13, 3, 1, "bitonic"), (32, 1, 1, "bitonic"), (24, 2, 4, "bitonic"),
                          (13, 3, 1, "odd_even"), (24, 2, 4, "odd_even"),
                          (32, 1, 4, "odd_even")])
def test_sorter_matches_sorted(n, reg_every, presorted, kind):
    """The sort network alone against ``sorted`` on random keys with many ties, random gaps and
    back-pressure: keys in order, each vector's entries kept, vectors in order (with
    ``presorted``, each aligned run of that many entries given ascending)."""
    rng = random.Random(n * 10 + reg_every)
    dut = BitonicSorter(unsigned(7), n, key=lambda e: e[:3], tag=8, reg_every=reg_every,
                        presorted=presorted, kind=SortNetwork(kind))
    vecs = []
    for _ in range(40):
        v = [rng.randrange(128) for _ in range(n)]
        vecs.append([x for r in range(0, n, presorted)
                     for x in sorted(v[r:r + presorted], key=lambda x: x & 7)])
    got = []

    async def bench(ctx):
        i = 0
        while len(got) < len(vecs):
            offer = i < len(vecs) and rng.random() < 0.8
            if offer:
                ctx.set(dut.i.payload, {"entries": vecs[i], "tag": i})
            ctx.set(dut.i.valid, int(offer))
            ctx.set(dut.o.ready, int(rng.random() < 0.6))
            _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if iv and ir:
                i += 1
            if ov and orr:
                got.append(([int(x) for x in op.entries], int(op.tag)))

    simulate(dut, bench)
    for k, (entries, tag) in enumerate(got):
        assert tag == k
        assert [x & 7 for x in entries] == sorted(x & 7 for x in vecs[k])
        assert sorted(entries) == sorted(vecs[k])
    # The network alone (unpadded sizes too) on every 0/1 input of up to 12 entries would be
    # the 0-1 principle; random integer vectors of every size up to 40 instead.
    for size, pre in [(s, 1) for s in range(1, 41)] + [(s, 4) for s in range(4, 41, 4)]:
        stages = network(SortNetwork(kind), size, pre)
        for _ in range(20):
            v = [rng.randrange(6) for _ in range(size)]
            v = [x for r in range(0, size, pre) for x in sorted(v[r:r + pre])]
            w = v + [99] * ((1 << max(0, (size - 1).bit_length())) - size)
            for stage in stages:
                for a, b in stage:
                    if w[a] > w[b]:
                        w[a], w[b] = w[b], w[a]
            assert w[:size] == sorted(v)


def test_cycle_model_throughput():
    """The model at a default-like size (T = window = 64, one sub-channel per beat): windows
    with at least as many groups as beats leave one group per cycle without a gap; fewer groups
    leave at the input's rate; and at every group count the default buffers cost no cycle
    against unlimited ones (here and at the test sizes)."""
    latency = register_stages(4 * 64, 1, 4)
    buffers = default_buffers(64, 1, latency)
    dense = [[Window(64, 64) for w in range(4)] for _ in range(4)]
    pred = predict(dense, latency, buffers)
    assert pred.buffer_waits == 0
    assert np.all(np.diff(pred.groups) == 1)
    sparse = [[Window(64, 40) for w in range(4)] for _ in range(4)]
    g = predict(sparse, latency, buffers).groups
    assert g[480] - g[160] == 8 * 64                 # windows 4 to 12: 64 input cycles each
    for w, s, r in [(64, 1, 1), (64, 1, 3), (64, 2, 1), (8, 1, 1), (8, 2, 3), (4, 1, 1)]:
        beats, latency = w // s, register_stages(4 * w, r, 4)
        for groups in (0, 1, beats // 2, beats - 1, beats, beats + 3, 2 * beats):
            tiles = [[Window(beats, groups) for k in range(4)] for _ in range(4)]
            assert (predict(tiles, latency, default_buffers(w, s, latency)).cycles
                    == predict(tiles, latency, latency).cycles)
            # The bucket stage (latency 1, a FIFO slot per buffer): against 64 buffers.
            nb = default_buffers(w, s, 1)
            assert (predict(tiles, 1, nb, nb).cycles == predict(tiles, 1, 64, 64).cycles)


@pytest.mark.parametrize("kind", [k for k in SortNetwork if k.is_network])
def test_networks_zero_one(kind):
    """The 0-1 principle: each network sorts every 0/1 input of 12 entries (padded to 16) and
    of 16 entries in presorted runs of 4 (every run a count of ones), so it sorts every such
    input; the odd-even network has the bitonic one's depth and fewer comparators."""
    for size, pre in [(12, 1), (16, 4)]:
        stages = network(kind, size, pre)
        assert len(stages) == network_depth(size, pre)
        if pre == 1:
            vecs = [[(v >> b) & 1 for b in range(size)] for v in range(1 << size)]
        else:
            vecs = [[int(x < ones) for ones in c for x in reversed(range(pre))]
                    for c in itertools.product(range(pre + 1), repeat=size // pre)]
        for v in vecs:
            w = v + [2] * ((1 << (size - 1).bit_length()) - size)
            for stage in stages:
                for a, b in stage:
                    if w[a] > w[b]:
                        w[a], w[b] = w[b], w[a]
            assert w[:size] == sorted(v)
    big = [sum(map(len, network(k, 256, 4))) for k in (SortNetwork.BITONIC, SortNetwork.ODD_EVEN)]
    assert big == [4224, 3519]


@pytest.mark.parametrize("channels,levels,lanes,depth", [(5, 3, 4, 2), (1, 1, 4, 1),
                                                         (8, 14, 4, 3), (6, 2, 2, 1)])
def test_bucket_order_matches_sorted(channels, levels, lanes, depth):
    """The bucket stage alone against ``sorted`` (level, channel) pairs cut into runs of up to
    ``lanes`` of one level, on random masks (empty, full, single levels and channels among
    them) with random gaps and back-pressure: every group, ``last``, ``empty`` and tag, windows
    in order."""
    rng = random.Random(channels * 100 + levels)
    dut = BucketOrder(channels, levels, tag=6, depth=depth, lanes=lanes)
    full = (1 << channels) - 1
    wins = [[0] * levels, [full] * levels, [full] + [0] * (levels - 1),
            [0] * (levels - 1) + [1 << (channels - 1)]]
    wins += [[rng.choice([0, full, rng.randrange(full + 1)]) for _ in range(levels)]
             for _ in range(40)]
    want = []
    for w, masks in enumerate(wins):
        pairs = [(lv, c) for lv in range(levels) for c in range(channels) if masks[lv] >> c & 1]
        runs = []
        for lv, c in pairs:
            if runs and runs[-1][0] == lv and len(runs[-1][1]) < lanes:
                runs[-1][1].append(c)
            else:
                runs.append((lv, [c]))
        if not runs:
            want.append((0, [(0, 0)] * lanes, 1, 1, w % 64))
        for k, (lv, chs) in enumerate(runs):
            want.append((lv, [(c, 1) for c in chs] + [(0, 0)] * (lanes - len(chs)),
                         int(k == len(runs) - 1), 0, w % 64))
    got = []

    async def bench(ctx):
        i = 0
        while len(got) < len(want):
            offer = i < len(wins) and rng.random() < 0.7
            if offer:
                ctx.set(dut.i.payload, {"masks": wins[i], "tag": i % 64})
            ctx.set(dut.i.valid, int(offer))
            ctx.set(dut.o.ready, int(rng.random() < 0.6))
            _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if iv and ir:
                i += 1
            if ov and orr:
                got.append((int(op.level), [(int(op.lane[k].ch), int(op.lane[k].valid))
                                            for k in range(lanes)],
                            int(op.last), int(op.empty), int(op.tag)))
        for _ in range(5):
            ctx.set(dut.o.ready, 1)
            ctx.set(dut.i.valid, 0)
            _, _, ov = await ctx.tick().sample(dut.o.valid)
            assert not ov, "a group too many"

    simulate(dut, bench)
    assert got == want
