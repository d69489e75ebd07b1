"""The host of a DiT block on an accelerator, over any engine: the block's accelerator
operations (``DiT.block_ops``: its four linears and its attention) become integer work for an
*engine*; everything else (LayerNorm, adaLN modulation, GELU, the residual adds) runs in
``DiT.block_ops``, and the float work around the engine (each layer's lattice, quantization,
logit multipliers, dequantization) is ``golden.host_side``'s, the golden pipeline's hooks' own
(``golden.difflinear.DiffLinear``, ``golden.attention.AttentionReuse`` or, with ``attention =
"sar"``, ``golden.sar.SparseAttentionReuse``), so that the block's float output is the golden
pipeline's bit for bit.

Engines are async, so that the same host runs inside a simulator's testbench:

* ``GoldenEngine``: the accelerator's integer contract computed by the golden model;
* ``dstar.sim.host.AcceleratorEngine``: the accelerator top itself, on any simulator.

``BlockHost.linear`` and ``BlockHost.attention`` are the host's hooks (coroutines; ``golden.dit
.drive`` runs them on an engine that never waits, ``drive_async`` on any), ``BlockHost.step``
runs one block at one sampling step. ``HeadSteps`` is the host of one head on a golden slot
(the attention benches and test cases).

SAR's host side: the masks are the host's (``BlockHost(masks=...)``), handed to the engine
with each head's cache step (the top loads them into its ``MASK`` memory then); a reuse step
quantizes V only (on its own per-head scale, as ``SparseAttentionReuse``) and hands no Q, K or
logit multipliers. ``qkv`` still computes all its columns on reuse steps: its Q and K columns'
accumulators must follow every step for the differential linears to stay the golden
pipeline's (a V-only ``qkv`` needs a catch-up of Q and K at the next cache step, not built).
"""

import numpy as np

from dstar.config import Attention, Encoding

from .attention import key_step_head, reuse_step_head, select_blocks
from .difflinear import encode_step
from .dit import drive_async, run_sync
from .fmdq_pe import linear_step
from .host_side import AttentionSide, LinearSide
from .quant import exact_matmul
from .sar import sar_cache_step, sar_reuse_step
from .schedule import is_key_step

__all__ = ["BlockHost", "GoldenEngine", "HeadSteps", "run_sync"]


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
                  out_frac_bits=cfg.attn_out_frac_bits, group=cfg.group, e_max=cfg.e_max)
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
            o, st["w"], st["l"] = sar_cache_step(q, k, v, m, sh, st["mask"], **kw)
            return o, True
        if key:
            res = key_step_head(q, k, v, m, sh, theta=cfg.theta, **kw)
            st["mask"], st["r"] = res["mask"], res["r"]
            # The blocks the mass rule picked, before the row maxima's were added (what the
            # attention cycle model needs besides the mask).
            st["picks"] = select_blocks(res["mass"], cfg.theta).sum(axis=-1)
            return res["o_full"], True
        return reuse_step_head(q, k, v, m, sh, st["mask"], st["r"], **kw), False


class BlockHost:
    """The host of the accelerated blocks of a DiT: per linear layer its ``LinearSide`` (the
    lattice fixed at its key steps, ``Config.refresh_linear``), per attention layer its
    ``AttentionSide`` (v1: V's lattice fixed at its key steps; SAR: every step's own) and its
    first slot, the integer work on ``engine`` (``GoldenEngine`` or ``AcceleratorEngine``).
    With ``attention = "sar"``, ``masks`` maps each attention layer's name to its static masks
    ``(H, nqb(N), nkb(N))`` (``dstar.sim.block_run.block_masks``)."""

    def __init__(self, cfg, model, engine, masks: dict | None = None):
        self.cfg, self.model, self.engine = cfg, model, engine
        self.masks = masks if cfg.attention is Attention.SAR else None
        if cfg.attention is Attention.SAR and not masks:
            raise ValueError("attention = 'sar' needs the attention layers' masks")
        self.lin: dict[str, LinearSide] = {}
        self.att: dict[str, tuple[AttentionSide, int]] = {}     # name -> (side, first slot)
        self.rows: tuple | None = None          # (B, N) of the first step

    async def step(self, i: int, h, sc, step: int):
        """Block ``i`` of ``model`` on ``h`` at sampling step ``step`` (``DiT.block_ops``);
        every step of one host has the first one's batch and tokens (its lattices and the
        engine's state are per row): a ``ValueError`` names another."""
        rows = np.shape(h)[:2]
        if self.rows is not None and rows != self.rows:
            raise ValueError(f"h has (batch, tokens) {rows}, this host's steps had {self.rows}; "
                             "use a new BlockHost for another sequence")
        try:
            return await drive_async(self.model.block_ops(i, h, sc), self.linear,
                                     self.attention, step)
        finally:
            if self.lin or self.att:            # a layer's state now holds these rows
                self.rows = rows

    async def linear(self, name: str, x, w, b, step: int):
        """The hook of linear layer ``name`` (``golden.dit.LinearOp``): float32 ``(N, M)``."""
        side = self.lin.get(name)
        if side is None:
            side = self.lin[name] = LinearSide(w, b, self.cfg)
        key = side.is_key(step)
        if key:
            side.fix_lattice(x)
        target = side.targets(x).astype(np.int64)
        y_int = await self.engine.linear(name, side.w_q, target, key)
        y = np.empty(y_int.shape, np.float32)
        side.output(y_int, y)
        return y

    async def attention(self, name: str, q, k, v, step: int):
        """The hook of attention layer ``name`` (``golden.dit.AttentionOp``): each (batch
        element, head) on its own slot of the engine; float32 ``(B, H, N, Dh)``."""
        sar = self.masks is not None
        v = np.asarray(v)
        nb, nh = v.shape[:2]
        if name not in self.att:
            self.att[name] = (AttentionSide(self.cfg, sar=sar), len(self.att) * nb * nh)
        side, slot0 = self.att[name]
        key = side.is_key(step)
        masks = None
        if sar and key:
            if name not in self.masks:
                raise ValueError(f"{name}: no masks for this attention layer")
            masks = np.asarray(self.masks[name], dtype=bool)
        q_int, k_int, m, sh, v_int, _ = side.quantize(q, k, v, key)
        o_int = np.empty(v.shape, np.int64)
        for bi in range(nb):
            for hi in range(nh):
                args = [None if a is None else a[bi, hi] for a in (q_int, k_int, v_int, m, sh)]
                if masks is not None:       # v1's engines take no mask
                    args.append(masks[hi])
                o_int[bi, hi], hw_key = await self.engine.attention(slot0 + bi * nh + hi, *args)
                if hw_key != key:
                    raise RuntimeError(f"{name}: the engine's step kind ({hw_key}) differs "
                                       f"from the host's ({key}) at step {step}")
        return side.output(o_int).astype(np.float32)


class HeadSteps:
    """One head (any ``(N, Dh)`` float q, k, v per step) through the host's attention side
    and a golden slot of v1's residual reuse (``cfg``'s ``theta``, ``refresh_attn``, blocks and
    softmax), step after step: per step the integer inputs, ``key``, the output ``o`` and the
    slot's residual ``r``, ``mask`` and, on key steps, ``picks`` (the blocks the mass rule
    picked), and V's lattice ``s_v``."""

    def __init__(self, cfg):
        if cfg.attention is Attention.SAR:      # a slot of v1's residual reuse, whatever cfg's
            cfg = cfg.replace(attention=Attention.RESIDUAL)
        self.side = AttentionSide(cfg)
        self.engine = GoldenEngine(cfg)
        self.calls = 0

    def step(self, q, k, v) -> dict:
        key = self.side.is_key(self.calls)      # the slot's own count, as the engine's
        self.calls += 1
        q_int, k_int, m, sh, v_int, _ = self.side.quantize(q, k, v, key)
        o, _ = run_sync(self.engine.attention(0, q_int, k_int, v_int, m, sh))
        st = self.engine.slots[0]
        return {"q": q_int, "k": k_int, "v": v_int, "m": m, "sh": sh, "key": key, "o": o,
                "r": st["r"], "mask": st["mask"], "picks": st["picks"] if key else None,
                "s_v": float(self.side.s_v)}
