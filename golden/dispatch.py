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
"""

import numpy as np

from .encoder import HIGH, LOW, PASSES, Encoded, split_nibbles

__all__ = ["element_ops", "lane_streams", "costs"]


def element_ops(q: int, e: int) -> list[tuple[int, int]]:
    """Nibble operations ``(nib, shift)`` of one code ``q`` at group shift ``e``."""
    q, e = int(q), int(e)
    if q == 0:
        return []
    if -8 <= q <= 7:
        return [(q, e)]
    lo, hi = split_nibbles(q)
    return [(int(lo), e), (int(hi), e + 4)]


def lane_streams(enc: Encoded, k_tile: int, rotation: int = 1):
    """The compacting strategy's work per slice: ``{(token, kt): [ops of lane 0, ...]}`` with
    each op ``(nib, shift, row)`` (``row``: group within the slice). Token ``t`` gives lane ``l``
    element ``(l - (t mod R) * G/R) mod G`` of each group. Slices whose lanes are all idle are
    left out. K must be a multiple of ``k_tile`` (pad with zeros)."""
    g = enc.group
    n, k = enc.q.shape
    s_n, stride = k_tile // g, g // rotation
    out = {}
    for t in range(n):
        for kt in range(k // k_tile):
            lanes = []
            for lane in range(g):
                i = (lane - (t % rotation) * stride) % g
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
    """Lane-pass counts of one encoded step (see the module docstring) and element fractions."""
    n_el = enc.cls.size
    counts = np.bincount(enc.cls.ravel(), minlength=3)
    passes = int(PASSES[enc.cls].sum())
    lockstep = int(enc.group_cost.sum()) * enc.group
    return {
        "elements": n_el,
        "zero": int(counts[0]), "low": int(counts[LOW]), "high": int(counts[HIGH]),
        "dense": 2 * n_el,
        "ideal": passes,
        "lockstep": lockstep,
        "ideal_speedup": (2 * n_el / passes) if passes else float("inf"),
        "lockstep_speedup": (2 * n_el / lockstep) if lockstep else float("inf"),
    }


def lockstep_streams(enc: Encoded, k_tile: int):
    """The lockstep strategy's work per slice: ``{(token, kt): [ops of lane 0, ...]}``, every
    lane issuing ``(nib, shift, row)`` for each pass of each non-ZERO group (an idle lane issues
    ``nib = 0``: a ZERO element, or the second pass of a LOW element in a HIGH group)."""
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
