"""Golden model of the precision dispatcher: nibble operations and their cost per strategy.

Ref: dstar-spec.md sections 3 and 5. NumPy only. An encoded element becomes nibble operations
``(nib, shift)`` with ``sum(nib << shift) == q << e``: none for ZERO, ``(q, e)`` for LOW, and
``(q & 15, e), (q >> 4, e + 4)`` for HIGH (low nibble unsigned, high nibble signed).

Costs, in lane-passes over ``G`` lanes (``hw.dispatcher`` runs them; ``sim.cycle_model`` adds
every cycle that is not a pass):

* ``dense``: every element HIGH, no skipping: ``2 * elements``.
* ``ideal``: element level, every lane busy: ``sum(passes per element)``.
* ``lockstep``: each group at its most expensive element, ``G`` lanes at a time:
  ``G * sum(group_cost)``.
* ``compact``: every lane issues only its own elements' ops: the ideal's count.

``STRATEGIES`` holds each ``dstar.config.Packing``'s model (its op streams and op count).
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dstar.config import Packing

from .encoder import HIGH, LOW, PASSES, Encoded, split_nibbles

__all__ = ["element_ops", "rotation_offset", "lane_rotations", "lane_streams", "costs",
           "lockstep_streams", "Strategy", "STRATEGIES"]


def element_ops(q: int, e: int) -> list[tuple[int, int]]:
    """Nibble operations ``(nib, shift)`` of one code ``q`` at group shift ``e``."""
    q, e = int(q), int(e)
    if q == 0:
        return []
    if -8 <= q <= 7:
        return [(q, e)]
    lo, hi = split_nibbles(q)
    return [(int(lo), e), (int(hi), e + 4)]


def rotation_offset(r: int, g: int) -> int:
    """Lane offset of rotation ``r``: the triangular number ``r (r + 1) / 2`` mod ``G`` (under
    rotation ``r`` lane ``l`` takes element ``(l - offset) mod G``). Triangular offsets are
    distinct mod a power of two and their differences include 1, 2, 3, ...: a channel's work can
    move to neighbouring lanes, so load spreads over all lanes, not within residue classes."""
    return r * (r + 1) // 2 % g


def _element_passes(q):
    return (q != 0).astype(np.int64) + ((q > 7) | (q < -8))


def lane_rotations(enc: Encoded, k_tile: int, rotation: int, order) -> list[int]:
    """The compacting strategy's rotation of each slice ``(token, kt)`` of ``order`` (the
    dispatcher's input order; a slice may come several times, once per column block).

    Balancing rule: the dispatcher keeps each lane's *excess* (nibble ops assigned to it beyond
    the least loaded lane, saturated at ``16 * S - 1``, all zero after ``clear``) and gives a
    slice the rotation ``r`` that minimises ``sum_l excess[l] * ops[l]`` (``ops[l]``: the
    slice's ops lane ``l`` would get under ``r``: heavy elements to lanes that are behind the
    least); ties go to ``r = t mod R`` first, then ``t + 1 mod R``, ... Then
    ``excess += ops`` and the minimum is subtracted."""
    g = enc.group
    s_n = k_tile // g
    cap = 16 * s_n - 1
    perm = [[(lane - rotation_offset(r, g)) % g for lane in range(g)] for r in range(rotation)]
    excess = [0] * g
    out = []
    for t, kt in order:
        q = enc.q[t, kt * k_tile:(kt + 1) * k_tile].reshape(s_n, g)
        ops = [int(x) for x in _element_passes(q).sum(0)]
        best = None
        for r in range(rotation):
            cand = [ops[perm[r][lane]] for lane in range(g)]
            key = (sum(e * c for e, c in zip(excess, cand, strict=True)), (r - t) % rotation)
            if best is None or key < best[0]:
                best = (key, r, cand)
        _, r, cand = best
        out.append(r)
        new = [e + c for e, c in zip(excess, cand, strict=True)]
        low = min(new)
        excess = [min(x - low, cap) for x in new]
    return out


def lane_streams(enc: Encoded, k_tile: int, rotation: int = 1, rots: dict | None = None):
    """The compacting strategy's work per slice: ``{(token, kt): [ops of lane 0, ...]}`` with
    each op ``(nib, shift, row)`` (``row``: group within the slice). Under rotation ``r`` lane
    ``l`` gets element ``(l - rotation_offset(r)) mod G`` of each group; ``rots`` gives each
    slice's rotation (default: ``lane_rotations`` in the order ``kt`` outer, tokens inner).
    Slices whose lanes are all idle are left out. K must be a multiple of ``k_tile``."""
    g = enc.group
    n, k = enc.q.shape
    s_n = k_tile // g
    if rots is None:
        order = [(t, kt) for kt in range(k // k_tile) for t in range(n)]
        rots = dict(zip(order, lane_rotations(enc, k_tile, rotation, order), strict=True))
    out = {}
    for t in range(n):
        for kt in range(k // k_tile):
            lanes = []
            for lane in range(g):
                i = (lane - rotation_offset(rots[(t, kt)], g)) % g
                ops = []
                for j in range(s_n):
                    grp = kt * s_n + j
                    for nib, sh in element_ops(enc.q[t, grp * g + i], enc.shift[t, grp]):
                        ops.append((nib, sh, j))
                lanes.append(ops)
            if any(lanes):
                out[(t, kt)] = lanes
    return out


def costs(enc: Encoded) -> dict:
    """Lane-pass counts of one encoded step (see the module docstring), with each strategy's
    under its ``Packing`` value, and element fractions."""
    n_el = enc.cls.size
    counts = np.bincount(enc.cls.ravel(), minlength=3)
    passes = int(PASSES[enc.cls].sum())
    out = {
        "elements": n_el,
        "zero": int(counts[0]), "low": int(counts[LOW]), "high": int(counts[HIGH]),
        "dense": 2 * n_el,
        "ideal": passes,
        "ideal_speedup": (2 * n_el / passes) if passes else float("inf"),
    }
    for p, strategy in STRATEGIES.items():
        ops = strategy.lane_ops(enc)
        out[p.value] = ops
        out[f"{p.value}_speedup"] = (2 * n_el / ops) if ops else float("inf")
    return out


def lockstep_streams(enc: Encoded, k_tile: int, rotation: int = 1, rots: dict | None = None):
    """The lockstep strategy's work per slice: ``{(token, kt): [ops of lane 0, ...]}``, every
    lane issuing ``(nib, shift, row)`` for each pass of each non-ZERO group (an idle lane issues
    ``nib = 0``: a ZERO element, or the second pass of a LOW element in a HIGH group).
    ``rotation`` and ``rots`` are ``lane_streams``'s; lockstep does not rotate (``rotation``
    1, every rotation 0)."""
    if rotation != 1 or (rots and any(rots.values())):
        raise ValueError("lockstep_streams: the lockstep strategy does not rotate lanes")
    g = enc.group
    n, k = enc.q.shape
    s_n = k_tile // g
    out = {}
    for t in range(n):
        for kt in range(k // k_tile):
            lanes = [[] for _ in range(g)]
            for j in range(s_n):
                grp = kt * s_n + j
                cost = int(enc.group_cost[t, grp])
                e = int(enc.shift[t, grp])
                for second in range(cost):
                    for lane in range(g):
                        ops = element_ops(enc.q[t, grp * g + lane], e)
                        nib = ops[second][0] if second < len(ops) else 0
                        lanes[lane].append((nib, e + 4 * second, j))
            if any(lanes):
                out[(t, kt)] = lanes
    return out


@dataclass(frozen=True)
class Strategy:
    """The golden model of one packing strategy.

    ``streams(enc, k_tile, rotation, rots)``: its lane ops per slice, ``{(token, kt): [ops of
    lane 0, ...]}`` (``lane_streams``'s arguments); ``lane_ops(enc)``: how many lane ops it
    issues on ``enc``, useful or idle (one lane-pass each); ``rotates``: whether it gives each
    slice one of R lane rotations (``lane_rotations``; if not, R is 1)."""

    streams: Callable[..., dict]
    lane_ops: Callable[[Encoded], int]
    rotates: bool


#: The golden model of each ``Packing``.
STRATEGIES: dict[Packing, Strategy] = {
    Packing.LOCKSTEP: Strategy(lockstep_streams,
                               lambda enc: int(enc.group_cost.sum()) * enc.group, rotates=False),
    Packing.COMPACT: Strategy(lane_streams, lambda enc: enc.passes(), rotates=True),
}
