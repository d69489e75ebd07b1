"""The host side of the ``dstar`` accelerator top, from its manifest only: command words, the
``cmd`` / ``din`` / ``dout`` stream handshakes and the memory images of a linear step and of an
attention step.

The driver talks to the design through the three-call adapter of ``dstar.sim.layer_io``
(``set(name, int)``, ``get(name) -> int``, ``await tick()``) with ports named as in the
Verilog (``cmd__payload``), so that the same code drives Amaranth's simulator and cocotb. The
manifest is ``dstar.hw.generate.manifest``'s.
"""

import numpy as np

from .layer_io import LayerImage, int_array, pack, pack_named, unpack

__all__ = ["command", "send", "receive", "load", "read", "run", "counters", "LinearStep",
           "AttentionStep"]


def command(man: dict, op: str, **args) -> int:
    """The ``cmd`` word of opcode ``op`` (a name of ``man["opcodes"]``) with the arguments of
    its group (``mem``: ``mem`` (a name or id of ``man["memories"]``), ``addr``, ``count``;
    ``linear``: ``n_tokens``, ``n_kt``, ``n_mt``, ``key``, ``w_base``; ``attention``: ``slot``,
    ``n_tokens``, ``theta_q``, ``refresh``); arguments left out are 0.
    ``ValueError`` naming the bad name or value for an unknown opcode, memory or argument
    name, or a value its field cannot hold (nothing wraps: a misspelled ``ntokens=`` is not a
    silent ``n_tokens = 0``). Values inside their fields that the top refuses (an address past
    the memory, ``n_tokens`` 0) are the top's to refuse."""
    if op not in man["opcodes"]:
        raise ValueError(f"unknown opcode {op!r}; opcodes: {', '.join(man['opcodes'])}")
    group = {"LOAD": "mem", "READ": "mem", "RUN_LINEAR": "linear",
             "RUN_ATTENTION": "attention"}.get(op)
    lay = man["layouts"]["command"]
    prefix = f"args.{group}."
    allowed = [f["name"][len(prefix):] for f in lay["fields"] if f["name"].startswith(prefix)]
    fields = {"op": man["opcodes"][op]}
    for name, value in args.items():
        if group is None:
            raise ValueError(f"{op} takes no arguments, got {name}")
        if name not in allowed:
            raise ValueError(f"{op} has no argument {name!r}; its arguments: "
                             f"{', '.join(allowed)}")
        if name == "mem":
            value = _mem_id(man, value)
        fields[prefix + name] = value
    return pack_named(fields, lay, op)


def _mem_id(man: dict, mem) -> int:
    """A memory's id from its name or id; ``ValueError`` for one the manifest does not list."""
    mems = man["memories"]
    if isinstance(mem, str) and mem in mems:
        return mems[mem]["id"]
    ids = {mm["id"] for mm in mems.values()}
    if not isinstance(mem, str) and isinstance(mem, (int, np.integer)) and int(mem) in ids:
        return int(mem)
    raise ValueError(f"unknown memory {mem!r}; memories: {', '.join(mems)}")


def _mem_name(man: dict, mem) -> str:
    mid = _mem_id(man, mem)
    return next(name for name, mm in man["memories"].items() if mm["id"] == mid)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_addrs(man: dict, mem, addrs) -> None:
    """Every address of ``addrs`` inside memory ``mem``; ``ValueError`` naming the first that
    is not."""
    name = _mem_name(man, mem)
    depth = man["memories"][name]["depth"]
    for a in addrs:
        if not _is_int(a):
            raise ValueError(f"{name}: address {a!r} is not an integer")
        if not 0 <= a < depth:
            raise ValueError(f"{name}: address {a} is outside its {depth} words [0, {depth})")


async def send(io, stream: str, beats, max_wait: int = 100_000) -> None:
    """Offer ``beats`` on the input stream ``stream``, one per cycle while it is ready; a
    ``TimeoutError`` if a beat waits ``max_wait`` cycles."""
    set_, get, tick = io
    set_(f"{stream}__valid", 1)
    for i, beat in enumerate(beats):
        set_(f"{stream}__payload", int(beat))
        for _ in range(max_wait):
            ready = get(f"{stream}__ready")          # a function of the top's state only
            await tick()
            if ready:
                break
        else:
            set_(f"{stream}__valid", 0)
            raise TimeoutError(f"{stream}: beat {i} not taken after {max_wait} cycles")
    set_(f"{stream}__valid", 0)


async def receive(io, stream: str, n: int, max_cycles: int = 1_000_000, stall=None) -> list:
    """Take ``n`` beats of the output stream ``stream``; ``stall(i)`` true holds ``ready`` low
    in cycle ``i`` (back-pressure)."""
    if not _is_int(n) or n < 0:
        raise ValueError(f"{stream}: the number of beats must be an integer >= 0, got {n!r}")
    set_, get, tick = io
    out = []
    for i in range(max_cycles):
        if len(out) == n:
            break
        ready = 0 if stall is not None and stall(i) else 1
        set_(f"{stream}__ready", ready)
        valid, payload = get(f"{stream}__valid"), get(f"{stream}__payload")
        await tick()
        if valid and ready:
            out.append(payload)
    set_(f"{stream}__ready", 0)
    if len(out) < n:
        raise TimeoutError(f"{stream}: {len(out)} of {n} beats after {max_cycles} cycles")
    return out


async def load(io, man: dict, mem: str, words: dict[int, int]) -> None:
    """Write ``{address: word}`` into memory ``mem``, one ``LOAD`` per run of consecutive
    addresses (``ValueError`` for an address outside the memory or a word wider than a
    ``din`` beat, before anything is sent)."""
    _check_addrs(man, mem, words)
    for a, w in words.items():
        if not _is_int(w) or not 0 <= w < 1 << man["data_bits"]:
            raise ValueError(f"{_mem_name(man, mem)}: word {w!r} at address {a} is not an "
                             f"unsigned {man['data_bits']}-bit integer (a din beat)")
    for start, run_words in _runs(words):
        await send(io, "cmd", [command(man, "LOAD", mem=mem, addr=start, count=len(run_words))])
        await send(io, "din", run_words)


async def read(io, man: dict, mem: str, addrs, stall=None) -> dict[int, int]:
    """``{address: word}`` of memory ``mem`` at ``addrs`` (``ValueError`` for an address
    outside the memory, before anything is sent)."""
    addrs = list(addrs)
    _check_addrs(man, mem, addrs)
    out = {}
    for start, n in _ranges(sorted(set(addrs))):
        await send(io, "cmd", [command(man, "READ", mem=mem, addr=start, count=n)])
        for i, w in enumerate(await receive(io, "dout", n, stall=stall)):
            out[start + i] = w
    return out


async def run(io, man: dict, op: str, max_cycles: int = 1_000_000, **args) -> int:
    """Send a ``RUN_LINEAR`` or ``RUN_ATTENTION`` command and wait for ``done`` (through the
    adapter's ``until`` where it has one, ``SimIO``); returns the cycles from the command's
    acceptance to ``done`` where it counted them (``None`` with ``until``: the counters hold
    the run's cycles). ``ValueError`` if the top refuses the command (``error`` rises)."""
    _, get, tick = io
    refused_before = get("error")
    await send(io, "cmd", [command(man, op, **args)])
    if get("error") and not refused_before:          # it will never be done
        raise ValueError(f"{op} {args}: refused by the top (error set)")
    if getattr(io, "until", None) is not None:        # the simulator waits, not Python
        await io.until("done", max_cycles)
        return None
    for i in range(max_cycles):
        if get("done"):
            await tick()
            return i + 1
        await tick()
    raise TimeoutError(f"{op} not done after {max_cycles} cycles")


async def counters(io, man: dict) -> dict[str, int]:
    """The counters of ``READ_COUNTERS``, by name."""
    await send(io, "cmd", [command(man, "READ_COUNTERS")])
    names = man["counters"]
    return dict(zip(names, await receive(io, "dout", len(names)), strict=True))


def _runs(words: dict[int, int]):
    addrs = sorted(words)
    for start, n in _ranges(addrs):
        yield start, [words[a] for a in range(start, start + n)]


def _ranges(addrs):
    i = 0
    while i < len(addrs):
        j = i
        while j + 1 < len(addrs) and addrs[j + 1] == addrs[j] + 1:
            j += 1
        yield addrs[i], j - i + 1
        i = j + 1


class LinearStep:
    """One differential linear layer (``K`` x ``M``, ``N`` tokens) on the accelerator: the
    target and state words of ``dstar.sim.layer_io.LayerImage``; weights and accumulators a
    whole row of a column block per word."""

    def __init__(self, man: dict, k: int, m: int, n: int):
        self.man = man
        self.img = LayerImage(_as_layer_manifest(man), k, m, n)
        self.bc = man["attention_geometry"]["block_cols"]

    def _blocks(self, name, a, shape, rows: int, layout: str, addr) -> dict[int, int]:
        """``a`` (exactly ``shape``: at most ``rows`` x ``n_mt * block_cols``; ``name`` in
        errors) -> {addr(row, mt): word of block mt}, zero beyond ``shape``."""
        img, bc = self.img, self.bc
        a = int_array(name, a, shape)
        pad = np.zeros((rows, img.n_mt * bc), dtype=np.int64)
        pad[:a.shape[0], :a.shape[1]] = a
        lay = self.man["layouts"][layout]
        return {addr(r, mt): pack(pad[r, mt * bc:(mt + 1) * bc], lay, f"{name} row {r}")
                for r in range(rows) for mt in range(img.n_mt)}

    @property
    def weight_span(self) -> int:
        """Words the layer's weights take in the ``WEIGHTS`` memory."""
        return self.img.weight_span

    def weight_words(self, w_q, base: int = 0) -> dict[int, int]:
        """``w_q`` (K, M) INT8 -> {address: weights word}, for a run with ``w_base = base``
        (the rows beyond K of the last K tile included, as zeros)."""
        img = self.img
        return self._blocks("weights", w_q, (img.k, img.m), img.n_kt * img.k_tile, "WEIGHTS",
                            lambda k, mt: img.weight_addr(k, mt, base))

    def y_words(self, y) -> dict[int, int]:
        """``y`` (N, M) -> {address: accumulator word} (a saved Y, to restore)."""
        img = self.img
        return self._blocks("y", y, (img.n, img.m), img.n, "Y",
                            lambda t, mt: t * img.n_mt_max + mt)

    def y_from(self, words: dict[int, int]) -> np.ndarray:
        """``Y`` (N, M) from ``{address: word}`` read at ``img.y_addrs()``."""
        img, bc = self.img, self.bc
        lay = self.man["layouts"]["Y"]
        y = np.zeros((img.n, img.n_mt * bc), dtype=np.int64)
        missing = [a for a in img.y_addrs() if a not in words]
        if missing:
            raise ValueError(f"Y: no word at address {missing[0]} (read every address of "
                             f"y_addrs(), {len(missing)} missing)")
        for t in range(img.n):
            for mt in range(img.n_mt):
                y[t, mt * bc:(mt + 1) * bc] = unpack(words[t * img.n_mt_max + mt], lay)
        return y[:, :img.m]

    async def run(self, io, target, *, key: bool, w_q=None, w_base: int = 0, state=None,
                  y=None):
        """Load (weights at ``w_base`` if given, state and ``Y`` if given: a layer's saved
        state and accumulators restored; targets), run the step on the weights at ``w_base``,
        read ``Y`` and the state (for the next step of this layer to restore); returns
        ``(y, state)``."""
        img, man = self.img, self.man
        if w_q is not None:
            await load(io, man, "WEIGHTS", self.weight_words(w_q, w_base))
        await load(io, man, "TARGET", img.row_words(target, "target"))
        if state is not None:
            await load(io, man, "STATE", img.row_words(state, "state"))
        if y is not None:
            await load(io, man, "Y", self.y_words(y))
        await run(io, man, "RUN_LINEAR", n_tokens=img.n, n_kt=img.n_kt, n_mt=img.n_mt,
                  key=int(key), w_base=w_base)
        rows = img.row_words(target, "target")
        s_words = await read(io, man, "STATE", rows)
        y_words = await read(io, man, "Y", img.y_addrs())
        return self.y_from(y_words), img.rows_from(s_words, "state")


def _as_layer_manifest(man: dict) -> dict:
    """The parts of the accelerator's manifest ``LayerImage`` reads, under its names."""
    lays = man["layouts"]
    return {"config": man["config"], "geometry": man["geometry"],
            "layouts": {"target_row": lays["TARGET"], "state_row": lays["STATE"]}}



class AttentionStep:
    """One attention head (``N`` rows) on the accelerator: the memory images of
    ``dstar.sim.tb_attention.HeadImage`` with the accelerator's layouts."""

    def __init__(self, man: dict, n: int):
        from .tb_attention import HeadImage

        self.man = man
        lays = man["layouts"]
        self.sar = bool(man["attention_geometry"].get("sar"))
        state = ({"sc_word": lays["SC"], "rl_word": lays["RL"]} if self.sar
                 else {"res_word": lays["RES"]})
        self.img = HeadImage({"config": man["config"], "geometry": man["attention_geometry"],
                              "layouts": {"q_word": lays["Q"], "ms_word": lays["MS"],
                                          "o_word": lays["O"], **state}}, n)

    def k_words(self, k) -> dict[int, int]:
        """K (N, Dh) -> {d * n_kc + kc: word of K^T, keys kc * block_cols ..}."""
        img = self.img
        k = img._check("k", k, (img.n, img.dh))
        pad = np.zeros((img.n_kc * img.bc, img.dh), dtype=np.int64)
        pad[:img.n] = k
        lay = self.man["layouts"]["KT"]
        return {d * img.n_kc + kc: pack(pad[kc * img.bc:(kc + 1) * img.bc, d], lay,
                                        f"k column {d}")
                for d in range(img.dh) for kc in range(-(-img.n // img.bc))}

    def v_words(self, v) -> dict[int, int]:
        """V (N, Dh) -> {j * n_cp + cp: word, columns cp * block_cols ..} (rows up to the next
        lane group)."""
        img = self.img
        v = img._check("v", v, (img.n, img.dh))
        n_up = -(-img.n // img.g) * img.g
        pad = np.zeros((n_up, img.n_cp * img.bc), dtype=np.int64)
        pad[:img.n, :img.dh] = v
        lay = self.man["layouts"]["V"]
        return {j * img.n_cp + cp: pack(pad[j, cp * img.bc:(cp + 1) * img.bc], lay,
                                        f"v row {j}")
                for j in range(n_up) for cp in range(img.n_cp)}

    async def run(self, io, q, k, v, m, sh, *, slot: int, theta_q: int, refresh: int,
                  stall=None, read_state: bool = True, mask=None):
        """Load the head, run one step of ``slot``; returns ``(o, res, mask, counters)``: the
        output and the slot's residual (N, Dh), its mask (nqb(N), nkb(N)) and the counters
        (``counters``); without ``read_state`` the residual and mask are not read (None).
        ``stall``: ``dout`` back-pressure of the reads (``receive``). SAR (``self.sar``):
        ``mask`` (the slot's, loaded first if given), ``q``, ``k``, ``m``, ``sh`` may be
        ``None`` (a reuse step reads V only: not loaded), ``read_state`` must be false."""
        img, man = self.img, self.man
        if mask is not None:
            await load(io, man, "MASK", img.mask_words(mask, slot))
        if q is not None:
            await load(io, man, "Q", img.q_words(q))
        if k is not None:
            await load(io, man, "KT", self.k_words(k))
        await load(io, man, "V", self.v_words(v))
        if m is not None:
            await load(io, man, "MS", img.ms_words(m, sh))
        await run(io, man, "RUN_ATTENTION", slot=slot, n_tokens=img.n, theta_q=theta_q,
                  refresh=refresh)
        o = img.rows_from(await read(io, man, "O", img.o_addrs(), stall=stall), img.o_addrs(),
                          "o_word")
        if not read_state:
            return o, None, None, await counters(io, man)
        r_w = await read(io, man, "RES", img.res_addrs(slot), stall=stall)
        res = img.rows_from(r_w, img.res_addrs(slot), "res_word")
        nkb = -(-img.n // img.bk)
        m_w = await read(io, man, "MASK", self.mask_addrs(slot))
        mask = np.array([[(m_w[a] >> j) & 1 for j in range(nkb)]
                         for a in self.mask_addrs(slot)], dtype=bool)
        return o, res, mask, await counters(io, man)

    def mask_addrs(self, slot: int) -> range:
        img = self.img
        return range(slot * img.nqb, slot * img.nqb + -(-img.n // img.bq))

    def slot_word(self, valid: bool, phase: int) -> int:
        """A slot's step-counter word (``SLOT``): stepped since the last clear, calls modulo
        ``refresh``."""
        return pack_named({"valid": int(valid), "phase": phase}, self.man["layouts"]["SLOT"],
                          "SLOT")

    async def save_slot(self, io, slot: int, *, counter_only: bool = False) -> dict:
        """Slot ``slot``'s state for ``N`` rows: ``{memory: {address: word}}`` of its step
        counter and (unless ``counter_only``: its next step is a key step, which needs neither)
        its residual cache and mask (SAR: its score cache, every row, and mask)."""
        man, img = self.man, self.img
        saved = {"SLOT": await read(io, man, "SLOT", [slot])}
        if not counter_only and self.sar:     # the whole score cache of the slot
            saved["SC"] = await read(io, man, "SC", img.sc_addrs(slot))
            saved["RL"] = await read(io, man, "RL", img.rl_addrs(slot))
            saved["MASK"] = await read(io, man, "MASK", self.mask_addrs(slot))
        elif not counter_only:
            saved["RES"] = await read(io, man, "RES", img.res_addrs(slot))
            saved["MASK"] = await read(io, man, "MASK", self.mask_addrs(slot))
        return saved

    async def restore_slot(self, io, saved: dict) -> None:
        """Write back a ``save_slot`` image (into the slot it was read from)."""
        for mem, words in saved.items():
            await load(io, self.man, mem, words)
