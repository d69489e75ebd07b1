"""The host of a DiT block on an accelerator, over any engine: the block's accelerator
operations (``DiT.block_ops``: its four linears and its attention) become integer work for an
*engine*; everything else (LayerNorm, adaLN modulation, GELU, the residual adds) runs in
``DiT.block_ops``, and the float work around the engine (each layer's lattice and its
refinement, quantization, logit multipliers, dequantization) is ``golden.host_side``'s.

This is the one path of the golden pipeline too: its hooks are this host's on the golden
engine (``golden.hooks.DStarLinears`` and ``golden.difflinear.DiffLinear`` over
``BlockHost.linear_step``, ``golden.attention.AttentionReuse`` and, with ``attention = "sar"``,
``golden.sar.SparseAttentionReuse`` over ``BlockHost.attention_step``), adding only their
records and statistics. Engines are async, so that the same host runs inside a simulator's
testbench:

* ``GoldenEngine``: the accelerator's integer contract computed by the golden model, with its
  invariant checks (``golden.linear_state``); it runs a layer's heads at once
  (``attention_heads``), refines a layer's lattice (``refine``, ``Config.refine_max``) and
  clears slots (``clear_slots``, ``Config.sar_reuse_from``);
* ``dstar.sim.host.AcceleratorEngine``: the accelerator top itself, on any simulator, a head
  at a time (``HeadLoop``); a host refuses ``refine_max`` and ``sar_reuse_from`` on it.

``BlockHost.linear`` and ``BlockHost.attention`` are the host's hooks (coroutines; ``golden.dit
.drive`` runs them on an engine that never waits, ``drive_async`` on any), ``BlockHost.step``
runs one block at one sampling step. ``HeadSteps`` is the host of one head on a golden slot
(the attention benches and test cases).

SAR's host side: the masks are the host's (``BlockHost(masks=...)``), handed to the engine
with each head's cache step (the top loads them into its ``MASK`` memory then); a reuse step
quantizes V only (on its own per-head scale) and hands no Q, K or logit multipliers. ``qkv``
still computes all its columns on reuse steps: its Q and K columns' accumulators must follow
every step for the differential linears to stay exact (a V-only ``qkv`` needs a catch-up of Q
and K at the next cache step, not built).
"""

from typing import NamedTuple

import numpy as np

from dstar.config import Attention

from .attention import key_step_head, reuse_step_head, select_blocks
from .dit import drive_async, run_sync
from .host_side import AttentionSide, LinearSide
from .linear_state import LinearState
from .sar import sar_cache_step, sar_reuse_step
from .schedule import is_key_step
from .softmax import P_MAX

__all__ = ["AttentionResult", "BlockHost", "GoldenEngine", "HeadLoop", "HeadSteps",
           "LinearResult", "run_sync"]


class GoldenEngine:
    """The accelerator's integer work by the golden model: per linear layer its
    ``golden.linear_state.LinearState`` (``layers``: ``Xs_int``, ``Y_int``, the invariant
    checks, each step's code and counts), per attention slot the step counter, mask and
    residual (``golden.attention.key_step_head`` / ``reuse_step_head``) and, after a key step,
    the blocks its mass rule picked (``picks``); with ``attention = "sar"`` the host's mask
    and the score cache ``w``, ``l`` instead (``golden.sar.sar_cache_step`` /
    ``sar_reuse_step``)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.layers: dict[str, LinearState] = {}
        self.slots: dict[int, dict] = {}

    def _check_linear(self, name: str, w_q, target, key: bool) -> None:
        """What the top's memories hold and its state needs: INT8 weights ``(K, M)`` (checked
        when the layer's state is made for them), integer targets ``(N, K)`` within
        ``+-target_max`` (the top would clip the others, and this engine must agree with it),
        and a non-key step with its layer's rows and weights; a ``ValueError`` naming the value
        or shape otherwise."""
        st = self.layers.get(name)
        new = st is None or (st.w_q is not w_q and not np.array_equal(st.w_q, w_q))
        checks = [("targets", target, self.cfg.target_max)]
        if new:
            checks.insert(0, ("weights", w_q, 128))
        for what, a, lim in checks:
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
        if not key and st is not None and st.xs is not None:
            if st.xs.shape != target.shape:
                raise ValueError(f"{name}: a non-key step of {target.shape[0]} rows after "
                                 f"steps of {st.xs.shape[0]}")
            if new:
                raise ValueError(f"{name}: a non-key step on other weights than its key "
                                 "step's (Y_int would not be W_q^T . Xs_int)")

    async def linear(self, name: str, w_q, target, key: bool):
        """One linear step of layer ``name``: ``Y_int`` (int64 ``(N, M)``) of its
        ``golden.linear_state.LinearState`` (``layers[name]``, made on the layer's first call
        or new weights; its ``last`` holds the step's code and counts). The layer's first call
        is a key step whatever ``key`` says."""
        w_q, target = np.asarray(w_q), np.asarray(target)
        self._check_linear(name, w_q, target, key)
        st = self.layers.get(name)
        if st is None or (st.w_q is not w_q and not np.array_equal(st.w_q, w_q)):
            st = self.layers[name] = LinearState(w_q, self.cfg, name)
        st.step(target.astype(np.int64, copy=False), key or st.xs is None)
        return st.y_int

    async def state_peak(self, name: str):
        """``max|Xs_int[n, :]|`` of layer ``name``'s rows (int64 ``(N,)``): what the host's
        lattice refinement reads (``LinearSide.refine``)."""
        return self.layers[name].state_peak()

    async def refine(self, name: str, k) -> None:
        """Halve the lattice of layer ``name``'s rows ``k`` times (int64 ``(N,)``): its state
        and accumulator shift left by ``k`` (``LinearState.refine``)."""
        self.layers[name].refine(np.asarray(k, np.int64))

    def next_is_key(self, slot: int) -> bool:
        """Whether ``slot``'s next step is a key step (its first, then every
        ``refresh_attn``-th since the slot was last cleared)."""
        return is_key_step(self.slots.get(int(slot), {"calls": 0})["calls"],
                           self.cfg.refresh_attn)

    async def clear_slots(self, slots) -> None:
        """The top's ``CLEAR_SLOTS``: the slots' next step is a key step."""
        for s in np.asarray(slots).flat:
            self.slots.setdefault(int(s), {})["calls"] = 0

    async def attention(self, slot: int, q, k, v, m, sh, mask=None):
        """One attention step of ``slot`` (its key step on its first call and every
        ``refresh_attn`` calls): ``(O_int (N, Dh), key)``. SAR: a cache step on the host's
        ``mask`` ``(nqb, nkb)``; a reuse step reads ``v`` only (the others may be ``None``).
        ``attention_heads`` on one slot."""
        return await self.attention_heads(np.asarray(slot), q, k, v, m, sh, mask)

    async def attention_heads(self, slots, q, k, v, m, sh, masks=None):
        """One attention step of each slot of ``slots`` (integers of any shape ``S``), at once:
        ``q``, ``k``, ``v`` ``S + (N, Dh)``, ``m``, ``sh`` ``S + (N,)``, SAR's ``masks``
        broadcast to ``S + (nqb, nkb)``; ``(O_int S + (N, Dh), key)``. Every slot must be at
        the same step kind (a ``ValueError`` otherwise: run them apart). Each slot keeps its
        step count and, v1, its ``mask``, residual ``r`` and, after a key step, the blocks its
        mass rule picked (``picks``); SAR its ``mask`` and score cache ``w``, ``l``."""
        cfg = self.cfg
        slots = np.asarray(slots, dtype=np.int64)
        lead = slots.shape
        sts = [self.slots.setdefault(int(s), {"calls": 0}) for s in slots.flat]
        kinds = {is_key_step(st["calls"], cfg.refresh_attn) for st in sts}
        if len(kinds) > 1:
            raise ValueError(f"slots {slots.ravel().tolist()} are at different step kinds; "
                             "run them one at a time")
        key = kinds.pop()
        kw = dict(block_q=cfg.block_q, block_k=cfg.block_k, frac_bits=cfg.attn_frac_bits,
                  out_frac_bits=cfg.attn_out_frac_bits, group=cfg.group, e_max=cfg.e_max)

        def stacked(field):
            return np.stack([st[field] for st in sts]).reshape(lead + np.shape(sts[0][field]))

        def store(**fields):
            for f, a in fields.items():
                a = np.asarray(a).reshape((len(sts),) + np.shape(a)[len(lead):])
                for st, x in zip(sts, a, strict=True):
                    st[f] = x

        if cfg.attention is Attention.SAR:
            if not key:
                o = sar_reuse_step(stacked("w"), stacked("l"), v, e_max=cfg.e_max,
                                   out_frac_bits=cfg.attn_out_frac_bits)
            else:
                if masks is None:
                    raise ValueError(f"slot {slots.ravel().tolist()}: a SAR cache step needs "
                                     "the host's mask")
                mk = np.array(np.broadcast_to(np.asarray(masks, dtype=bool),
                                              lead + np.shape(masks)[-2:]))
                o, w, lsum = sar_cache_step(q, k, v, m, sh, mk, **kw)
                # The cache in the narrowest type that holds 255 << e_max (as the top's).
                store(mask=mk, w=w.astype(np.min_scalar_type(P_MAX << cfg.e_max)), l=lsum)
        elif key:
            res = key_step_head(q, k, v, m, sh, theta=cfg.theta, **kw)
            # The blocks the mass rule picked, before the row maxima's were added (what the
            # attention cycle model needs besides the mask).
            store(mask=res["mask"], r=res["r"],
                  picks=select_blocks(res["mass"], cfg.theta).sum(axis=-1))
            o = res["o_full"]
        else:
            o = reuse_step_head(q, k, v, m, sh, stacked("mask"), stacked("r"), **kw)
        for st in sts:
            st["calls"] += 1
        return o, key


class HeadLoop:
    """``attention_heads`` for an engine whose slots run one at a time (``attention(slot, q,
    k, v, m, sh[, mask])`` per slot): the accelerator's (``dstar.sim.host
    .AcceleratorEngine``)."""

    async def attention_heads(self, slots, q, k, v, m, sh, masks=None):
        """``GoldenEngine.attention_heads``' contract, one slot after the other."""
        slots = np.asarray(slots, dtype=np.int64)
        lead = slots.shape
        mk = None if masks is None else np.broadcast_to(masks, lead + np.shape(masks)[-2:])
        o = np.empty(np.shape(v), np.int64)
        kinds = set()
        for idx in np.ndindex(lead):
            args = [None if a is None else a[idx] for a in (q, k, v, m, sh)]
            if mk is not None:                  # v1's engines take no mask
                args.append(mk[idx])
            o[idx], key = await self.attention(int(slots[idx]), *args)
            kinds.add(key)
        if len(kinds) > 1:
            raise RuntimeError(f"slots {slots.ravel().tolist()} ran at different step kinds")
        return o, kinds.pop()


class LinearResult(NamedTuple):
    """A linear step of the host: the float output ``y`` ``(N, M)``, the integer targets
    ``target`` (int64 ``(N, K)``), whether it was a key step, and each row's lattice halvings
    before it (``refine``, int64 ``(N,)``, or ``None``: no refinement)."""
    y: np.ndarray
    target: np.ndarray
    key: bool
    refine: np.ndarray | None


class BlockHost:
    """The host of the accelerated blocks of a DiT: per linear layer its ``LinearSide`` (the
    lattice fixed at its key steps, ``Config.refresh_linear``), per attention layer its
    ``AttentionSide`` (v1: V's lattice fixed at its key steps; SAR: every step's own) and its
    first slot, the integer work on ``engine`` (``GoldenEngine`` or ``AcceleratorEngine``).
    With ``attention = "sar"``, ``masks`` maps each attention layer's name to its static masks
    ``(H, nqb(N), nkb(N))`` (``dstar.sim.block_run.block_masks``)."""

    def __init__(self, cfg, model, engine, masks: dict | None = None):
        self.cfg, self.model, self.engine = cfg, model, engine
        if cfg.refine_max and not hasattr(engine, "refine"):
            raise ValueError(f"refine_max={cfg.refine_max} needs an engine that refines its "
                             f"layers' lattice ({type(engine).__name__} has no refine); use "
                             "refine_max=0")
        if (cfg.attention is Attention.SAR and cfg.sar_reuse_from
                and not hasattr(engine, "clear_slots")):
            raise ValueError(f"sar_reuse_from={cfg.sar_reuse_from} needs an engine whose slots "
                             f"the host can clear ({type(engine).__name__} has no clear_slots)"
                             "; use sar_reuse_from=0")
        self.masks = dict(masks or {}) if cfg.attention is Attention.SAR else None
        self.lin: dict[str, LinearSide] = {}
        # name -> (side, first slot, shape of its steps)
        self.att: dict[str, tuple[AttentionSide, int, tuple]] = {}
        self._slots = 0                         # slots the layers so far have
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
        return (await self.linear_step(name, x, w, b, step)).y

    async def linear_step(self, name: str, x, w, b, step: int,
                          dtype=np.float32) -> "LinearResult":
        """One step of linear layer ``name`` on the rows ``x`` ``(N, K)`` (``w`` ``(M, K)``,
        ``b`` ``(M,)`` or None: read on the layer's first call): on a key step the layer's
        lattice is fixed on ``x``; before a delta step, with ``Config.refine_max``, the
        lattice of the rows that shrank is refined, here and in the engine's state
        (``LinearSide.refine``); then the integer targets go to the engine and its ``Y_int``
        comes back as ``y`` (``dtype``, computed in float64)."""
        side = self.lin.get(name)
        if side is None:
            side = self.lin[name] = LinearSide(w, b, self.cfg)
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != side.w_q.shape[0]:
            raise ValueError(f"{name}: input must be (N, {side.w_q.shape[0]}), got {x.shape}")
        key = side.is_key(step)
        refine = None
        if key:
            side.fix_lattice(x)
        elif x.shape[0] != len(side.d):
            raise ValueError(f"{name}: {x.shape[0]} rows, but the state holds {len(side.d)}")
        elif self.cfg.refine_max:
            refine = side.refine(x, await self.engine.state_peak(name))
            if refine.any():
                await self.engine.refine(name, refine)
        target = side.targets(x).astype(np.int64)
        y_int = await self.engine.linear(name, side.w_q, target, key)
        y = np.empty(y_int.shape, dtype)
        side.output(y_int, y)
        return LinearResult(y, target, key, refine)

    async def attention(self, name: str, q, k, v, step: int):
        """The hook of attention layer ``name`` (``golden.dit.AttentionOp``): float32 ``(B, H,
        N, Dh)`` (``attention_step``)."""
        return (await self.attention_step(name, q, k, v, step)).out.astype(np.float32)

    async def attention_step(self, name: str, q, k, v, step: int) -> "AttentionResult":
        """One step of attention layer ``name`` on float ``q``, ``k``, ``v`` ``(B, H, N,
        Dh)`` (before the 1/sqrt(Dh) scale; SAR's reuse steps read ``v`` only): each (batch
        element, head) has its own slot of the engine, the layer's ``B * H`` slots after the
        layers before it; the layer's key steps are its ``AttentionSide``'s, and where the
        engine's slots would run a reuse step instead the host clears them first (an engine
        with ``clear_slots``; the engine's step kind must agree, a ``RuntimeError``
        otherwise). Every step of a layer has its first one's shape."""
        sar = self.masks is not None
        v = np.asarray(v)
        if v.ndim != 4 or 0 in v.shape:
            raise ValueError(f"{name}: v must be (B, H, N, Dh) with no empty axis, got shape "
                             f"{v.shape}")
        nb, nh = v.shape[:2]
        if name not in self.att:
            self.att[name] = (AttentionSide(self.cfg, sar=sar), self._slots, v.shape)
            self._slots += nb * nh
        side, slot0, shape = self.att[name]
        if v.shape != shape:
            raise ValueError(f"{name}: shape {v.shape} differs from the layer's first step's "
                             f"{shape}")
        key = side.is_key(step)
        masks = None
        if sar and key:
            if name not in self.masks:
                raise ValueError(f"{name}: no masks for this attention layer (attention = "
                                 "'sar' needs each attention layer's masks)")
            masks = np.asarray(self.masks[name], dtype=bool)
        q_int, k_int, m, sh, v_int, n_clip = side.quantize(q, k, v, key)
        slots = slot0 + np.arange(nb * nh).reshape(nb, nh)
        if key and hasattr(self.engine, "clear_slots") and not self.engine.next_is_key(slot0):
            await self.engine.clear_slots(slots)
        o_int, hw_key = await self.engine.attention_heads(slots, q_int, k_int, v_int, m, sh,
                                                          masks)
        if hw_key != key:
            raise RuntimeError(f"{name}: the engine's step kind ({hw_key}) differs from the "
                               f"host's ({key}) at step {step}")
        return AttentionResult(side.output(o_int), key, slots, q_int, k_int, m, sh, v_int,
                               n_clip)


class AttentionResult(NamedTuple):
    """An attention step of the host: the float64 output ``out`` ``(B, H, N, Dh)``, whether it
    was a key step, the layer's ``slots`` ``(B, H)`` on the engine, and the integer inputs the
    engine got (``AttentionSide.quantize``; ``None`` where a step reads none) with the count of
    V's values its lattice clipped."""
    out: np.ndarray
    key: bool
    slots: np.ndarray
    q: np.ndarray | None
    k: np.ndarray | None
    m: np.ndarray | None
    sh: np.ndarray | None
    v: np.ndarray
    n_clipped: int


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
