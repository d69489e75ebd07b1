"""Stream driver of ``dstar.hw.softmax.SoftmaxUnit`` (any simulator) and its cocotb testbench.

``run_rows`` drives rows through the unit's four streams through a small I/O adapter (the
Amaranth-simulator one is in ``tests/hw/test_softmax.py``, the cocotb one is ``CocotbIO``),
``lanes`` keys per beat, with optional random valid gaps and random ready, checks the stream
rules on the outputs (a valid beat stays valid and unchanged until taken) and records every
handshake's cycle.

The cocotb test reads everything from files named by environment variables set by
``tests/hw/test_softmax_icarus.py``: ``DSTAR_SOFTMAX_PARAMS`` (JSON: the payload fields' offsets
and widths in the flat Verilog vectors, the unit's lanes) and ``DSTAR_SOFTMAX_CASES`` (``.npz``:
per case the rows, their multipliers and the stall probabilities; the golden mantissas, shifts,
``l``, ``r``, ``L`` and the cycle model's schedule are computed here). Each case runs on a
freshly reset design; integers are compared with equality.
"""

import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from dstar.golden.softmax import reciprocal, softmax_groups
from dstar.sim.case_files import from_env
from dstar.sim.softmax_cycles import schedule

__all__ = ["expected", "octave_rows", "real_rows", "run_rows", "check", "RunResult", "CocotbIO"]

STREAMS_IN = ("i_row", "i_logit")
STREAMS_OUT = ("o_p", "o_sum")


def expected(rows, m, sh, frac_bits, group, e_max):
    """Golden per-row mantissas ``p`` and per-key group shifts (lists of int arrays) and
    ``(l, r, L)`` (int arrays)."""
    ps, shifts, ls = [], [], []
    for row, mi, si in zip(rows, m, sh, strict=True):
        p, shift, lsum = softmax_groups(np.asarray(row, dtype=np.int64)[None], [mi], [si],
                                        frac_bits=frac_bits, group=group, e_max=e_max)
        ps.append(p[0])
        shifts.append(np.repeat(shift[0], group)[:len(row)])
        ls.append(int(lsum[0]))
    r, big_l = reciprocal(np.array(ls, dtype=np.int64))
    return ps, shifts, np.array(ls, dtype=np.int64), r, big_l


def real_rows(layer: int = 0, head: int = 0, rows=range(16), frac_bits: int = 6, seed: int = 0):
    """Integer logits of the bundled DiT (NumPy golden model, one noise image of label 3 at
    ``t = 500``): rows ``rows`` of head ``head`` of layer ``layer``, quantized as
    ``dstar.golden.attention.AttentionReuse`` does (INT8 Q per token, K per head), with each row's
    multiplier. Returns ``(rows, m, sh)`` (lists)."""
    import math

    from dstar.golden.attention import quantize_per_head, quantize_per_token
    from dstar.golden.dit import DiT, float_attention
    from dstar.golden.softmax import logit_multiplier

    dit = DiT.bundled()
    s = dit.shape
    name = f"blocks.{layer}.attn"
    cap = {}

    def attn(n, q, k, v, step):
        if n == name:
            cap["qk"] = (q, k)
        return float_attention(n, q, k, v, step)

    x = np.random.default_rng(seed).standard_normal(
        (1, s.in_channels, s.image_size, s.image_size)).astype(np.float32)
    dit.forward(x, np.array([500]), np.array([3]), attention=attn)
    q, k = cap["qk"]
    q_int, s_q = quantize_per_token(q)
    k_int, s_k = quantize_per_head(k)
    m, sh = logit_multiplier(s_q * s_k[..., None] / math.sqrt(q.shape[-1]), frac_bits)
    logits = q_int[0, head].astype(np.int64) @ k_int[0, head].astype(np.int64).T
    rows = list(rows)
    return ([logits[i].tolist() for i in rows], m[0, head, rows].tolist(),
            sh[0, head, rows].tolist())


def octave_rows(cfg, lengths, seed):
    """Rows with ``x = d`` (``m = 1, sh = 0``) whose groups sit at different octaves: group ``g``
    of a row holds distances in ``[o_g * 2**F, (o_g + 3) * 2**F)`` for a random octave ``o_g``
    in ``[0, e_max + 12]`` (so some groups clamp at ``e_max`` and some keys are cut to 0), the
    row max in a random group."""
    rng = np.random.default_rng(seed)
    f, g = cfg.attn_frac_bits, cfg.group
    rows = []
    for length in lengths:
        d = np.empty(length, dtype=np.int64)
        for k in range(0, length, g):
            o = int(rng.integers(0, cfg.e_max + 13))
            d[k:k + g] = rng.integers(o << f, (o + 3) << f, size=len(d[k:k + g]))
        d[rng.integers(0, length)] = 0
        rows.append((-d + int(rng.integers(-1000, 1000))).tolist())
    return rows, [1] * len(rows), [0] * len(rows)


class RunResult:
    """What the unit produced and when: per row the keys' ``p`` and ``shift`` lists, the beats'
    ``last`` flags, the ``p`` of lanes past the row's end (``pad``) and ``(l, r, L)``; the cycle
    of each handshake, per beat (cycle 0: the first cycle the first header is offered)."""

    def __init__(self, nrows, lanes):
        self.lanes = lanes
        self.p = [[] for _ in range(nrows)]
        self.shift = [[] for _ in range(nrows)]
        self.last = [[] for _ in range(nrows)]
        self.pad = [[] for _ in range(nrows)]
        self.sums = []
        self.head, self.p_cycles, self.sum_cycles = [], [[] for _ in range(nrows)], []
        self.logit_cycles = [[] for _ in range(nrows)]
        self.cycles = 0


def _beats(rows, lanes, pad):
    """``(row, logits)`` of every ``i_logit`` beat: ``lanes`` logits, the last beat of a row
    filled up with ``pad``."""
    out = []
    for k, row in enumerate(rows):
        row = [int(s) for s in row]
        row += [pad] * (-len(row) % lanes)
        out += [(k, row[i:i + lanes]) for i in range(0, len(row), lanes)]
    return out


async def run_rows(io, rows, m, sh, max_row, *, lanes=1, pad=0, n_hdr=None, p_valid=1.0,
                   p_ready=1.0, seed=0):
    """Drive ``rows`` (lists of logits) with headers ``(m, sh, n)``, ``lanes`` logits per beat
    (the last beat of a row filled up with ``pad``, which the unit must ignore); ``n_hdr``
    overrides the header's ``n`` (the unit clamps it into ``1 .. max_row``; the row must then
    hold that many logits). Returns a ``RunResult``; raises ``AssertionError`` on a stream-rule
    violation or when the unit stalls."""
    rng = random.Random(seed)
    nrows = len(rows)
    n_hdr = [len(r) for r in rows] if n_hdr is None else list(n_hdr)
    flat = _beats(rows, lanes, pad)
    res = RunResult(nrows, lanes)
    guard = 40 * (len(flat) + 30 * nrows) + 200
    hv = lv = False
    hi = li = 0
    pk = 0                                  # row of the next p
    held = {}                               # output beats offered and not taken last cycle
    cyc = 0
    while len(res.sums) < nrows or pk < nrows:
        assert cyc < guard, f"unit stalled: {len(res.sums)} sums, {pk} rows of p after {cyc}"
        if not hv and hi < nrows and rng.random() < p_valid:
            hv = True
            io.put("i_row", {"m": int(m[hi]), "sh": int(sh[hi]), "n": int(n_hdr[hi])})
        if not lv and li < len(flat) and rng.random() < p_valid:
            lv = True
            io.put("i_logit", {"s": flat[li][1]})
        io.set_valid("i_row", hv)
        io.set_valid("i_logit", lv)
        rdy = {s: rng.random() < p_ready for s in STREAMS_OUT}
        for s in STREAMS_OUT:
            io.set_ready(s, rdy[s])
        await io.settle()
        if hv and io.ready("i_row"):
            res.head.append(cyc)
            hi += 1
            hv = False
        if lv and io.ready("i_logit"):
            res.logit_cycles[flat[li][0]].append(cyc)
            li += 1
            lv = False
        for s in STREAMS_OUT:
            if not io.valid(s):
                assert s not in held, f"{s}: valid dropped before the beat was taken ({cyc})"
                continue
            beat = io.payload(s)
            if s in held:
                assert beat == held[s], f"{s}: payload changed while waiting ({cyc})"
            if not rdy[s]:
                held[s] = beat
                continue
            held.pop(s, None)
            if s == "o_p":
                assert pk < nrows, f"o_p: beat after the last row ({cyc})"
                keys = min(lanes, len(rows[pk]) - len(res.p[pk]))
                res.p[pk] += beat["p"][:keys]
                res.pad[pk] += beat["p"][keys:]
                res.shift[pk] += [beat["shift"]] * keys
                res.last[pk].append(beat["last"])
                res.p_cycles[pk].append(cyc)
                if beat["last"]:
                    pk += 1
            else:
                assert len(res.sums) < nrows, f"o_sum: beat after the last row ({cyc})"
                res.sums.append((beat["l"], beat["r"], beat["big_l"]))
                res.sum_cycles.append(cyc)
        await io.tick()
        cyc += 1
    # A few idle cycles: nothing more may come out.
    for s in STREAMS_IN:
        io.set_valid(s, False)
    for _ in range(30):
        for s in STREAMS_OUT:
            assert not io.valid(s), f"{s}: extra beat after the run"
        await io.tick()
    res.cycles = max(res.sum_cycles[-1], res.p_cycles[-1][-1]) + 1
    return res


def check(res, rows, m, sh, frac_bits, group, e_max, sched=None):
    """Failures (strings) of ``res`` against the golden model (``group``/``e_max``: the
    configuration's) and, if given, the cycle model's schedule."""
    exp_p, exp_s, exp_l, exp_r, exp_bl = expected(rows, m, sh, frac_bits, group, e_max)
    fails = []
    for k in range(len(rows)):
        if res.p[k] != exp_p[k].tolist():
            fails.append(f"row {k}: p {res.p[k]} != {exp_p[k].tolist()}")
        if res.shift[k] != exp_s[k].tolist():
            fails.append(f"row {k}: shift {res.shift[k]} != {exp_s[k].tolist()}")
        want_last = [0] * (-(-len(rows[k]) // res.lanes) - 1) + [1]
        if res.last[k] != want_last:
            fails.append(f"row {k}: last flags {res.last[k]}")
        if any(res.pad[k]):
            fails.append(f"row {k}: lanes past the row's end carry p {res.pad[k]}")
        want = (int(exp_l[k]), int(exp_r[k]), int(exp_bl[k]))
        if res.sums[k] != want:
            fails.append(f"row {k}: (l, r, L) {res.sums[k]} != {want}")
    if sched is not None:
        got = (res.head, res.logit_cycles, res.p_cycles, res.sum_cycles)
        want = (sched.head, sched.logits, sched.p, sched.sums)
        for name, g, w in zip(("head", "logits", "p", "sums"), got, want, strict=True):
            if g != w:
                fails.append(f"{name} cycles {g} != model {w}")
    return fails


# ----- cocotb -----

class CocotbIO:
    """The adapter ``run_rows`` / ``run_values`` need, on the flat Verilog ports
    (``<stream>__valid`` etc.)."""

    def __init__(self, dut, fields):
        self.dut = dut
        # stream -> {field: [offset, width, signed]}, or [offset, element width, signed,
        # elements] for an array field (its value a list)
        self.fields = fields

    def _h(self, stream, member):
        return getattr(self.dut, f"{stream}__{member}")

    def put(self, stream, values):
        word = 0
        for name, (off, width, _, *count) in self.fields[stream].items():
            v = values.get(name, [0] * count[0] if count else 0)
            for i, e in enumerate(v if count else [v]):
                word |= (int(e) & ((1 << width) - 1)) << (off + i * width)
        self._h(stream, "payload").value = word

    def set_valid(self, stream, v):
        self._h(stream, "valid").value = int(v)

    def set_ready(self, stream, v):
        self._h(stream, "ready").value = int(v)

    def ready(self, stream):
        return bool(int(self._h(stream, "ready").value))

    def valid(self, stream):
        return bool(int(self._h(stream, "valid").value))

    def payload(self, stream):
        word = int(self._h(stream, "payload").value)
        out = {}
        for name, (off, width, signed, *count) in self.fields[stream].items():
            vs = [(word >> (off + i * width)) & ((1 << width) - 1) for i in range(*count or [1])]
            vs = [v - (1 << width) if signed and v >> (width - 1) else v for v in vs]
            out[name] = vs if count else vs[0]
        return out

    async def settle(self):
        """Let this cycle's writes and the logic they drive settle before reading."""
        await ReadOnly()

    async def tick(self):
        await FallingEdge(self.dut.clk)


def _rows(c):
    bounds = np.cumsum(c["lengths"])[:-1]
    return [r.tolist() for r in np.split(c["logits"], bounds)]


@cocotb.test()
async def test_cases(dut):
    """Every case of ``DSTAR_SOFTMAX_CASES``: bit-exact ``p``, ``l``, ``r``, ``L``; with no
    stalls, every handshake at the cycle model's cycle."""
    Clock(dut.clk, 10, unit="ns").start()
    params, cases = from_env("DSTAR_SOFTMAX_PARAMS", "DSTAR_SOFTMAX_CASES")
    io = CocotbIO(dut, params["fields"])
    failures = []
    for name, c in cases:
        for s in STREAMS_IN:
            io.set_valid(s, False)
            io.put(s, {})
        for s in STREAMS_OUT:
            io.set_ready(s, False)
        dut.rst.value = 1
        await io.tick()
        await io.tick()
        dut.rst.value = 0
        await io.tick()
        rows = _rows(c)
        pv, pr = (float(x) for x in c["stall"])
        lanes = params["lanes"]
        res = await run_rows(io, rows, c["m"], c["sh"], params["max_row"], lanes=lanes,
                             pad=(1 << (params["logit_bits"] - 1)) - 1,
                             n_hdr=c["n_hdr"].tolist(), p_valid=pv, p_ready=pr,
                             seed=int(c["seed"]))
        sched = schedule(c["lengths"], lanes) if pv == 1.0 and pr == 1.0 else None
        fails = check(res, rows, c["m"], c["sh"], params["frac_bits"], params["group"],
                      params["e_max"], sched)
        cocotb.log.info(f"{name}: {len(rows)} rows, {res.cycles} cycles, "
                        f"{len(fails)} failures")
        failures += [f"{name}: {f}" for f in fails[:5]]
    assert not failures, "; ".join(failures)


async def run_values(io, values, *, p_valid=1.0, p_ready=1.0, seed=0):
    """Drive ``values`` (payload dicts) into ``i`` and collect ``o``'s payloads (one in, one
    out), with random valid gaps and ready; checks the stream rules on ``o``."""
    rng = random.Random(seed)
    got, held, offer, i, cyc = [], None, False, 0, 0
    while len(got) < len(values):
        assert cyc < 40 * len(values) + 100, f"stalled after {len(got)} outputs"
        if not offer and i < len(values) and rng.random() < p_valid:
            offer = True
            io.put("i", values[i])
        io.set_valid("i", offer)
        rdy = rng.random() < p_ready
        io.set_ready("o", rdy)
        await io.settle()                   # i.ready follows o.ready combinationally
        if offer and io.ready("i"):
            i += 1
            offer = False
        if io.valid("o"):
            beat = io.payload("o")
            assert held is None or beat == held, f"o: payload changed while waiting ({cyc})"
            held = None if rdy else beat
            if rdy:
                got.append(beat)
        else:
            assert held is None, f"o: valid dropped before the beat was taken ({cyc})"
        await io.tick()
        cyc += 1
    return got


@cocotb.test()
async def test_normalizer(dut):
    """``Normalizer``: every case's outputs equal ``dstar.golden.softmax.normalize``."""
    from dstar.golden.softmax import normalize

    Clock(dut.clk, 10, unit="ns").start()
    params, cases = from_env("DSTAR_SOFTMAX_PARAMS", "DSTAR_SOFTMAX_CASES")
    io = CocotbIO(dut, params["fields"])
    failures = []
    for name, c in cases:
        io.set_valid("i", False)
        io.set_ready("o", False)
        dut.rst.value = 1
        await io.tick()
        await io.tick()
        dut.rst.value = 0
        await io.tick()
        r, big_l = reciprocal(c["lsum"])
        values = [{"acc": int(a), "r": int(ri), "big_l": int(bl)}
                  for a, ri, bl in zip(c["acc"], r, big_l, strict=True)]
        pv, pr = (float(x) for x in c["stall"])
        got = await run_values(io, values, p_valid=pv, p_ready=pr, seed=int(c["seed"]))
        want = normalize(c["acc"][:, None], c["lsum"], params["out_frac_bits"])[:, 0]
        bad = [k for k, (g, w) in enumerate(zip(got, want, strict=True)) if g["o"] != int(w)]
        cocotb.log.info(f"{name}: {len(values)} values, {len(bad)} mismatches")
        failures += [f"{name}[{k}]: {got[k]['o']} != {int(want[k])}" for k in bad[:5]]
    assert not failures, "; ".join(failures)
