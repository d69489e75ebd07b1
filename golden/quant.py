"""Number formats of spec section 2: INT8 per-channel weights and per-token activation lattices,
and the dense W8A8 reference every speedup and accuracy figure is measured against."""

import numpy as np

__all__ = ["quantize_weights", "amax_rows", "token_lattice", "layer_lattice", "to_lattice",
           "to_lattice_float", "exact_dtype", "exact_matmul", "exact_matmul_float", "w8a8_linear",
           "LATTICE_LIMIT"]

#: Largest magnitude ``to_lattice`` returns: beyond it values are clipped (in float, before the
#: cast, so that no value wraps). Every consumer clips far tighter (INT8, ``Config.target_max``).
LATTICE_LIMIT = 1 << 62


def _finite(name: str, a: np.ndarray) -> np.ndarray:
    if not np.isfinite(a).all():
        bad = np.argwhere(~np.isfinite(a))[0]
        raise ValueError(f"{name} has a non-finite value {float(a[tuple(bad)])} at index "
                         f"{tuple(int(i) for i in bad)}")
    return a


def quantize_weights(w):
    """INT8 symmetric per output channel: ``w`` is ``(M, K)`` (PyTorch layout).

    Returns ``(w_q, s_w)``: int64 ``(K, M)`` (reduction first, as the PE array stores it) with
    ``w_q = clip(round(w / s_w), -127, 127)`` and float64 ``s_w[m] = max|w[m, :]| / 127``
    (1 for an all-zero channel)."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or 0 in w.shape:
        raise ValueError(f"weights must be 2-D (M, K) and not empty, got shape {w.shape}")
    _finite("weights", w)
    amax = np.abs(w).max(axis=1)
    s_w = np.where(amax > 0, amax / 127.0, 1.0)
    w_q = np.clip(np.rint(w / s_w[:, None]), -127, 127).astype(np.int64)
    return np.ascontiguousarray(w_q.T), s_w


def amax_rows(x):
    """``max|x[n, :]|`` per row as float64 (exact: computed in ``x``'s own float type); a
    non-finite value anywhere is refused (``ValueError``, naming it)."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    amax = np.maximum(x.max(axis=-1, initial=-np.inf), -x.min(axis=-1, initial=np.inf))
    if not np.isfinite(amax).all():          # max and min propagate NaN and +-inf
        _finite("activations", x)
    return amax.astype(np.float64)


def token_lattice(x, extra_bits: int = 0):
    """Per-token step ``d[n] = max|x[n, :]| / (127 * 2**extra_bits)`` (1 for an all-zero row),
    float64 ``(N,)``. ``extra_bits = 0`` is spec section 2's INT8 lattice; DSTAR's differential
    layers may use a finer one (``Config.lattice_bits``), as their state is wider than INT8."""
    _check_extra_bits(extra_bits)
    amax = amax_rows(x)
    return np.where(amax > 0, amax / (127.0 * (1 << extra_bits)), 1.0)


def _check_extra_bits(extra_bits) -> None:
    if isinstance(extra_bits, bool) or not isinstance(extra_bits, (int, np.integer)) \
            or not 0 <= extra_bits <= 52:
        raise ValueError(f"extra_bits must be an integer in [0, 52], got {extra_bits!r}")


def layer_lattice(x, extra_bits: int = 0):
    """One step for every row: ``max|x| / (127 * 2**extra_bits)`` over the whole ``x`` (1 if it
    is all zero), float64 ``(N,)``."""
    _check_extra_bits(extra_bits)
    amax = amax_rows(x)
    top = float(amax.max(initial=0.0))
    return np.full(amax.shape, top / (127.0 * (1 << extra_bits)) if top > 0 else 1.0)


def to_lattice_float(x, d, limit):
    """``to_lattice`` as float64 (exact integers, ``|limit| < 2**53``), the division in float64:
    ``clip(rint(x / d[n]), -limit, limit)``, for callers that cast or multiply next."""
    d = np.asarray(d, dtype=np.float64)
    if not (np.isfinite(d).all() and (d > 0).all()):
        raise ValueError("lattice steps must be finite and > 0")
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow to +-inf is clipped
        q = np.divide(x, d[:, None], dtype=np.float64)
        finite = np.isfinite(q.sum())
    if not finite:                        # non-finite x, or finite values that overflowed
        _finite("activations", x)
    np.rint(q, out=q)
    return np.clip(q, -limit, limit, out=q)


def to_lattice(x, d, limit: int = LATTICE_LIMIT):
    """``round(x / d[n])`` (round half to even) as int64, clipped to ``+-limit`` (at most
    ``LATTICE_LIMIT``, the default); may exceed INT8 between key steps. Non-finite ``x`` or steps
    that are not finite and positive are refused (``ValueError``)."""
    return to_lattice_float(x, d, min(int(limit), LATTICE_LIMIT)).astype(np.int64)


def exact_dtype(a, b, a_bound, b_bound):
    """The float type whose BLAS computes ``a @ b`` exactly: float32 while every partial sum
    stays below 2**24, float64 below 2**53 (the config guarantees it: ``Config.acc_bits <= 48``);
    beyond, ``OverflowError``. ``a_bound`` / ``b_bound``: known bounds on ``|a|`` / ``|b|``
    (else taken from the operands)."""
    if a_bound is None:
        a_bound = np.abs(a).max(initial=0)
    if b_bound is None:
        b_bound = np.abs(b).max(initial=0)
    bound = int(a_bound) * int(b_bound) * a.shape[-1]
    if bound >= 2 ** 53:
        raise OverflowError(f"integer matmul bound {bound} exceeds float64's exact range")
    return np.float32 if bound < 2 ** 24 else np.float64


def exact_matmul_float(a, b, a_bound=None, b_bound=None):
    """Integer ``a @ b`` as a float array of exact integers (float32 or float64, see
    ``exact_dtype``), for callers that scale the result next."""
    if np.ndim(a) < 1 or np.ndim(b) < 2 or np.shape(a)[-1] != np.shape(b)[-2]:
        raise ValueError(f"integer matmul of {np.shape(a)} by {np.shape(b)}: the inner sizes "
                         "differ")
    dt = exact_dtype(a, b, a_bound, b_bound)
    return np.asarray(a, dt) @ np.asarray(b, dt)


def exact_matmul(a, b, a_bound=None, b_bound=None):
    """Integer ``a @ b`` (int64) through float BLAS, exact (``exact_matmul_float``)."""
    return exact_matmul_float(a, b, a_bound, b_bound).astype(np.int64)


#: Elements of the widest row block of ``w8a8_linear`` (its rows run in chunks that stay in
#: cache).
CHUNK_ELEMENTS = 1 << 16


def w8a8_linear(x, w_q, s_w, bias=None, dtype=np.float64):
    """Dense W8A8: per-token INT8 activations re-quantized every step, per-channel INT8 weights.
    ``(x_q @ w_q) * d[:, None] * s_w[None, :] (+ bias)`` in float64, returned as ``dtype``."""
    x = np.asarray(x)
    if x.ndim != 2 or np.ndim(w_q) != 2 or x.shape[1] != np.shape(w_q)[0]:
        raise ValueError(f"w8a8_linear needs activations (N, K) and weights (K, M) of one K, "
                         f"got {x.shape} and {np.shape(w_q)}")
    n, m = x.shape[0], w_q.shape[1]
    y = np.empty((n, m), dtype)
    rows = max(1, CHUNK_ELEMENTS // max(x.shape[1], m))
    for i in range(0, n, rows):
        c = slice(i, min(i + rows, n))
        d = token_lattice(x[c])
        yc = np.multiply(exact_matmul_float(to_lattice_float(x[c], d, 127), w_q, 127, 127),
                         d[:, None], dtype=np.float64)
        yc *= s_w[None, :]
        if bias is not None:
            yc += bias
        y[c] = yc
    return y
