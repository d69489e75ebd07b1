"""Mask selection of one query block: the key blocks to compute from their masses.

Ref: ``golden/ATTENTION.md`` step 3; bit-exact with ``dstar.golden.attention.select_blocks``.
"""

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dstar.golden.attention import THETA_BITS

from ..geometry import AttentionGeometry

__all__ = ["MaskSelector"]


class MaskSelector(wiring.Component):
    """Selects key blocks by descending mass ``M`` (ties: the lower index first) until the
    cumulative mass ``C`` reaches ``C * 2**16 >= theta_q * T`` (``T``: the total over the
    candidates); ``theta_q >= 2**16`` selects every block, also those of zero mass. At least
    one block is always selected.

    ``start`` (a one-cycle pulse) begins a selection over the candidates ``0 .. n_blocks - 1``
    (``1 .. nkb``); ``mass`` and ``theta_q`` must hold still until ``done``. Each pick takes
    one scan of ``n_blocks`` cycles over the masses (the first scan also sums ``T``) and a
    commit cycle, so a selection of ``k`` blocks takes ``k * (n_blocks + 1)`` cycles after
    ``start``, and one cycle with ``theta_q >= 2**16``.

    ``done`` is high for one cycle, combinationally with ``mask``, the selected blocks (bit
    ``J``: block ``J``); ``busy`` is high from the cycle after ``start`` up to and including
    the ``done`` cycle. There is no back-pressure. Reset (or ``start`` at any time) abandons a
    selection.

    Parameters
    ----------
    ag : AttentionGeometry
        ``nkb`` candidates of ``mass_bits`` masses, sums of ``total_bits``.

    Members
    -------
    start : In(1)
    n_blocks : In(range(nkb + 1))
    mass : In(data.ArrayLayout(unsigned(mass_bits), nkb))
    theta_q : In(theta_bits)
    busy : Out(1)
    done : Out(1)
    mask : Out(nkb)
    """

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        super().__init__({
            "start": In(1),
            "n_blocks": In(range(ag.nkb + 1)),
            "mass": In(data.ArrayLayout(unsigned(ag.mass_bits), ag.nkb)),
            "theta_q": In(ag.theta_bits),
            "busy": Out(1),
            "done": Out(1),
            "mask": Out(ag.nkb),
        })

    def elaborate(self, platform):
        ag = self._ag
        nkb, theta_bits = ag.nkb, THETA_BITS
        jb = range(nkb + 1)
        m = Module()

        chosen = Signal(nkb)
        sc_j = Signal(jb)
        sc_first = Signal()                 # no candidate yet in this scan
        sc_best = Signal(jb)
        sc_bm = Signal(ag.mass_bits)
        c_acc = Signal(ag.total_bits)
        t_acc = Signal(ag.total_bits)
        pick0 = Signal()                    # the first scan (also sums T)
        commit = Signal()                   # the cycle after a scan
        m_j = Signal(ag.mass_bits)
        m.d.comb += m_j.eq(self.mass[sc_j])
        c_new = Signal(ag.total_bits)
        m.d.comb += c_new.eq(c_acc + sc_bm)
        reached = Signal()
        m.d.comb += reached.eq((c_new << theta_bits) >= self.theta_q * t_acc)

        m.d.comb += self.mask.eq(chosen)
        with m.If(self.busy):
            with m.If(self.theta_q[theta_bits]):
                m.d.comb += [self.done.eq(1), self.mask.eq((1 << nkb) - 1)]
            with m.Elif(commit):
                m.d.sync += [commit.eq(0), pick0.eq(0), c_acc.eq(c_new), sc_j.eq(0),
                             sc_first.eq(1), chosen.eq(chosen | (1 << sc_best))]
                m.d.comb += [self.done.eq(reached), self.mask.eq(chosen | (1 << sc_best))]
            with m.Else():
                m.d.sync += sc_j.eq(sc_j + 1)
                with m.If(pick0):
                    m.d.sync += t_acc.eq(t_acc + m_j)
                with m.If(~chosen.bit_select(sc_j, 1) & (sc_first | (m_j > sc_bm))):
                    m.d.sync += [sc_best.eq(sc_j), sc_bm.eq(m_j), sc_first.eq(0)]
                with m.If(sc_j == self.n_blocks - 1):
                    m.d.sync += commit.eq(1)
            with m.If(self.done):
                m.d.sync += self.busy.eq(0)
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), chosen.eq(0), sc_j.eq(0), sc_first.eq(1),
                         c_acc.eq(0), t_acc.eq(0), pick0.eq(1), commit.eq(0)]
        return m
