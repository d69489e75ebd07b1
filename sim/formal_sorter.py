"""Formal property: the FMDQ quantization unit's sort network passes on every entry once, sorted.

``SorterHarness`` drives a ``BitonicSorter`` (``dstar.hw.fmdq.sorter``) with free vectors, free
``i.valid`` and free ``o.ready``, and follows one symbolic vector (the ``n``-th taken, ``n`` an
``AnyConst``): it records the vector's entries and tag when it is taken and checks the ``n``-th
vector that leaves (``o.valid & o.ready``). Asserted, for that vector:

* its entries are ascending by key (position 0 the smallest);
* its entries are a permutation of the taken ones: every taken entry occurs exactly once
  among the output's entries (checked for a symbolic input position ``s``, an ``AnyConst``,
  so for each), which with ``n`` distinct taken entries and ``n`` outputs is a permutation:
  no entry is lost, duplicated or altered;
* its tag is the taken vector's.

Since ``n`` is free, this holds for every vector, and "the ``n``-th out is the ``n``-th in"
means no vector is lost, duplicated or reordered whatever ``i.valid`` and ``o.ready`` do. The
input obeys the stream rule (an offer is held until taken) and, with ``presorted``, the
network's contract (every aligned run of ``presorted`` entries ascending).

The entries are ``key_bits`` of free key above an identity field (the quantization unit's
entries carry a key and a channel; the network does not look below the key): input position
``k`` carries identity ``k`` (assumed), so the taken entries are distinct while their keys are
free (equal keys included, where a sorter that copies an entry instead of swapping it would
show). Counting equal values of free entries instead makes a pigeonhole problem for the SAT
solver (a bounded check of 8 entries reached step 6 in 10 minutes).

Covers: the symbolic vector leaves after being stalled at the output, with two entries of
equal key among its entries (the property is not vacuous).

Mutations: ``drop_comparator`` removes the first comparator of the network's last stage (the
output is not sorted for some input); ``drop_ready`` hides ``o.ready`` from the sorter (it
sees it high: vectors are lost). The proof must fail on each.

With ``reference``, the check is instead that the vector equals what a second sorter of the
same network with one register makes of it (an equivalence, for a pipelined sorter against
the single-register one that the check above proves).

Status (yices, a 2-core machine at load 8 to 10): on the quantization unit's window-2 network
(8 entries, presorted runs of 4, odd-even, 3 stages) with one register (``reg_every=3``) this
harness passes bounded model checking to depth 20 in 80 s. With the unit's default register
after every stage (``reg_every=1``) it does not finish (step 16 after 8 min; the ``reference``
equivalence step 15 after 6 min: the solver re-derives at every step which cycle's input each
register holds). ``SorterPipelineHarness`` proves the pipelined sorter instead, by k-induction
with per-register invariants.
"""

from amaranth import Array, Cat, Elaboratable, Module, Mux, Signal
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover

import dstar.hw.fmdq.sorter as sorter_mod
from dstar.hw.fmdq.sorter import BitonicSorter, SortNetwork, register_stages

from .formal import elaborate_patched, reset_first

__all__ = ["SorterHarness", "SorterPipelineHarness"]

#: Bits of the harness's vector counters (more than any proof depth).
_COUNT_BITS = 6


class SorterHarness(Elaboratable):
    """A ``BitonicSorter`` of ``n`` entries sorts and passes on every vector exactly once (the
    module docstring); ``presorted``, ``reg_every`` and ``kind`` as the sorter's."""

    def __init__(self, n: int, *, key_bits: int = 2, presorted: int = 1,
                 reg_every: int = 1, kind: SortNetwork = SortNetwork.ODD_EVEN,
                 reference: bool = False, drop_comparator: bool = False,
                 drop_ready: bool = False):
        self.n, self.key_bits, self.tie_bits = n, key_bits, max(1, (n - 1).bit_length())
        self.presorted, self.reg_every, self.kind = presorted, reg_every, SortNetwork(kind)
        self.reference = reference
        self.drop_comparator, self.drop_ready = drop_comparator, drop_ready

    def _sorter(self, platform):
        tie = self.tie_bits
        dut = BitonicSorter(self.key_bits + tie, self.n, lambda v: v[tie:], tag=2,
                            reg_every=self.reg_every, presorted=self.presorted, kind=self.kind)
        if not self.drop_comparator:
            return dut, dut
        real = sorter_mod.network

        def broken(kind, n, presorted=1):
            stages = real(kind, n, presorted)
            return stages[:-1] + [stages[-1][1:]]

        return dut, elaborate_patched(dut, platform, sorter_mod, "network", broken)

    def elaborate(self, platform):
        n, tie = self.n, self.tie_bits
        m = Module()
        dut, body = self._sorter(platform)
        m.submodules.dut = body
        reset_first(m)
        width = self.key_bits + tie
        m.d.comb += [dut.i.valid.eq(AnySeq(1)),
                     dut.i.payload.eq(AnySeq(dut.i.payload.shape().size))]
        ready = Signal()
        m.d.comb += ready.eq(AnySeq(1))
        m.d.comb += dut.o.ready.eq(1 if self.drop_ready else ready)

        # The input contract: the stream rule, and presorted runs ascending.
        ins = [dut.i.payload.entries[k] for k in range(n)]
        held = Signal()
        prev = Signal.like(dut.i.payload.as_value())
        m.d.sync += [held.eq(dut.i.valid & ~dut.i.ready), prev.eq(dut.i.payload.as_value())]
        with m.If(held):
            m.d.comb += Assume(dut.i.valid & (dut.i.payload.as_value() == prev))
        for k in range(n):
            if not self.reference:
                m.d.comb += Assume(~dut.i.valid | (ins[k][:tie] == k))
            if k % self.presorted:
                m.d.comb += Assume(~dut.i.valid | (ins[k - 1][tie:] <= ins[k][tie:]))

        # The symbolic vector.
        sym = Signal(_COUNT_BITS)
        m.d.comb += sym.eq(AnyConst(_COUNT_BITS))
        taken, left = Signal(_COUNT_BITS), Signal(_COUNT_BITS)
        take = dut.i.valid & dut.i.ready
        out = dut.o.valid & ready
        m.d.sync += [taken.eq(taken + take), left.eq(left + out)]
        got = Signal()
        rec = [Signal(width, name=f"in_{k}") for k in range(n)]
        rec_tag = Signal(2)
        with m.If(take & (taken == sym)):
            m.d.sync += [got.eq(1), rec_tag.eq(dut.i.payload.tag)]
            m.d.sync += [r.eq(x) for r, x in zip(rec, ins, strict=True)]
        outs = [dut.o.payload.entries[k] for k in range(n)]
        mine = Signal()
        m.d.comb += mine.eq(out & (left == sym))

        pos = Signal(range(n))
        m.d.comb += pos.eq(AnyConst(len(pos)))
        m.d.comb += Assume(pos < n)
        entry = Signal(width)
        m.d.comb += entry.eq(Array(rec)[pos])
        hits = Signal(range(n + 1))
        m.d.comb += hits.eq(sum((x == entry).as_unsigned() for x in outs))

        if self.reference:
            # The reference network: the same stages, one register (always loading, so its
            # output is the network of the previous cycle's input).
            ref = BitonicSorter(width, n, lambda v: v[tie:], tag=2,
                                reg_every=len(sorter_mod.network(self.kind, n, self.presorted)),
                                presorted=self.presorted, kind=self.kind)
            m.submodules.reference = ref
            m.d.comb += [ref.i.valid.eq(1), ref.i.payload.eq(dut.i.payload), ref.o.ready.eq(1)]
            exp = [Signal(width, name=f"exp_{k}") for k in range(n)]
            catch = Signal()
            m.d.sync += catch.eq(take & (taken == sym))
            with m.If(catch):
                m.d.sync += [x.eq(ref.o.payload.entries[k]) for k, x in enumerate(exp)]
            with m.If(mine):
                m.d.comb += Assert(got, "a vector left before it was taken")
                m.d.comb += Assert(dut.o.payload.tag == rec_tag, "the tag changed")
                m.d.comb += Assert(~catch, "a vector left in the cycle after it was taken")
                for k in range(n):
                    m.d.comb += Assert(outs[k] == exp[k],
                                       f"position {k} differs from the reference network's")
        with m.If(mine & (not self.reference)):
            m.d.comb += Assert(got, "a vector left before it was taken")
            m.d.comb += Assert(dut.o.payload.tag == rec_tag, "the tag changed")
            for k in range(n - 1):
                m.d.comb += Assert(outs[k][tie:] <= outs[k + 1][tie:],
                                   f"positions {k} and {k + 1} out of order")
            m.d.comb += Assert(hits == 1, "a taken entry is not in the output exactly once")

        stall = Signal()
        m.d.sync += stall.eq(stall | (dut.o.valid & ~ready & (left == sym)))
        ties = Cat(*[rec[a][tie:] == rec[b][tie:]
                     for a in range(n) for b in range(a + 1, n)]).any()
        m.d.comb += Cover(mine & stall & ties & (sym > 0),
                          "a vector with tied keys leaves after a stall")
        return m


def _driven(body: Module, name: str):
    """The signal named ``name`` that ``body`` (an elaborated ``Module``) drives."""
    found = [s for s in body._driving.keys() if s.name == name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} signals named {name!r} in the sorter")
    return found[0]


class SorterPipelineHarness(Elaboratable):
    """The pipelined sort network, by k-induction (``mode="prove"``): what ``SorterHarness``
    asserts of the vector it follows, for a ``BitonicSorter`` with a register after every
    ``reg_every`` comparator stages, for every depth.

    The followed vector is the one taken in a cycle where a free ``pick`` is high (the first
    such), its entries and tag recorded; inputs as ``SorterHarness``'s (free, the stream rule,
    presorted runs, identity fields). The harness marks the register that holds it (moved with
    the sorter's own register enables) and counts the vectors taken before it that are still
    inside (``ahead``). Asserted in every cycle (the invariants, which make the proof
    inductive):

    * at most one register is marked, a marked register is valid, and once picked the vector
      is marked somewhere until it has left (never lost, never copied);
    * ``ahead`` equals the number of valid registers after the marked one (nothing overtakes
      it);
    * the marked register holds the first comparator stages (as far as that register) of the
      network applied to the recorded entries (the harness's own copy of the network, from
      ``dstar.hw.fmdq.sorter.network``), and the recorded tag;
    * the recorded entries meet the input contract (identity fields, presorted runs);

    and when the followed vector leaves (``o.valid & o.ready``, the last register marked):
    nothing taken before it is still inside, its entries are ascending by key and every
    recorded entry occurs exactly once among them (a permutation), and its tag is the
    recorded one.

    Cover: the followed vector leaves after a stall, behind another vector, with tied keys.
    Mutants as ``SorterHarness``'s: ``drop_comparator`` (the harness's copy of the network
    drops the same comparator, so the register invariants hold and the output check must
    find the unsorted vector), ``drop_ready``.
    """

    def __init__(self, n: int, *, key_bits: int = 2, presorted: int = 1, reg_every: int = 1,
                 kind: SortNetwork = SortNetwork.ODD_EVEN, drop_comparator: bool = False,
                 drop_ready: bool = False):
        self.n, self.key_bits, self.tie_bits = n, key_bits, max(1, (n - 1).bit_length())
        self.presorted, self.reg_every, self.kind = presorted, reg_every, SortNetwork(kind)
        self.drop_comparator, self.drop_ready = drop_comparator, drop_ready

    def _partial(self, m: Module, rec):
        """Per register group: the positions after that group's stages applied to ``rec``
        (``None``: padding), as the sorter elaborates them."""
        tie, n = self.tie_bits, self.n
        stages = sorter_mod.network(self.kind, n, self.presorted)
        if self.drop_comparator:                  # the copy follows the mutant's network
            stages = stages[:-1] + [stages[-1][1:]]
        groups = [stages[s:s + self.reg_every] for s in range(0, len(stages), self.reg_every)]
        groups = groups or [[]]
        pos = list(rec) + [None] * ((1 << max(0, (n - 1).bit_length())) - n)
        out = []
        for r, group in enumerate(groups):
            for s, stage in enumerate(group):
                for a, b in stage:
                    if pos[b] is None:
                        continue
                    if pos[a] is None:
                        pos[a], pos[b] = pos[b], None
                        continue
                    va, vb = pos[a], pos[b]
                    swap = va[tie:] > vb[tie:]
                    lo = Signal(len(va), name=f"spec_{r}_{s}_{a}")
                    hi = Signal(len(va), name=f"spec_{r}_{s}_{b}")
                    m.d.comb += [lo.eq(Mux(swap, vb, va)), hi.eq(Mux(swap, va, vb))]
                    pos[a], pos[b] = lo, hi
            out.append(list(pos))
        return out

    def elaborate(self, platform):
        n, tie = self.n, self.tie_bits
        width = self.key_bits + tie
        m = Module()
        base = SorterHarness(n, key_bits=self.key_bits, presorted=self.presorted,
                             reg_every=self.reg_every, kind=self.kind,
                             drop_comparator=self.drop_comparator)
        base._MustUse__silence = True              # only its sorter is used
        dut, body = base._sorter(platform)
        if body is dut:
            dut._MustUse__silence = True
            body = dut.elaborate(platform)
        m.submodules.dut = body
        reset_first(m)
        n_reg = register_stages(n, self.reg_every, self.presorted)
        valid = [_driven(body, f"valid_{r}") for r in range(n_reg)]
        adv = [_driven(body, f"adv_{r}") for r in range(n_reg)]
        tags = [_driven(body, f"tag_{r}") for r in range(n_reg)]

        m.d.comb += [dut.i.valid.eq(AnySeq(1)),
                     dut.i.payload.eq(AnySeq(dut.i.payload.shape().size))]
        ready = Signal()
        m.d.comb += ready.eq(AnySeq(1))
        m.d.comb += dut.o.ready.eq(1 if self.drop_ready else ready)
        ins = [dut.i.payload.entries[k] for k in range(n)]
        held = Signal()
        prev = Signal.like(dut.i.payload.as_value())
        m.d.sync += [held.eq(dut.i.valid & ~dut.i.ready), prev.eq(dut.i.payload.as_value())]
        with m.If(held):
            m.d.comb += Assume(dut.i.valid & (dut.i.payload.as_value() == prev))
        for k in range(n):
            m.d.comb += Assume(~dut.i.valid | (ins[k][:tie] == k))
            if k % self.presorted:
                m.d.comb += Assume(~dut.i.valid | (ins[k - 1][tie:] <= ins[k][tie:]))

        # The followed vector.
        pick = Signal()
        m.d.comb += pick.eq(AnySeq(1))
        picked, done = Signal(), Signal()
        take = dut.i.valid & dut.i.ready
        out = dut.o.valid & ready
        start = Signal()
        m.d.comb += start.eq(take & pick & ~picked)
        rec = [Signal(width, name=f"in_{k}") for k in range(n)]
        rec_tag = Signal(2)
        with m.If(start):
            m.d.sync += [picked.eq(1), rec_tag.eq(dut.i.payload.tag)]
            m.d.sync += [r.eq(x) for r, x in zip(rec, ins, strict=True)]
        mark = [Signal(name=f"mark_{r}") for r in range(n_reg)]
        for r in range(n_reg):
            src = start if r == 0 else valid[r - 1] & mark[r - 1]
            with m.If(adv[r]):
                m.d.sync += mark[r].eq(src)
        mine = Signal()
        m.d.comb += mine.eq(out & mark[-1])
        with m.If(mine):
            m.d.sync += done.eq(1)
        ahead = Signal(range(n_reg + 1))
        n_valid = sum(v.as_unsigned() for v in valid)
        with m.If(start):
            m.d.sync += ahead.eq(n_valid - out)
        with m.Elif(out & ~mark[-1]):
            m.d.sync += ahead.eq(ahead - 1)

        # The invariants.
        spec = self._partial(m, rec)
        for r in range(n_reg):
            m.d.comb += Assert(~mark[r] | valid[r], f"register {r} marked but empty")
            for s in range(r + 1, n_reg):
                m.d.comb += Assert(~(mark[r] & mark[s]), f"registers {r} and {s} both marked")
            after = sum(v.as_unsigned() for v in valid[r + 1:]) if r + 1 < n_reg else 0
            with m.If(mark[r]):
                m.d.comb += Assert(ahead == after, f"register {r}: a vector overtook")
                m.d.comb += Assert(tags[r] == rec_tag, f"register {r}: the tag changed")
                for k, want in enumerate(spec[r]):
                    if want is not None:
                        have = _driven(body, f"r{r}_{k}")
                        m.d.comb += Assert(have == want,
                                           f"register {r} position {k}: not the network's")
        with m.If(picked):                        # the recorded vector met the contract
            for k in range(n):
                m.d.comb += Assert(rec[k][:tie] == k, f"recorded entry {k}: identity")
                if k % self.presorted:
                    m.d.comb += Assert(rec[k - 1][tie:] <= rec[k][tie:],
                                       f"recorded entry {k}: presorted run")
        marked = Cat(*mark).any()
        m.d.comb += Assert(~picked | done | marked, "the followed vector was lost")
        m.d.comb += Assert(picked | ~(done | marked), "a vector marked before it was taken")
        m.d.comb += Assert(~(done & marked), "the followed vector left twice")

        # What leaves.
        outs = [dut.o.payload.entries[k] for k in range(n)]
        pos = Signal(range(n))
        m.d.comb += pos.eq(AnyConst(len(pos)))
        m.d.comb += Assume(pos < n)
        entry = Signal(width)
        m.d.comb += entry.eq(Array(rec)[pos])
        hits = Signal(range(n + 1))
        m.d.comb += hits.eq(sum((x == entry).as_unsigned() for x in outs))
        with m.If(mine):
            m.d.comb += [Assert(ahead == 0, "left before a vector taken earlier"),
                         Assert(dut.o.payload.tag == rec_tag, "the tag changed"),
                         Assert(hits == 1, "a taken entry is not in the output exactly once")]
            for k in range(n - 1):
                m.d.comb += Assert(outs[k][tie:] <= outs[k + 1][tie:],
                                   f"positions {k} and {k + 1} out of order")

        stall, behind = Signal(), Signal()
        m.d.sync += stall.eq(stall | (dut.o.valid & ~ready & mark[-1]))
        with m.If(start):
            m.d.sync += behind.eq(n_valid != 0)
        ties = Cat(*[rec[a][tie:] == rec[b][tie:]
                     for a in range(n) for b in range(a + 1, n)]).any()
        m.d.comb += Cover(mine & stall & behind & ties,
                          "a vector with tied keys leaves behind another, after a stall")
        return m
