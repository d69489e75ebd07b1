"""Reciprocals of the selected blocks' row sums: the ``(r, L)`` a key step normalizes ``O_sel``
with when it takes ``O_sel`` from the full pass.

Ref: ``golden/ATTENTION.md`` (reciprocal, blocks and mask); ``dstar.golden.softmax.reciprocal``.
"""

from amaranth import Array, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from dstar.golden.softmax import RECIP_BITS, sum_bits

from ..geometry import AttentionGeometry, SoftmaxGeometry
from ..softmax import _bit_length

__all__ = ["SelReciprocal"]

DIV_CYCLES = SoftmaxGeometry.DIV_CYCLES


class SelReciprocal(wiring.Component):
    """Per row ``i`` of a query block, ``l_sel = sum_J mask[J] * b[i][J]`` (the row's block sums
    of applied weights over the selected blocks) and its reciprocal ``r = floor((2**(L+16) -
    1) / l_sel)``, ``L = bit_length(l_sel)``, as ``golden.softmax.reciprocal`` (the restoring
    division of ``SoftmaxUnit``, one quotient bit per cycle).

    ``start`` (a pulse) begins the rows ``0 .. rows - 1`` into table ``bank`` (of two: one
    query block's table is read while the next one's is computed); ``mask``, ``b``, ``rows``
    and ``bank`` must hold still until ``done``. Each row takes ``CYCLES`` (19) cycles: the
    sum, 17 division steps, the write of ``(r, L)``; ``done`` is high from ``rows * CYCLES``
    cycles after the ``start`` edge until the next ``start`` (and after reset). ``r`` /
    ``big_l`` show row ``row`` of table ``rd_bank`` combinationally. A row with ``l_sel = 0``
    gives an undefined ``r`` (a key step never normalizes by it: a query block with such a row
    takes the second pass).
    No back-pressure. Reset abandons a block.

    Parameters
    ----------
    ag : AttentionGeometry

    Members
    -------
    start, bank, rd_bank : In(1), rows : In(range(block_q + 1)), mask : In(nkb)
    b : In(data.ArrayLayout(data.ArrayLayout(unsigned(b_bits), nkb), block_q))
    row : In(range(block_q)), r : Out(17), big_l : Out
    done : Out(1)
    """

    #: Cycles per row: the masked sum, ``DIV_CYCLES`` division steps, the table write.
    CYCLES = AttentionGeometry.SEL_RECIP_CYCLES

    def __init__(self, ag: AttentionGeometry):
        self._ag = ag
        cfg = ag.cfg
        self._lb = lb = sum_bits(ag.n_max, cfg.e_max)
        super().__init__({
            "start": In(1),
            "bank": In(1),
            "rd_bank": In(1),
            "rows": In(range(cfg.block_q + 1)),
            "mask": In(ag.nkb),
            "b": In(data.ArrayLayout(data.ArrayLayout(unsigned(ag.b_bits), ag.nkb),
                                     cfg.block_q)),
            "row": In(range(cfg.block_q)),
            "r": Out(RECIP_BITS + 1),
            "big_l": Out(range(lb + 1)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        ag, lb = self._ag, self._lb
        bq, nkb = ag.cfg.block_q, ag.nkb
        assert self.CYCLES == DIV_CYCLES + 2
        m = Module()
        busy = Signal()
        load = Signal()                     # this cycle sums row i into c_l
        i = Signal(range(bq + 1))
        c_l = Signal(lb)
        c_rem = Signal(lb)
        c_q = Signal(RECIP_BITS + 1)
        c_step = Signal(range(DIV_CYCLES + 1))
        r_tab = Array(Signal(RECIP_BITS + 1, name=f"r_sel{t}_{k}")
                      for t in range(2) for k in range(bq))
        l_tab = Array(Signal(range(lb + 1), name=f"L_sel{t}_{k}")
                      for t in range(2) for k in range(bq))
        rd_at, at = Signal(range(2 * bq)), Signal(range(2 * bq + 1))
        m.d.comb += [rd_at.eq(self.rd_bank * bq + self.row), at.eq(self.bank * bq + i)]
        m.d.comb += [self.r.eq(r_tab[rd_at]), self.big_l.eq(l_tab[rd_at]),
                     self.done.eq(~busy)]

        row_b = self.b[i]
        l_sel = Signal(lb)
        m.d.comb += l_sel.eq(sum(Mux(self.mask[j], row_b[j], 0) for j in range(nkb)))

        big_l = _bit_length(m, c_l, lb, "big_l")
        # The first trial is the dividend's top L bits, 2**L - 1: l with every bit below its
        # leading one set (as in SoftmaxUnit's divider).
        smear = c_l
        k = 1
        while k < lb:
            smear = smear | (smear >> k)
            k *= 2
        trial = Signal(lb + 1)
        m.d.comb += trial.eq(Mux(c_step == 0, smear, Const(1, 1) | (c_rem << 1)))
        ge = Signal()
        m.d.comb += ge.eq(trial >= c_l)

        with m.If(busy):
            with m.If(load):
                m.d.sync += [c_l.eq(l_sel), c_step.eq(0), load.eq(0)]
            with m.Elif(c_step != DIV_CYCLES):
                m.d.sync += [c_rem.eq(Mux(ge, trial - c_l, trial)), c_q.eq((c_q << 1) | ge),
                             c_step.eq(c_step + 1)]
            with m.Else():
                m.d.sync += [r_tab[at].eq(c_q), l_tab[at].eq(big_l), i.eq(i + 1), load.eq(1)]
                with m.If(i + 1 >= self.rows):
                    m.d.sync += busy.eq(0)
        with m.If(self.start):
            m.d.sync += [busy.eq(1), load.eq(1), i.eq(0)]
        return m
