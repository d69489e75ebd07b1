"""Host side of the FMDQ linear datapath (``dstar.hw.fmdq.linear.FmdqLinear``): packing of its
memory words and one layer step through the three-call adapter of ``dstar.sim.layer_io``
(``SimIO``: ``set``, ``get``, ``tick``), so the same code drives Amaranth's simulator and
cocotb. Sizes come from ``FmdqGeometry.to_dict()`` (the manifest's ``fmdq`` section) and the
configuration's ``state_bits``; memory layouts are ``FmdqGeometry``'s docstring."""

from dataclasses import dataclass

import numpy as np

__all__ = ["FmdqImage", "FmdqOutcome", "COUNTERS", "run_fmdq_step"]

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

    def sub_words(self, x) -> dict[int, int]:
        """Target or state ``x`` ``(n, k)`` as sub-channel words by address."""
        t = self.geo["tokens"]
        pad = np.zeros((-(-self.n // t) * t, self.k), np.int64)
        pad[:self.n] = x
        return {tile * self.max_k + c: _pack(pad[tile * t:(tile + 1) * t, c], self.state_bits)
                for tile in range(pad.shape[0] // t) for c in range(self.k)}

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


async def run_fmdq_step(io, img: FmdqImage, target, *, key: bool, w_q=None, state=None,
                        max_cycles: int = 10_000_000) -> FmdqOutcome:
    """Load ``target`` (and ``w_q``, ``state`` if given), run one step, read ``Y`` and the
    state back."""
    set_, get, tick = io
    g = img.geo
    n_arrays = g["block_cols"] // g["columns"]
    if w_q is not None:
        await _write(io, "host_w_we", "host_w_addr", "host_w_wdata", img.weight_words(w_q),
                     (1 << n_arrays) - 1)
    if state is not None:
        await _write(io, "host_state_we", "host_sub_addr", "host_state_wdata",
                     img.sub_words(state))
    await _write(io, "host_target_we", "host_sub_addr", "host_target_wdata",
                 img.sub_words(target))
    for name, v in (("n_tokens", img.n), ("n_k", img.k), ("n_mt", img.n_mt),
                    ("key", int(key)), ("start", 1)):
        set_(name, v)
    await tick()
    set_("start", 0)
    for _ in range(max_cycles):
        if not get("busy"):
            break
        await tick()
    else:
        raise TimeoutError(f"the FMDQ step did not finish in {max_cycles} cycles")
    counters = {c: get(c) for c in COUNTERS}
    cols, bc, t = g["columns"], g["block_cols"], g["tokens"]
    y = np.zeros((img.n, img.n_mt * bc), np.int64)
    for r in range(img.n):
        for mt in range(img.n_mt):
            set_("host_y_addr", r * g["n_mt_max"] + mt)
            await tick()
            for a in range(n_arrays):
                y[r, mt * bc + a * cols:mt * bc + (a + 1) * cols] = _unpack(
                    get(f"host_y_rdata__{a}"), cols, g["y_bits"])
    xs = np.zeros((img.n, img.k), np.int64)
    for c in range(img.k):
        for tile in range(-(-img.n // t)):
            set_("host_sub_addr", tile * img.max_k + c)
            await tick()
            vals = _unpack(get("host_state_rdata"), t, img.state_bits)
            rows = range(tile * t, min((tile + 1) * t, img.n))
            xs[rows.start:rows.stop, c] = vals[:len(rows)]
    return FmdqOutcome(y[:, :img.m], xs, counters)
