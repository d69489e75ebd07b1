"""The host's float work around an integer engine, one layer at a time, stated once: what turns
a layer's float inputs into the integers the engine (the golden model's or the accelerator's)
computes on, and its integer results back into floats.

* ``LinearSide``: a differential linear layer's INT8 weights and their per-column scale, its
  bias, and its per-row lattice ``d`` (fixed at key steps, ``key_lattice``): integer targets
  in, ``linear_output`` out.
* ``AttentionSide``: an attention layer's INT8 Q (per token) and K (per head) with each query
  row's logit multiplier (``quantize_qk``), V on its per-head lattice (v1: fixed at key steps,
  the residual cache being in its units; SAR: every step's own), and the output on that
  lattice (``dequantize_output``).

Both decide a layer's key steps the same way: its first call, then ``is_key_step`` of the
sampling step. Their users: the golden pipeline's hooks (``golden.difflinear.DiffLinear``,
``golden.attention.AttentionReuse``, ``golden.sar.SparseAttentionReuse``) with the golden
model's integer work, and the accelerator's host (``golden.host.BlockHost``) on an engine.
"""

import math

import numpy as np

from dstar.config import Encoding, FmdqLattice

from .quant import amax_rows, layer_lattice, quantize_weights, to_lattice_float, token_lattice
from .schedule import is_key_step
from .softmax import logit_multiplier

__all__ = ["LATTICES", "key_lattice", "lattice_refinements", "linear_output",
           "quantize_per_token", "quantize_per_head", "quantize_on", "quantize_qk",
           "dequantize_output", "LinearSide", "AttentionSide"]

#: Each ``FmdqLattice``'s key-step lattice: ``(x, extra_bits) -> d`` (float64 ``(N,)``).
LATTICES = {FmdqLattice.TOKEN: token_lattice, FmdqLattice.LAYER: layer_lattice}


def key_lattice(x, cfg):
    """The lattice ``d`` (float64 ``(N,)``) a key step fixes for the rows ``x``: per token
    (``token_lattice``), or with ``encoding = "fmdq"`` ``fmdq_lattice``'s (``LATTICES``)."""
    lattice = LATTICES[cfg.fmdq_lattice] if cfg.encoding is Encoding.FMDQ else token_lattice
    return lattice(x, cfg.lattice_bits)


def lattice_refinements(peak, refined, xs_peak, cfg) -> np.ndarray:
    """Halvings ``k`` (int64 ``(N,)``) of each token's lattice before a delta step: while the
    token's ``peak`` (``max|X[n]| / d[n]``, float, on its current lattice) times ``2**k`` is at
    most ``cfg.refine_at * 127 * 2**cfg.lattice_bits``, its halvings since the key step
    (``refined + k``) stay within ``cfg.refine_max`` and the doubled state peak
    (``xs_peak << (k + 1)``) within ``cfg.state_max``, ``k`` grows by one. All-zero rows
    (``peak == 0``) keep their lattice."""
    limit = cfg.refine_at * (127 << cfg.lattice_bits)
    peak = np.asarray(peak, np.float64)
    k = np.zeros(peak.shape, np.int64)
    for _ in range(cfg.refine_max):
        more = ((peak * 2.0 ** k <= limit) & (peak > 0) & (refined + k < cfg.refine_max)
                & ((xs_peak << (k + 1)) <= cfg.state_max))
        if not more.any():
            break
        k += more
    return k


def linear_output(y_int, d, s_w, bias, y) -> None:
    """A differential linear layer's float output into ``y`` ``(N, M)``: ``Y_int * d * s_w +
    bias`` (``d`` the rows' lattice ``(N,)``, ``s_w`` the weights' per-column scale, ``bias``
    float64 or None), in float64, cast to ``y``'s type as the last step."""
    y64 = y if y.dtype == np.float64 else np.empty(y.shape, np.float64)
    np.multiply(y_int, d[:, None], out=y64)
    y64 *= s_w[None, :]
    if bias is not None:
        np.add(y64, bias, out=y)
    elif y64 is not y:
        y[...] = y64


# ----- attention: INT8 Q, K, V and the logit multiplier -----
def _amax_scale(amax):
    return np.where(amax > 0, amax / 127.0, 1.0)


def _float(x, name: str = "x"):
    """``x`` as a float array ``(..., N, D)`` with ``N, D >= 1`` and finite values; a
    ``ValueError`` naming ``name`` and the first bad value or the shape otherwise (a NaN would
    quantize to INT64_MIN with only a warning)."""
    x = np.asarray(x)
    if x.ndim < 2 or 0 in x.shape[-2:]:
        raise ValueError(f"{name} must be (..., N, D) with N, D >= 1, got shape {x.shape}")
    x = x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} has a non-finite value {x[idx]} at index {idx}")
    return x


def _absmax(x, axis):
    """``max|x|`` over ``axis`` in ``x``'s own float type (exact), as float64."""
    return np.maximum(x.max(axis=axis), -x.min(axis=axis)).astype(np.float64)


def _on_lattice(x, s):
    """``rint(x / s)`` in float64 (``s`` broadcast), ``x`` in its own float type."""
    u = np.divide(x, s, dtype=np.float64)
    return np.rint(u, out=u)


def quantize_per_token(x):
    """``(..., N, D)`` float -> ``(x_int, s)``: INT8 per row, ``s`` ``(..., N)`` float64."""
    x = _float(x)
    s = _amax_scale(_absmax(x, -1))
    return np.clip(_on_lattice(x, s[..., None]), -127, 127).astype(np.int64), s


def quantize_per_head(x):
    """``(..., N, D)`` float -> ``(x_int, s)``: INT8 with one scale per head, ``s`` ``(...)``."""
    x = _float(x)
    s = _amax_scale(_absmax(x, (-2, -1)))
    return np.clip(_on_lattice(x, s[..., None, None]), -127, 127).astype(np.int64), s


def quantize_on(x, s):
    """``clip(rint(x / s), -127, 127)`` on a given per-head lattice ``s`` ``(...)``; returns
    ``(x_int, n_clipped)``."""
    s = np.asarray(s, dtype=np.float64)
    if not (np.isfinite(s).all() and (s > 0).all()):
        bad = s[~(np.isfinite(s) & (s > 0))].flat[0]
        raise ValueError(f"the lattice steps s must be finite and > 0, got {bad}")
    u = _on_lattice(_float(x), s[..., None, None])
    n_clipped = int(np.count_nonzero(u > 127) + np.count_nonzero(u < -127))
    return np.clip(u, -127, 127).astype(np.int64), n_clipped


def quantize_qk(q, k, frac_bits: int):
    """The integer side of ``q`` and ``k`` ``(..., N, Dh)``: INT8 Q per token, K per head, and
    each query row's logit multiplier ``(m, sh)`` of ``s_q * s_k / sqrt(Dh)``
    (``logit_multiplier``): ``(q_int, k_int, m, sh)``. """
    q_int, s_q = quantize_per_token(q)
    k_int, s_k = quantize_per_head(k)
    m, sh = logit_multiplier(s_q * s_k[..., None] / math.sqrt(q.shape[-1]), frac_bits)
    return q_int, k_int, m, sh


def dequantize_output(o_int, s_v, out_frac_bits: int):
    """The float64 attention output of the integer one ``o_int`` ``(..., N, Dh)`` (``out_frac_bits``
    fraction bits) on V's per-head lattice ``s_v`` ``(...)``."""
    return o_int * (np.asarray(s_v)[..., None, None] / float(1 << out_frac_bits))



# ----- the sides of a layer -----
class LinearSide:
    """The float side of linear layer ``y = x @ w.T + b`` (``w`` ``(M, K)`` float, PyTorch
    layout): ``w_q`` (INT8 ``(K, M)``), ``s_w``, ``bias`` (float64 or None), the rows'
    lattice ``d`` (``None`` before the first key step) and each row's halvings of it since
    (``refined``, int64 ``(N,)``).

    Lattice refinement (``Config.refine_max`` > 0): before a delta step, a token whose values
    have shrunk since its key step gets a finer lattice, by powers of two, exactly: ``d[n] /=
    2**k`` here, and the engine's ``Xs_int[n] <<= k``, ``Y_int[n] <<= k`` (``refine`` gives
    ``k``), so the layer's invariant holds and its float output is unchanged, while the new
    targets land on the finer lattice. The lattice never coarsens between key steps (that would
    not be exact)."""

    def __init__(self, w, b, cfg):
        self.cfg = cfg
        self.w_q, self.s_w = quantize_weights(w)
        self.bias = None if b is None else np.asarray(b, dtype=np.float64)
        self.d = None
        self.refined = None

    def is_key(self, step: int) -> bool:
        """Whether the call at sampling step ``step`` is a key step (``Config.refresh_linear``):
        the layer's first call always is."""
        return self.d is None or is_key_step(step, self.cfg.refresh_linear)

    def fix_lattice(self, x) -> None:
        """A key step's lattice for the rows ``x`` (``key_lattice``)."""
        self.d = key_lattice(x, self.cfg)
        self.refined = np.zeros(len(self.d), np.int64)

    def refine(self, x, xs_peak):
        """Before a delta step on the rows ``x``: each row's halvings ``k`` (int64 ``(N,)``,
        ``lattice_refinements`` of the engine's state peak ``xs_peak``), applied to ``d``; the
        engine must shift its state by the same ``k``."""
        k = lattice_refinements(amax_rows(x) / self.d, self.refined, xs_peak, self.cfg)
        if k.any():
            self.d = self.d / np.ldexp(1.0, k)      # exact powers of two
            self.refined = self.refined + k
        return k

    def targets(self, x, rows=slice(None)):
        """The integer targets of rows ``x`` (those ``rows`` of the lattice): float64 holding
        integers within ``+-target_max`` (``quant.to_lattice_float``)."""
        return to_lattice_float(x, self.d[rows], self.cfg.target_max)

    def output(self, y_int, y, rows=slice(None)) -> None:
        """The float output of the accumulators ``y_int`` (those ``rows``) into ``y``
        (``linear_output``)."""
        linear_output(y_int, self.d[rows], self.s_w, self.bias, y)


class AttentionSide:
    """The float side of attention layer ``name``: ``quantize`` a step's float ``q``, ``k``,
    ``v`` ``(..., N, Dh)`` (before the 1/sqrt(Dh) scale), ``output`` its integer result;
    ``s_v`` is V's per-head lattice ``(...)`` (``None`` before the first key step). With
    ``sar`` V is quantized afresh every step and a reuse step quantizes V only."""

    def __init__(self, cfg, *, sar: bool = False, frac_bits: int | None = None,
                 out_frac_bits: int | None = None):
        self.cfg, self.sar = cfg, sar
        self.frac_bits = cfg.attn_frac_bits if frac_bits is None else frac_bits
        self.out_frac_bits = cfg.attn_out_frac_bits if out_frac_bits is None else out_frac_bits
        self.s_v = None

    def is_key(self, step: int) -> bool:
        """Whether the call at sampling step ``step`` is a key step (SAR: a cache step;
        ``Config.refresh_attn``, and with SAR every step before ``Config.sar_reuse_from``): the
        layer's first call always is."""
        return (self.s_v is None or is_key_step(step, self.cfg.refresh_attn)
                or (self.sar and step < self.cfg.sar_reuse_from))

    def quantize(self, q, k, v, key: bool):
        """``(q_int, k_int, m, sh, v_int, n_clipped)`` of a step (``key``: whether it is a key
        step): Q, K and the logit multipliers (``None`` on SAR's reuse steps, which read no Q
        or K), V on a fresh per-head lattice (key steps, SAR) or on the key step's, counting
        the values that lattice clipped."""
        q_int = k_int = m = sh = None
        if key or not self.sar:
            q_int, k_int, m, sh = quantize_qk(np.asarray(q), np.asarray(k), self.frac_bits)
        n_clip = 0
        if key or self.sar:
            v_int, self.s_v = quantize_per_head(v)
        else:
            v_int, n_clip = quantize_on(v, self.s_v)
        return q_int, k_int, m, sh, v_int, n_clip

    def output(self, o_int):
        """The float64 output of the integer one ``o_int`` on V's lattice
        (``dequantize_output``)."""
        return dequantize_output(o_int, self.s_v, self.out_frac_bits)
