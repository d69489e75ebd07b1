"""Stream payload layouts of the FMDQ datapath (``golden.fmdq`` is their integer contract).

Field order is the LSB-first bit order of the flat Verilog vectors. Every layout is a function of
plain sizes, so the quantization unit, the PE array and their tests build the same payloads.
"""

from amaranth import signed, unsigned
from amaranth.lib import data

from dstar.golden.fmdq import LANES, MAX_SLICES, SLICE_BITS

__all__ = ["total_shift_bits", "lane_meta_layout", "slice_group_layout", "diff_row_layout"]


def total_shift_bits(e_max: int) -> int:
    """Bits of a group's total shift ``p + 2j`` in ``[0, e_max + 2 * (MAX_SLICES - 1)]``."""
    return max(1, (e_max + SLICE_BITS * (MAX_SLICES - 1)).bit_length())


def lane_meta_layout(channel_bits: int) -> data.StructLayout:
    """One lane of a group: the weight row it multiplies (``channel``, an index into the layer's
    K), whether its slice is its code's top, signed slice (``signed``: the 2 bits read as
    [-2, 1], else unsigned [0, 3]) and whether the lane carries a slice at all (``valid``: 0 for
    the padding lanes of a partly filled group, whose slices are 0)."""
    return data.StructLayout({
        "channel": unsigned(channel_bits),
        "signed": unsigned(1),
        "valid": unsigned(1),
    })


def slice_group_layout(tokens: int, channel_bits: int, e_max: int) -> data.StructLayout:
    """One group of ``LANES`` slices for a whole token tile: one PE-array cycle,
    ``Y[t, m] += (sum_i act[t][i] * W[lane[i].channel, m]) << shift``. ``act[t][i]`` are the raw
    2 bits of lane ``i``'s slice for token ``t`` (read per ``lane[i].signed``); ``last``: the
    last group of a unit (one token tile over one sort window, ``golden.fmdq_pe.units_of``)."""
    return data.StructLayout({
        "shift": unsigned(total_shift_bits(e_max)),
        "lane": data.ArrayLayout(lane_meta_layout(channel_bits), LANES),
        "act": data.ArrayLayout(data.ArrayLayout(unsigned(SLICE_BITS), LANES), tokens),
        "last": unsigned(1),
    })


def diff_row_layout(channels: int, diff_bits: int) -> data.ArrayLayout:
    """One token's differences over ``channels`` consecutive channels (signed ``diff_bits``),
    the quantization unit's input beat."""
    return data.ArrayLayout(signed(diff_bits), channels)
