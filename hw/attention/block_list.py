"""Block list of the attention engine: the key blocks a phase of a query block runs over.

Ref: ``golden/ATTENTION.md`` (blocks and mask).
"""

import enum

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..geometry import AttentionGeometry
from .layouts import block_list_layouts

__all__ = ["BlockList", "ListMode"]


class ListMode(enum.IntEnum):
    """Which key blocks a list holds: every block, the mask's, or the others."""
    ALL = 0
    SELECTED = 1
    UNSELECTED = 2


class BlockList(wiring.Component):
    """Scans a query block's mask word, one key block per cycle, into the list of the blocks
    ``mode`` picks (``ListMode``): their indices ``sel_j[0 .. n_sel - 1]`` (ascending), their
    lengths ``sel_len`` (``block_k``, the last block of ``n_tokens`` keys ragged) and
    ``n_valid``, the keys they hold.

    ``start`` (a pulse, while ``mode``, ``mask`` and ``n_tokens`` are valid: they are sampled
    during the scan, so they must hold still until ``done``) begins a scan; the ``nkb =
    ceil(n_tokens / block_k)`` cycles after the ``start`` cycle each look at one block, and
    ``done`` is high from the next cycle on, the list then complete and held until the next
    ``start``. No back-pressure. Reset empties the list.

    Parameters
    ----------
    ag : AttentionGeometry

    Members
    -------
    start : In(1), mode : In(ListMode), mask : In(nkb), n_tokens : In(range(n_max + 1))
    sel_j, sel_len : Out(block_list_layouts(ag)), n_sel : Out(range(nkb + 1))
    n_valid : Out(range(n_max + 1)), done : Out(1)
    """

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        sel_j_l, sel_len_l = block_list_layouts(ag)
        super().__init__({
            "start": In(1),
            "mode": In(ListMode),
            "mask": In(ag.nkb),
            "n_tokens": In(range(ag.n_max + 1)),
            "sel_j": Out(sel_j_l),
            "sel_len": Out(sel_len_l),
            "n_sel": Out(range(ag.nkb + 1)),
            "n_valid": Out(range(ag.n_max + 1)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        ag = self._ag
        bk, nkb = ag.cfg.block_k, ag.nkb
        m = Module()
        busy = Signal()
        j = Signal(range(nkb + 1))
        start = Signal(range(ag.n_max + bk + 1))
        length = Signal(range(bk + 1))
        n_tok = self.n_tokens
        m.d.comb += [length.eq(Mux(n_tok - start >= bk, bk, n_tok - start)),
                     self.done.eq(~busy)]
        bit = Signal()
        mbit = self.mask.bit_select(j, 1)
        m.d.comb += bit.eq(Mux(self.mode == ListMode.ALL, 1,
                               Mux(self.mode == ListMode.SELECTED, mbit, ~mbit)))
        with m.If(busy):
            m.d.sync += [j.eq(j + 1), start.eq(start + bk)]
            with m.If(bit):
                m.d.sync += [self.sel_j[self.n_sel].eq(j), self.sel_len[self.n_sel].eq(length),
                             self.n_sel.eq(self.n_sel + 1),
                             self.n_valid.eq(self.n_valid + length)]
            with m.If(start + bk >= n_tok):
                m.d.sync += busy.eq(0)
        with m.If(self.start):
            m.d.sync += [busy.eq(1), j.eq(0), start.eq(0), self.n_sel.eq(0),
                         self.n_valid.eq(0)]
        return m
