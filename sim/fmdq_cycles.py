"""Cycles of the FMDQ SIMD-4 PE array (``dstar.hw.fmdq.pe_array.FmdqPEArray``), exactly, from the
golden model's groups and Horner bubbles (``dstar.golden.fmdq_pe``).

``array_cycles``: one run of units on the array, fed without gaps, from the first group's
acceptance to the last unit's ``o_unit_done`` inclusive (the RTL's count; the array's contract
gives each term):

* a unit ``u`` with ``g_u`` groups and ``b_u`` bubbles accepts its last group ``L_u`` at
  ``L_0 = g_0 + b_0 - 1`` and ``L_u = L_{u-1} + max(g_u + b_u, n_{u-1})`` (its write-out hold:
  ``n_{u-1}`` tokens of the previous unit);
* the run ends ``n_last + DRAIN_TAIL`` (4) cycles after ``L_last``.

``layer_cycles``: a layer ``(N, K) x (K, M_out)`` on ``n_arrays`` arrays sharing the group
stream, column block by column block, windows outer and token tiles inner (a window's weight
rows stay in the array while every tile runs it). Units without a slice are skipped except in
the first window, whose units write (overwrite) the tile's rows and so issue one empty group.
The weight window's ``window`` rows load at one row per cycle into the free buffer (the buffer
of window ``j - 2`` is free once that window's last group is accepted); a window's first group
waits for its rows. That loader is the layer sequencer's (not built yet): this part of the
model is the sequencer's specification, not yet checked against RTL.

``linear_cycles``: the FMDQ linear datapath (``dstar.hw.fmdq.linear.FmdqLinear``), exactly, and
checked against its RTL: every counter of a run from the encoded difference. The windows' encodes
run one after the other and overlap the replays (two banks of groups):

* encode: the window's sub-channels (tiles outer) enter the quantization unit, idle, one per
  cycle from its first beat's cycle ``a`` on (``dstar.sim.fmdq_qu_cycles.predict`` gives every
  update and group from there); it ends (``E``) the cycle after its last update or group,
  whichever is later. ``a = 2`` for the first window, else ``max(E', F) + 2``: ``E'`` the
  previous encode's end, ``F`` the cycle after the last group of the window handed two before
  this one is accepted (its bank's), if any;
* a window that issued a group is handed at ``E + 1`` and replayed in hand-over order: per
  column block a pass, loaded in ``min(W, K - j W)`` cycles (one cycle to start, one row per
  cycle, the rows usable two cycles after the last is addressed) once the window is handed,
  the loader is free and pass ``p - 2``'s last group is accepted (passes counted over the
  run); the groups follow the array's recurrence above across passes and windows, a window's
  first group fetched at ``E + 1`` at the earliest and valid the cycle after, a pass's first
  group also waiting for its rows;
* the run ends at ``L + n + DRAIN_TAIL + 1`` (``L`` the last group's acceptance, ``n`` its
  unit's tokens), or at the last window's ``E + 1`` if that is later (it issued nothing).
"""

import numpy as np

from dstar.golden.fmdq import LANES, FmdqEncoded, _shift_counts
from dstar.golden.fmdq_pe import unit_bubbles

from .fmdq_qu_cycles import Window, predict

__all__ = ["array_cycles", "unit_table", "layer_cycles", "DRAIN_TAIL", "linear_cycles",
           "qu_timing"]

#: Cycles from a unit's last accepted group to its ``o_unit_done``, beyond its ``n_tok`` rows.
DRAIN_TAIL = 4


def array_cycles(groups, bubbles, n_tok) -> int:
    """Cycles of one run of units (module docstring); every unit has at least one group."""
    g, b, n = (np.asarray(a, np.int64) for a in (groups, bubbles, n_tok))
    if g.size == 0:
        return 0
    if np.any(g < 1):
        raise ValueError("every unit of a run has at least one group")
    steps = np.maximum(g[1:] + b[1:], n[:-1])
    return int(g[0] + b[0] - 1 + steps.sum() + n[-1] + DRAIN_TAIL + 1)


def unit_table(enc: FmdqEncoded, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups, bubbles and tokens of every (window, tile) unit of ``enc``: int64 ``(n_windows,
    n_tiles)`` each, before the first window's empty units are given their group."""
    k = enc.shift.shape[1]
    n = enc.q.shape[0]
    tok = np.minimum(enc.token_tile, n - enc.token_tile * np.arange(enc.n_tiles))
    g, b = [], []
    for c in range(0, k, window):
        sh, wd = enc.shift[:, c:c + window], enc.width[:, c:c + window]
        g.append(((_shift_counts(sh, wd) + LANES - 1) // LANES).sum(axis=1))
        b.append(unit_bubbles(sh, wd))
    return np.array(g, np.int64), np.array(b, np.int64), np.broadcast_to(tok, (len(g), len(tok)))


def layer_cycles(enc: FmdqEncoded, window: int, m_out: int, columns: int,
                 n_arrays: int = 1) -> int:
    """Cycles of one layer step on the arrays (module docstring)."""
    g, b, n = unit_table(enc, window)
    g = g.copy()
    g[0] = np.maximum(g[0], 1)                 # the first window writes every tile's rows
    blocks = -(-m_out // (columns * n_arrays))
    return blocks * _run_with_loads(g, b, n, window)


def _run_with_loads(g, b, n, window: int) -> int:
    """One column block: the unit recurrence with each window's first group waiting for its
    rows (loaded one per cycle from cycle 0, into buffer ``j % 2``)."""
    last = -1                      # L of the previous unit
    prev_n = 0
    load_end = [0, 0]              # per buffer: the cycle its window's rows are all written
    loader = 0                     # the cycle the loader is free
    win_last = [-1, -1]            # per buffer: L of the last unit of its window
    done = 0
    for j in range(g.shape[0]):
        start = max(loader, win_last[j % 2] + 1)
        load_end[j % 2] = loader = start + window
        first = True
        for u in np.flatnonzero(g[j]):
            f = last + 1
            if first:
                f = max(f, load_end[j % 2])
                first = False
            last = max(f + g[j, u] + b[j, u] - 1, last + prev_n) if last >= 0 else \
                f + g[j, u] + b[j, u] - 1
            prev_n = n[j, u]
            done = last + prev_n + DRAIN_TAIL + 1
        win_last[j % 2] = last
    return int(done)


def qu_timing(window: int) -> tuple[int, int, int]:
    """``(sort_latency, buffers, capacity)`` of ``FmdqLinear``'s quantization unit (one
    sub-channel a beat, its default ordering stage ``DEFAULT_ORDER``, a register after every
    comparator stage of a network, the default buffers; ``capacity``: the windows the ordering
    stage holds, ``QuantUnit.order_capacity``)."""
    from dstar.hw.fmdq.quant_unit import DEFAULT_ORDER, default_buffers, sort_latency
    lat = sort_latency(window, 1, DEFAULT_ORDER)
    buffers = default_buffers(window, 1, lat)
    return lat, buffers, lat if DEFAULT_ORDER.is_network else buffers


def linear_cycles(enc: FmdqEncoded, window: int, n_mt: int, *, sort_latency: int | None = None,
                  buffers: int | None = None, capacity: int | None = None) -> dict[str, int]:
    """The counters of one ``FmdqLinear`` run on the difference ``enc`` over ``n_mt`` column
    blocks (``dstar.sim.fmdq_linear_io.COUNTERS``; the quantization unit's ``sort_latency``,
    ``buffers`` and ordering ``capacity``, ``qu_timing``'s by default)."""
    if sort_latency is None or buffers is None:
        sort_latency, buffers, capacity = qu_timing(window)
    g, b, n = unit_table(enc, window)
    k = enc.shift.shape[1]
    n_win = g.shape[0]
    issued = (g > 0) | (np.arange(n_win) == 0)[:, None]
    g_iss = np.where(issued, np.maximum(g, 1), 0)
    neg = -(1 << 60)
    done = []                       # per handed window: the cycle its bank is free again
    accept_last, stall = [], 0      # per pass: its last group's acceptance
    load_free, prev_l, prev_n, enc_end, end = 0, None, 0, neg, 0
    for j in range(n_win):
        rows = min(window, k - j * window)
        free = done[-2] if len(done) >= 2 else neg
        a0 = 2 if j == 0 else max(enc_end, free) + 2      # the window's first beat
        qu = predict([[Window(rows, int(g[j, t]), j == 0)] for t in range(enc.n_tiles)],
                     sort_latency, buffers, capacity)
        enc_end = a0 + max(qu.updates[-1], qu.groups[-1] if qu.groups else 0) + 1
        end = enc_end + 1
        if not issued[j].any():                     # nothing to replay
            continue
        handed = enc_end + 1                        # the loader and the replayer see it
        # The replayer's read register, then its second register (stage S) in front of the
        # arrays: a handed window's first group is offered two cycles after it is seen.
        valid_at = handed + 2 if prev_l is None else max(handed + 2, prev_l + 1)
        for _ in range(n_mt):
            p = len(accept_last)
            c = max(load_free, handed, accept_last[p - 2] + 1 if p >= 2 else handed)
            load_free = c + rows + 1
            ready = c + rows + 2
            stall += max(0, ready - valid_at)
            first = max(valid_at, ready)
            for t in np.flatnonzero(issued[j]):
                gu, bu = int(g_iss[j, t]), int(b[j, t])
                last = first + gu + bu - 1
                if prev_l is not None:
                    last = max(last, prev_l + prev_n)
                prev_l, prev_n = last, int(n[j, t])
                first = valid_at = last + 1
            accept_last.append(prev_l)
        done.append(prev_l + 1)
    st = enc.stats(window)
    return {"cycles": max(end, prev_l + prev_n + DRAIN_TAIL + 1), "stall_load": stall,
            "count_groups": int(g_iss.sum()), "count_units": int(issued.sum()),
            "count_clipped": st["clipped"], "count_saturated": st["saturated"]}
