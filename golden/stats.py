"""Operation statistics of differential linear layers, per layer type and per step.

Counts (all integers) per encoded step of one layer:

* ``elements``, ``zero``, ``low``, ``high``: encoded elements and their classes;
* ``passes``: element-level nibble passes, ``low + 2 * high`` (the ideal any packing can reach);
* ``lockstep_passes``: each group at the cost of its most expensive element, ``G * max cost``;
* ``dense_passes``: dense INT8 (W8A8) on the same lanes, two nibble passes per element;
* ``groups``, ``zero_groups``, ``clipped_groups``, ``saturated_groups``.

Every pass feeds all M output columns of the layer, so ratios of passes are ratios of MACs.
"""

import numpy as np

from .encoder import HIGH, LOW, ZERO, Encoded

__all__ = ["FIELDS", "count_encoded", "OpStats"]

FIELDS = ("elements", "zero", "low", "high", "passes", "lockstep_passes", "dense_passes",
          "groups", "zero_groups", "clipped_groups", "saturated_groups")


def count_encoded(enc: Encoded) -> np.ndarray:
    """The ``FIELDS`` counts of one encoded tensor, int64 ``(len(FIELDS),)``."""
    cls = enc.cls
    n = cls.size
    nz = np.count_nonzero(cls == ZERO)
    nl = np.count_nonzero(cls == LOW)
    nh = np.count_nonzero(cls == HIGH)
    cost = enc.group_cost
    return np.array([n, nz, nl, nh, nl + 2 * nh, int(cost.sum()) * enc.group, 2 * n,
                     cost.size, np.count_nonzero(cost == 0), np.count_nonzero(enc.clipped),
                     np.count_nonzero(enc.saturated)], dtype=np.int64)


class OpStats:
    """Accumulates ``count_encoded`` per (step, layer type)."""

    def __init__(self, layer_types):
        self.types = list(layer_types)
        self.counts: dict[int, np.ndarray] = {}

    def add(self, step: int, layer_type: str, enc: Encoded) -> None:
        row = self.counts.setdefault(step, np.zeros((len(self.types), len(FIELDS)), np.int64))
        row[self.types.index(layer_type)] += count_encoded(enc)

    def total(self, step=None, layer_type=None) -> dict[str, int]:
        steps = sorted(self.counts) if step is None else [step]
        arr = sum((self.counts[s] for s in steps), np.zeros((len(self.types), len(FIELDS)),
                                                            np.int64))
        if layer_type is not None:
            arr = arr[self.types.index(layer_type)][None]
        return dict(zip(FIELDS, (int(v) for v in arr.sum(axis=0)), strict=True))

    @staticmethod
    def summary(c: dict[str, int]) -> dict[str, float]:
        """Fractions and ratios derived from a ``total()`` dict."""
        n = max(c["elements"], 1)
        nonzero = c["low"] + c["high"]
        return {
            "zero_fraction": c["zero"] / n,
            "low_fraction": c["low"] / n,
            "high_fraction": c["high"] / n,
            "low_bit_fraction": c["low"] / nonzero if nonzero else 1.0,
            "mean_passes": c["passes"] / n,
            "lockstep_mean_passes": c["lockstep_passes"] / n,
            "ops_ratio_vs_w8a8": c["dense_passes"] / max(c["passes"], 1),
            "lockstep_ops_ratio_vs_w8a8": c["dense_passes"] / max(c["lockstep_passes"], 1),
            "clipped_group_fraction": c["clipped_groups"] / max(c["groups"], 1),
            "saturated_group_fraction": c["saturated_groups"] / max(c["groups"], 1),
            "zero_group_fraction": c["zero_groups"] / max(c["groups"], 1),
        }
