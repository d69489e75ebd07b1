"""Sparse attention with reuse (spec section 4): the integer contract of the attention-reuse
controller, on top of the fixed-point softmax of ``golden.softmax``. See ``golden/ATTENTION.md``.

Number formats, per batch element ``b`` and head ``h`` (shapes ``(..., N, Dh)``):

* ``Q``: INT8 per token (per query row of each head): ``s_q = max|q[n, :]| / 127`` (1 for a zero
  row), ``Q = clip(rint(q / s_q), -127, 127)``, fresh every step.
* ``K``: INT8 per head, ``s_k = max|k| / 127`` over the head's ``(N, Dh)``, fresh every step.
* ``V``: INT8 per head; its lattice ``s_v`` is set on attention key steps and frozen until the next
  one (like the activation lattice of spec section 2), so that the cached residual stays in the
  units of the current output. On reuse steps ``V = clip(rint(v / s_v), -127, 127)`` (clipping is
  counted in the stats).
* Logits ``S = Q K^T`` (exact integers, ``|S| <= Dh * 127**2``); the multiplier ``(m, sh)`` of each
  query row comes from ``logit_multiplier(s_q * s_k / sqrt(Dh))``.
* Output ``O = normalize(P V, l)`` (``dstar.golden.softmax``): integers with ``out_frac_bits`` (8)
  fraction bits in units of ``s_v``, i.e. ``o = O * s_v / 2**out_frac_bits``, ``|O| <= 127 * 2**8``.

Blocks: queries in blocks of ``block_q`` rows, keys in blocks of ``block_k``; the last block of
each may be shorter (ragged), so any ``N >= 1`` is accepted. A *mask* is a bool array
``(..., nqb, nkb)`` of the key blocks each query block computes.

Attention key step (the first call for a layer, ``step == 0``, and every ``refresh_attn`` steps):

1. Full softmax over every key: ``(P, l)``; ``O_full = normalize(P V, l)``.
2. Block mass: per row ``i`` and key block ``J`` the row's share ``q[i, J] = block_fraction(
   sum_{j in J} P[i, j], l[i])`` of the applied weights ``P`` (``w = p << shift`` of
   ``golden.softmax``, not its 8-bit mantissas ``p``; a 16-bit fraction, truncating), summed
   over the rows of each query block: ``M[I, J] = sum_{i in I} q[i, J]``; the total is
   ``T[I] = sum_J M[I, J]``.
3. Mask: key blocks sorted by descending ``M`` (ties: lower block index first); the smallest prefix
   whose cumulative mass ``C`` satisfies ``C * 2**16 >= theta_q * T[I]`` with
   ``theta_q = rint(theta * 2**16)``. ``theta_q == 2**16`` (theta = 1) selects every block, also
   those of zero mass.
4. ``O_sel``: the softmax restricted to the keys of the selected blocks (its own row max and row
   sum), ``O_sel = normalize(P_sel V, l_sel)``; cache ``R = O_full - O_sel`` (integers,
   ``|R| <= 2 * 127 * 2**8``). The step outputs ``O_full`` (``== O_sel + R`` exactly).

Reuse step: ``O = O_sel + R`` with ``O_sel`` computed on the masked blocks only, from fresh Q, K, V.
"""

import math

import numpy as np

from dstar.config import Attention

from .host_side import (
    dequantize_output,
    quantize_on,
    quantize_per_head,
    quantize_per_token,
    quantize_qk,
)
from .quant import exact_matmul, exact_matmul_float
from .softmax import (
    DEFAULT_E_MAX,
    DEFAULT_FRAC_BITS,
    DEFAULT_GROUP,
    DEFAULT_OUT_FRAC_BITS,
    P_MAX,
    block_fraction,
    normalize,
    softmax_exp_float,
)

__all__ = ["THETA_BITS", "quantize_per_token", "quantize_per_head", "quantize_on", "quantize_qk",
           "dequantize_output", "theta_fixed",
           "n_blocks", "expand_mask", "block_mass", "select_blocks", "row_max_blocks",
           "attention_head",
           "key_step_head", "reuse_step_head", "float_attention", "AttentionReuse"]

THETA_BITS = 16


def theta_fixed(theta: float) -> int:
    """``theta_q = rint(theta * 2**16)`` in ``[1, 2**16]``."""
    if not 0.0 < theta <= 1.0:
        raise ValueError(f"theta must be in (0, 1], got {theta!r}")
    return max(1, int(np.rint(theta * (1 << THETA_BITS))))


# ----- blocks -----
def n_blocks(n: int, block: int) -> int:
    """Number of blocks of ``block`` covering ``n`` (the last one ragged)."""
    if n < 1 or block < 1:
        raise ValueError(f"need n >= 1 and block >= 1, got n={n}, block={block}")
    return -(-n // block)


def expand_mask(mask, n_q: int, n_k: int, block_q: int, block_k: int):
    """Block mask ``(..., nqb, nkb)`` -> element mask ``(..., n_q, n_k)``."""
    rows = np.repeat(np.asarray(mask, dtype=bool), block_q, axis=-2)[..., :n_q, :]
    return np.repeat(rows, block_k, axis=-1)[..., :n_k]


def block_mass(p, lsum, block_q: int, block_k: int):
    """Integer block masses ``M`` ``(..., nqb, nkb)`` of step 2 from a full softmax's applied
    weights and row sums ``(w, l)``."""
    n_q, n_k = p.shape[-2:]
    b = np.add.reduceat(p, np.arange(0, n_k, block_k), axis=-1)
    frac = block_fraction(b, lsum)
    return np.add.reduceat(frac, np.arange(0, n_q, block_q), axis=-2)


def row_max_blocks(s, block_q: int, block_k: int):
    """The key blocks ``(..., nqb, nkb)`` holding, for some row of the query block, the row's
    first largest logit (the lowest key index of its maximum; ``s``: logits ``(..., N,
    Nk)``)."""
    s = np.asarray(s)
    n_q, n_k = s.shape[-2:]
    blk = s.argmax(axis=-1) // block_k
    hit = blk[..., None] == np.arange(n_blocks(n_k, block_k))
    return np.logical_or.reduceat(hit, np.arange(0, n_q, block_q), axis=-2)


def select_blocks(mass, theta: float, forced=None):
    """Step 3: the mask ``(..., nqb, nkb)`` from block masses ``(..., nqb, nkb)``, with the
    blocks of ``forced`` (``row_max_blocks``) added."""
    mass = np.asarray(mass, dtype=np.int64)
    tq = theta_fixed(theta)
    if tq == 1 << THETA_BITS:
        return np.ones(mass.shape, dtype=bool)
    order = np.argsort(-mass, axis=-1, kind="stable")   # stable: lower index first on ties
    cum = np.cumsum(np.take_along_axis(mass, order, axis=-1), axis=-1)
    total = cum[..., -1:]
    reached = (cum << THETA_BITS) >= tq * total
    count = np.argmax(reached, axis=-1)[..., None] + 1   # reached[-1] is always true
    sel_sorted = np.arange(mass.shape[-1]) < count
    mask = np.zeros(mass.shape, dtype=bool)
    np.put_along_axis(mask, order, sel_sorted, axis=-1)
    return mask if forced is None else mask | np.asarray(forced, dtype=bool)


# ----- one head, integers in and out (the RTL testbench's reference) -----
def _check_head(q_int, k_int, v_int, m, sh):
    """A head's INT8 ``q (..., N, Dh)`` and ``k``, ``v (..., Nk, Dh)`` as int64, its rows'
    multipliers ``m``, ``sh`` ``(..., N)`` checked, or a ``ValueError`` naming the shapes (an
    empty axis or a short ``m`` made NumPy fail deep inside)."""
    q, k, v = _check_int("q_int", q_int), _check_int("k_int", k_int), _check_int("v_int", v_int)
    if q.ndim < 2 or k.ndim < 2 or 0 in q.shape[-2:] or k.shape != v.shape \
            or k.shape[:-2] != q.shape[:-2] or k.shape[-2] < 1 or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"a head needs q (..., N, Dh) and k, v (..., Nk, Dh) with N, Nk, "
                         f"Dh >= 1, got {q.shape}, {k.shape}, {v.shape}")
    if np.shape(m) != q.shape[:-1] or np.shape(sh) != q.shape[:-1]:
        raise ValueError(f"m and sh must have q's rows {q.shape[:-1]}, got {np.shape(m)} and "
                         f"{np.shape(sh)}")
    return q, k, v


def _check_int(name, x, lo=-128, hi=127):
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.integer):
        raise TypeError(f"{name} must be integer, got dtype {x.dtype}")
    if x.size and (x.min() < lo or x.max() > hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}]")
    return x.astype(np.int64)


#: Logits of the heads one chunk of ``_attend`` holds: a chunk's working set stays in cache.
CHUNK_ELEMENTS = 1 << 17


def _lead(*shapes_tails):
    """The broadcast leading shape of ``(array, tail rank)`` pairs."""
    return np.broadcast_shapes(*(np.shape(a)[:np.ndim(a) - t] for a, t in shapes_tails))


def _flat(a, lead, tail, dtype=None):
    """``a`` broadcast to ``lead + tail`` with the leading dims flattened into one."""
    a = np.broadcast_to(np.asarray(a), lead + tail)
    return np.asarray(a.reshape((-1,) + tail), dtype=dtype)


def _attend(q, k, v, m, sh, mask=None, theta=None, *, block_q, block_k, frac_bits,
            out_frac_bits, group, e_max, want_w=False) -> dict:
    """Integer attention over every head (leading dims broadcast), in chunks of heads.

    Dense (``mask`` and ``theta`` None), on the blocks of ``mask``, or a key step (``theta``
    given: the full softmax, its block masses and mask, then the softmax on the selected blocks,
    from the same logits). Logits stay a float array of exact integers (float32 BLAS,
    ``quant.exact_matmul_float``), probabilities float64 (``softmax.softmax_exp_float``).
    Returns ``o`` (dense / masked) or ``o_full``, ``o_sel``, ``mask``, ``mass`` (key step), int64
    and bool arrays of the broadcast shape; with ``want_w`` also ``w`` and ``l`` (int64)."""
    n, dh, nk = q.shape[-2], q.shape[-1], k.shape[-2]
    nqb, nkb = n_blocks(n, block_q), n_blocks(nk, block_k)
    parts = [(q, 2), (k, 2), (v, 2), (m, 1), (sh, 1)] + ([(mask, 2)] if mask is not None else [])
    lead = _lead(*parts)
    qf = _flat(q, lead, (n, dh), np.float32)
    kt = np.ascontiguousarray(np.swapaxes(_flat(k, lead, (nk, dh)), -1, -2), dtype=np.float32)
    vf = _flat(v, lead, (nk, dh), np.float64)
    mf, shf = _flat(m, lead, (n,)), _flat(sh, lead, (n,))
    if mask is not None:
        mask = _flat(mask, lead, (nqb, nkb), bool)
        if not mask.any(axis=-1).all():
            raise ValueError("every row needs at least one valid key")
    sm = dict(frac_bits=frac_bits, group=group, e_max=e_max)
    nh = qf.shape[0]
    key = theta is not None
    out = {"o_full": np.empty((nh, n, dh), np.int64), "o_sel": np.empty((nh, n, dh), np.int64),
           "mask": np.empty((nh, nqb, nkb), bool), "mass": np.empty((nh, nqb, nkb), np.int64)
           } if key else {"o": np.empty((nh, n, dh), np.int64)}
    if want_w:
        out["w"], out["l"] = np.empty((nh, n, nk), np.int64), np.empty((nh, n), np.int64)

    def pv(w, lsum, c):
        return normalize(exact_matmul(w, vf[c], P_MAX << e_max, 128), lsum, out_frac_bits)

    step = max(1, CHUNK_ELEMENTS // (n * nk))
    for i in range(0, nh, step):
        c = slice(i, min(i + step, nh))
        s = exact_matmul_float(qf[c], kt[c], 128, 128)
        inv = None if mask is None else expand_mask(~mask[c], n, nk, block_q, block_k)
        w, lsum = softmax_exp_float(s, mf[c], shf[c], inv, **sm)
        lsum = lsum.astype(np.int64)
        if want_w:
            out["w"][c], out["l"][c] = w, lsum
        if not key:
            out["o"][c] = pv(w, lsum, c)
            continue
        out["o_full"][c] = pv(w, lsum, c)
        mass = out["mass"][c] = block_mass(w, lsum, block_q, block_k)
        sel = out["mask"][c] = select_blocks(mass, theta, row_max_blocks(s, block_q, block_k))
        unsel = expand_mask(~sel, n, nk, block_q, block_k)
        if block_k % group == 0:
            # The mask holds each row's max and whole exponent groups, so the masked softmax
            # is the full one's weights on the selected keys (ATTENTION.md step 3).
            np.copyto(w, 0.0, where=unsel)
            lsum = w.sum(axis=-1)
        else:
            w, lsum = softmax_exp_float(s, mf[c], shf[c], unsel, **sm)
        out["o_sel"][c] = pv(w, lsum.astype(np.int64), c)
    return {name: a.reshape(lead + a.shape[1:]) for name, a in out.items()}


def attention_head(q_int, k_int, v_int, m, sh, mask=None, *, block_q: int = 16,
                   block_k: int = 16, frac_bits: int = DEFAULT_FRAC_BITS,
                   out_frac_bits: int = DEFAULT_OUT_FRAC_BITS, group: int = DEFAULT_GROUP,
                   e_max: int = DEFAULT_E_MAX):
    """Integer attention of one head (or a batch of heads, leading dims): INT8 ``q_int``
    ``(..., N, Dh)``, ``k_int``/``v_int`` ``(..., Nk, Dh)``, per-row ``m``/``sh`` ``(..., N)``,
    optional block ``mask`` ``(..., nqb, nkb)`` (``None``: dense); ``group``/``e_max``: the
    probabilities' exponent groups (``golden.softmax``). Returns ``(o, w, l)``: the output ``O``
    int64 ``(..., N, Dh)``, the applied integer weights ``w = p << shift`` and their row sums."""
    q, k, v = _check_head(q_int, k_int, v_int, m, sh)
    res = _attend(q, k, v, m, sh, mask, block_q=block_q, block_k=block_k, frac_bits=frac_bits,
                  out_frac_bits=out_frac_bits, group=group, e_max=e_max, want_w=True)
    return res["o"], res["w"], res["l"]


def key_step_head(q_int, k_int, v_int, m, sh, *, block_q: int = 16, block_k: int = 16,
                  theta: float = 0.9, frac_bits: int = DEFAULT_FRAC_BITS,
                  out_frac_bits: int = DEFAULT_OUT_FRAC_BITS, group: int = DEFAULT_GROUP,
                  e_max: int = DEFAULT_E_MAX) -> dict:
    """Attention key step of one head (or batch of heads), integers in and out. Returns a dict of
    int64 arrays ``o_full``, ``o_sel``, ``r`` (``o_full - o_sel``), bool ``mask`` ``(..., nqb,
    nkb)`` and the block masses ``mass``; the step's output is ``o_full``."""
    theta_fixed(theta)
    q, k, v = _check_head(q_int, k_int, v_int, m, sh)
    res = _attend(q, k, v, m, sh, None, theta, block_q=block_q, block_k=block_k,
                  frac_bits=frac_bits, out_frac_bits=out_frac_bits, group=group, e_max=e_max)
    res["r"] = res["o_full"] - res["o_sel"]
    return res


def reuse_step_head(q_int, k_int, v_int, m, sh, mask, r, *, block_q: int = 16,
                    block_k: int = 16, frac_bits: int = DEFAULT_FRAC_BITS,
                    out_frac_bits: int = DEFAULT_OUT_FRAC_BITS, group: int = DEFAULT_GROUP,
                    e_max: int = DEFAULT_E_MAX):
    """Reuse step: ``O_sel + R`` (int64 ``(..., N, Dh)``), ``O_sel`` on the masked blocks only."""
    q, k, v = _check_head(q_int, k_int, v_int, m, sh)
    res = _attend(q, k, v, m, sh, mask, block_q=block_q, block_k=block_k, frac_bits=frac_bits,
                  out_frac_bits=out_frac_bits, group=group, e_max=e_max)
    res["o"] += np.asarray(r, dtype=np.int64)
    return res["o"]


def float_attention(q, k, v):
    """Reference ``softmax(q k^T / sqrt(Dh)) v`` in float64."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    z = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)) @ v


def _rel_err(a, ref) -> float:
    n = float(np.linalg.norm(ref))
    return float(np.linalg.norm(a - ref)) / n if n > 0 else float(np.linalg.norm(a))


# ----- the DiT hook -----
class AttentionReuse:
    """The ``attn(name, q, k, v, step) -> out`` hook of ``dstar.golden.dit``: DSTAR sparse attention
    with reuse, the host's attention step (``golden.host.BlockHost.attention_step``) on the
    golden engine (``golden.host.GoldenEngine``), the path the accelerator's host takes: one
    state (the slots' masks and residuals, V's lattice) per layer ``name``, a slot per batch
    element and head. ``q, k, v``: float ``(B, H, N, Dh)`` before the 1/sqrt(Dh) scale, every
    step of a layer of one shape; returns float32 ``(B, H, N, Dh)``.

    Parameters come from ``cfg`` (``block_q``, ``block_k``, ``theta``, ``refresh_attn``,
    ``attn_frac_bits``, ``attn_out_frac_bits`` and the probabilities' exponent groups ``group``
    / ``e_max``; v1's residual reuse whatever its ``attention``). With ``measure`` each call
    also computes float attention and dense integer attention and records the relative L2
    errors of the output against them, over the first ``measure_batch`` batch elements
    (``None``: all of them)."""

    def __init__(self, cfg, *, measure: bool = True, measure_batch: int | None = None):
        theta_fixed(cfg.theta)
        if cfg.attention is not Attention.RESIDUAL:
            cfg = cfg.replace(attention=Attention.RESIDUAL)
        self.cfg = cfg
        self.measure = measure
        self.measure_batch = measure_batch
        self.records: list[dict] = []
        self.reset()

    def reset(self):
        """Forget every layer's state and record (a new sampling run)."""
        # golden.host builds on this module's integer attention, so it is imported here.
        from .host import BlockHost, GoldenEngine

        self.host = BlockHost(self.cfg, None, GoldenEngine(self.cfg))
        self.records.clear()

    @property
    def state(self) -> dict[str, dict]:
        """Per layer: its steps' ``shape``, V's lattice ``s_v`` and its slots' ``mask``
        ``(B, H, nqb, nkb)`` and residual ``r`` ``(B, H, N, Dh)`` (stacked from the engine)."""
        out = {}
        for name, (side, slot0, shape) in self.host.att.items():
            sts = [self.host.engine.slots[slot0 + i] for i in range(shape[0] * shape[1])]
            out[name] = {"shape": shape, "s_v": side.s_v,
                         **{f: np.stack([st[f] for st in sts]).reshape(
                             shape[:2] + sts[0][f].shape) for f in ("mask", "r")}}
        return out

    def is_key(self, name: str, step: int) -> bool:
        side = self.host.att.get(name)
        return side is None or side[0].is_key(step)

    def _kw(self):
        c = self.cfg
        return dict(block_q=c.block_q, block_k=c.block_k, frac_bits=c.attn_frac_bits,
                    out_frac_bits=c.attn_out_frac_bits, group=c.group, e_max=c.e_max)

    def __call__(self, name: str, q, k, v, step: int):
        from .host import run_sync

        q, k, v = (np.asarray(a) for a in (q, k, v))
        if q.ndim != 4 or q.shape != k.shape or q.shape != v.shape:
            raise ValueError(f"{name}: q, k, v must share one (B, H, N, Dh) shape, got "
                             f"{q.shape}, {k.shape}, {v.shape}")
        res = run_sync(self.host.attention_step(name, q, k, v, step))
        key, out = res.key, res.out
        engine = self.host.engine
        sel = float(np.stack([engine.slots[int(s)]["mask"] for s in res.slots.flat]).mean())
        rec = {"name": name, "step": step, "key": key, "selected_fraction": sel,
               "blocks_computed": 1.0 if key else sel,
               "pv_blocks": 1.0 if key else sel, "v_clipped": res.n_clipped / v.size}
        if self.measure:
            b = slice(0, self.measure_batch)
            ref = float_attention(q[b], k[b], v[b])
            rec["err_vs_float"] = _rel_err(out[b], ref)
            if key:
                rec["err_dense_int"] = rec["err_vs_float"]
            else:
                v_fresh, s_fresh = quantize_per_head(v[b])
                dense = _attend(res.q[b], res.k[b], v_fresh, res.m[b], res.sh[b],
                                **self._kw())["o"]
                rec["err_dense_int"] = _rel_err(
                    dense * s_fresh[..., None, None] / float(1 << self.cfg.attn_out_frac_bits),
                    ref)
        self.records.append(rec)
        return out.astype(np.float32)

    def stats(self) -> dict:
        """Summary over every recorded call: counts, the mean fraction of QK^T blocks computed on
        reuse steps and over all steps, the mean selected fraction of masks, the mean / max
        relative error vs float attention (all, key, reuse steps) and of dense integer attention,
        and per-step means over layers (``per_step``)."""
        recs = self.records

        def mean(key, cond=lambda r: True):
            vals = [r[key] for r in recs if key in r and cond(r)]
            return float(np.mean(vals)) if vals else None

        def is_reuse(r):
            return not r["key"]

        per_step = {}
        for s in sorted({r["step"] for r in recs}):
            rs = [r for r in recs if r["step"] == s]
            row = {"key": any(r["key"] for r in rs),
                   "blocks_computed": float(np.mean([r["blocks_computed"] for r in rs]))}
            if self.measure:
                row["err_vs_float"] = float(np.mean([r["err_vs_float"] for r in rs]))
            per_step[s] = row
        errs = [r["err_vs_float"] for r in recs if "err_vs_float" in r]
        return {
            "calls": len(recs), "key_calls": sum(r["key"] for r in recs),
            "blocks_computed_fraction": mean("blocks_computed"),
            "blocks_computed_fraction_reuse": mean("blocks_computed", is_reuse),
            "selected_fraction": mean("selected_fraction"),
            "pv_blocks_fraction": mean("pv_blocks"),
            "v_clipped_fraction": mean("v_clipped"),
            "err_vs_float": mean("err_vs_float"),
            "err_vs_float_key": mean("err_vs_float", lambda r: r["key"]),
            "err_vs_float_reuse": mean("err_vs_float", is_reuse),
            "err_vs_float_max": max(errs) if errs else None,
            "err_dense_int": mean("err_dense_int"),
            "per_step": per_step,
        }
