"""Cycle model of the FMDQ quantization unit (``dstar.hw.fmdq.quant_unit.QuantUnit``).

Given the tiles' windows (their beats and golden's group counts), ``predict`` gives the cycle in
which every update and every group is offered, with the input offered from cycle 0 without gaps
and both outputs always ready; the test of the unit checks it against the RTL cycle for cycle.
It follows the unit's structure window by window:

* a beat's update is offered ``FRONT_STAGES`` (3) cycles after the beat enters, one beat per
  cycle, except that a window's first beat waits for a free code buffer;
* a window's last beat hands its entries to the ordering stage (a sort network, or the bucket
  stage's FIFO), whose output they reach ``sort_latency`` cycles later; the packer loads a
  window when it has finished the previous one (in the same cycle) and spends
  ``max(groups, 1)`` cycles on it, one group per cycle;
* a group is offered ``PACK_STAGES + 1`` cycles after the packer forms it (the skid register,
  then its buffer read); an empty window offers nothing, except a tile's first, which offers
  one empty group;
* a buffer is free again the cycle after its window's last group is read (the cycle it is
  offered), or the cycle after the packer drops an empty window or passes on its one empty
  group (which reads no buffer).

Exact while the ordering stage never back-pressures the input, which the unit guarantees when
``buffers <= capacity``, the windows the stage holds (every window in it holds a buffer): a
network's registers (``sort_latency``, the default), the bucket stage's FIFO (``buffers``:
``QuantUnit.order_capacity``); ``predict`` refuses other configurations.
"""

from dataclasses import dataclass

import numpy as np

from dstar.golden.fmdq import fmdq_encode, schedule_tile

__all__ = ["Window", "windows_of", "predict", "Prediction"]

FRONT_STAGES = 3
#: Registers between the packer and the code buffer's read (``QuantUnit._skid``).
PACK_STAGES = 1


@dataclass(frozen=True)
class Window:
    """One sort window of a tile (a unit): its input ``beats``, golden's ``groups`` and whether
    it is the tile's first window (empty, it still issues one group)."""
    beats: int
    groups: int
    first: bool = False


def windows_of(d, token_tile: int, e_max: int, tau: int, window: int,
               per_beat: int) -> list[Window]:
    """The windows of one tile ``d`` (``(N, K)``, ``N <= token_tile``) as the unit sees them."""
    d = np.asarray(d)
    enc = fmdq_encode(d, token_tile, e_max, tau)
    k = d.shape[1]
    out = []
    for c in range(0, k, window):
        g = schedule_tile(enc.shift[0, c:c + window], enc.width[0, c:c + window], window).groups
        out.append(Window(-(-min(window, k - c) // per_beat), g, c == 0))
    return out


@dataclass
class Prediction:
    """``updates``: the cycle each update is offered (one per input beat); ``groups``: the cycle
    each group is offered;
    ``cycles``: the cycle after the last group; ``buffer_waits``: cycles a window's first beat
    waited for a free buffer."""
    updates: list[int]
    groups: list[int]
    cycles: int
    buffer_waits: int

    def groups_per_cycle(self) -> float:
        return len(self.groups) / max(1, self.cycles)


def predict(tiles: list[list[Window]], sort_latency: int, buffers: int,
            capacity: int | None = None) -> Prediction:
    """The unit's cycles for ``tiles`` (each a list of ``Window``s; windows in input order);
    ``capacity``: the windows the ordering stage holds (``sort_latency`` by default)."""
    capacity = sort_latency if capacity is None else capacity
    if buffers > capacity:
        raise ValueError(f"the model needs buffers <= capacity (no back-pressure from the "
                         f"ordering stage), got {buffers} > {capacity}")
    neg = -(1 << 60)
    updates, groups = [], []
    clears: list[int | None] = []       # per window so far: the cycle its buffer is free
    fire, beat, waits = neg, 0, 0
    load_prev, done_prev = neg, neg     # last cycle the sort output held / the packer worked
    for tile in tiles:
        for win in tile:
            for b in range(win.beats):
                t = max(fire + 1, beat + FRONT_STAGES)
                if b == 0:
                    t0 = t
                    while sum(c is None or c > t for c in clears) >= buffers:
                        later = [c for c in clears if c is not None and c > t]
                        if not later:
                            raise RuntimeError("the unit would deadlock (too few buffers)")
                        t = min(later)
                    waits += t - t0
                fire, beat = t, beat + 1
                updates.append(t)
            me = len(clears)
            clears.append(None)
            ready = max(fire + sort_latency, load_prev + 1)
            load = max(ready, done_prev)
            start = load + 1
            load_prev, done_prev = load, start + max(win.groups, 1) - 1
            groups += [start + g + 1 + PACK_STAGES
                       for g in range(win.groups or int(win.first))]
            # Free after the last group's read, or (no group but a tile's first window's
            # empty one, which reads nothing) as the packer drops or passes the window.
            clears[me] = start + (win.groups + PACK_STAGES if win.groups else 1)
    return Prediction(updates, groups, (max(groups) + 1) if groups else 0, waits)
