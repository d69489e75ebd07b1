"""The paper's sparse attention reuse (SAR, spec section 7.3): static block masks profiled
offline, cached probabilities, reuse steps without Q, K, ``Q K^T`` or softmax. The integer
contract is ``golden/ATTENTION.md`` (section "SAR"); v1 (dynamic masks, a cached residual) is
``golden.attention``.

* Profiling (``profile_masks``): an FP32 calibration run (float linears, float attention) on its
  own seed; per layer and head each ``Bq x Bk`` block's mean attention mass (the mean over
  steps, batch elements and the query block's rows of a row's probability sum over the block's
  keys; a query block's masses sum to 1). Per query block the mask keeps the smallest set of key
  blocks, by descending mass, whose mass reaches ``theta`` of the row's (``select_blocks`` on
  the masses as 16-bit fractions); the row's largest block always comes first. A ``MaskSet``
  keeps both the masks and the masses (other ``theta`` re-select from the same masses) and
  what it was profiled on; ``to_bytes`` / ``load_masks`` are its ``.npz`` file.
* Cache step (the first step, every ``refresh_attn`` steps, and every step before
  ``sar_reuse_from``, which keeps reuse to the later, low-noise steps): Q, K, V quantized as
  v1, logits and the fixed-point softmax on the kept blocks only (the row max and the row sum
  over the kept keys); the applied weights ``w = p << shift`` and the row sums ``l`` are the
  score cache; ``O = normalize(w V, l)``.
* Reuse step: no Q, K, logits or softmax; V quantized afresh (per head), ``O = normalize(
  w_cached V, l_cached)`` on the kept blocks.
"""

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dstar.config import Attention, Encoding

from .attention import (
    _attend,
    expand_mask,
    float_attention,
    n_blocks,
    select_blocks,
    theta_fixed,
)
from .quant import exact_matmul
from .softmax import (
    DEFAULT_E_MAX,
    DEFAULT_FRAC_BITS,
    DEFAULT_GROUP,
    DEFAULT_OUT_FRAC_BITS,
    P_MAX,
    RECIP_BITS,
    normalize,
)

__all__ = ["MASK_FORMAT", "MaskError", "MaskSet", "MassRecorder", "select_static",
           "load_masks", "masks_from_bytes", "score_cache_bits", "sar_cache_step",
           "sar_reuse_step", "profile_masks", "SparseAttentionReuse", "QKSkip",
           "CALIBRATION_SEED", "default_masks_path", "masks_for", "sar_hooks",
           "sar_stats"]

#: The ``format`` entry of a mask file's metadata.
MASK_FORMAT = "dstar-sar-masks-1"
#: The calibration run's default seed: the evaluation runs use ``Config.seed`` (0 by default).
CALIBRATION_SEED = 1000
#: Bits per row of the score cache besides the probabilities: the reciprocal ``r`` (17) and
#: ``L`` (5) of ``golden.softmax.reciprocal``.
ROW_BITS = RECIP_BITS + 1 + 5


class MaskError(ValueError):
    """A mask file cannot be read, or does not match the model or the configuration."""


# ----- profiling -----
class MassRecorder:
    """The attention hook of a calibration run: float attention (``golden.dit``'s), and per
    layer the sum over steps and batch elements of each block's mean row mass ``(H, nqb, nkb)``.
    """

    def __init__(self, block_q: int, block_k: int):
        self.block_q, self.block_k = block_q, block_k
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, int] = {}
        self.tokens = self.heads = None

    def __call__(self, name, q, k, v, step):
        q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
        n = q.shape[-2]
        z = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        z = np.exp(z - z.max(axis=-1, keepdims=True))
        p = z / z.sum(axis=-1, keepdims=True)
        rows = np.add.reduceat(p, np.arange(0, n, self.block_k), axis=-1)
        blk = np.add.reduceat(rows, np.arange(0, n, self.block_q), axis=-2)
        size = np.diff(np.append(np.arange(0, n, self.block_q), n))
        blk = (blk / size[:, None]).sum(axis=0)               # mean over rows, sum over batch
        self.sums[name] = self.sums.get(name, 0.0) + blk
        self.counts[name] = self.counts.get(name, 0) + q.shape[0]
        self.tokens, self.heads = n, q.shape[1]
        return (p @ v).astype(np.float32)

    def masses(self, names) -> np.ndarray:
        """``(L, H, nqb, nkb)`` mean masses of the layers ``names`` (in that order)."""
        return np.stack([self.sums[n] / self.counts[n] for n in names])


def select_static(mass, theta: float) -> np.ndarray:
    """Masks ``(..., nqb, nkb)`` from mean masses (fractions of a row, summing to 1 per query
    block): ``select_blocks`` on ``rint(mass * 2**16)`` (ties: the lower block first), so the
    largest block of every query block is always kept."""
    theta_fixed(theta)
    mq = np.rint(np.asarray(mass, np.float64) * (1 << 16)).astype(np.int64)
    return select_blocks(mq, theta)


# ----- the mask file -----
_META_KEYS = ("format", "workload", "samples", "seed", "steps", "cfg_scale", "theta", "block_q",
              "block_k", "layers", "heads", "tokens", "layer_names")


@dataclass
class MaskSet:
    """Static masks ``mask`` ``(L, H, nqb, nkb)`` bool at ``meta["theta"]``, the masses they come
    from (float64, same shape) and ``meta``: what they were profiled on (``_META_KEYS``)."""

    mask: np.ndarray
    mass: np.ndarray
    meta: dict = field(default_factory=dict)
    source: str = "masks"

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        np.savez_compressed(buf, mask=self.mask.astype(bool), mass=self.mass.astype(np.float64),
                            meta=np.array(json.dumps(self.meta, sort_keys=True)))
        return buf.getvalue()

    def at(self, theta: float) -> np.ndarray:
        """The masks at ``theta``: the file's own, or re-selected from its masses."""
        if theta_fixed(theta) == theta_fixed(self.meta["theta"]):
            return self.mask
        return select_static(self.mass, theta)

    def check(self, layers: int, heads: int, tokens: int, block_q: int, block_k: int):
        """``MaskError`` (one line naming the mismatch) unless the masks fit this model and
        block size."""
        m = self.meta
        for what, have, want in (("block_q", m["block_q"], block_q),
                                 ("block_k", m["block_k"], block_k),
                                 ("layers", m["layers"], layers), ("heads", m["heads"], heads),
                                 ("tokens", m["tokens"], tokens)):
            if have != want:
                raise MaskError(f"mask file {self.source!r} was profiled with {what}={have}, "
                                f"but the model/configuration has {what}={want}")
        return self


def masks_from_bytes(data: bytes, source: str = "masks") -> MaskSet:
    """Parse a mask file's bytes; ``MaskError`` names the file and what is wrong."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("mask", "mass", "meta") if k in z.files}
    except Exception as e:             # noqa: BLE001 - any parse failure is one bad-file line
        raise MaskError(f"mask file {source!r} is not a .npz mask file ({type(e).__name__})"
                        ) from None
    missing = [k for k in ("mask", "mass", "meta") if k not in arrays]
    if missing:
        raise MaskError(f"mask file {source!r} lacks {', '.join(missing)}")
    try:
        meta = json.loads(str(arrays["meta"]))
    except ValueError:
        raise MaskError(f"mask file {source!r}: its metadata is not JSON") from None
    if not isinstance(meta, dict) or meta.get("format") != MASK_FORMAT:
        raise MaskError(f"mask file {source!r} is not in format {MASK_FORMAT!r}")
    lack = [k for k in _META_KEYS if k not in meta]
    if lack:
        raise MaskError(f"mask file {source!r}: metadata lacks {', '.join(lack)}")
    mask, mass = arrays["mask"], arrays["mass"]
    want = (meta["layers"], meta["heads"], n_blocks(meta["tokens"], meta["block_q"]),
            n_blocks(meta["tokens"], meta["block_k"]))
    for name, a in (("mask", mask), ("mass", mass)):
        if a.shape != want:
            raise MaskError(f"mask file {source!r}: {name} has shape {a.shape}, its metadata "
                            f"says {want}")
    if mask.dtype != bool or not mask.any(axis=-1).all():
        raise MaskError(f"mask file {source!r}: mask must be bool with a kept block in every "
                        "query block")
    return MaskSet(mask=mask, mass=mass.astype(np.float64), meta=meta, source=source)


def load_masks(path) -> MaskSet:
    """Read a mask file (``MaskError`` if it is missing or unreadable)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MaskError(f"mask file {str(path)!r} does not exist (dstar profile-masks writes "
                        "one)") from None
    except OSError as e:
        raise MaskError(f"mask file {str(path)!r} cannot be read: {e.strerror or e}") from None
    return masks_from_bytes(data, str(path))


def default_masks_path(workload) -> Path:
    """The bundled mask file of ``workload``: ``golden/data/masks_<workload>.npz``."""
    return Path(__file__).parent / "data" / f"masks_{workload}.npz"


def masks_for(cfg, shape) -> MaskSet:
    """The mask set a run of ``cfg`` reads (``cfg.masks``, or the workload's bundled file),
    checked against the model ``shape`` (``golden.dit.DiTShape``), ``cfg.block_q``,
    ``cfg.block_k`` and ``cfg.workload``."""
    ms = load_masks(cfg.masks or default_masks_path(cfg.workload))
    if ms.meta["workload"] != str(cfg.workload):
        raise MaskError(f"mask file {ms.source!r} was profiled on workload "
                        f"{ms.meta['workload']!r}, the run is {str(cfg.workload)!r}")
    return ms.check(shape.depth, shape.heads, shape.tokens, cfg.block_q, cfg.block_k)


# ----- one head (or a batch of heads), integers in and out -----
def score_cache_bits(mask, tokens: int, block_q: int, block_k: int, group: int = DEFAULT_GROUP,
                     e_max: int = DEFAULT_E_MAX) -> int:
    """Bits of the score cache for the masks ``(..., nqb, nkb)`` (one batch element): 8 bits per
    kept probability, a shift of ``bit_length(e_max)`` bits per row and kept exponent group,
    ``ROW_BITS`` per row (``r``, ``L``)."""
    el = expand_mask(mask, tokens, tokens, block_q, block_k)
    kept_groups = np.logical_or.reduceat(el, np.arange(0, tokens, group), axis=-1)
    rows = int(np.prod(el.shape[:-1]))
    return int(8 * el.sum() + max(1, e_max.bit_length()) * kept_groups.sum() + ROW_BITS * rows)


def sar_cache_step(q_int, k_int, v_int, m, sh, mask, *, block_q: int = 16, block_k: int = 16,
                   frac_bits: int = DEFAULT_FRAC_BITS,
                   out_frac_bits: int = DEFAULT_OUT_FRAC_BITS, group: int = DEFAULT_GROUP,
                   e_max: int = DEFAULT_E_MAX):
    """Cache step of one head (or batch of heads): ``(o, w, l)``: the output (int64 ``(..., N,
    Dh)``), the cached applied weights ``w`` (0 outside the mask, ``<= 255 << e_max``) and row
    sums ``l``, the softmax over the kept keys only (``golden.attention.attention_head`` with
    ``mask``)."""
    res = _attend(np.asarray(q_int, np.int64), np.asarray(k_int, np.int64),
                  np.asarray(v_int, np.int64), m, sh, mask, block_q=block_q, block_k=block_k,
                  frac_bits=frac_bits, out_frac_bits=out_frac_bits, group=group, e_max=e_max,
                  want_w=True)
    return res["o"], res["w"], res["l"]


def sar_reuse_step(w, lsum, v_int, *, e_max: int = DEFAULT_E_MAX,
                   out_frac_bits: int = DEFAULT_OUT_FRAC_BITS):
    """Reuse step: ``normalize(w V, l)`` from the cached ``(w, l)`` and fresh INT8 ``v_int``
    (int64 ``(..., N, Dh)``). Needs no Q, no K, no logits, no softmax."""
    v = np.asarray(v_int, np.int64)
    return normalize(exact_matmul(w, v, P_MAX << e_max, 128), lsum, out_frac_bits)


def profile_masks(model, cfg, *, samples: int, seed: int, steps: int, theta: float,
                  progress=None) -> MaskSet:
    """Profile static masks on an FP32 calibration run of ``model`` (``cfg``: ``block_q``,
    ``block_k``, ``cfg_scale``, ``workload``) over ``samples`` images from ``seed`` and
    ``steps`` DDIM steps."""
    from .sampler import ddim_sample, initial_noise, sample_labels

    theta_fixed(theta)
    rec = MassRecorder(cfg.block_q, cfg.block_k)
    ddim_sample(model, sample_labels(samples, model.shape.num_classes),
                initial_noise(samples, model.shape, seed), steps, cfg.cfg_scale, attention=rec,
                on_step=(lambda i, t: progress(i, steps)) if progress else None)
    names = model.attention_names()
    mass = rec.masses(names)
    meta = {"format": MASK_FORMAT, "workload": str(cfg.workload), "samples": samples,
            "seed": seed, "steps": steps, "cfg_scale": cfg.cfg_scale, "theta": theta,
            "block_q": cfg.block_q, "block_k": cfg.block_k, "layers": len(names),
            "heads": int(rec.heads), "tokens": int(rec.tokens), "layer_names": names,
            "calibration": "FP32 run (float linears and attention); mass = mean over steps, "
                           "batch elements (conditional and unconditional) and the query "
                           "block's rows of a row's probability over the block's keys"}
    return MaskSet(mask=select_static(mass, theta), mass=mass, meta=meta)


# ----- the DiT hooks -----
def _work(mask, n: int, dh: int, block_q: int, block_k: int) -> int:
    """Kept (query, key) pairs of masks ``(..., nqb, nkb)``."""
    return int(expand_mask(mask, n, n, block_q, block_k).sum())


class SparseAttentionReuse:
    """The ``attn(name, q, k, v, step) -> out`` hook of ``golden.dit`` running SAR with the
    static masks ``masks`` (``(L, H, nqb, nkb)``, layers in ``layer_names`` order): the host's
    attention step (``golden.host.BlockHost.attention_step``) on the golden engine
    (``golden.host.GoldenEngine``), the path the accelerator's host takes; one score cache
    (``w``, ``l``) per slot, a slot per batch element and head of a layer. Every step before
    ``cfg.sar_reuse_from`` is a cache step too. On reuse steps ``q`` and ``k`` are not read
    (``None`` is fine: ``QKSkip`` hands NaN columns).

    Work counted per call, in multiply-accumulates: ``qk`` (logits of kept pairs, cache steps),
    ``pv`` (kept pairs times ``Dh``, every step) against dense attention's ``2 N**2 Dh``
    per head. With ``measure`` the output's relative L2 error vs float attention is recorded on
    the first ``measure_batch`` batch elements (``None``: all)."""

    def __init__(self, cfg, masks, layer_names, *, measure: bool = False,
                 measure_batch: int | None = None):
        # golden.host builds on this module's cache and reuse steps, so it is imported here.
        from .host import BlockHost, GoldenEngine

        masks = np.asarray(masks, bool)
        if len(layer_names) != masks.shape[0]:
            raise MaskError(f"{masks.shape[0]} layers of masks for {len(layer_names)} "
                            "attention layers")
        if cfg.attention is not Attention.SAR:
            cfg = cfg.replace(attention=Attention.SAR)
        self.cfg = cfg
        self.block_q, self.block_k, self.refresh = cfg.block_q, cfg.block_k, cfg.refresh_attn
        self.reuse_from = cfg.sar_reuse_from
        self.kw = dict(block_q=cfg.block_q, block_k=cfg.block_k, frac_bits=cfg.attn_frac_bits,
                       out_frac_bits=cfg.attn_out_frac_bits, group=cfg.group, e_max=cfg.e_max)
        self.masks = dict(zip(layer_names, masks, strict=True))
        self.host = BlockHost(cfg, None, GoldenEngine(cfg), masks=self.masks)
        self.measure, self.measure_batch = measure, measure_batch
        self.records: list[dict] = []
        self.masks_meta: dict = {}          # what the masks were profiled on (sar_hooks)

    @property
    def state(self) -> dict[str, dict]:
        """Per layer: its steps' ``shape`` and its slots' score cache ``w`` ``(B, H, N, N)``
        and ``l`` ``(B, H, N)`` (stacked from the engine)."""
        out = {}
        for name, (_, slot0, shape) in self.host.att.items():
            sts = [self.host.engine.slots[slot0 + i] for i in range(shape[0] * shape[1])]
            out[name] = {"shape": shape, **{f: np.stack([st[f] for st in sts]).reshape(
                shape[:2] + sts[0][f].shape) for f in ("w", "l")}}
        return out

    def is_cache(self, name: str, step: int) -> bool:
        side = self.host.att.get(name)
        return side is None or side[0].is_key(step)

    def __call__(self, name: str, q, k, v, step: int):
        from .host import run_sync

        v = np.asarray(v)
        if name not in self.masks:
            raise MaskError(f"no mask for attention layer {name!r}")
        mask = self.masks[name]
        b, h, n, dh = v.shape
        if mask.shape != (h, n_blocks(n, self.block_q), n_blocks(n, self.block_k)):
            raise MaskError(f"{name}: masks of shape {mask.shape} for {h} heads of {n} tokens "
                            f"in blocks of {self.block_q} x {self.block_k}")
        res = run_sync(self.host.attention_step(name, q, k, v, step))
        cache, out = res.key, res.out
        kept = _work(mask, n, dh, self.block_q, self.block_k) * b
        rec = {"name": name, "step": step, "cache": cache, "dense": 2 * b * h * n * n * dh,
               "qk": kept * dh if cache else 0, "pv": kept * dh, "softmax": kept if cache else 0,
               "kept_fraction": kept / (b * h * n * n), "n": n}
        if self.measure and q is not None:
            sl = slice(0, self.measure_batch)
            if np.isfinite(np.asarray(q[sl])).all():
                rec["err_vs_float"] = _rel_err(out[sl], float_attention(q[sl], k[sl], v[sl]))
        self.records.append(rec)
        return out.astype(np.float32)

    def stats(self) -> dict:
        """Attention work vs dense per step kind and over the run, the kept fraction and the
        score cache's size (``score_cache``: bits per batch element, the largest layer's and
        every layer's together)."""
        recs = self.records

        def ratio(cond):
            rs = [r for r in recs if cond(r)]
            dense = sum(r["dense"] for r in rs)
            return sum(r["qk"] + r["pv"] for r in rs) / dense if dense else None

        cq = {n: score_cache_bits(mk, recs[0]["n"], self.block_q, self.block_k,
                                  self.kw["group"], self.kw["e_max"])
              for n, mk in self.masks.items()} if recs else {}
        errs = [r["err_vs_float"] for r in recs if "err_vs_float" in r]

        def err(cache):
            e = [r["err_vs_float"] for r in recs if "err_vs_float" in r and r["cache"] == cache]
            return float(np.mean(e)) if e else None

        per_step = {}
        for s in sorted({r["step"] for r in recs}):
            rs = [r for r in recs if r["step"] == s]
            per_step[s] = {"cache": any(r["cache"] for r in rs),
                           "work_vs_dense": ratio(lambda r, s=s: r["step"] == s)}
        return {
            "calls": len(recs), "cache_calls": sum(r["cache"] for r in recs),
            "work_vs_dense": ratio(lambda r: True),
            "work_vs_dense_cache_steps": ratio(lambda r: r["cache"]),
            "work_vs_dense_reuse_steps": ratio(lambda r: not r["cache"]),
            "qk_work_vs_dense": (sum(r["qk"] for r in recs)
                                 / max(1, sum(r["dense"] for r in recs) // 2)),
            "pv_work_vs_dense": (sum(r["pv"] for r in recs)
                                 / max(1, sum(r["dense"] for r in recs) // 2)),
            "kept_fraction": float(np.mean([r["kept_fraction"] for r in recs])) if recs else None,
            # v1's names, for the sweep's table and plot: SAR's PV runs on the kept blocks at
            # every step (QK^T at cache steps only).
            "blocks_computed_fraction": ratio(lambda r: True),
            "blocks_computed_fraction_reuse": ratio(lambda r: not r["cache"]),
            "score_cache": {"bits_per_layer_max": max(cq.values(), default=0),
                            "bits_all_layers": sum(cq.values()),
                            "bytes_per_layer_max": -(-max(cq.values(), default=0) // 8),
                            "bytes_all_layers": -(-sum(cq.values()) // 8),
                            "per": "batch element (one image's pass; CFG runs two)"},
            "pv_blocks_fraction": (float(np.mean([r["kept_fraction"] for r in recs]))
                                   if recs else None),
            "err_vs_float": float(np.mean(errs)) if errs else None,
            "err_vs_float_cache": err(True), "err_vs_float_reuse": err(False),
            "err_dense_int": None,
            "masks": {k: v for k, v in self.masks_meta.items() if k != "layer_names"},
            "per_step": per_step,
        }

    def blocks_fraction(self) -> float:
        """Mean kept-block fraction of the masks (every layer and head)."""
        return float(np.mean([m.mean() for m in self.masks.values()]))


def _rel_err(a, ref) -> float:
    n = float(np.linalg.norm(ref))
    return float(np.linalg.norm(a - ref)) / n if n > 0 else float(np.linalg.norm(a))


class QKSkip:
    """The host side of SAR on the linears: wraps a ``linear(name, x, w, b, step)`` hook so that
    on a reuse step of ``sar`` the ``qkv`` layer's Q and K columns (the first two thirds) come
    out as NaN: nothing downstream may read them (``SparseAttentionReuse`` does not). Counts the
    linear work in multiply-accumulates (``rows * K * M`` per call: ``macs``) and the Q and K
    columns skipped (``skipped_macs``); with ``passes(name, step)`` (the DSTAR linears' nibble
    passes of the call) also their pass-weighted work, and an estimate of the catch-up the
    differential Q and K columns need at a cache step after reuse steps: the passes of
    ``encode(Xs_t - Xs_c)`` (the state's change since the last cache step, coded once by v1's
    encoder) on those columns (``catchup_pass_work``)."""

    def __init__(self, linear, sar: SparseAttentionReuse, passes=None):
        self.linear, self.sar, self.passes = linear, sar, passes
        self.macs = self.skipped_macs = 0
        self.pass_work = self.skipped_pass_work = self.catchup_pass_work = 0
        self._xs_cache: dict[str, np.ndarray] = {}
        self._skipped: set[str] = set()

    def _catchup(self, name, mm):
        """At a cache step of a differential ``qkv``: count the catch-up and keep the state."""
        from .encoder import encode

        layer = getattr(self.linear, "layers", {}).get(name)
        if layer is None or layer.xs is None:
            return
        xs_c = self._xs_cache.get(name)
        if xs_c is not None and name in self._skipped and xs_c.shape == layer.xs.shape:
            cfg = layer.cfg
            enc = encode(layer.xs - xs_c, cfg.group, cfg.e_max, cfg.tau)
            self.catchup_pass_work += enc.passes() * (2 * mm // 3)
        self._skipped.discard(name)
        self._xs_cache[name] = layer.xs.copy()

    def __call__(self, name, x, w, b, step):
        out = self.linear(name, x, w, b, step)
        rows, kk = np.shape(x)
        mm = np.shape(w)[0]
        self.macs += rows * kk * mm
        p = self.passes(name, step) if self.passes is not None else None
        if p is not None:
            self.pass_work += p * mm
        if not name.endswith(".qkv"):
            return out
        if self.sar.is_cache(name.rsplit(".", 1)[0], step):
            if p is not None:
                self._catchup(name, mm)
            return out
        out = np.array(out, dtype=np.float32, copy=True)
        out[:, : 2 * mm // 3] = np.nan
        self.skipped_macs += rows * kk * (2 * mm // 3)
        if p is not None:
            self.skipped_pass_work += p * (2 * mm // 3)
            self._skipped.add(name)
        return out

    def stats(self) -> dict:
        return {"linear_macs": self.macs, "skipped_qk_macs": self.skipped_macs,
                "skipped_fraction_of_linear_macs": self.skipped_macs / max(1, self.macs),
                "linear_pass_work": self.pass_work or None,
                "skipped_qk_pass_work": self.skipped_pass_work if self.pass_work else None,
                "skipped_fraction_of_linear_passes": (self.skipped_pass_work / self.pass_work
                                                      if self.pass_work else None),
                "catchup_qk_pass_work": self.catchup_pass_work if self.pass_work else None,
                "net_saved_fraction_of_linear_passes": (
                    (self.skipped_pass_work - self.catchup_pass_work) / self.pass_work
                    if self.pass_work else None)}


def sar_hooks(cfg, model, linear=None, masks: MaskSet | None = None, *, measure: bool = False,
              measure_batch: int | None = None) -> dict:
    """The model hooks of a SAR run of ``model``: ``attention`` (``SparseAttentionReuse`` on the
    masks at ``cfg.theta``: ``masks``, else ``masks_for(cfg, model.shape)``) and ``linear``
    (``QKSkip`` around ``linear``, float linears if ``None``; with DSTAR's nibble linears
    (``golden.hooks.DStarLinears``) it also counts their passes)."""
    from .dit import float_linear
    from .stats import FIELDS

    ms = masks_for(cfg, model.shape) if masks is None else masks
    ms.check(model.shape.depth, model.shape.heads, model.shape.tokens, cfg.block_q, cfg.block_k)
    sar = SparseAttentionReuse(cfg, ms.at(cfg.theta), model.attention_names(), measure=measure,
                               measure_batch=measure_batch)
    sar.masks_meta = {**ms.meta, "source": ms.source, "theta_used": cfg.theta}
    passes = None
    if getattr(linear, "cfg", None) is not None and linear.cfg.encoding == Encoding.NIBBLE \
            and hasattr(linear, "on_result"):
        last = {}
        linear.on_result = lambda name, step, res: last.update(
            n=int(np.asarray(res.counts)[FIELDS.index("passes")]))

        def passes(name, step):
            return last.get("n")
    return {"linear": QKSkip(linear or float_linear, sar, passes), "attention": sar}


def sar_stats(hooks: dict) -> dict:
    """``SparseAttentionReuse.stats`` of ``sar_hooks``' run, with ``linears``: ``QKSkip``'s."""
    return {**hooks["attention"].stats(), "linears": hooks["linear"].stats()}
