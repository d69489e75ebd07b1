"""Mask selection of one query block: the key blocks to compute from their masses.

Ref: ``golden/ATTENTION.md`` step 3; bit-exact with ``dstar.golden.attention.select_blocks``.
"""

from amaranth import Array, Module, Mux, Signal, unsigned
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
    (``1 .. nkb``); ``n_blocks``, ``mass`` and ``theta_q`` must be valid from the cycle after
    ``start`` and hold still until ``done`` (``mass`` may still change in the ``start`` cycle).
    Each pick takes one scan over the masses, ``SCAN`` of them per cycle (``ceil(n_blocks /
    SCAN)`` cycles), and a commit cycle, so a selection of ``k`` blocks takes ``k *
    (ceil(n_blocks / SCAN) + 1)`` cycles after ``start``, and one cycle with ``theta_q >=
    2**16``. The threshold ``theta_q * T`` is registered, from all the candidates at once, in
    the first scan cycle, so the commit's test is an addition and a comparison from registers
    (the ECP5 Fmax: the product ran into the mask memory's write enables).

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

    #: Masses compared per scan cycle.
    SCAN = AttentionGeometry.SEL_SCAN

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
        thr = Signal(ag.total_bits + len(self.theta_q))  # theta_q * T
        commit = Signal()                   # the cycle after a scan
        # This cycle's candidates sc_j .. sc_j + SCAN - 1: the largest unchosen one, the lower
        # index on ties.
        w = self.SCAN
        masses = Array(self.mass[j] for j in range(nkb))
        cands = []
        for k in range(w):
            jk = Signal(range(nkb + w), name=f"cand_j{k}")
            mk = Signal(ag.mass_bits, name=f"cand_m{k}")
            vk = Signal(name=f"cand_v{k}")
            m.d.comb += [jk.eq(sc_j + k),
                         mk.eq(masses[jk[:len(sc_j)]]),
                         vk.eq((jk < self.n_blocks) & ~chosen.bit_select(jk, 1))]
            cands.append((vk, mk, jk))
        while len(cands) > 1:
            nxt = []
            for a, b in zip(cands[0::2], cands[1::2], strict=True):
                v, mm, jj = (Signal.like(x, name=f"{x.name}_t{len(cands)}") for x in a)
                left = a[0] & (~b[0] | (a[1] >= b[1]))
                m.d.comb += [v.eq(a[0] | b[0]), mm.eq(Mux(left, a[1], b[1])),
                             jj.eq(Mux(left, a[2], b[2]))]
                nxt.append((v, mm, jj))
            cands = nxt
        c_v, m_j, c_j = cands[0]
        # T over every candidate at once, and its threshold, registered each cycle: the masses
        # are complete from the first scan cycle, whose product the first commit (one cycle
        # later at the earliest) reads.
        total = Signal(ag.total_bits)
        m.d.comb += total.eq(sum(Mux(j < self.n_blocks, self.mass[j], 0) for j in range(nkb)))
        m.d.sync += thr.eq(self.theta_q * total)
        c_new = Signal(ag.total_bits)
        m.d.comb += c_new.eq(c_acc + sc_bm)
        reached = Signal()
        m.d.comb += reached.eq((c_new << theta_bits) >= thr)

        m.d.comb += self.mask.eq(chosen)
        with m.If(self.busy):
            with m.If(self.theta_q[theta_bits]):
                m.d.comb += [self.done.eq(1), self.mask.eq((1 << nkb) - 1)]
            with m.Elif(commit):
                m.d.sync += [commit.eq(0), c_acc.eq(c_new), sc_j.eq(0),
                             sc_first.eq(1), chosen.eq(chosen | (1 << sc_best))]
                m.d.comb += [self.done.eq(reached), self.mask.eq(chosen | (1 << sc_best))]
            with m.Else():
                m.d.sync += sc_j.eq(sc_j + w)
                with m.If(c_v & (sc_first | (m_j > sc_bm))):
                    m.d.sync += [sc_best.eq(c_j), sc_bm.eq(m_j), sc_first.eq(0)]
                with m.If(sc_j + w >= self.n_blocks):
                    m.d.sync += commit.eq(1)
            with m.If(self.done):
                m.d.sync += self.busy.eq(0)
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), chosen.eq(0), sc_j.eq(0), sc_first.eq(1),
                         c_acc.eq(0), commit.eq(0)]
        return m
