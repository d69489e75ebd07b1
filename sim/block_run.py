"""One block of a bundled DiT on the accelerator top, end to end (``dstar run``): the block's
inputs at the first steps of a real sampling run, the golden pipeline's outputs for them, and
an engine that runs the accelerator and checks every operation against the golden model and the
cycle models as it goes.

* ``block_inputs``: block ``i``'s input and conditioning at steps ``0 .. steps - 1`` of the
  golden pipeline's sampling run (DSTAR linears and the configuration's attention: v1's
  residual reuse or SAR), optionally its first ``tokens`` tokens only (a shorter block for
  quick runs);
* ``block_masks``: with ``attention = "sar"``, the block's static masks from the
  configuration's mask file, cut to those tokens;
* ``golden_block``: the golden pipeline's output of the block for those inputs (its hooks,
  fresh, step after step);
* ``CheckedEngine``: ``AcceleratorEngine`` with ``GoldenEngine`` beside it; per run command
  the integer results compared with equality and the counters with the cycle models'
  predictions (``dstar.sim.cycle_model``, ``dstar.sim.attention_cycles``); ``ops`` lists one
  record per operation;
* ``summarize``: the records and the block outputs' comparison as ``dstar run`` reports them.
"""

import numpy as np

from dstar.config import Attention, Encoding
from dstar.golden.attention import AttentionReuse, n_blocks, theta_fixed
from dstar.golden.difflinear import encode_step
from dstar.golden.dit import ATTN_SUFFIX, LINEAR_TYPES, DiT, drive
from dstar.golden.encoder import HIGH, LOW, ZERO
from dstar.golden.fmdq import fmdq_encode
from dstar.golden.hooks import DStarLinears
from dstar.golden.host import GoldenEngine, HeadLoop
from dstar.golden.sampler import ddim_sample, initial_noise, sample_labels
from dstar.golden.sar import SparseAttentionReuse, masks_for

from .attention_cycles import predict as predict_attention
from .cycle_model import predict as predict_linear
from .fmdq_cycles import linear_cycles

__all__ = ["block_inputs", "block_masks", "check_request", "check_fits", "golden_block",
           "CheckedEngine", "op_kind", "run_cycles", "summarize", "step_kind",
           "LINEAR_COUNTERS", "ATTENTION_COUNTERS"]

#: The manifest's counters of a linear / attention run, and the cycle models' names for them.
LINEAR_COUNTERS = {"linear_cycles": "cycles", "linear_stall_load": "stall_load",
                   "linear_low": "count_low", "linear_high": "count_high",
                   "linear_zero": "count_zero", "linear_clipped_groups": "count_clipped",
                   "linear_saturated_groups": "count_saturated"}
#: ``LINEAR_COUNTERS`` with ``encoding = "fmdq"`` (``sim.fmdq_cycles.linear_cycles``' names).
FMDQ_LINEAR_COUNTERS = {"linear_cycles": "cycles", "linear_stall_load": "stall_load",
                        "linear_groups": "count_groups", "linear_units": "count_units",
                        "linear_clipped": "count_clipped",
                        "linear_saturated": "count_saturated"}
ATTENTION_COUNTERS = {"attention_cycles": "cycles", "attention_qk_tiles": "count_qk",
                      "attention_pv_tiles": "count_pv"}


class _Enough(Exception):
    """Raised to end a sampling run after the steps that were asked for."""


class _Tap(DiT):
    def __init__(self, model: DiT, block: int):
        super().__init__(model.shape, model.w)
        self.block, self.records = block, []

    def block_ops(self, i, h, sc):
        if i == self.block:
            self.records.append((np.array(h), np.array(sc)))
        return (yield from super().block_ops(i, h, sc))


def block_inputs(cfg, model: DiT, block: int, steps: int, tokens: int | None = None):
    """``[(h, sc)]``: block ``block``'s input ``(B, N, D)`` and conditioning ``(B, D)`` at
    steps ``0 .. steps - 1`` of the golden pipeline's sampling run of ``cfg`` (its first
    sample, ``cfg.steps`` steps; with guidance a batch of two; SAR: every layer on every token
    with the mask file's masks), ``h`` cut to its first ``tokens`` tokens if given."""
    check_request(cfg, model.shape, block, steps, tokens)
    tap = _Tap(model, block)

    def enough(i, _t):
        if i == steps:
            raise _Enough

    masks = (masks_for(cfg, model.shape).at(cfg.theta) if cfg.attention is Attention.SAR
             else None)
    try:
        ddim_sample(tap, sample_labels(1, model.shape.num_classes),
                    initial_noise(1, model.shape, cfg.seed), cfg.steps, cfg.cfg_scale,
                    on_step=enough, **_hooks(cfg, masks, model.attention_names()))
    except _Enough:
        pass
    return [(h[:, :tokens] if tokens is not None else h, sc) for h, sc in tap.records]


def block_masks(cfg, model: DiT, block: int, tokens: int | None = None):
    """With ``attention = "sar"``: block ``block``'s static masks ``(H, nqb, nkb)`` at
    ``cfg.theta`` from the configuration's mask file (``golden.sar.masks_for``: a
    ``MaskError`` for a file that does not fit the model), cut to the blocks of the first
    ``tokens`` tokens; ``None`` for v1. A query block whose kept key blocks all lie beyond the
    cut keeps its largest-mass block among the others (the rule that puts it first when the
    file's masks are selected), so that every row has keys to attend to."""
    if cfg.attention is not Attention.SAR:
        return None
    ms = masks_for(cfg, model.shape)
    mask = np.array(ms.at(cfg.theta)[block], dtype=bool)
    if tokens is None:
        return mask
    nq, nk = n_blocks(tokens, cfg.block_q), n_blocks(tokens, cfg.block_k)
    mask, mass = mask[:, :nq, :nk], ms.mass[block][:, :nq, :nk]
    for h, i in zip(*np.nonzero(~mask.any(axis=-1)), strict=True):
        mask[h, i, int(np.argmax(mass[h, i]))] = True      # ties: the lower block, as selected
    return mask


def check_request(cfg, shape, block: int, steps: int, tokens: int | None = None) -> None:
    """Raise ``ValueError`` naming the bad value of a request for ``block_inputs``."""
    if not 0 <= block < shape.depth:
        raise ValueError(f"block must be in [0, {shape.depth - 1}], got {block}")
    if not 1 <= steps <= cfg.steps:
        raise ValueError(f"steps must be in [1, {cfg.steps}] (the sampling run's), got {steps}")
    if tokens is not None and not 1 <= tokens <= shape.tokens:
        raise ValueError(f"tokens must be in [1, {shape.tokens}], got {tokens}")


def check_fits(cfg, shape, tokens: int | None = None) -> None:
    """Raise ``ValueError`` naming the first configuration field that cannot hold a block of a
    DiT of ``shape`` (``golden.dit.DiTShape``) on ``tokens`` tokens (default: all)."""
    d, mlp, heads = shape.hidden, shape.mlp_hidden, shape.heads
    n = shape.tokens if tokens is None else tokens
    needs = [("head_dim", cfg.head_dim == d // heads, f"= {d // heads} (hidden {d} / {heads} "
              "heads)"),
             ("max_k", cfg.max_k >= max(d, mlp), f">= {max(d, mlp)} (fc2: {mlp} x {d})"),
             ("max_m", cfg.max_m >= max(3 * d, mlp), f">= {max(3 * d, mlp)} (qkv: {d} x "
              f"{3 * d}, fc1: {d} x {mlp})"),
             ("max_tokens", cfg.max_tokens >= n, f">= {n} (the tokens of an attention head; "
              "fewer with --tokens)")]
    for name, ok, want in needs:
        if not ok:
            raise ValueError(f"{name} = {getattr(cfg, name)} cannot run the block: it needs "
                             f"{name} {want}")


def golden_block(cfg, model: DiT, block: int, inputs, masks=None) -> list[np.ndarray]:
    """The golden pipeline's output of block ``block`` for ``inputs`` (``block_inputs``), its
    hooks (DSTAR linears, and v1's attention reuse or, with ``attention = "sar"``, SAR on
    ``masks``: ``block_masks``' for the same tokens) fresh at the first and kept across the
    steps."""
    hooks = _hooks(cfg, None if masks is None else np.asarray(masks)[None],
                   [model.attention_names()[block]])
    return [drive(model.block_ops(block, h, sc), hooks["linear"], hooks["attention"], s)
            for s, (h, sc) in enumerate(inputs)]


def _hooks(cfg, masks, names) -> dict:
    """The golden pipeline's hooks, fresh: DSTAR's linears and v1's attention reuse or, with
    ``attention = "sar"``, SAR on ``masks`` ``(L, H, nqb, nkb)`` of the attention layers
    ``names`` (the Q and K columns of ``qkv`` are computed on its reuse steps too, and not
    read: the host's run does the same)."""
    if cfg.attention is not Attention.SAR:
        att = AttentionReuse(cfg, measure=False)
    elif masks is None:
        raise ValueError("attention = 'sar' needs the block's masks (block_masks)")
    else:
        att = SparseAttentionReuse(cfg, masks, names)
    return {"linear": DStarLinears(cfg, LINEAR_TYPES), "attention": att}


def op_kind(name: str) -> str:
    """The operation of a layer name: a linear type (``qkv``, ``proj``, ``fc1``, ``fc2``) or
    ``attention``."""
    last = name.rsplit(".", 1)[-1]
    return "attention" if last == ATTN_SUFFIX else last


class CheckedEngine(HeadLoop):
    """``hw`` (an ``AcceleratorEngine``) checked run by run: each operation also runs on a
    ``GoldenEngine`` and the cycle models, and ``ops`` gets a record of it (``step``, ``op``,
    ``layer``, ``key``, ``bit_exact``, ``counters`` (the top's, summed over its runs) and
    ``predicted`` (the models'), ``elements`` (ZERO / LOW / HIGH, linears) or ``kind``
    (``step_kind``) and ``tiles`` (the blocks of a dense pass, attention)). With ``attention
    = "sar"`` the caller hands each head's static mask to its cache steps
    (``BlockHost``). ``step`` is the sampling step the caller is in;
    ``on_op(record)`` is called after each operation."""

    def __init__(self, hw, cfg, on_op=None):
        self.hw, self.cfg, self.on_op = hw, cfg, on_op
        self.golden = GoldenEngine(cfg)
        self.ops: list[dict] = []
        self.step = 0
        self._heads: dict | None = None

    def _record(self, rec):
        self.ops.append(rec)
        if self.on_op is not None:
            self.on_op(rec)

    async def linear(self, name, w_q, target, key):
        self._flush_heads()
        cfg = self.cfg
        prev = self.golden.layers.get(name)
        xs0 = np.zeros_like(target) if key or prev is None or prev.xs is None else prev.xs
        want = await self.golden.linear(name, w_q, target, key)
        first = len(self.hw.runs)
        got = await self.hw.linear(name, w_q, target, key)
        runs = self.hw.runs[first:]
        k, m = w_q.shape
        rows = self.hw.max_rows
        fmdq = cfg.encoding is Encoding.FMDQ
        names = FMDQ_LINEAR_COUNTERS if fmdq else LINEAR_COUNTERS
        predicted = dict.fromkeys(names, 0)
        elements = {"zero": 0, "low": 0, "high": 0}
        for r0 in range(0, target.shape[0], rows):
            d = target[r0:r0 + rows] - xs0[r0:r0 + rows]
            if fmdq:
                enc = fmdq_encode(d, cfg.token_tile, cfg.e_max, cfg.tau)
                rep = linear_cycles(enc, cfg.sort_window, -(-m // (cfg.m_tile * cfg.n_arrays)))
                _fmdq_elements(enc, elements)
            else:
                enc, _ = encode_step(target[r0:r0 + rows], xs0[r0:r0 + rows], cfg)
                rep = predict_linear(cfg, enc, k, m).counters()
                for cls, kind in ((ZERO, "zero"), (LOW, "low"), (HIGH, "high")):
                    elements[kind] += int(np.count_nonzero(enc.cls == cls))
            for c, model_name in names.items():
                predicted[c] += rep[model_name]
        self._record({"step": self.step, "op": op_kind(name), "layer": name, "key": bool(key),
                      "rows": int(target.shape[0]), "bit_exact": bool(np.array_equal(got, want)),
                      "counters": {c: sum(r[c] for r in runs) for c in names},
                      "predicted": predicted, "elements": elements})
        return got

    async def attention(self, slot, q, k, v, m, sh, mask=None):
        cfg = self.cfg
        sar = cfg.attention is Attention.SAR
        extra = (mask,) if sar else ()          # v1's engines take no mask
        want, key = await self.golden.attention(slot, q, k, v, m, sh, *extra)
        st = self.golden.slots[slot]
        got, hw_key = await self.hw.attention(slot, q, k, v, m, sh, *extra)
        cnt = self.hw.runs[-1]
        n = v.shape[0]
        # SAR: the slot's host mask (the last cache step's), no selection; v1: the mask its
        # last key step selected and the blocks the mass rule picked.
        pred = predict_attention(cfg, n, st["mask"], key, theta_fixed(cfg.theta),
                                 st["picks"] if key and not sar else None).counters()
        nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
        h = self._heads
        if h is None:
            h = self._heads = {"step": self.step, "op": "attention", "key": bool(key),
                               "kind": step_kind(cfg, key), "heads": 0, "bit_exact": True,
                               "counters": dict.fromkeys(ATTENTION_COUNTERS, 0),
                               "predicted": dict.fromkeys(ATTENTION_COUNTERS, 0),
                               "tiles": 0}
        h["heads"] += 1
        h["bit_exact"] &= bool(np.array_equal(got, want)) and hw_key == key
        h["tiles"] += nqb * nkb
        for c, model_name in ATTENTION_COUNTERS.items():
            h["counters"][c] += cnt[c]
            h["predicted"][c] += pred[model_name]
        return got, hw_key

    def _flush_heads(self):
        """The heads of one attention layer make one record, closed by the next linear."""
        if self._heads is not None:
            rec, self._heads = self._heads, None
            self._record(rec)

    def finish(self) -> None:
        """Close the last record (call after the block's last operation)."""
        self._flush_heads()


def _fmdq_elements(enc, elements: dict) -> None:
    """FMDQ's element mix in v1's three kinds: elements of skipped sub-channels (``zero``), of
    2- and 4-bit ones (``low``), of 6- and 8-bit ones (``high``)."""
    w = enc._per_row(enc.width)
    elements["zero"] += int(np.count_nonzero(w == 0))
    elements["low"] += int(np.count_nonzero((w == 2) | (w == 4)))
    elements["high"] += int(np.count_nonzero(w >= 6))


def step_kind(cfg, key: bool) -> str:
    """An attention step's kind as ``dstar run`` reports it: v1's ``key`` (every block, the
    mask selected) or SAR's ``cache`` (the masked blocks, the score cache written), else
    ``reuse``."""
    if not key:
        return "reuse"
    return "cache" if cfg.attention is Attention.SAR else "key"


def run_cycles(counters: dict) -> int:
    """The cycles of a record's ``counters`` or ``predicted`` (its ``*_cycles`` entries)."""
    return sum(v for c, v in counters.items() if c.endswith("_cycles"))


def summarize(ops: list[dict], outputs_equal: list[bool]) -> dict:
    """``dstar run``'s figures from ``CheckedEngine.ops`` and, per step, whether the block's
    float output equalled the golden pipeline's: cycles and predicted cycles in total and per
    operation (``per_op``: ``qkv``, ``attention``, ``proj``, ``fc1``, ``fc2``), the linears'
    element mix, per attention step kind (``attention_steps``: ``key`` / ``cache`` and
    ``reuse``, ``step_kind``) the runs, cycles and the blocks whose ``P V`` ran (the fraction
    of a dense pass's), and that fraction on reuse steps (``attention_blocks_computed``)."""
    per_op: dict[str, dict] = {}
    kinds: dict[str, dict] = {}
    el = {"zero": 0, "low": 0, "high": 0}
    for rec in ops:
        d = per_op.setdefault(rec["op"], {"cycles": 0, "predicted_cycles": 0, "runs": 0,
                                          "bit_exact": True, "counters_equal": True})
        d["cycles"] += run_cycles(rec["counters"])
        d["predicted_cycles"] += run_cycles(rec["predicted"])
        d["runs"] += 1
        d["bit_exact"] &= rec["bit_exact"]
        d["counters_equal"] &= rec["counters"] == rec["predicted"]
        if rec["op"] != "attention":
            for kind in el:
                el[kind] += rec["elements"][kind]
            continue
        k = kinds.setdefault(rec["kind"], {"runs": 0, "cycles": 0, "predicted_cycles": 0,
                                           "pv_tiles": 0, "dense_tiles": 0})
        k["runs"] += 1
        k["cycles"] += rec["counters"]["attention_cycles"]
        k["predicted_cycles"] += rec["predicted"]["attention_cycles"]
        # PV runs on every block a step computes (on v1's reuse steps as many as QK^T).
        k["pv_tiles"] += rec["counters"]["attention_pv_tiles"]
        k["dense_tiles"] += rec["tiles"]
    steps = {kind: {"runs": k["runs"], "cycles": k["cycles"],
                    "predicted_cycles": k["predicted_cycles"],
                    "blocks_computed": k["pv_tiles"] / k["dense_tiles"]}
             for kind, k in kinds.items()}
    n_el = sum(el.values()) or 1
    return {
        "steps": len(outputs_equal),
        "cycles": sum(d["cycles"] for d in per_op.values()),
        "predicted_cycles": sum(d["predicted_cycles"] for d in per_op.values()),
        "bit_exact": all(outputs_equal) and all(d["bit_exact"] for d in per_op.values()),
        "counters_equal": all(d["counters_equal"] for d in per_op.values()),
        "outputs_equal": outputs_equal,
        "per_op": per_op,
        "elements": {k: v / n_el for k, v in el.items()},
        "attention_steps": steps,
        "attention_blocks_computed": (steps["reuse"]["blocks_computed"] if "reuse" in steps
                                      else None),
    }
