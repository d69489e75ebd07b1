"""Operation statistics of FMDQ-coded differential linear layers (spec 7.2), per step and layer
type, beside v1's element mix (``golden.stats``).

Counts (all integers) per encoded step of one layer, from ``FmdqEncoded.stats(window)``:

* ``sub_channels``: (token tile, channel) pairs; ``skipped``: those of width 0;
* ``width_bits``: the sum of their widths (average activation width = ``width_bits /
  sub_channels``, skipped sub-channels counting 0 bits); ``width_<b>``: sub-channels per width;
* ``slices``: 2-bit slices issued (``width_bits / 2``); ``groups``: SIMD-4 PE cycles per column
  block (sorted, window by window of ``sort_window`` channels); ``padding``: the empty lanes of
  partly filled groups (``4 * groups - slices``);
* ``dense_groups``: dense INT8's cycles on the same array (``K`` per tile: four slices of every
  channel on four lanes), so that ``dense_groups / groups`` is FMDQ's speed-up over INT8;
* ``clipped``, ``saturated``: sub-channels whose error may exceed ``tau`` / whose codes saturated.

Every group feeds all the tile's tokens and all M output columns, so ratios of groups are ratios
of PE-array cycles.
"""

import numpy as np

from .fmdq import LANES, WIDTHS, FmdqEncoded
from .stats import OpStats

__all__ = ["FMDQ_FIELDS", "count_fmdq", "FmdqStats"]

FMDQ_FIELDS = ("sub_channels", "skipped", "width_bits", "slices", "groups", "padding",
               "dense_groups", "clipped", "saturated", *(f"width_{w}" for w in WIDTHS))


def count_fmdq(enc: FmdqEncoded, window: int) -> np.ndarray:
    """The ``FMDQ_FIELDS`` counts of one encoded tensor with sort windows of ``window``
    channels, int64 ``(len(FMDQ_FIELDS),)``."""
    c = enc.stats(window)
    return np.array([c[f] for f in FMDQ_FIELDS], dtype=np.int64)


class FmdqStats(OpStats):
    """Accumulates ``count_fmdq`` per (step, layer type)."""

    FIELDS = FMDQ_FIELDS

    def add(self, step: int, layer_type: str, enc: FmdqEncoded, window: int) -> None:
        self.add_counts(step, layer_type, count_fmdq(enc, window))

    @staticmethod
    def summary(c: dict[str, int]) -> dict[str, float]:
        """Averages and ratios of a ``total()`` dict: ``mean_width_bits`` (skipped sub-channels
        count 0 bits), ``mean_width_bits_live`` (over the others), ``skipped_fraction``,
        ``groups_per_tile_channel`` (groups over ``dense_groups``), ``speedup_vs_int8``
        (``dense_groups / groups``, ``None`` when no group was issued), ``padding_fraction``
        (empty lanes over all lanes issued), ``clipped_fraction``, ``saturated_fraction`` and
        ``width_<b>_fraction``."""
        n = max(c["sub_channels"], 1)
        live = c["sub_channels"] - c["skipped"]
        lanes = LANES * c["groups"]
        return {
            "mean_width_bits": c["width_bits"] / n,
            "mean_width_bits_live": c["width_bits"] / live if live else 0.0,
            "skipped_fraction": c["skipped"] / n,
            "groups_per_tile_channel": c["groups"] / max(c["dense_groups"], 1),
            "speedup_vs_int8": c["dense_groups"] / c["groups"] if c["groups"] else None,
            "padding_fraction": c["padding"] / lanes if lanes else 0.0,
            "clipped_fraction": c["clipped"] / n,
            "saturated_fraction": c["saturated"] / n,
            **{f"width_{w}_fraction": c[f"width_{w}"] / n for w in WIDTHS},
        }
