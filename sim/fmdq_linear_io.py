"""Host side of the FMDQ linear datapath (``dstar.hw.fmdq.linear.FmdqLinear``): packing of its
memory words and stream beats, and one layer step through the three-call adapter of
``dstar.sim.layer_io`` (``SimIO``: ``set``, ``get``, ``tick``), so the same code drives
Amaranth's simulator and cocotb. Sizes come from ``FmdqGeometry.to_dict()`` (the manifest's
``fmdq`` section) and the configuration's ``state_bits``; memory layouts and the beat order are
``FmdqGeometry``'s docstring."""

from dataclasses import dataclass

import numpy as np

__all__ = ["FmdqImage", "FmdqOutcome", "COUNTERS", "run_fmdq_step", "stream_step"]

#: The run's counter ports, in the order ``FmdqOutcome.counters`` lists them.
COUNTERS = ("cycles", "stall_load", "count_groups", "count_units", "count_clipped",
            "count_saturated")


def _pack(values, bits: int) -> int:
    word = 0
    for i, v in enumerate(values):
        word |= (int(v) & ((1 << bits) - 1)) << (i * bits)
    return word


def _unpack(word: int, n: int, bits: int) -> list[int]:
    out = []
    for i in range(n):
        v = (word >> (i * bits)) & ((1 << bits) - 1)
        out.append(v - (1 << bits) if v >> (bits - 1) else v)
    return out


@dataclass
class FmdqImage:
    """One layer (``k`` x ``m``, ``n`` tokens) on one FMDQ geometry ``geo`` (a
    ``FmdqGeometry.to_dict()``) of a configuration with ``state_bits`` and ``max_k``."""
    geo: dict
    state_bits: int
    max_k: int
    k: int
    m: int
    n: int

    def __post_init__(self):
        g = self.geo
        if not 0 < self.k <= self.max_k or not 0 < self.m <= g["n_mt_max"] * g["block_cols"]:
            raise ValueError(f"K={self.k}, M={self.m} exceed the geometry")
        if not 0 < self.n <= g["n_tiles_max"] * g["tokens"]:
            raise ValueError(f"N={self.n} exceeds the geometry")

    @property
    def n_mt(self) -> int:
        return -(-self.m // self.geo["block_cols"])

    def beats(self) -> list[tuple[int, int]]:
        """``(tile, channel)`` of each beat of the step's streams (``FmdqGeometry.beats``)."""
        t, w = self.geo["tokens"], self.geo["window"]
        n_tiles = -(-self.n // t)
        return [(tile, c) for j0 in range(0, self.k, w) for tile in range(n_tiles)
                for c in range(j0, min(j0 + w, self.k))]

    def _padded(self, x) -> np.ndarray:
        t = self.geo["tokens"]
        pad = np.zeros((-(-self.n // t) * t, self.k), np.int64)
        if x is not None:
            pad[:self.n] = x
        return pad

    def sub_beats(self, target, state=None) -> list[int]:
        """The ``i_sub`` beats of a step: each sub-channel's target (low bits) and old state
        (``None``: zeros), in ``beats`` order."""
        t, bits = self.geo["tokens"], self.state_bits
        tg, st = self._padded(target), self._padded(state)
        half = t * bits
        return [_pack(tg[tile * t:(tile + 1) * t, c], bits)
                | _pack(st[tile * t:(tile + 1) * t, c], bits) << half
                for tile, c in self.beats()]

    def state_from(self, words) -> np.ndarray:
        """The new state ``(n, k)`` from the ``o_state`` words, in ``beats`` order."""
        t = self.geo["tokens"]
        xs = np.zeros((-(-self.n // t) * t, self.k), np.int64)
        for (tile, c), w in zip(self.beats(), words, strict=True):
            xs[tile * t:(tile + 1) * t, c] = _unpack(w, t, self.state_bits)
        return xs[:self.n]

    @property
    def weight_span(self) -> int:
        """Words the layer's weights take: ``n_mt * K``."""
        return self.n_mt * self.k

    def weight_words(self, w_q, base: int = 0) -> dict[int, int]:
        """The weight words of ``w_q`` ``(k, m)``, a whole row of a column block each: row
        ``k`` of block ``mt`` at ``base + mt * K + k``."""
        bc = self.geo["block_cols"]
        pad = np.zeros((self.k, self.n_mt * bc), np.int64)
        pad[:, :self.m] = w_q
        return {base + mt * self.k + r: _pack(pad[r, mt * bc:(mt + 1) * bc], 8)
                for mt in range(self.n_mt) for r in range(self.k)}


@dataclass
class FmdqOutcome:
    """A step's ``y`` ``(n, m)``, ``state`` ``(n, k)`` and ``counters`` (``COUNTERS``)."""
    y: np.ndarray
    state: np.ndarray
    counters: dict


async def _write(io, we: str, addr: str, wdata: str, words: dict, we_value: int = 1):
    set_, _, tick = io
    for a, w in words.items():
        set_(addr, a)
        set_(wdata, w)
        set_(we, we_value)
        await tick()
    set_(we, 0)


async def stream_step(io, beats: list[int], n_out: int, inp: str, out: str, busy,
                      max_cycles: int = 10_000_000) -> list[int]:
    """Offer ``beats`` on the input stream ``inp`` (held valid, a beat per cycle while it is
    ready) and take ``n_out`` words of ``out`` (always ready) until ``busy()`` is false and
    every word has come: the step's stream traffic at full rate."""
    set_, get, tick = io
    got, i = [], 0
    set_(f"{out}__ready", 1)
    for _ in range(max_cycles):
        if i < len(beats):
            set_(f"{inp}__valid", 1)
            set_(f"{inp}__payload", beats[i])
        else:
            set_(f"{inp}__valid", 0)
        ready = get(f"{inp}__ready")            # a function of the design's state only
        o_valid = get(f"{out}__valid")
        o_word = get(f"{out}__payload")
        if len(got) == n_out and i == len(beats) and not busy():
            break
        await tick()
        if ready and i < len(beats):
            i += 1
        if o_valid:
            got.append(o_word)
    else:
        raise TimeoutError(f"{len(got)} of {n_out} {out} words and {i} of {len(beats)} {inp} "
                           f"beats after {max_cycles} cycles")
    set_(f"{inp}__valid", 0)
    set_(f"{out}__ready", 0)
    if len(got) != n_out:
        raise ValueError(f"{out}: {len(got)} words, expected {n_out}")
    return got


async def run_fmdq_step(io, img: FmdqImage, target, *, key: bool, w_q=None, state=None,
                        max_cycles: int = 10_000_000) -> FmdqOutcome:
    """Load ``w_q`` (if given), run one step with the target and the old ``state`` (None:
    zeros) streamed in, take the new state, read ``Y`` back."""
    set_, get, tick = io
    g = img.geo
    n_arrays = g["block_cols"] // g["columns"]
    if w_q is not None:
        await _write(io, "host_w_we", "host_w_addr", "host_w_wdata", img.weight_words(w_q),
                     (1 << n_arrays) - 1)
    for name, v in (("n_tokens", img.n), ("n_k", img.k), ("n_mt", img.n_mt),
                    ("key", int(key)), ("start", 1)):
        set_(name, v)
    await tick()
    set_("start", 0)
    beats = img.sub_beats(target, state)
    words = await stream_step(io, beats, len(beats), "i_sub", "o_state",
                              lambda: get("busy"), max_cycles)
    counters = {c: get(c) for c in COUNTERS}
    cols, bc = g["columns"], g["block_cols"]
    y = np.zeros((img.n, img.n_mt * bc), np.int64)
    for r in range(img.n):
        for mt in range(img.n_mt):
            set_("host_y_addr", r * g["n_mt_max"] + mt)
            await tick()
            for a in range(n_arrays):
                y[r, mt * bc + a * cols:mt * bc + (a + 1) * cols] = _unpack(
                    get(f"host_y_rdata__{a}"), cols, g["y_bits"])
    return FmdqOutcome(y[:, :img.m], img.state_from(words), counters)
