"""FMDQ: fine-grained mixed-precision differential quantization (spec section 7.2).

The integer contract of ``encoding = "fmdq"`` that the quantization unit and the SIMD-4 PE array
reproduce bit for bit. A difference ``D`` (integer lattice units, rows are tokens, shape
``(N, K)``) is cut along the tokens into tiles of ``T`` consecutive rows (the last tile may hold
fewer); a **sub-channel** is one channel over one tile's tokens, ``D[tile, k]``.

Per sub-channel:

* a shift ``p`` by the precision rule (``RULES``, ``dstar.config.FmdqRule``):

  - ``lossless`` (the default), v1's rule (``golden.encoder``) applied to the sub-channel's
    values: the smallest ``p <= e_tol`` at which every ``round_shift(D, p)`` lies in INT8;
    failing that the smallest ``p <= e_max`` that fits (the sub-channel is *clipped*); failing
    that ``e_max`` with the codes saturated to INT8 (clipped and *saturated*);
  - ``magnitude``, the paper's: ``a = max |D|`` over the sub-channel's values outside the dead
    zone (``|D| > tau``) gives a width ``b0`` = 2, 4, 6 or 8 bits, the first whose threshold
    ``thr0 * 4**(b0/2 - 1)`` is ``>= a`` (8 beyond ``16 * thr0``); ``p`` is the smallest shift
    ``<= e_max`` at which those values' codes fit signed ``b0`` bits, else the smallest that fits
    the next wider width (8 bits: v1's saturation at ``e_max``). The sub-channel is *clipped*
    when ``p > e_tol`` (its rounding error may exceed ``tau``: the rule is lossy by design);
* codes ``q = round_shift(D, p)`` (round half up), ``q = 0`` where ``|D| <= tau`` (dead zone);
* a width ``b``: the smallest of ``WIDTHS`` = 0, 2, 4, 6, 8 whose signed range
  ``[-2**(b-1), 2**(b-1) - 1]`` holds every code of the sub-channel (``b = 0``: all codes are 0,
  the sub-channel is skipped);
* ``decode = q << p``.

Slices: a ``b``-bit code is ``b / 2`` slices of 2 bits, ``q == sum_j slice_j * 4**j``; slice
``j < b/2 - 1`` is unsigned ``(q >> 2j) & 3`` in [0, 3], the top slice ``j = b/2 - 1`` is signed
``q >> 2j`` in [-2, 1]. Slice ``j`` of channel ``k`` weighs ``2**(p_k + 2j)``, its *total shift*.

Schedule of a tile: its channels are cut into sort *windows* of ``window`` consecutive channels
(the quantization unit's sort network sorts one window at a time; ``window >= K``: one sort of
the whole tile). Window by window, the (channel, slice) pairs are ordered by **descending** total
shift, ties by ascending channel; each run of equal total shift is cut into groups of ``LANES`` =
4 in that order (the last group of a run padded with empty lanes). One group is one PE cycle for
the whole tile::

    Y[t, m] += (sum_i slice_i[t] * W_q[k_i, m]) << s       for every token t and column m

so a tile costs ``groups`` cycles per column block, against ``K`` for dense INT8 (four slices of
every channel on four lanes). Windows change only how the groups are formed (more windows, more
partly filled groups), never the result. The descending order lets the PE array accumulate a
window in Horner form, ``acc = (acc << (s_prev - s)) + P`` with small steps ``s_prev - s``, and
apply the window's last shift once when it writes the sum out.
"""

from dataclasses import dataclass, field

import numpy as np

from dstar.config import FmdqRule

from .encoder import E_LIMIT, _check_range, _fit_bounds

__all__ = ["LANES", "WIDTHS", "SLICE_BITS", "MAX_SLICES", "FmdqEncoded", "Schedule", "RULES",
           "fmdq_encode", "width_of", "slice_codes", "schedule_tile", "apply_schedule"]

#: Lanes of one SIMD-4 PE: slices multiplied and summed per cycle.
LANES = 4
#: Code widths a sub-channel may take (bits); 0 skips it.
WIDTHS = (0, 2, 4, 6, 8)
SLICE_BITS = 2
#: Slices of the widest code.
MAX_SLICES = WIDTHS[-1] // SLICE_BITS


def width_of(qmax, qmin) -> np.ndarray:
    """The smallest ``WIDTHS`` member whose signed range holds ``[qmin, qmax]`` (int64,
    broadcasting; codes must lie in INT8)."""
    qmax, qmin = np.asarray(qmax, np.int64), np.asarray(qmin, np.int64)
    b = np.zeros(np.broadcast(qmax, qmin).shape, np.int64)
    for w in WIDTHS[:0:-1]:                   # 8, 6, 4, 2: the last that holds wins
        holds = (qmax <= (1 << (w - 1)) - 1) & (qmin >= -(1 << (w - 1)))
        b = np.where(holds, w, b)
    return np.where((qmax == 0) & (qmin == 0), 0, b)


def slice_codes(q, width) -> np.ndarray:
    """The 2-bit slices of codes ``q`` of widths ``width`` (broadcast against ``q``): int64
    ``q.shape + (MAX_SLICES,)``, slice ``j`` at ``[..., j]``, 0 beyond ``width / 2`` slices."""
    q = np.asarray(q, np.int64)
    n = np.broadcast_to(np.asarray(width, np.int64) // SLICE_BITS, q.shape)
    out = np.zeros(q.shape + (MAX_SLICES,), np.int64)
    for j in range(MAX_SLICES):
        unsigned = (q >> (SLICE_BITS * j)) & 3
        signed = q >> (SLICE_BITS * j)
        out[..., j] = np.where(j < n - 1, unsigned, np.where(j == n - 1, signed, 0))
    return out


@dataclass
class Schedule:
    """The groups of one tile, in issue order: ``channel``, ``slice`` (index ``j``) and ``valid``
    (False: a padding lane) int64/bool ``(groups, LANES)``; ``shift``: the total shift of each
    group ``(groups,)``; ``signed``: whether each lane's slice is its code's top (signed) slice
    ``(groups, LANES)``."""
    channel: np.ndarray
    slice: np.ndarray
    valid: np.ndarray
    shift: np.ndarray
    signed: np.ndarray

    @property
    def groups(self) -> int:
        return len(self.shift)


@dataclass
class FmdqEncoded:
    """An FMDQ-encoded ``(N, K)`` difference in tiles of ``token_tile`` rows.

    ``q``: int64 ``(N, K)`` codes; ``shift``, ``width``: int64 ``(n_tiles, K)``; ``clipped``,
    ``saturated``: bool ``(n_tiles, K)``."""
    q: np.ndarray
    shift: np.ndarray
    width: np.ndarray
    clipped: np.ndarray
    saturated: np.ndarray
    token_tile: int
    _groups: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_tiles(self) -> int:
        return self.shift.shape[0]

    @classmethod
    def concat(cls, parts: list["FmdqEncoded"]) -> "FmdqEncoded":
        """Encoded blocks of rows joined along the rows; every block but the last must hold
        whole tiles (a multiple of ``token_tile`` rows)."""
        if len(parts) == 1:
            return parts[0]
        t = parts[0].token_tile
        if any(p.token_tile != t or p.q.shape[0] % t for p in parts[:-1]):
            raise ValueError("FmdqEncoded.concat needs blocks of whole tiles of one token_tile")
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("q", "shift", "width", "clipped", "saturated")), token_tile=t)

    def tile_rows(self, tile: int) -> slice:
        return slice(tile * self.token_tile, min((tile + 1) * self.token_tile, self.q.shape[0]))

    def _per_row(self, a) -> np.ndarray:
        return np.repeat(a, self.token_tile, axis=0)[:self.q.shape[0]]

    def decode(self) -> np.ndarray:
        """``q << p`` per element (int64 ``(N, K)``)."""
        return np.left_shift(self.q, self._per_row(self.shift))

    def slices(self) -> np.ndarray:
        """``slice_codes`` of every element: int64 ``(N, K, MAX_SLICES)``."""
        return slice_codes(self.q, self._per_row(self.width))

    def groups_per_tile(self, window: int) -> np.ndarray:
        """PE cycles of each tile per column block with sort windows of ``window`` channels
        (int64 ``(n_tiles,)``)."""
        if window not in self._groups:
            self._groups[window] = self._count_groups(window)
        return self._groups[window]

    def _count_groups(self, window: int) -> np.ndarray:
        k = self.shift.shape[1]
        total = np.zeros(self.n_tiles, np.int64)
        for c in range(0, k, window):
            counts = _shift_counts(self.shift[:, c:c + window], self.width[:, c:c + window])
            total += ((counts + LANES - 1) // LANES).sum(axis=1)
        return total

    def schedule(self, tile: int, window: int) -> Schedule:
        return schedule_tile(self.shift[tile], self.width[tile], window)

    def stats(self, window: int) -> dict[str, int]:
        """Integer counts: ``sub_channels``, ``skipped`` (width 0), ``width_bits`` (sum of the
        widths), ``slices`` (non-empty lanes issued), ``groups``, ``padding`` (empty lanes of
        partly filled groups, ``LANES * groups - slices``), ``dense_groups`` (dense INT8: ``K``
        per tile), ``clipped``, ``saturated``, and ``width_<b>`` sub-channels per width."""
        groups = int(self.groups_per_tile(window).sum())
        slices = int(self.width.sum()) // SLICE_BITS
        out = {"sub_channels": self.width.size, "skipped": int(np.count_nonzero(self.width == 0)),
               "width_bits": int(self.width.sum()), "slices": slices, "groups": groups,
               "padding": LANES * groups - slices, "dense_groups": self.width.size,
               "clipped": int(np.count_nonzero(self.clipped)),
               "saturated": int(np.count_nonzero(self.saturated))}
        out.update({f"width_{w}": int(np.count_nonzero(self.width == w)) for w in WIDTHS})
        return out


def _shift_counts(shift, width) -> np.ndarray:
    """Slices per total shift of each tile: int64 ``(n_tiles, e_max + 2 * MAX_SLICES)``."""
    n_tiles = shift.shape[0]
    top = int(shift.max(initial=0)) + SLICE_BITS * MAX_SLICES
    counts = np.zeros((n_tiles, top), np.int64)
    rows = np.broadcast_to(np.arange(n_tiles)[:, None], shift.shape)
    for j in range(MAX_SLICES):
        live = width > SLICE_BITS * j
        np.add.at(counts, (rows[live], shift[live] + SLICE_BITS * j), 1)
    return counts


def fmdq_encode(d, token_tile: int, e_max: int, tau: int, rule=FmdqRule.LOSSLESS,
                thr0: int = 4) -> FmdqEncoded:
    """Encode a difference ``d`` (integers ``(N, K)``, ``|d| <= D_LIMIT``) per sub-channel of
    ``token_tile`` tokens by the precision ``rule`` (``thr0``: the ``magnitude`` rule's 2-bit
    threshold, lattice units; module docstring)."""
    d = np.asarray(d)
    if not np.issubdtype(d.dtype, np.integer) or d.dtype == np.bool_:
        raise TypeError(f"fmdq_encode needs an integer difference, got dtype {d.dtype}")
    if d.ndim != 2:
        raise ValueError(f"fmdq_encode needs a difference of shape (N, K), got {d.shape}")
    if token_tile < 1 or not 0 <= e_max <= E_LIMIT or tau < 0 or thr0 < 1:
        raise ValueError(f"fmdq_encode needs token_tile >= 1, 0 <= e_max <= {E_LIMIT}, "
                         f"tau >= 0 and thr0 >= 1, got token_tile={token_tile}, e_max={e_max}, "
                         f"tau={tau}, thr0={thr0}")
    choose = RULES[FmdqRule(rule)]
    _check_range(d)
    d = d.astype(np.int64)
    n, k = d.shape
    n_tiles = -(-n // token_tile)
    # Padding rows of zeros fit every shift and every width: they change no decision.
    padded = np.zeros((n_tiles * token_tile, k), np.int64)
    padded[:n] = d
    tiles = padded.reshape(n_tiles, token_tile, k)
    e_tol = 0
    while e_tol < e_max and (1 << e_tol) <= tau:
        e_tol += 1
    shift, clipped, saturated = choose(tiles, e_max, e_tol, tau, thr0)
    half = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
    q = (tiles + half[:, None, :]) >> shift[:, None, :]
    np.clip(q, -128, 127, out=q)              # only saturated sub-channels reach the clip
    if tau > 0:
        q[np.abs(tiles) <= tau] = 0
    width = width_of(q.max(axis=1), q.min(axis=1))
    return FmdqEncoded(q=q.reshape(-1, k)[:n], shift=shift, width=width, clipped=clipped,
                       saturated=saturated, token_tile=token_tile)


def _first_fit(dmax, dmin, hi_e, lo_e) -> np.ndarray:
    """Per sub-channel, the number of shifts ``e`` (of ``len(hi_e)``) at which a code leaves the
    range bounded by ``hi_e[e]`` / ``lo_e[e]``: the first that fits, as the fit is monotone."""
    first_fit = np.zeros(dmax.shape, np.int64)
    for e in range(len(hi_e)):
        first_fit += (dmax > hi_e[e]) | (-dmin > lo_e[e])
    return first_fit


def _lossless(tiles, e_max: int, e_tol: int, tau: int, thr0: int):
    """v1's shift rule per sub-channel: ``(shift, clipped, saturated)`` ``(n_tiles, K)``."""
    first_fit = _first_fit(tiles.max(axis=1), tiles.min(axis=1), *_fit_bounds(e_max))
    saturated = first_fit > e_max
    return np.minimum(first_fit, e_max), first_fit > e_tol, saturated


def _width_bounds(e_max: int, w: int):
    """``_fit_bounds`` for signed ``w``-bit codes: ``round_shift(d, e) <= 2**(w-1) - 1`` iff
    ``d <= 2**(e+w-1) - 2**(e-1) - 1`` and ``>= -2**(w-1)`` iff ``-d <= 2**(e+w-1) + 2**(e-1)``
    (``2**(w-1) - 1`` and ``2**(w-1)`` at e = 0); capped at int64's range."""
    cap = np.iinfo(np.int64).max
    hi = [(1 << (w - 1)) - 1] + [min((1 << (e + w - 1)) - (1 << (e - 1)) - 1, cap)
                                 for e in range(1, e_max + 1)]
    lo = [1 << (w - 1)] + [min((1 << (e + w - 1)) + (1 << (e - 1)), cap)
                           for e in range(1, e_max + 1)]
    return np.array(hi, np.int64), np.array(lo, np.int64)


def _magnitude(tiles, e_max: int, e_tol: int, tau: int, thr0: int):
    """The paper's rule (module docstring): ``(shift, clipped, saturated)`` ``(n_tiles, K)``."""
    live = np.where(np.abs(tiles) > tau, tiles, 0) if tau else tiles
    dmax, dmin = live.max(axis=1), live.min(axis=1)
    a = np.maximum(dmax, -dmin)
    want = 2 + 2 * sum((a > thr0 << (2 * n)).astype(np.int64) for n in range(3))
    fit8 = _first_fit(dmax, dmin, *_fit_bounds(e_max))
    saturated = fit8 > e_max
    shift = np.minimum(fit8, e_max)
    for w in (6, 4, 2):                      # the narrowest width >= want that fits wins
        fit = _first_fit(dmax, dmin, *_width_bounds(e_max, w))
        shift = np.where((want <= w) & (fit <= e_max), fit, shift)
    return shift, (shift > e_tol) | saturated, saturated


#: The shift rule of each ``FmdqRule``: ``(tiles (n_tiles, T, K), e_max, e_tol, tau, thr0) ->
#: (shift, clipped, saturated)``, each ``(n_tiles, K)``.
RULES = {FmdqRule.LOSSLESS: _lossless, FmdqRule.MAGNITUDE: _magnitude}


def schedule_tile(shift, width, window: int) -> Schedule:
    """The issue order of one tile's slices from its sub-channels' ``shift`` and ``width``
    (int ``(K,)``): window by window of ``window`` channels, ordered by descending total shift,
    ties by ascending channel, runs of equal total shift cut into groups of ``LANES``."""
    shift, width = np.asarray(shift, np.int64), np.asarray(width, np.int64)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    parts = [_schedule_window(shift[c:c + window], width[c:c + window], c)
             for c in range(0, len(shift), window)]
    if not parts:
        parts = [_schedule_window(shift, width, 0)]
    sched = Schedule(*(np.concatenate([getattr(p, f) for p in parts])
                       for f in ("channel", "slice", "valid", "shift", "signed")))
    return sched


def _schedule_window(shift, width, base: int) -> Schedule:
    """``schedule_tile`` of one window whose first channel is ``base``."""
    ch, sl = [], []
    for j in range(MAX_SLICES):
        live = np.flatnonzero(width > SLICE_BITS * j)
        ch.append(live)
        sl.append(np.full(live.size, j, np.int64))
    ch, sl = np.concatenate(ch), np.concatenate(sl)
    total = shift[ch] + SLICE_BITS * sl
    order = np.lexsort((ch, -total))
    ch, sl, total = ch[order], sl[order], total[order]
    lanes_c, lanes_s, lanes_v, shifts = [], [], [], []
    for s in np.unique(total)[::-1]:
        run = np.flatnonzero(total == s)
        for g in range(0, run.size, LANES):
            idx = run[g:g + LANES]
            pad = LANES - idx.size
            lanes_c.append(np.concatenate([ch[idx], np.zeros(pad, np.int64)]))
            lanes_s.append(np.concatenate([sl[idx], np.zeros(pad, np.int64)]))
            lanes_v.append(np.arange(LANES) < idx.size)
            shifts.append(s)
    if not shifts:
        empty = np.zeros((0, LANES), np.int64)
        return Schedule(empty, empty, empty.astype(bool), np.zeros(0, np.int64),
                        empty.astype(bool))
    channel, slc, valid = np.array(lanes_c), np.array(lanes_s), np.array(lanes_v)
    signed = valid & (slc == width[channel] // SLICE_BITS - 1)
    return Schedule(channel + base, slc, valid, np.array(shifts, np.int64), signed)


def apply_schedule(enc: FmdqEncoded, w_q, window: int) -> np.ndarray:
    """``W_q^T . decode(enc)`` computed as the PE array does, group by group per tile (the
    golden twin of the SIMD-4 array; int64 ``(N, M)``, equal to ``enc.decode() @ w_q``)."""
    w_q = np.asarray(w_q, np.int64)
    sl = enc.slices()
    y = np.zeros((enc.q.shape[0], w_q.shape[1]), np.int64)
    for t in range(enc.n_tiles):
        rows = enc.tile_rows(t)
        sched = enc.schedule(t, window)
        for g in range(sched.groups):
            c, j, v = sched.channel[g], sched.slice[g], sched.valid[g]
            acts = sl[rows][:, c, j] * v                       # (tokens, LANES)
            y[rows] += (acts @ w_q[c]) << int(sched.shift[g])
    return y
