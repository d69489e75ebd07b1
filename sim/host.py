"""The host side of a DiT block on the accelerator: the block's accelerator operations
(``DiT.block_ops``: its four linears and its attention) become integer work for an *engine*,
everything else (LayerNorm, adaLN modulation, GELU, the residual adds, the requantization of
activations onto each layer's lattice and back) runs here in NumPy, exactly as the golden
pipeline does (``dstar.golden.hooks.DStarLinears``, ``dstar.golden.attention.AttentionReuse``
or, with ``attention = "sar"``, ``dstar.golden.sar.SparseAttentionReuse``), so that the
block's float output is the golden pipeline's bit for bit.

Engines (async, so that the same host code runs inside a simulator's testbench):

* ``GoldenEngine``: the accelerator's integer contract computed by the golden model;
* ``AcceleratorEngine``: the accelerator top itself, through ``dstar.sim.accel_io`` on any
  simulator's ``(set, get, tick)`` adapter. Rows beyond ``max_tokens`` run in chunks; each
  layer's state and accumulators are saved and restored around other layers' steps, its
  weights loaded once and kept while the weight memory has room for the others'; each
  (batch element, head) has a host attention slot, kept in the top's slot ``host slot %
  attn_slots`` and saved and restored when another host slot needs it (v1: its step counter,
  residual and mask; SAR: its step counter, score cache and mask).

SAR's host side: the masks are the host's (``BlockHost(masks=...)``), handed to the engine
with each head's cache step (the top loads them into its ``MASK`` memory then); a reuse step
quantizes V only (on its own per-head scale, as ``SparseAttentionReuse``) and hands no Q, K or
logit multipliers. ``qkv`` still computes all its columns on reuse steps: its Q and K columns'
accumulators must follow every step for the differential linears to stay the golden
pipeline's (a V-only ``qkv`` needs a catch-up of Q and K at the next cache step, not built).

``BlockHost.step`` runs one block at one sampling step; ``run_sync`` runs a coroutine that
never waits on a simulator (the golden engine) to its result.
"""

import numpy as np

from dstar.config import Attention, Encoding
from dstar.golden.attention import (
    dequantize_output,
    key_step_head,
    quantize_on,
    quantize_per_head,
    quantize_qk,
    reuse_step_head,
    select_blocks,
    theta_fixed,
)
from dstar.golden.difflinear import encode_step, key_lattice, linear_output
from dstar.golden.dit import apply
from dstar.golden.fmdq_pe import linear_step
from dstar.golden.quant import exact_matmul, quantize_weights, to_lattice_float
from dstar.golden.sar import sar_cache_step, sar_reuse_step
from dstar.golden.schedule import is_key_step

from .accel_io import AttentionStep, counters
from .fmdq_accel_io import linear_step_of

__all__ = ["BlockHost", "GoldenEngine", "AcceleratorEngine", "run_sync"]


def run_sync(coro):
    """The result of a coroutine that never suspends (``BlockHost.step`` on ``GoldenEngine``)."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the coroutine waited on something: it needs an event loop")


class GoldenEngine:
    """The accelerator's integer work by the golden model: per layer the state and ``Y_int``
    (``golden.difflinear.encode_step``), per attention slot the step counter, mask and
    residual (``golden.attention.key_step_head`` / ``reuse_step_head``) and, after a key step,
    the blocks its mass rule picked (``picks``); with ``attention = "sar"`` the host's mask
    and the score cache ``w``, ``l`` instead (``golden.sar.sar_cache_step`` /
    ``sar_reuse_step``)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.layers: dict[str, tuple] = {}
        self.slots: dict[int, dict] = {}

    def _check_linear(self, name: str, w_q, target, key: bool) -> None:
        """What the top's memories hold and its state needs: INT8 weights ``(K, M)``, integer
        targets ``(N, K)`` within ``+-target_max`` (the top would clip the others, and this
        engine must agree with it), and a non-key step with its layer's rows; a ``ValueError``
        naming the value or shape otherwise."""
        w_q, target = np.asarray(w_q), np.asarray(target)
        for what, a, lim in (("weights", w_q, 128), ("targets", target, self.cfg.target_max)):
            if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"{name}: {what} must be a 2-D integer array, got {a.dtype} "
                                 f"of shape {a.shape}")
            bad = (a < -lim) | (a > (127 if what == "weights" else lim))
            if bad.any():
                idx = tuple(int(i) for i in np.argwhere(bad)[0])
                raise ValueError(f"{name}: {what} hold {a[idx]} at {idx}, outside "
                                 f"[{-lim}, {127 if what == 'weights' else lim}]")
        if target.shape[1] != w_q.shape[0]:
            raise ValueError(f"{name}: targets of K={target.shape[1]} for weights of "
                             f"K={w_q.shape[0]}")
        if not key and name in self.layers and self.layers[name][0].shape != target.shape:
            raise ValueError(f"{name}: a non-key step of {target.shape[0]} rows after steps of "
                             f"{self.layers[name][0].shape[0]}")

    async def linear(self, name: str, w_q, target, key: bool):
        """One linear step of layer ``name``: ``Y_int`` (int64 ``(N, M)``; with ``encoding =
        "fmdq"`` ``golden.fmdq_pe.linear_step``'s)."""
        cfg = self.cfg
        self._check_linear(name, w_q, target, key)
        if key or name not in self.layers:
            xs = np.zeros_like(target)
            y = np.zeros((target.shape[0], w_q.shape[1]), np.int64)
        else:
            xs, y = self.layers[name]
        if cfg.encoding is Encoding.FMDQ:
            st = linear_step(target, xs, y, w_q, key=False, token_tile=cfg.token_tile,
                             window=cfg.sort_window, e_max=cfg.e_max, tau=cfg.tau)
            xs, y = st.xs, st.y
        else:
            enc, xs = encode_step(target, xs, cfg)
            y = y + exact_matmul(enc.decode(), w_q)
        self.layers[name] = (xs, y)
        return y

    async def attention(self, slot: int, q, k, v, m, sh, mask=None):
        """One attention step of ``slot`` (its key step on its first call and every
        ``refresh_attn`` calls): ``(O_int (N, Dh), key)``. SAR: a cache step on the host's
        ``mask`` ``(nqb, nkb)``; a reuse step reads ``v`` only (the others may be ``None``)."""
        cfg = self.cfg
        kw = dict(block_q=cfg.block_q, block_k=cfg.block_k, frac_bits=cfg.attn_frac_bits,
                  group=cfg.group, e_max=cfg.e_max)
        st = self.slots.setdefault(slot, {"calls": 0})
        key = is_key_step(st["calls"], cfg.refresh_attn)
        st["calls"] += 1
        if cfg.attention is Attention.SAR:
            if not key:
                return sar_reuse_step(st["w"], st["l"], v, e_max=cfg.e_max,
                                      out_frac_bits=cfg.attn_out_frac_bits), False
            if mask is None:
                raise ValueError(f"slot {slot}: a SAR cache step needs the host's mask")
            st["mask"] = np.asarray(mask, dtype=bool)
            o, st["w"], st["l"] = sar_cache_step(q, k, v, m, sh, st["mask"],
                                                 out_frac_bits=cfg.attn_out_frac_bits, **kw)
            return o, True
        if key:
            res = key_step_head(q, k, v, m, sh, theta=cfg.theta, **kw)
            st["mask"], st["r"] = res["mask"], res["r"]
            # The blocks the mass rule picked, before the row maxima's were added (what the
            # attention cycle model needs besides the mask).
            st["picks"] = select_blocks(res["mass"], cfg.theta).sum(axis=-1)
            return res["o_full"], True
        return reuse_step_head(q, k, v, m, sh, st["mask"], st["r"], **kw), False


class AcceleratorEngine:
    """The accelerator top through ``dstar.sim.accel_io`` (``io``: a ``(set, get, tick)``
    adapter of a reset design, ``man``: its manifest's ``accelerator`` section), attention at
    ``cfg``'s ``theta`` and ``refresh_attn``. ``runs`` lists the counters (``READ_COUNTERS``,
    by name) after each run command, in order."""

    def __init__(self, io, man: dict, cfg):
        self.io, self.man, self.cfg = io, man, cfg
        self.runs: list[dict] = []
        self.max_rows = man["config"]["max_tokens"]
        self.saved: dict[tuple, tuple] = {}       # (layer, chunk) -> (state, Y)
        self.w_base: dict[str, int] = {}          # layer -> where its weights are loaded
        self.w_free = 0                           # the first weight word no layer holds
        self.resident: dict[int, int] = {}        # the top's slot -> the host slot in it
        self.parked: dict[int, dict] = {}         # host slot -> its saved state
        self.rows: dict[int, int] = {}            # host slot -> its N
        self.calls: dict[int, int] = {}           # host slot -> steps run

    async def linear(self, name: str, w_q, target, key: bool):
        n, k = target.shape
        ys = []
        for c, r0 in enumerate(range(0, n, self.max_rows)):
            rows = target[r0:r0 + self.max_rows]
            step = linear_step_of(self.man)(self.man, k, w_q.shape[1], rows.shape[0])
            state, y = (None, None) if key else self.saved[(name, c)]
            w = None if name in self.w_base else w_q
            y_int, xs = await step.run(self.io, rows, key=key, w_q=w,
                                       w_base=self._weights_at(name, step.weight_span),
                                       state=state, y=y)
            self.runs.append(await counters(self.io, self.man))
            self.saved[(name, c)] = (xs, y_int)
            ys.append(y_int)
        return np.concatenate(ys)

    def _weights_at(self, name: str, span: int) -> int:
        """Where layer ``name``'s weights (``span`` words) are, or go: after the last layer
        loaded, or, when the memory is full, from address 0 on again (the layers there
        forgotten)."""
        if name not in self.w_base:
            if self.w_free + span > self.man["memories"]["WEIGHTS"]["depth"]:
                self.w_base, self.w_free = {}, 0
            self.w_base[name] = self.w_free
            self.w_free += span
        return self.w_base[name]

    async def attention(self, slot: int, q, k, v, m, sh, mask=None):
        """One attention step of the host's slot ``slot`` on the top's slot ``slot %
        attn_slots``, whose state (step counter, residual or score cache, mask) is saved and
        restored when another host slot had it. SAR: ``mask`` (a cache step's) is loaded into
        the slot's ``MASK`` words before the run; ``None`` arguments are not loaded (a reuse
        step needs V only)."""
        phys = slot % self.man["config"]["attn_slots"]
        step = AttentionStep(self.man, v.shape[0])
        owner = self.resident.get(phys)
        if owner != slot:
            if owner is not None:
                self.parked[owner] = await AttentionStep(self.man, self.rows[owner]).save_slot(
                    self.io, phys, counter_only=self._next_is_key(owner))
            saved = self.parked.pop(slot, None)
            if saved is None:                   # a fresh slot: its first step is a key step
                saved = {"SLOT": {phys: step.slot_word(False, 0)}}
            await step.restore_slot(self.io, saved)
            self.resident[phys] = slot
        o, _, _, cnt = await step.run(
            self.io, q, k, v, m, sh, slot=phys, theta_q=theta_fixed(self.cfg.theta),
            refresh=self.cfg.refresh_attn, read_state=False, mask=mask)
        self.runs.append(cnt)
        self.rows[slot] = v.shape[0]
        self.calls[slot] = self.calls.get(slot, 0) + 1
        return o, bool(cnt["attention_key"])

    def _next_is_key(self, slot: int) -> bool:
        return is_key_step(self.calls.get(slot, 0), self.cfg.refresh_attn)


class BlockHost:
    """The host of the accelerated blocks of a DiT: per linear layer its lattice (fixed at
    its key steps, ``Config.refresh_linear``), per attention layer its V lattice (v1: fixed at
    its key steps; SAR: every step's own); the float conversions of ``DiffLinear`` and
    ``AttentionReuse`` (``SparseAttentionReuse``), the integer work on ``engine``. With
    ``attention = "sar"``, ``masks`` maps each attention layer's name to its static masks
    ``(H, nqb(N), nkb(N))`` (``dstar.sim.block_run.block_masks``)."""

    def __init__(self, cfg, model, engine, masks: dict | None = None):
        self.cfg, self.model, self.engine = cfg, model, engine
        self.masks = masks if cfg.attention is Attention.SAR else None
        if cfg.attention is Attention.SAR and not masks:
            raise ValueError("attention = 'sar' needs the attention layers' masks")
        self.lin: dict[str, dict] = {}
        self.att: dict[str, dict] = {}
        self.rows: tuple | None = None          # (B, N) of the first step

    async def step(self, i: int, h, sc, step: int):
        """Block ``i`` of ``model`` on ``h`` at sampling step ``step`` (``DiT.block_ops``);
        every step of one host has the first one's batch and tokens (its lattices and the
        engine's state are per row): a ``ValueError`` names another."""
        rows = np.shape(h)[:2]
        if self.rows is not None and rows != self.rows:
            raise ValueError(f"h has (batch, tokens) {rows}, this host's steps had {self.rows}; "
                             "use a new BlockHost for another sequence")
        ops = self.model.block_ops(i, h, sc)
        try:
            op = next(ops)
            self.rows = rows
            while True:
                op = ops.send(await apply(op, self._linear, self._attention, step))
        except StopIteration as done:
            return done.value

    def _is_key(self, st, step: int, refresh: int) -> bool:
        return st.get("d") is None or is_key_step(step, refresh)

    async def _linear(self, name, x, w, b, step):
        cfg = self.cfg
        st = self.lin.get(name)
        if st is None:
            w_q, s_w = quantize_weights(w)
            st = self.lin[name] = {"w_q": w_q, "s_w": s_w, "d": None,
                                   "b": None if b is None else np.asarray(b, np.float64)}
        key = self._is_key(st, step, cfg.refresh_linear)
        if key:
            st["d"] = key_lattice(x, cfg)
        target = to_lattice_float(x, st["d"], cfg.target_max).astype(np.int64)
        y_int = await self.engine.linear(name, st["w_q"], target, key)
        y = np.empty(y_int.shape, np.float32)
        linear_output(y_int, st["d"], st["s_w"], st["b"], y)
        return y

    async def _attention(self, name, q, k, v, step):
        cfg = self.cfg
        sar = self.masks is not None
        v = np.asarray(v)
        st = self.att.setdefault(name, {"slot0": len(self.att) * v.shape[0] * v.shape[1]})
        key = "s_v" not in st or is_key_step(step, cfg.refresh_attn)
        nb, nh, _, dh = v.shape
        q_int = k_int = m = sh = masks = None
        if key or not sar:                  # SAR's reuse steps read no Q or K
            q, k = np.asarray(q), np.asarray(k)
            q_int, k_int, m, sh = quantize_qk(q, k, cfg.attn_frac_bits)
        if sar and key:
            if name not in self.masks:
                raise ValueError(f"{name}: no masks for this attention layer")
            masks = np.asarray(self.masks[name], dtype=bool)
        if key or sar:                      # v1 freezes V's lattice between key steps
            v_int, st["s_v"] = quantize_per_head(v)
        else:
            v_int, _ = quantize_on(v, st["s_v"])
        o_int = np.empty(v.shape, np.int64)
        for bi in range(nb):
            for hi in range(nh):
                args = [None if a is None else a[bi, hi] for a in (q_int, k_int, v_int, m, sh)]
                if masks is not None:       # v1's engines take no mask
                    args.append(masks[hi])
                o_int[bi, hi], hw_key = await self.engine.attention(st["slot0"] + bi * nh + hi,
                                                                    *args)
                if hw_key != key:
                    raise RuntimeError(f"{name}: the engine's step kind ({hw_key}) differs "
                                       f"from the host's ({key}) at step {step}")
        return dequantize_output(o_int, st["s_v"], cfg.attn_out_frac_bits).astype(np.float32)
