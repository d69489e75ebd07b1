"""Memory images and the step driver of the ``dstar_linear`` wrapper, from ``params.json`` only.

Every width, depth and address rule comes from the manifest (``dstar.hw.generate.manifest``), so the
same code drives the Amaranth simulation and the generated Verilog under cocotb. The driver talks
to the design through a three-call adapter (``set(name, int)``, ``get(name) -> int`` (unsigned),
``await tick()``), with ports named as in the Verilog (``host_y_rdata__0``).
"""

import operator

import numpy as np

__all__ = ["pack", "unpack", "pack_named", "unpack_named", "field_value", "field_range",
           "int_array", "SimIO", "LayerImage", "run_step",
           "StepOutcome", "write_words", "start_and_wait", "COUNTERS"]


def field_range(f: dict) -> tuple[int, int]:
    """The integers a manifest field ``f`` holds: ``[lo, hi]``."""
    w = f["width"]
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if f["signed"] else (0, (1 << w) - 1)


def field_value(v, f: dict, what: str = "") -> int:
    """``v`` as the integer of field ``f``; a ``ValueError`` naming ``what``, the field and
    the value when it is not an integer or does not fit (a word never wraps a value)."""
    where = f"{what} field {f['name']!r}" if what else f"field {f['name']!r}"
    try:
        i = int(v) if isinstance(v, np.bool_) else operator.index(v)
    except TypeError:
        fv = float(v) if isinstance(v, (float, np.floating)) else None
        if fv is None or not np.isfinite(fv) or fv != int(fv):
            raise ValueError(f"{where} must be an integer, got {v!r}") from None
        i = int(fv)
    lo, hi = field_range(f)
    if not lo <= i <= hi:
        sign = "signed" if f["signed"] else "unsigned"
        raise ValueError(f"{where} is {i}, outside its {f['width']}-bit {sign} range "
                         f"[{lo}, {hi}]")
    return i


def pack(values, layout, what: str = "") -> int:
    """Pack integers into a flat word of an array layout from the manifest (two's complement);
    a ``ValueError`` (``field_value``) for a value the word cannot hold."""
    word = 0
    for v, f in zip(values, layout["fields"], strict=True):
        word |= (field_value(v, f, what) & ((1 << f["width"]) - 1)) << f["offset"]
    return word


def int_array(name: str, x, shape: tuple) -> np.ndarray:
    """``x`` as an int64 array of exactly ``shape``; a ``ValueError`` naming ``name`` for
    another shape (no broadcast, no padding), a non-number, a NaN or a fraction (no
    truncation)."""
    try:
        a = np.asarray(x)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} is not an array of integers ({e})") from None
    if a.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {a.shape}")
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    if a.dtype.kind != "f":
        raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    bad = ~np.isfinite(a) | (a != np.round(a)) | (np.abs(a) >= 2.0 ** 63)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} must hold integers, got {a[idx]} at index {idx}")
    return a.astype(np.int64)


def unpack(word, layout) -> list[int]:
    out = []
    for f in layout["fields"]:
        v = (int(word) >> f["offset"]) & ((1 << f["width"]) - 1)
        if f["signed"] and v >> (f["width"] - 1):
            v -= 1 << f["width"]
        out.append(v)
    return out


class SimIO(tuple):
    """The ``(set, get, tick)`` adapter, unpacked as those three, with an optional fourth call
    ``await until(name, max_cycles=None)``: tick until the 1-bit port ``name`` has read 1
    before a tick (as a loop of ``get`` and ``tick`` would, without a call per cycle: a
    simulator's own trigger), ``TimeoutError`` after ``max_cycles`` cycles where the adapter
    can bound it (cocotb's)."""

    def __new__(cls, set_, get, tick, until=None):
        io = super().__new__(cls, (set_, get, tick))
        io.until = until
        return io


class LayerImage:
    """Geometry of one layer (``K`` x ``M``, ``N`` tokens) on one generated configuration."""

    def __init__(self, man: dict, k: int, m: int, n: int):
        cfg, geo = man["config"], man["geometry"]
        if k % cfg["group"] or not 0 < k <= cfg["max_k"]:
            raise ValueError(f"K={k} must be a positive multiple of group <= max_k")
        if not 0 < m <= cfg["max_m"] or not 0 < n <= cfg["max_tokens"]:
            raise ValueError(f"M={m}, N={n} exceed max_m / max_tokens")
        self.man, self.k, self.m, self.n = man, k, m, n
        self.k_tile, self.m_tile = cfg["k_tile"], cfg["m_tile"]
        self.n_arrays = cfg["n_arrays"]
        self.n_kt = -(-k // self.k_tile)
        self.n_mt = -(-m // geo["block_cols"])
        self.n_kt_max, self.n_mt_max = geo["n_kt_max"], geo["n_mt_max"]

    def row_words(self, rows, which: str) -> dict[int, int]:
        """``rows`` (N, K) -> {address: word} of the target or state memory."""
        lay = self.man["layouts"][f"{which}_row"]
        pad = np.zeros((self.n, self.n_kt * self.k_tile), dtype=np.int64)
        pad[:, :self.k] = int_array(f"{which} rows", rows, (self.n, self.k))
        return {t * self.n_kt_max + kt: pack(pad[t, kt * self.k_tile:(kt + 1) * self.k_tile],
                                             lay, f"{which} row {t}")
                for t in range(self.n) for kt in range(self.n_kt)}

    def rows_from(self, words: dict[int, int], which: str) -> np.ndarray:
        lay = self.man["layouts"][f"{which}_row"]
        out = np.zeros((self.n, self.n_kt * self.k_tile), dtype=np.int64)
        for t in range(self.n):
            for kt in range(self.n_kt):
                out[t, kt * self.k_tile:(kt + 1) * self.k_tile] = unpack(
                    words[t * self.n_kt_max + kt], lay)
        return out[:, :self.k]

    @property
    def weight_span(self) -> int:
        """Words of the layer's weights in each array's memory: ``n_kt * n_mt`` tiles of
        ``k_tile`` rows."""
        return self.n_kt * self.n_mt * self.k_tile

    def weight_addr(self, k: int, mt: int, base: int = 0) -> int:
        """The address of row ``k`` of column block ``mt`` (the loader reads tiles in run
        order: ``base + (kt * n_mt + mt) * k_tile + r``)."""
        kt, r = divmod(k, self.k_tile)
        return base + (kt * self.n_mt + mt) * self.k_tile + r

    def weight_words(self, w_q) -> list[dict[int, int]]:
        """``w_q`` (K, M) INT8 -> per array {address: word}, the rows beyond K of the last K
        tile included (as zeros)."""
        lay = self.man["layouts"]["weight_row"]
        bc = self.m_tile * self.n_arrays
        rows = self.n_kt * self.k_tile
        pad = np.zeros((rows, self.n_mt * bc), dtype=np.int64)
        pad[:self.k, :self.m] = int_array("weights", w_q, (self.k, self.m))
        out = []
        for a in range(self.n_arrays):
            words = {}
            for k in range(rows):
                for mt in range(self.n_mt):
                    c0 = mt * bc + a * self.m_tile
                    words[self.weight_addr(k, mt)] = pack(pad[k, c0:c0 + self.m_tile], lay,
                                                          f"weights row {k}")
            out.append(words)
        return out

    def y_addrs(self):
        return [t * self.n_mt_max + mt for t in range(self.n) for mt in range(self.n_mt)]

    def y_from(self, words: list[dict[int, int]]) -> np.ndarray:
        lay = self.man["layouts"]["y_row"]
        bc = self.m_tile * self.n_arrays
        y = np.zeros((self.n, self.n_mt * bc), dtype=np.int64)
        for a in range(self.n_arrays):
            for t in range(self.n):
                for mt in range(self.n_mt):
                    c0 = mt * bc + a * self.m_tile
                    y[t, c0:c0 + self.m_tile] = unpack(words[a][t * self.n_mt_max + mt], lay)
        return y[:, :self.m]


async def write_words(io, we: str, addr: str, wdata: str, words: dict, we_value: int = 1):
    """Write ``{address: word}`` through a host write port, one word a cycle: ``we`` held at
    ``we_value`` (a one-hot bank select on banked memories) while writing, 0 after."""
    set_, _, tick = io
    set_(we, we_value)
    for a, word in words.items():
        set_(addr, a)
        set_(wdata, word)
        await tick()
    set_(we, 0)


async def start_and_wait(io, max_cycles: int, what: str):
    """Pulse ``start`` for one cycle, then tick until ``busy`` reads low after a tick; a
    ``TimeoutError`` naming ``what`` if it is still busy after ``max_cycles`` ticks."""
    set_, get, tick = io
    set_("start", 1)
    await tick()
    set_("start", 0)
    for _ in range(max_cycles):
        await tick()
        if not get("busy"):
            return
    raise TimeoutError(f"{what} still busy after {max_cycles} cycles")


class StepOutcome:
    def __init__(self, y, state, counters):
        self.y, self.state, self.counters = y, state, counters


#: The counter ports a layer top may have, in report order (``counters()`` of the cycle models).
COUNTERS = ("cycles", "stall_load", "count_low", "count_high", "count_zero", "count_clipped",
            "count_saturated")


async def run_step(io, img: LayerImage, target, *, key: bool, w_q=None, state=None,
                   max_cycles: int = 1_000_000, read_back: bool = True) -> StepOutcome:
    """Load (weights if given, targets, state if given), run one step, read Y and the state.

    ``target``/``state`` are (N, K) integers; ``w_q`` (K, M). Returns the outcome with the
    design's counters (those of ``COUNTERS`` it has). A dense INT8 top (no state memory, no
    ``key``) takes its INT8 activations as ``target``; ``key`` is ignored and the outcome's
    ``state`` is ``None``."""
    set_, get, tick = io
    ports = img.man["ports"]
    has_state = "host_state_wdata" in ports
    if state is not None and not has_state:
        raise ValueError("this top has no state memory to preload")
    if w_q is not None:
        for a, words in enumerate(img.weight_words(w_q)):
            await write_words(io, "host_w_we", "host_w_addr", "host_w_wdata", words, 1 << a)
    t_words = img.row_words(target, "target")
    s_words = img.row_words(state, "state") if state is not None else None
    set_("host_target_we", 1)
    if has_state:
        set_("host_state_we", int(s_words is not None))
    for addr, word in t_words.items():
        set_("host_row_addr", addr)
        set_("host_target_wdata", word)
        if s_words is not None:
            set_("host_state_wdata", s_words[addr])
        await tick()
    set_("host_target_we", 0)
    if has_state:
        set_("host_state_we", 0)
    set_("n_tokens", img.n)
    set_("n_kt", img.n_kt)
    set_("n_mt", img.n_mt)
    if "key" in ports:
        set_("key", int(key))
    await start_and_wait(io, max_cycles, "layer step")
    counters = {n: get(n) for n in COUNTERS if n in ports}
    if not read_back:
        return StepOutcome(None, None, counters)
    s_read, y_read = {}, [{} for _ in range(img.n_arrays)]
    if has_state:
        for addr in t_words:
            set_("host_row_addr", addr)
            await tick()
            s_read[addr] = get("host_state_rdata")
    for addr in img.y_addrs():
        set_("host_y_addr", addr)
        await tick()
        for a in range(img.n_arrays):
            y_read[a][addr] = get(f"host_y_rdata__{a}")
    state_out = img.rows_from(s_read, "state") if has_state else None
    return StepOutcome(img.y_from(y_read), state_out, counters)


def pack_named(values: dict, layout, what: str = "") -> int:
    """Pack ``{field name: int}`` into a flat word of any manifest layout (missing fields 0);
    a ``ValueError`` for a name the layout does not have or a value its field cannot hold."""
    names = {f["name"] for f in layout["fields"]}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{what or 'the layout'} has no field {unknown[0]!r}")
    word = 0
    for f in layout["fields"]:
        v = field_value(values.get(f["name"], 0), f, what)
        word |= (v & ((1 << f["width"]) - 1)) << f["offset"]
    return word


def unpack_named(word, layout) -> dict:
    return dict(zip((f["name"] for f in layout["fields"]), unpack(word, layout), strict=True))
