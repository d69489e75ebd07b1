"""Operation statistics of differential linear layers, per layer type and per step.

Counts (all integers) per encoded step of one layer:

* ``elements``, ``zero``, ``low``, ``high``: encoded elements and their classes;
* ``passes``: element-level nibble passes, ``low + 2 * high`` (the ideal any packing can reach);
* ``<packing>_passes``: the lane ops each ``Packing`` issues (``dispatch.STRATEGIES``), e.g.
  ``lockstep_passes``: each group at the cost of its most expensive element, ``G * max cost``;
* ``dense_passes``: dense INT8 (W8A8) on the same lanes, two nibble passes per element;
* ``groups``, ``zero_groups``, ``clipped_groups``, ``saturated_groups``.

Every pass feeds all M output columns of the layer, so ratios of passes are ratios of MACs.
"""

import numpy as np

from .dispatch import STRATEGIES
from .encoder import Encoded

__all__ = ["FIELDS", "count_encoded", "OpStats"]

FIELDS = ("elements", "zero", "low", "high", "passes",
          *(f"{p.value}_passes" for p in STRATEGIES), "dense_passes",
          "groups", "zero_groups", "clipped_groups", "saturated_groups")


def count_encoded(enc: Encoded) -> np.ndarray:
    """The ``FIELDS`` counts of one encoded tensor, int64 ``(len(FIELDS),)``."""
    n = enc.cls.size
    nz, nl, nh = enc.class_counts()
    cost = enc.group_cost
    c = {"elements": n, "zero": nz, "low": nl, "high": nh,
         "passes": nl + 2 * nh, "dense_passes": 2 * n,
         **{f"{p.value}_passes": s.lane_ops(enc) for p, s in STRATEGIES.items()},
         "groups": cost.size, "zero_groups": np.count_nonzero(cost == 0),
         "clipped_groups": np.count_nonzero(enc.clipped),
         "saturated_groups": np.count_nonzero(enc.saturated)}
    return np.array([c[f] for f in FIELDS], dtype=np.int64)


class OpStats:
    """Accumulates ``count_encoded`` per (step, layer type) (``FIELDS``: the counts' names; a
    subclass counts another encoding's, ``golden.fmdq_stats.FmdqStats``)."""

    FIELDS = FIELDS

    def __init__(self, layer_types):
        self.types = list(layer_types)
        self.counts: dict[int, np.ndarray] = {}

    def add(self, step: int, layer_type: str, enc: Encoded) -> None:
        self.add_counts(step, layer_type, count_encoded(enc))

    def add_counts(self, step: int, layer_type: str, counts) -> None:
        """Add ``count_encoded`` counts already taken."""
        row = self.counts.setdefault(step, np.zeros((len(self.types), len(self.FIELDS)),
                                                    np.int64))
        row[self.types.index(layer_type)] += counts

    def total(self, step=None, layer_type=None) -> dict[str, int]:
        steps = sorted(self.counts) if step is None else [step]
        arr = sum((self.counts[s] for s in steps), np.zeros((len(self.types), len(self.FIELDS)),
                                                            np.int64))
        if layer_type is not None:
            arr = arr[self.types.index(layer_type)][None]
        return dict(zip(self.FIELDS, (int(v) for v in arr.sum(axis=0)), strict=True))

    @staticmethod
    def summary(c: dict[str, int]) -> dict[str, float]:
        """Fractions and ratios derived from a ``total()`` dict. A pass ratio is ``None`` when
        DSTAR issued no pass at all (every element ZERO): there is no work to compare with."""
        n = max(c["elements"], 1)
        nonzero = c["low"] + c["high"]
        return {
            "zero_fraction": c["zero"] / n,
            "low_fraction": c["low"] / n,
            "high_fraction": c["high"] / n,
            "low_bit_fraction": c["low"] / nonzero if nonzero else 1.0,
            "mean_passes": c["passes"] / n,
            **{f"{p.value}_mean_passes": c[f"{p.value}_passes"] / n for p in STRATEGIES},
            "ops_ratio_vs_w8a8": _ratio(c["dense_passes"], c["passes"]),
            **{f"{p.value}_ops_ratio_vs_w8a8": _ratio(c["dense_passes"], c[f"{p.value}_passes"])
               for p in STRATEGIES},
            "clipped_group_fraction": c["clipped_groups"] / max(c["groups"], 1),
            "saturated_group_fraction": c["saturated_groups"] / max(c["groups"], 1),
            "zero_group_fraction": c["zero_groups"] / max(c["groups"], 1),
        }


def _ratio(dense: int, passes: int) -> float | None:
    return dense / passes if passes else None
