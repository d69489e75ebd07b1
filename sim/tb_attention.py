"""Host driver of ``dstar.hw.attention.AttentionEngine`` (any simulator) and its cocotb testbench.

``run_head`` loads one head's Q, K, V and row multipliers into the engine's memories (layouts
from the manifest's ``attention`` section, ``dstar.hw.generate.manifest``), runs one step
of a slot and reads the output, the slot's residual cache and mask back, through a three-call
adapter (``set(name, int)``, ``get(name) -> int`` (unsigned), ``await tick()``), as
``dstar.sim.layer_io`` does for the linear wrapper.

The cocotb test reads ``DSTAR_ATTN_PARAMS`` (the manifest JSON) and ``DSTAR_ATTN_CASES`` (an
``.npz``: per case and step the inputs, slot settings, and the golden outputs, residuals, masks
and the cycle model's counters, computed outside the simulator); each case runs its steps on a
freshly reset design and compares integers with equality. On a SAR engine (``geometry["sar"]``)
a case holds one host mask and no residuals (``_sar_cases``).
"""

import numpy as np

from dstar.golden.attention import theta_fixed
from dstar.sim.layer_io import (
    int_array,
    pack,
    pack_named,
    start_and_wait,
    unpack,
    unpack_named,
    write_words,
)

__all__ = ["HeadImage", "run_head", "HeadOutcome", "read_words", "save_slot",
           "restore_slot"]


class HeadImage:
    """Memory words of one head on one generated configuration (``man``: the manifest's
    ``attention`` section, with ``config`` and ``geometry``)."""

    def __init__(self, man: dict, n: int):
        cfg, geo = man["config"], man["geometry"]
        if not 1 <= n <= cfg["max_tokens"]:
            raise ValueError(f"N={n} must be in [1, max_tokens={cfg['max_tokens']}]")
        self.man, self.n = man, n
        self.lays = man["layouts"]
        self.g, self.dh = cfg["group"], cfg["head_dim"]
        self.mt, self.n_arr = cfg["m_tile"], cfg["n_arrays"]
        self.bc = self.mt * self.n_arr
        self.n_kc, self.n_cp, self.rows_q = geo["n_kc"], geo["n_cp"], geo["rows_q"]
        self.q_tokens = geo.get("q_tokens", 1)
        self.n_max, self.nqb = geo["n_max"], geo["nqb"]
        self.bq, self.bk = cfg["block_q"], cfg["block_k"]

    def _check(self, name, x, shape):
        return int_array(name, x, shape)

    def q_words(self, q) -> dict[int, int]:
        """Q (N, Dh) -> {address: word}: per row its lane groups of ``G`` dimensions, or with
        the FMDQ arrays (``q_tokens`` rows a word) per token tile its groups of 4 dimensions."""
        q = self._check("q", q, (self.n, self.dh))
        t = self.q_tokens
        if t == 1:
            return {i * self.rows_q + r: pack(q[i, r * self.g:(r + 1) * self.g],
                                              self.lays["q_word"], f"q row {i}")
                    for i in range(self.n) for r in range(self.rows_q)}
        n_tt, n_cg = -(-self.n // t), self.dh // 4
        pad = np.zeros((n_tt * t, self.dh), dtype=np.int64)
        pad[:self.n] = q
        return {tt * n_cg + c: pack(pad[tt * t:(tt + 1) * t, 4 * c:4 * c + 4].reshape(-1),
                                    self.lays["q_word"], f"q tile {tt}")
                for tt in range(n_tt) for c in range(n_cg)}

    def k_words(self, k) -> list[dict[int, int]]:
        """K (N, Dh) -> per array {d * n_kc + kc: word of K^T}."""
        k = self._check("k", k, (self.n, self.dh))
        pad = np.zeros((self.n_kc * self.bc, self.dh), dtype=np.int64)
        pad[:self.n] = k
        nkc = -(-self.n // self.bc)
        return [{d * self.n_kc + kc: pack(pad[kc * self.bc + a * self.mt:
                                              kc * self.bc + (a + 1) * self.mt, d],
                                          self.lays["kt_word"], f"k column {d}")
                 for d in range(self.dh) for kc in range(nkc)} for a in range(self.n_arr)]

    def v_words(self, v) -> list[dict[int, int]]:
        """V (N, Dh) -> per array {j * n_cp + cp: word} (rows up to the next lane group)."""
        v = self._check("v", v, (self.n, self.dh))
        n_up = -(-self.n // self.g) * self.g
        pad = np.zeros((n_up, self.n_cp * self.bc), dtype=np.int64)
        pad[:self.n, :self.dh] = v
        return [{j * self.n_cp + cp: pack(pad[j, cp * self.bc + a * self.mt:
                                              cp * self.bc + (a + 1) * self.mt],
                                          self.lays["v_word"], f"v row {j}")
                 for j in range(n_up) for cp in range(self.n_cp)} for a in range(self.n_arr)]

    def ms_words(self, m, sh) -> dict[int, int]:
        """The rows' logit multipliers ``m`` and shifts ``sh`` (N each) -> {row: word}."""
        m, sh = self._check("m", m, (self.n,)), self._check("sh", sh, (self.n,))
        return {i: pack_named({"m": m[i], "sh": sh[i]}, self.lays["ms_word"], f"MS row {i}")
                for i in range(self.n)}

    def o_addrs(self) -> range:
        """The output words of the ``N`` rows (``block_cols`` columns each)."""
        return range(self.n * self.n_cp)

    def res_addrs(self, slot: int) -> range:
        """The residual words of slot ``slot``'s ``N`` rows."""
        base = slot * self.n_max * self.n_cp
        return range(base, base + self.n * self.n_cp)

    def rows_from(self, words: dict[int, int], addrs: range, layout: str) -> np.ndarray:
        """(N, Dh) from ``{address: word}`` at ``addrs`` (``o_addrs`` or ``res_addrs``) of
        words ``layout`` (``o_word`` or ``res_word``)."""
        lay = self.lays[layout]
        flat = np.concatenate([unpack(words[a], lay) for a in addrs]).astype(np.int64)
        return flat.reshape(self.n, self.n_cp * self.bc)[:, :self.dh]


    # ----- SAR (``geometry["sar"]``): host-loaded masks and the score cache -----
    def mask_words(self, mask, slot: int) -> dict[int, int]:
        """A slot's masks ``(nqb(N), nkb(N))`` bool -> {slot * nqb + I: word} (bit ``J``)."""
        mask = np.asarray(mask, dtype=bool)
        want = (-(-self.n // self.bq), -(-self.n // self.bk))
        if mask.shape != want:
            raise ValueError(f"mask must have shape {want}, got {mask.shape}")
        return {slot * self.nqb + i: sum(1 << j for j in range(mask.shape[1]) if mask[i, j])
                for i in range(mask.shape[0])}

    def sc_addrs(self, slot: int) -> range:
        """Host addresses of slot ``slot``'s score-cache P words (every row and key group)."""
        per = self.man["geometry"]["sc_rows"] * self.man["geometry"]["n_kg"]
        return range(slot * per, (slot + 1) * per)

    def sc_addr(self, slot: int, i: int, kg: int) -> int:
        """Host address of slot ``slot``'s P word of row ``i``, key group ``kg`` (the P banks'
        words interleaved: bank ``i mod p_banks`` in the low bits)."""
        geo = self.man["geometry"]
        r, t = slot * geo["sc_rows"] + i, geo["p_banks"]
        return (r // t * geo["n_kg"] + kg) * t + r % t

    def rl_addrs(self, slot: int) -> range:
        """Host addresses of slot ``slot``'s score-cache row words."""
        rows = self.man["geometry"]["sc_rows"]
        return range(slot * rows, (slot + 1) * rows)

    def score_cache(self, sc: dict[int, int], rl: dict[int, int], slot: int):
        """The applied weights ``w = p << shift`` ``(N, N)`` and the rows' ``(r, L)`` ``(N, 2)``
        of slot ``slot`` from its words (``sc_addrs`` / ``rl_addrs``), as
        ``golden.sar.sar_cache_step`` caches them (``w`` at keys outside the mask: whatever the
        memory holds)."""
        geo = self.man["geometry"]
        n_kg, rows = geo["n_kg"], geo["sc_rows"]
        lay = self.lays["sc_word"]
        w = np.zeros((self.n, n_kg * self.g), dtype=np.int64)
        for i in range(self.n):
            for kg in range(n_kg):
                f = unpack_named(sc[self.sc_addr(slot, i, kg)], lay)
                w[i, kg * self.g:(kg + 1) * self.g] = [f[f"p[{k}]"] << f["shift"]
                                                       for k in range(self.g)]
        rlw = [unpack_named(rl[slot * rows + i], self.lays["rl_word"]) for i in range(self.n)]
        return w[:, :self.n], np.array([[f["r"], f["big_l"]] for f in rlw], dtype=np.int64)


async def read_words(io, addr: str, rdata: str, addrs) -> dict[int, int]:
    """``{address: word}`` through a host read port, one word a cycle (read a cycle after its
    address: the synchronous ports' latency, which the combinational ones meet too)."""
    set_, get, tick = io
    out = {}
    for a in addrs:
        set_(addr, a)
        await tick()
        out[a] = get(rdata)
    return out


async def save_slot(io, img: HeadImage, slot: int) -> dict:
    """SAR: a slot's state, to restore later (``restore_slot``): its step counter, masks and
    score cache (P words and row words)."""
    set_, get, tick = io
    set_("host_slot_addr", slot)
    await tick()
    return {"slot": get("host_slot_rdata"),
            "mask": await read_words(io, "host_mask_addr", "host_mask_rdata",
                                     range(slot * img.nqb, (slot + 1) * img.nqb)),
            "sc": await read_words(io, "host_sc_addr", "host_sc_rdata", img.sc_addrs(slot)),
            "rl": await read_words(io, "host_rl_addr", "host_rl_rdata", img.rl_addrs(slot))}


async def restore_slot(io, slot: int, saved: dict):
    """SAR: write back what ``save_slot`` read (into the same slot's addresses)."""
    await write_words(io, "host_slot_we", "host_addr", "host_slot_wdata", {slot: saved["slot"]})
    await write_words(io, "host_mask_we", "host_addr", "host_mask_wdata", saved["mask"])
    await write_words(io, "host_sc_we", "host_addr", "host_sc_wdata", saved["sc"])
    await write_words(io, "host_rl_we", "host_addr", "host_rl_wdata", saved["rl"])


class HeadOutcome:
    def __init__(self, o, res, mask, key, counters):
        self.o, self.res, self.mask, self.key, self.counters = o, res, mask, key, counters


async def run_head(io, img: HeadImage, q, k, v, m, sh, *, slot: int = 0,
                   theta_q: int | None = None, refresh: int | None = None, read_res: bool = True,
                   mask=None, max_cycles: int = 5_000_000) -> HeadOutcome:
    """Load one head, run one step of ``slot``, read the output ``O`` (N, Dh), and (with
    ``read_res``) the slot's residual R (N, Dh) and mask (nqb(N), nkb(N)) back. ``theta_q`` and
    ``refresh`` default to the configuration's ``theta`` and ``refresh_attn``. SAR: ``mask``
    (the slot's, written first, if given); ``q``, ``k`` and ``m``, ``sh`` may be ``None`` (a
    reuse step reads none of them: not written); ``read_res`` must be false."""
    set_, get, tick = io
    cfg = img.man["config"]
    theta_q = theta_fixed(cfg["theta"]) if theta_q is None else theta_q
    refresh = cfg["refresh_attn"] if refresh is None else refresh
    if mask is not None:
        await write_words(io, "host_mask_we", "host_addr", "host_mask_wdata",
                          img.mask_words(mask, slot))
    if q is not None:
        await write_words(io, "host_q_we", "host_addr", "host_q_wdata", img.q_words(q))
    if k is not None:
        for a, words in enumerate(img.k_words(k)):
            await write_words(io, "host_k_we", "host_addr", "host_k_wdata", words, 1 << a)
    for a, words in enumerate(img.v_words(v)):
        await write_words(io, "host_v_we", "host_addr", "host_v_wdata", words, 1 << a)
    if m is not None:
        await write_words(io, "host_ms_we", "host_addr", "host_ms_wdata", img.ms_words(m, sh))
    for name, val in (("slot", slot), ("n_tokens", img.n), ("theta_q", theta_q),
                      ("refresh", refresh)):
        set_(name, val)
    await start_and_wait(io, max_cycles, "attention step")
    counters = {c: get(c) for c in ("cycles", "count_qk", "count_pv")}
    key = bool(get("key"))
    n = img.n
    o_w = {}
    for a in img.o_addrs():
        set_("host_o_addr", a)
        await tick()
        o_w[a] = get("host_o_rdata")
    o = img.rows_from(o_w, img.o_addrs(), "o_word")
    res = mask = None
    if read_res:
        r_w = {}
        for a in img.res_addrs(slot):
            set_("host_res_addr", a)
            await tick()
            r_w[a] = get("host_res_rdata")
        res = img.rows_from(r_w, img.res_addrs(slot), "res_word")
        nqb, nkb = -(-n // img.bq), -(-n // img.bk)
        mask = np.zeros((nqb, nkb), dtype=bool)
        for i in range(nqb):
            set_("host_mask_addr", slot * img.nqb + i)
            await tick()
            word = get("host_mask_rdata")
            mask[i] = [(word >> j) & 1 for j in range(nkb)]
    return HeadOutcome(o, res, mask, key, counters)


# ----- cocotb -----
try:
    import cocotb
    from cocotb.clock import Clock

    from dstar.sim.case_files import from_env
    from dstar.sim.cocotb_io import CLOCK_NS, dut_io, reset
except ImportError:                         # the driver is usable without cocotb
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def test_cases(dut):
        """Every case of ``DSTAR_ATTN_CASES``: bit-exact O, R and mask, cycles equal to the
        model, on a freshly reset design per case."""
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        man, cases = from_env("DSTAR_ATTN_PARAMS", "DSTAR_ATTN_CASES")
        att = man["attention"]
        io = dut_io(dut)
        failures = []
        if att["geometry"].get("sar"):
            await _sar_cases(dut, att, io, cases)
            return
        for name, c in cases:
            await reset(dut, io, att["ports"])
            n = int(c["n"])
            img = HeadImage(att, n)
            for s in range(len(c["keys"])):
                out = await run_head(io, img, c["q"][s], c["k"][s], c["v"][s], c["m"][s],
                                     c["sh"][s], slot=int(c["slot"]), theta_q=int(c["theta_q"]),
                                     refresh=int(c["refresh"]))
                want = dict(zip(("cycles", "count_qk", "count_pv"),
                                (int(x) for x in c["counters"][s]), strict=True))
                cocotb.log.info(f"{name} step {s}: key={out.key} {out.counters}")
                if out.key != bool(c["keys"][s]):
                    failures.append(f"{name} step {s}: key {out.key}")
                if not np.array_equal(out.o, c["o"][s]):
                    failures.append(f"{name} step {s}: O differs "
                                    f"({int((out.o != c['o'][s]).sum())} elements)")
                if not np.array_equal(out.res, c["r"][s]):
                    failures.append(f"{name} step {s}: R differs")
                if not np.array_equal(out.mask, c["mask"][s]):
                    failures.append(f"{name} step {s}: mask differs")
                if out.counters != want:
                    failures.append(f"{name} step {s}: counters {out.counters} != {want}")
        assert not failures, "; ".join(failures)

    async def _sar_cases(dut, att, io, cases):
        """SAR (``attention = "sar"``): per case the host's mask (written before the first
        step only), per step Q, K and ``(m, sh)`` written on cache steps only, V always;
        bit-exact O, the step kind and counters equal to the model."""
        failures = []
        for name, c in cases:
            await reset(dut, io, att["ports"])
            img = HeadImage(att, int(c["n"]))
            for s in range(len(c["keys"])):
                cache = bool(c["keys"][s])
                q, k, m, sh = (c[x][s] if cache else None for x in ("q", "k", "m", "sh"))
                out = await run_head(io, img, q, k, c["v"][s], m, sh, slot=int(c["slot"]),
                                     theta_q=int(c["theta_q"]), refresh=int(c["refresh"]),
                                     read_res=False, mask=c["mask"] if s == 0 else None)
                want = dict(zip(("cycles", "count_qk", "count_pv"),
                                (int(x) for x in c["counters"][s]), strict=True))
                cocotb.log.info(f"{name} step {s}: cache={out.key} {out.counters}")
                if out.key != cache:
                    failures.append(f"{name} step {s}: cache step {out.key}")
                if not np.array_equal(out.o, c["o"][s]):
                    failures.append(f"{name} step {s}: O differs "
                                    f"({int((out.o != c['o'][s]).sum())} elements)")
                if out.counters != want:
                    failures.append(f"{name} step {s}: counters {out.counters} != {want}")
        assert not failures, "; ".join(failures)
