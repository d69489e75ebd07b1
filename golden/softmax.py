"""Fixed-point softmax of DSTAR's attention (spec section 4): the integer contract the RTL softmax
unit reproduces bit for bit. ``golden/ATTENTION.md`` restates it with widths for the RTL author.

Input: integer logits ``S[i, j] = sum_d Q[i, d] * K[j, d]`` (INT8 x INT8), and per query row a
fixed-point multiplier ``(m[i], sh[i])`` that folds the scales into the base-2 domain:
``S * s_q[i] * s_k / sqrt(Dh) * log2(e) * 2**F ~= S * m[i] / 2**sh[i]`` (``F = frac_bits``).
``m`` and ``sh`` are computed on the host (``logit_multiplier``) and handed to the hardware as
integers; the golden model treats them as given. Per row, over the *valid* keys only (all keys,
or the keys of the selected blocks):

1. ``Smax = max_j S[i, j]``; ``d = Smax - S >= 0``.
2. ``x = round_shift(d * m, sh)`` (``(v + 2**(sh-1)) >> sh``, round half up; ``v`` for sh = 0):
   the distance from the row max in the base-2 domain, unsigned, ``F`` fraction bits.
3. ``xi = x >> F``, ``f = x & (2**F - 1)``. Keys are in *groups* of ``G = group`` consecutive
   key indices (``j // G``; the last group of a row may be shorter). Per row and group ``g`` the
   group exponent is ``e_g = min(min_{valid j in g} xi_j, E)`` (``E = e_max``; ``e_g = E`` for a
   group without valid keys), and each valid key gets the 8-bit **mantissa**
   ``p = (LUT[f] + 2**(xi-e_g+7)) >> (xi-e_g+8)`` (round half up; ``p = 0`` once
   ``xi - e_g >= 9``) with ``LUT[f] = floor(255 * 2**8 * 2**(-f / 2**F) + 0.5)`` (``2**F``
   entries of 16 bits): ``p ~= 255 * 2**(e_g - x / 2**F)``, so a group's largest key has
   ``128 <= p <= 255`` and the row max gets exactly 255 (its group has ``e_g = 0``).
4. The applied integer weight is ``w = p << (E - e_g)`` (the group's *shift* ``E - e_g``), an
   **unnormalized** probability ``~= 255 * 2**E * 2**(-x / 2**F)``, and ``l = sum_j w``
   (``255 * 2**E <= l <= 255 * 2**E * n_valid``); invalid keys have ``p = w = 0``.

This is DSTAR's group format of the linear layers' differences (spec section 2: a power-of-two
shift per group of ``G`` elements, 8-bit elements as two nibbles) applied to probabilities: PV
runs on the PE lanes as ``(p & 15) * V << shift`` and ``(p >> 4) * V << (shift + 4)``, the shifts
the lanes already have for ``e <= e_max``. ``e_max = 0`` gives one exponent per row (the plain
8-bit unnormalized format).

Normalization is deferred to the output (as FlashAttention does): PV gives the integer
``acc = sum_j w[i, j] * V[j, :]``, then ``normalize`` divides by ``l`` through a reciprocal:

5. ``L = bit_length(l)``, ``r = floor((2**(L+16) - 1) / l)``, an unsigned 17-bit value in
   ``[2**16, 2**17)`` (one per row: a 17-step restoring divider or any exact floor divider).
6. ``out = (acc * r + 2**(s-1)) >> s`` with ``s = L + 16 - out_frac_bits`` (arithmetic shift,
   round half up): ``out ~= acc * 2**out_frac_bits / l``, within 1 for INT8 V and
   ``out_frac_bits <= 8``.

Why unnormalized probabilities and a shift per group of keys: ``docs/design/attention.md``.
"""

import functools

import numpy as np

__all__ = ["LOG2E", "MANT_BITS", "SHIFT_MAX", "EXP_EXTRA_BITS", "RECIP_BITS", "DEFAULT_FRAC_BITS",
           "DEFAULT_OUT_FRAC_BITS", "DEFAULT_GROUP", "DEFAULT_E_MAX", "exp_lut",
           "logit_multiplier", "round_shift", "bit_length", "softmax_groups", "softmax_exp",
           "softmax_exp_float", "exp2_fixed", "reciprocal", "normalize", "block_fraction",
           "softmax_probs", "softmax_error", "sum_bits"]

LOG2E = 1.4426950408889634
MANT_BITS = 16          # m: unsigned 16 bits, in [2**15, 2**16) unless clamped
SHIFT_MAX = 47          # sh: 6-bit field, 0..47
EXP_EXTRA_BITS = 8      # LUT entries carry 8 bits below the 8-bit probability
RECIP_BITS = 16         # r has 16 fraction bits below its leading one (17 bits in all)
DEFAULT_FRAC_BITS = 6   # F: LUT of 2**6 = 64 entries x 16 bits
DEFAULT_OUT_FRAC_BITS = 8
DEFAULT_GROUP = 16      # G: keys per exponent group (the configuration's ``group``)
DEFAULT_E_MAX = 7       # E: largest group exponent (the configuration's ``e_max``)
P_MAX = 255


def sum_bits(n: int, e_max: int = DEFAULT_E_MAX) -> int:
    """Width of a row sum ``l <= 255 * 2**e_max * n`` (and of a block sum)."""
    return ((P_MAX << e_max) * n).bit_length()


def _check_group(group: int, e_max: int):
    if not isinstance(group, int) or group < 1:
        raise ValueError(f"group must be an int >= 1, got {group!r}")
    if not isinstance(e_max, int) or not 0 <= e_max <= 15:
        raise ValueError(f"e_max must be an int in [0, 15], got {e_max!r}")


def _check_frac_bits(frac_bits: int):
    if not 1 <= frac_bits <= 10:
        raise ValueError(f"frac_bits must be in [1, 10], got {frac_bits!r}")


def exp_lut(frac_bits: int = DEFAULT_FRAC_BITS) -> np.ndarray:
    """``LUT[f] = floor(255 * 2**8 * 2**(-f / 2**F) + 0.5)`` for ``f < 2**F``: int64, 16-bit
    unsigned values in ``(32640, 65280]``, strictly decreasing."""
    _check_frac_bits(frac_bits)
    f = np.arange(1 << frac_bits, dtype=np.float64)
    return np.floor(P_MAX * 2.0 ** EXP_EXTRA_BITS * np.exp2(-f / (1 << frac_bits)) + 0.5
                    ).astype(np.int64)


def logit_multiplier(scale, frac_bits: int = DEFAULT_FRAC_BITS):
    """Host side: fold a natural-log logit scale ``c`` (``s_q * s_k / sqrt(Dh)``, per row, any
    shape, ``>= 0``) into ``(m, sh)`` with ``m / 2**sh ~= c * log2(e) * 2**F``.

    ``sh = 16 - e`` where ``2**(e-1) <= c' < 2**e`` (``c' = c * log2(e) * 2**F``), so that
    ``m = rint(c' * 2**sh)`` lies in ``[2**15, 2**16]`` (``2**16`` is renormalized to ``2**15``
    with ``sh - 1``). Clamps: ``sh < 0`` -> ``m = 2**16 - 1, sh = 0`` (every non-max key then gets
    ``p = 0``, as with the exact value); ``sh > 47`` -> ``sh = 47, m = rint(c' * 2**47)`` (every
    ``x`` rounds to 0 for ``Dh <= 128``, as with the exact value); ``c' = 0`` -> ``m = sh = 0``.
    Returns two int64 arrays of ``scale``'s shape."""
    _check_frac_bits(frac_bits)
    c = np.asarray(scale, dtype=np.float64) * LOG2E * (1 << frac_bits)
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise ValueError("logit scale must be finite and >= 0")
    _, e = np.frexp(c)
    sh = (MANT_BITS - e).astype(np.int64)
    m = np.rint(np.ldexp(c, sh)).astype(np.int64)
    over = m >= (1 << MANT_BITS)
    m, sh = np.where(over, m >> 1, m), np.where(over, sh - 1, sh)
    big = sh < 0
    m, sh = np.where(big, (1 << MANT_BITS) - 1, m), np.where(big, 0, sh)
    small = sh > SHIFT_MAX
    m = np.where(small, np.rint(np.ldexp(np.where(small, c, 0.0), SHIFT_MAX)).astype(np.int64), m)
    sh = np.where(small, SHIFT_MAX, sh)
    zero = c == 0
    return np.where(zero, 0, m).astype(np.int64), np.where(zero, 0, sh).astype(np.int64)


def round_shift(v, s):
    """``(v + 2**(s-1)) >> s`` (arithmetic shift, round half up), ``v`` where ``s == 0``."""
    v = np.asarray(v, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)
    return np.right_shift(v + half, s)


def bit_length(v) -> np.ndarray:
    """``int.bit_length`` elementwise for non-negative int64 below 2**53 (exact via frexp)."""
    return np.frexp(np.asarray(v, dtype=np.float64))[1].astype(np.int64)


def softmax_groups(s_int, m, sh, valid=None, frac_bits: int = DEFAULT_FRAC_BITS,
                   group: int = DEFAULT_GROUP, e_max: int = DEFAULT_E_MAX):
    """Steps 1-4 of the module contract on a row-major block of logits, in the hardware's form.

    ``s_int``: integer logits ``(..., N, Nk)``; ``m``, ``sh``: int ``(..., N)`` per query row;
    ``valid``: optional bool, broadcastable to ``s_int``, the keys taking part (every row needs at
    least one). Returns ``(p, shift, l)``: int64 mantissas ``p`` ``(..., N, Nk)`` in ``[0, 255]``
    (0 on invalid keys), the group shifts ``E - e_g`` ``(..., N, ceil(Nk / group))`` in
    ``[0, e_max]``, and the row sums ``l = sum p << shift`` ``(..., N)``."""
    _check_frac_bits(frac_bits)
    _check_group(group, e_max)
    s = np.asarray(s_int)
    if not np.issubdtype(s.dtype, np.integer):
        raise TypeError(f"softmax_exp needs integer logits, got dtype {s.dtype}")
    s = s.astype(np.int64, copy=False)
    m = np.asarray(m, dtype=np.int64)[..., None]
    sh = np.asarray(sh, dtype=np.int64)[..., None]
    if np.any(m < 0) or np.any(m >= (1 << MANT_BITS)) or np.any(sh < 0) or np.any(sh > SHIFT_MAX):
        raise ValueError(f"m must be in [0, 2**{MANT_BITS}) and sh in [0, {SHIFT_MAX}]")
    if valid is None:
        valid = np.ones(s.shape, dtype=bool)
    else:
        valid = np.broadcast_to(np.asarray(valid, dtype=bool), s.shape)
        if not valid.any(axis=-1).all():
            raise ValueError("every row needs at least one valid key")
    if valid is None:
        d = s.max(axis=-1, keepdims=True) - s
    else:
        smax = np.where(valid, s, np.iinfo(np.int64).min).max(axis=-1, keepdims=True)
        d = np.where(valid, smax - s, 0)
    # x = round_shift(d * m, sh), in place; the rounding half is per row.
    half = np.where(sh > 0, np.left_shift(1, np.maximum(sh - 1, 0)), 0)
    x = d
    x *= m
    x += half
    x >>= sh
    nk = s.shape[-1]
    ng = -(-nk // group)
    xi = x >> frac_bits
    if valid is not None:
        np.putmask(xi, ~valid, e_max)
    pad = ng * group - nk
    if pad:
        xi = np.concatenate([xi, np.full(xi.shape[:-1] + (pad,), e_max, np.int64)], axis=-1)
    e = np.minimum(xi.reshape(xi.shape[:-1] + (ng, group)).min(axis=-1), e_max)
    # Valid keys have e_g <= xi, so the offset distance x - e_g * 2**F is >= 0; invalid keys
    # index the table's last entry, whose p is 0.
    top = 9 << frac_bits
    t = x
    _per_key_op(np.subtract, t, e << frac_bits, group)
    if valid is not None:
        np.putmask(t, ~valid, top)
    np.minimum(t, top, out=t)
    p = _exp2_table(frac_bits)[t]
    shift = e_max - e
    return p, shift, np.left_shift(_group_sums(p, group, ng), shift).sum(axis=-1)


def _group_sums(p, group: int, ng: int):
    """Sums of ``p`` over each group of ``group`` keys (the last group may be short)."""
    pad = ng * group - p.shape[-1]
    if pad:
        p = np.concatenate([p, np.zeros(p.shape[:-1] + (pad,), p.dtype)], axis=-1)
    return p.reshape(p.shape[:-1] + (ng, group)).sum(axis=-1)


def _per_key(per_group, group: int, nk: int):
    """A per-group array ``(..., ceil(nk / group))`` repeated for each of the ``nk`` keys."""
    return np.repeat(per_group, group, axis=-1)[..., :nk]


def _per_key_op(op, a, per_group, group: int):
    """``a = op(a, per_key(per_group))`` in place, on a view of ``a`` by groups when the keys
    fill whole groups (no repeated copy), else through ``_per_key``."""
    nk = a.shape[-1]
    if nk % group or not a.flags.c_contiguous:
        op(a, _per_key(per_group, group, nk), out=a)
    else:
        v = a.reshape(a.shape[:-1] + (nk // group, group))
        op(v, per_group[..., None], out=v)
    return a


def softmax_exp(s_int, m, sh, valid=None, frac_bits: int = DEFAULT_FRAC_BITS,
                group: int = DEFAULT_GROUP, e_max: int = DEFAULT_E_MAX):
    """Steps 1-4 as applied weights: ``(w, l)`` with int64 ``w = p << shift`` ``(..., N, Nk)``
    (``255 << e_max`` on each row's max, 0 on invalid keys) and the row sums ``l``; arguments as
    ``softmax_groups``."""
    p, shift, lsum = softmax_groups(s_int, m, sh, valid, frac_bits, group, e_max)
    return _per_key_op(np.left_shift, p, shift, group), lsum


#: Largest logit magnitude ``softmax_exp_float`` accepts: ``|s| * m`` then stays below 2**52.
FLOAT_LOGIT_LIMIT = 1 << 35


def softmax_exp_float(s, m, sh, invalid=None, frac_bits: int = DEFAULT_FRAC_BITS,
                      group: int = DEFAULT_GROUP, e_max: int = DEFAULT_E_MAX):
    """``softmax_exp`` on logits held as a float array of exact integers (float32 or float64,
    ``|s| < 2**35``, e.g. ``quant.exact_matmul_float``'s), returning ``(w, l)`` as float64 arrays
    of exact integers; ``invalid``: optional bool broadcastable to ``s``, the keys left out (the
    complement of ``softmax_exp``'s ``valid``; every row needs one valid key, not checked here).

    Bit for bit ``softmax_exp``, every step exact in float64: with ``c = m / 2**sh``,
    ``x = round_shift((smax - s) * m, sh) = floor(smax * c + 1/2 - s * c)``. ``x`` falls as ``s``
    rises, so a group's smallest ``x`` is that of its largest logit, which gives the group
    exponent ``e_g`` from the group maxima alone, and the table index is
    ``x - e_g * 2**F = floor(smax * c + 1/2 - e_g * 2**F - s * c)`` (clamped to ``9 * 2**F``,
    where ``p`` is 0, which also stands for left-out keys)."""
    _check_frac_bits(frac_bits)
    _check_group(group, e_max)
    s = np.asarray(s)
    if not np.issubdtype(s.dtype, np.floating):
        raise TypeError(f"softmax_exp_float needs float logits, got dtype {s.dtype}")
    m = np.asarray(m, dtype=np.int64)
    sh = np.asarray(sh, dtype=np.int64)
    if np.any(m < 0) or np.any(m >= (1 << MANT_BITS)) or np.any(sh < 0) or np.any(sh > SHIFT_MAX):
        raise ValueError(f"m must be in [0, 2**{MANT_BITS}) and sh in [0, {SHIFT_MAX}]")
    c = np.ldexp(m.astype(np.float64), -sh)[..., None]
    nk = s.shape[-1]
    ng = -(-nk // group)
    gmax = _group_max(s if invalid is None else np.where(invalid, -np.inf, s), group)
    smax = gmax.max(axis=-1, keepdims=True).astype(np.float64)
    a = smax * c + 0.5
    if invalid is not None:             # a group without valid keys: any exponent will do
        gmax = np.where(gmax == -np.inf, smax, gmax)
    e = np.minimum(np.floor((a - gmax * c) * (1.0 / (1 << frac_bits))), float(e_max))
    top = float(9 << frac_bits)
    buf = np.empty(s.shape[:-1] + (ng * group,), np.float64)
    np.multiply(s, -c, out=buf[..., :nk])
    g = buf.reshape(buf.shape[:-1] + (ng, group))
    g += (a - e * float(1 << frac_bits))[..., None]
    buf[..., nk:] = top
    np.minimum(buf, top, out=buf)
    if invalid is not None:
        np.copyto(buf[..., :nk], top, where=invalid)
    w = _exp2_table_float(frac_bits).take(buf.astype(np.intp))   # >= 0: truncation is floor
    w.reshape(g.shape)[...] *= np.exp2(e_max - e)[..., None]
    return w[..., :nk], w.sum(axis=-1)


def _group_max(s, group: int):
    """Maxima over groups of ``group`` consecutive keys (the last may be short), one strided
    pass per position in the group (long inner loops, unlike a reduction over a short axis)."""
    out = s[..., ::group].copy()
    for j in range(1, group):
        col = s[..., j::group]
        part = out[..., :col.shape[-1]]
        np.maximum(part, col, out=part)
    return out


@functools.cache
def _exp2_table_float(frac_bits: int) -> np.ndarray:
    t = _exp2_table(frac_bits).astype(np.float64)
    t.setflags(write=False)
    return t


def exp2_fixed(x, frac_bits: int = DEFAULT_FRAC_BITS) -> np.ndarray:
    """Step 3: ``p = round_shift(LUT[x & (2**F - 1)], (x >> F) + 8)`` for unsigned ``x`` with
    ``F`` fraction bits; ``~= 255 * 2**(-x / 2**F)``, in ``[0, 255]``, non-increasing in ``x``,
    ``p(0) = 255``; ``p = 0`` for ``x >= 9 * 2**F`` (and, for ``F <= 7``, only there).
    Implemented as a table over ``x`` clamped to ``9 * 2**F``."""
    x = np.asarray(x, dtype=np.int64)
    if np.any(x < 0):
        raise ValueError("exp2_fixed needs x >= 0")
    return _exp2_table(frac_bits)[np.minimum(x, 9 << frac_bits)]


@functools.cache
def _exp2_table(frac_bits: int) -> np.ndarray:
    """``p`` for every ``x`` in ``[0, 9 * 2**F]`` (the last entry, 0, stands for every larger x:
    ``LUT[f] < 2**16`` shifted by ``>= 17`` with rounding is 0)."""
    x = np.arange((9 << frac_bits) + 1, dtype=np.int64)
    t = round_shift(exp_lut(frac_bits)[x & ((1 << frac_bits) - 1)],
                    (x >> frac_bits) + EXP_EXTRA_BITS)
    t[-1] = 0
    t.setflags(write=False)
    return t


def reciprocal(lsum):
    """Step 5: ``(r, L)`` with ``L = bit_length(l)`` and ``r = floor((2**(L+16) - 1) / l)`` in
    ``[2**16, 2**17)``, for integer row sums ``l = lsum >= 1`` (int64 arrays of their shape)."""
    lsum = np.asarray(lsum, dtype=np.int64)
    if np.any(lsum < 1):
        raise ValueError("row sums must be >= 1")
    big_l = bit_length(lsum)
    r = (np.left_shift(1, big_l + RECIP_BITS) - 1) // lsum
    return r, big_l


def normalize(acc, lsum, out_frac_bits: int = DEFAULT_OUT_FRAC_BITS):
    """Step 6: ``(acc * r + 2**(s-1)) >> s``, ``s = L + 16 - out_frac_bits``; ``acc`` integer
    ``(..., N, D)``, row sums ``l = lsum`` ``(..., N)``; ``out_frac_bits`` in ``[0, 16]``.
    With ``y = acc * 2**out_frac_bits / l``: ``|result - y| < 0.5 + |y| * 2**-16``, which is
    ``< 1`` when ``|acc| <= 127 * l`` (INT8 V) and ``out_frac_bits <= 8``."""
    if not 0 <= out_frac_bits <= 16:
        raise ValueError(f"out_frac_bits must be in [0, 16], got {out_frac_bits!r}")
    r, big_l = reciprocal(lsum)
    acc = np.asarray(acc, dtype=np.int64)
    return round_shift(acc * r[..., None], (big_l + RECIP_BITS - out_frac_bits)[..., None])


def block_fraction(b, lsum):
    """Fraction of a row's mass held by a partial sum ``b <= l`` of its ``p``, as an unsigned
    16-bit fixed-point value: ``(b * r) >> L`` (truncating) with ``(r, L) = reciprocal(l)``;
    in ``[0, 2**16)``, ``~= 2**16 * b / l``. ``b`` ``(..., N, nb)``, ``l = lsum`` ``(..., N)``."""
    r, big_l = reciprocal(lsum)
    return np.right_shift(np.asarray(b, dtype=np.int64) * r[..., None], big_l[..., None])


def softmax_probs(s_int, m, sh, valid=None, frac_bits: int = DEFAULT_FRAC_BITS,
                  group: int = DEFAULT_GROUP, e_max: int = DEFAULT_E_MAX) -> np.ndarray:
    """The probabilities the fixed-point pipeline applies, ``w / l`` as float64 (for error
    measurement only; the hardware never forms them)."""
    w, lsum = softmax_exp(s_int, m, sh, valid, frac_bits, group, e_max)
    return w / lsum[..., None]


def softmax_error(s_int, scale, frac_bits: int = DEFAULT_FRAC_BITS, group: int = DEFAULT_GROUP,
                  e_max: int = DEFAULT_E_MAX) -> dict:
    """Error of the fixed-point softmax against float64 ``softmax(s_int * scale)`` for integer
    logits ``(..., N, Nk)`` and a natural-log scale per row ``(..., N)`` (``s_q * s_k / sqrt(Dh)``),
    the multiplier quantized by ``logit_multiplier``. Returns max/mean absolute error of the
    applied probabilities ``w / l``, the same in units of the row max (where 1 LSB = 1/255),
    and the mean/max per-row L1 distance."""
    s = np.asarray(s_int, dtype=np.int64)
    scale = np.asarray(scale, dtype=np.float64)
    m, sh = logit_multiplier(scale, frac_bits)
    got = softmax_probs(s, m, sh, frac_bits=frac_bits, group=group, e_max=e_max)
    z = s * scale[..., None]
    z = z - z.max(axis=-1, keepdims=True)
    ref = np.exp(z)
    ref /= ref.sum(axis=-1, keepdims=True)
    err = np.abs(got - ref)
    rel_max = err / ref.max(axis=-1, keepdims=True)
    row_l1 = err.sum(axis=-1)
    return {"max_abs": float(err.max()), "mean_abs": float(err.mean()),
            "max_abs_rel_to_rowmax_lsb": float(rel_max.max() * P_MAX),
            "mean_row_l1": float(row_l1.mean()), "max_row_l1": float(row_l1.max())}
