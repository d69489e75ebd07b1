"""A pipelined sort network: one whole vector of entries sorted per cycle.

The quantization unit (``dstar.hw.fmdq.quant_unit``) sorts one window's (channel, slice) entries
with it; the network itself knows nothing of FMDQ: it orders any entries by an unsigned key.
Two comparator networks of equal depth (``SortNetwork``): Batcher's bitonic sort and his
odd-even merge sort, which needs about a fifth fewer comparators.
"""

from enum import Enum

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SortNetwork", "bitonic_network", "odd_even_network", "network", "network_depth",
           "register_stages", "BitonicSorter"]


class SortNetwork(Enum):
    """How the quantization unit orders a window's entries: a comparator network of a
    ``BitonicSorter`` (``BITONIC``, ``ODD_EVEN``: both ascending, equal depth) or no network at
    all (``BUCKET``: ``dstar.hw.fmdq.bucket.BucketOrder``, per-key bit masks)."""

    #: Bitonic merges (``bitonic_network``): ``N/2`` comparators in every stage.
    BITONIC = "bitonic"
    #: Odd-even merges (``odd_even_network``): the same stages, fewer comparators in most
    #: (3519 instead of 4224 for 256 entries in presorted runs of 4).
    ODD_EVEN = "odd_even"
    #: A counting (bucket) sort: one bit mask of the window's channels per total shift, the
    #: groups taken from the masks (``hw.fmdq.bucket``); not a network (``network`` refuses it).
    BUCKET = "bucket"

    @property
    def is_network(self) -> bool:
        return self is not SortNetwork.BUCKET


def bitonic_network(n: int, presorted: int = 1) -> list[list[tuple[int, int]]]:
    """The comparator stages of an ascending bitonic sort of ``n`` entries padded to the next
    power of two ``N`` (padding entries sort after every real one), whose aligned runs of
    ``presorted`` entries (a power of two) are already ascending. Stage ``s`` is a list of
    compare-exchange pairs ``(a, b)``, ``a < b``: after it, position ``a`` holds the smaller key.

    All comparators point the same way: each merge of two sorted halves of a block of ``k``
    starts with a *flip* (``i`` against ``k - 1 - i``) instead of reversing every other block,
    then half-cleaners at distances ``k/4 .. 1``; merges of blocks up to ``presorted`` are left
    out. Depth ``m (m + 1) / 2 - r (r + 1) / 2`` for ``N = 2**m``, ``presorted = 2**r``."""
    if presorted < 1 or presorted & (presorted - 1):
        raise ValueError(f"presorted must be a power of two, got {presorted}")
    size = 1 << max(0, (n - 1).bit_length())
    stages = []
    k = 2 * presorted
    while k <= size:
        stages.append([(b + i, b + k - 1 - i) for b in range(0, size, k) for i in range(k // 2)])
        j = k // 4
        while j >= 1:
            stages.append([(i, i + j) for i in range(size) if not i & j])
            j //= 2
        k *= 2
    return stages


def odd_even_network(n: int, presorted: int = 1) -> list[list[tuple[int, int]]]:
    """The comparator stages of Batcher's ascending odd-even merge sort of ``n`` entries padded
    to the next power of two ``N`` (padding entries sort after every real one), whose aligned
    runs of ``presorted`` entries (a power of two) are already ascending; pairs as
    ``bitonic_network``'s, with the same number of stages. The merge of two sorted runs of
    ``p`` compares at distances ``p, p/2 .. 1``, at each distance ``k < p`` only pairs that the
    previous distances left out of order can hold (``j = k mod p`` onwards, in strides of
    ``2k``, within one ``2p`` block)."""
    if presorted < 1 or presorted & (presorted - 1):
        raise ValueError(f"presorted must be a power of two, got {presorted}")
    size = 1 << max(0, (n - 1).bit_length())
    stages = []
    p = presorted
    while p < size:
        k = p
        while k >= 1:
            stages.append([(i + j, i + j + k) for j in range(k % p, size - k, 2 * k)
                           for i in range(min(k, size - j - k))
                           if (i + j) // (2 * p) == (i + j + k) // (2 * p)])
            k //= 2
        p *= 2
    return stages


def network(kind: SortNetwork, n: int, presorted: int = 1) -> list[list[tuple[int, int]]]:
    """The stages of network ``kind`` (``bitonic_network`` or ``odd_even_network``)."""
    if not SortNetwork(kind).is_network:
        raise ValueError(f"{kind} is not a comparator network")
    return (odd_even_network if kind is SortNetwork.ODD_EVEN else bitonic_network)(n, presorted)


def network_depth(n: int, presorted: int = 1) -> int:
    """Comparator stages of ``bitonic_network(n, presorted)`` (``odd_even_network``'s too)."""
    return len(bitonic_network(n, presorted))


def register_stages(n: int, reg_every: int = 1, presorted: int = 1) -> int:
    """Pipeline registers of a ``BitonicSorter`` of ``n`` entries: one after every ``reg_every``
    comparator stages, at least one (its latency in cycles)."""
    return max(1, -(-network_depth(n, presorted) // reg_every))


class BitonicSorter(wiring.Component):
    """Sort ``n`` entries of shape ``entry`` ascending by ``key(entry_view)`` (an unsigned
    value), one vector per cycle; ``tag`` rides along unchanged. With ``presorted`` (a power of
    two dividing ``n``) the caller guarantees that every aligned run of that many input entries
    is already ascending, and the network starts with the merges of such runs. ``kind``: the
    comparator network (``SortNetwork``; the latency does not depend on it).

    Entries with equal keys leave in an unspecified order (the network is not stable): callers
    that need a total order put a tie-breaker into the key. Padding to a power of two is
    resolved at elaboration (a padding entry is greater than every real one, so comparators
    against it are wires or fixed swaps), so a non-power-of-two ``n`` costs no more comparators
    than the real entries need.

    Latency ``register_stages(n, reg_every, presorted)`` cycles (a register after every
    ``reg_every`` comparator stages; the input is combinational into the first ones);
    throughput one vector per cycle. Back-pressure per register: a stalled output holds the last
    register only, and vectors behind it advance into empty registers (``i.ready`` is low only
    when every register is full and the output is stalled). Reset empties the pipeline.

    Members
    -------
    i : In(stream.Signature(StructLayout({"entries": ArrayLayout(entry, n), "tag": tag})))
    o : Out(same)
        The entries sorted, position 0 the smallest key.
    """

    def __init__(self, entry, n: int, key, tag=1, reg_every: int = 1, presorted: int = 1,
                 kind: SortNetwork = SortNetwork.BITONIC):
        if n < 1 or reg_every < 1 or n % presorted:
            raise ValueError(f"BitonicSorter needs n >= 1, reg_every >= 1 and presorted "
                             f"dividing n, got {n}, {reg_every}, {presorted}")
        bitonic_network(1, presorted)                   # checks presorted
        self._entry, self._n, self._key, self._reg_every = entry, n, key, reg_every
        self._presorted, self._kind = presorted, SortNetwork(kind)
        self.layout = data.StructLayout({"entries": data.ArrayLayout(entry, n), "tag": tag})
        super().__init__({
            "i": In(stream.Signature(self.layout)),
            "o": Out(stream.Signature(self.layout)),
        })

    @property
    def latency(self) -> int:
        return register_stages(self._n, self._reg_every, self._presorted)

    def elaborate(self, platform):
        m = Module()
        n, entry = self._n, self._entry
        stages = network(self._kind, n, self._presorted)
        if isinstance(entry, data.Layout):
            def view(v):
                return data.View(entry, v)
        else:
            def view(v):
                return v
        groups = [stages[s:s + self._reg_every] for s in range(0, len(stages), self._reg_every)]
        groups = groups or [[]]

        # Positions known to hold padding at elaboration (None); real positions hold values.
        pos = [Value.cast(self.i.payload.entries[k]) for k in range(n)]
        pos += [None] * ((1 << max(0, (n - 1).bit_length())) - n)
        tag = self.i.payload.tag
        valid_in = self.i.valid
        regs = []
        for r, group in enumerate(groups):
            for s, stage in enumerate(group):
                for a, b in stage:
                    if pos[b] is None:
                        continue                        # b is padding: a is already the min
                    if pos[a] is None:
                        pos[a], pos[b] = pos[b], None   # a fixed swap
                        continue
                    va, vb = pos[a], pos[b]
                    ka, kb = self._key(view(va)), self._key(view(vb))
                    swap = Signal(name=f"swap_{r}_{s}_{a}_{b}")
                    lo = Signal(len(va), name=f"c{r}_{s}_{a}")
                    hi = Signal(len(va), name=f"c{r}_{s}_{b}")
                    m.d.comb += [swap.eq(ka > kb), lo.eq(Mux(swap, vb, va)),
                                 hi.eq(Mux(swap, va, vb))]
                    pos[a], pos[b] = lo, hi
            # The pipeline register after this group of stages.
            valid = Signal(name=f"valid_{r}")
            reg = [None if p is None else Signal(len(p), name=f"r{r}_{k}")
                   for k, p in enumerate(pos)]
            reg_tag = Signal.like(tag, name=f"tag_{r}")
            regs.append((valid, reg, reg_tag, list(pos), tag, valid_in))
            pos, tag, valid_in = list(reg), reg_tag, valid

        # Advance chain from the output back: a register loads when it is empty or moves on.
        adv_next = self.o.ready
        for valid, reg, reg_tag, src, src_tag, src_valid in reversed(regs):
            adv = Signal(name=f"adv_{valid.name[6:]}")
            m.d.comb += adv.eq(~valid | adv_next)
            with m.If(adv):
                m.d.sync += [valid.eq(src_valid), reg_tag.eq(src_tag)]
                m.d.sync += [d.eq(s) for d, s in zip(reg, src, strict=True) if d is not None]
            adv_next = adv
        m.d.comb += self.i.ready.eq(adv_next)

        valid, reg, reg_tag = regs[-1][:3]
        assert all(p is not None for p in reg[:n]) and all(p is None for p in reg[n:])
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.tag.eq(reg_tag)]
        m.d.comb += [self.o.payload.entries[k].eq(reg[k]) for k in range(n)]
        return m
