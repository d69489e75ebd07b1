"""Stream payload layouts of the linear datapath, each a function of the ``Geometry``.

Field order is the LSB-first bit order of the flat Verilog vectors (``generate`` writes every
layout's field offsets into ``params.json``, so testbenches never restate them).
"""

from amaranth import signed, unsigned
from amaranth.lib import data

from .geometry import Geometry, uwidth

__all__ = ["pass_meta_layout", "slice_cmd_layout", "encoded_group_layout",
           "encoded_slice_layout", "lane_op_layout", "token_layout", "weight_row_layout"]


def pass_meta_layout(geo: Geometry) -> data.StructLayout:
    """What travels with a slice from the sequencer to the reduction, untouched by the encoder:
    the weight buffer of its pass, the accumulator row it adds into, whether that add overwrites
    (the first pass of a key step) and whether it is the last slice of its pass."""
    return data.StructLayout({
        "token": unsigned(geo.token_bits),
        "bank": unsigned(1),
        "y_addr": unsigned(uwidth(geo.y_depth)),
        "overwrite": unsigned(1),
        "last": unsigned(1),
    })


def slice_cmd_layout(geo: Geometry) -> data.StructLayout:
    """Encode the slice ``kt`` of token ``meta.token``; ``key``: the state reads as zero;
    ``commit``: write the new state back (the last pass over this K range)."""
    return data.StructLayout({
        "kt": unsigned(uwidth(geo.n_kt_max)),
        "key": unsigned(1),
        "commit": unsigned(1),
        "meta": pass_meta_layout(geo),
    })


def encoded_group_layout(geo: Geometry) -> data.StructLayout:
    """One encoded group: its shift ``e`` and ``G`` INT8 codes (class derived from the code:
    0 ZERO, [-8, 7] LOW, else HIGH)."""
    return data.StructLayout({
        "shift": unsigned(geo.cfg.shift_bits),
        "q": data.ArrayLayout(signed(8), geo.lanes),
    })


def encoded_slice_layout(geo: Geometry) -> data.StructLayout:
    """A token's slice of one pass: ``slice_groups`` encoded groups, in K order."""
    return data.StructLayout({
        "meta": pass_meta_layout(geo),
        "groups": data.ArrayLayout(encoded_group_layout(geo), geo.slice_groups),
    })


def lane_op_layout(geo: Geometry) -> data.StructLayout:
    """One nibble operation of one lane: ``nib * W[row*G + lane_element(lane, rot)] << shift``;
    ``close``: it is the lane's last operation of its slice (its partial sum is complete)."""
    return data.StructLayout({
        "nib": signed(5),
        "shift": unsigned(geo.op_shift_bits),
        "row": unsigned(geo.row_bits),
        "rot": unsigned(geo.rot_bits),
        "bank": unsigned(1),
        "close": unsigned(1),
    })


def token_layout(geo: Geometry) -> data.StructLayout:
    """A slice as the reduction sees it: which lanes close a partial sum for it (``mask``) and
    where its sum goes."""
    return data.StructLayout({
        "mask": unsigned(geo.lanes),
        "meta": pass_meta_layout(geo),
    })


def weight_row_layout(geo: Geometry) -> data.StructLayout:
    """One row of a weight tile for one array: ``m_tile`` INT8 weights."""
    return data.StructLayout({
        "bank": unsigned(1),
        "row": unsigned(uwidth(geo.cfg.k_tile)),
        "w": data.ArrayLayout(signed(8), geo.cfg.m_tile),
    })
