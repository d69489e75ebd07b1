"""The extremes of a few values from one level of pairwise comparisons: a tournament, not a
tree of compare-and-select stages, so that a stage that needs a maximum or a minimum of ``n``
values is one comparator deep instead of ``log2 n`` (the ECP5 Fmax path of the softmax loader
and the quantization unit's max extraction)."""

import operator
from functools import reduce

from amaranth.hdl import Cat, Const, Module, Mux, Signal

__all__ = ["extremes", "pick"]


def extremes(m: Module, vals, name: str, *, top: bool = True, bottom: bool = True):
    """One-hot selects ``(top, bottom)`` of the maximum and the minimum of ``vals`` (values of
    one signedness), from the ``n (n - 1) / 2`` comparisons ``vals[i] >= vals[k]``, ``i < k``:
    in the order of ``vals`` by value, ties by index, ``top`` selects the first (the first
    index holding the maximum) and ``bottom`` the last (the last index holding the minimum).
    Either is ``None`` when not asked for."""
    n = len(vals)
    ge = {}
    for i in range(n):
        for k in range(i + 1, n):
            ge[i, k] = Signal(name=f"{name}_ge{i}_{k}")
            m.d.comb += ge[i, k].eq(vals[i] >= vals[k])

    def before(i, k):
        return ge[i, k] if i < k else ~ge[k, i]

    def one_hot(first: bool, kind: str) -> list:
        out = []
        for i in range(n):
            s = Signal(name=f"{name}_{kind}{i}")
            m.d.comb += s.eq(Cat(*[before(i, k) if first else ~before(i, k)
                                   for k in range(n) if k != i], Const(1, 1)).all())
            out.append(s)
        return out

    return (one_hot(True, "top") if top else None, one_hot(False, "bottom") if bottom else None)


def pick(sel, vals):
    """The value of ``vals`` the one-hot ``sel`` selects (an OR of masked values)."""
    return reduce(operator.or_, [Mux(s, v, 0) for s, v in zip(sel, vals, strict=True)])
