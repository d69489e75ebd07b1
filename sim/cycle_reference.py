"""Reference cycle model of the ``dstar_linear`` wrapper (``dstar.hw.linear.LinearLayer``), cycle by
cycle: the executable specification ``dstar.sim.cycle_model`` (event times, batched, what the
benchmark and the RTL tests use) is tested against. Slow (seconds per real layer-step).

Given a layer's shape and the encoded difference of a step (``dstar.golden.encoder.Encoded``), it
replays the wrapper's control registers cycle by cycle (tile loader, front end, encoder pipeline,
dispatcher lane queues and sequencers, partial-sum credits, in-order reduction) without any
datapath, and returns the cycles ``busy`` is high, the op counters, and an account of every lane
cycle that is not a useful nibble op, in the categories ``dstar.sim.cycle_model`` defines (``load``,
``fill``, ``drain``, ``credit``, ``starved``, ``zero``).

``lane_cycles = G * cycles = useful + sum(account)`` holds by construction. The model must agree
with the RTL exactly; ``tests/sim/test_cycle_model.py`` checks ``dstar.sim.cycle_model`` against it.
"""

from collections import deque

import numpy as np

from dstar.config import Packing
from dstar.golden.encoder import HIGH
from dstar.sim.cycle_model import CycleReport, group_flags

__all__ = ["predict", "slice_masks", "LANE_QUEUES"]

#: Per ``Packing``, which dispatcher ``predict`` replays: per-lane bundle queues and sequencers
#: (True: compact), or one group sequencer all lanes follow (False: lockstep).
LANE_QUEUES: dict[Packing, bool] = {Packing.LOCKSTEP: False, Packing.COMPACT: True}


def slice_masks(enc, geo, n_kt: int, n_mt: int):
    """Per slice in issue order (compact: its lanes' remaining-pass masks, rotation from
    ``dstar.golden.dispatch.lane_rotations``), and per ``(token, kt)`` the group pass mask
    (lockstep), as Python ints (bit ``2j``: pass 0 of group j, ``2j+1``: pass 1)."""
    from dstar.golden.dispatch import lane_rotations

    cfg = geo.cfg
    g_n, s_n = cfg.group, cfg.k_tile // cfg.group
    n, k = enc.q.shape
    q = np.zeros((n, n_kt * cfg.k_tile), dtype=np.int64)
    q[:, :k] = enc.q
    cls = np.zeros((n, n_kt * cfg.k_tile), dtype=np.int64)
    cls[:, :k] = enc.cls
    padded = type(enc)(q=q, cls=cls, shift=enc.shift, clipped=enc.clipped,
                       saturated=enc.saturated, group=enc.group)
    order = [(t, kt) for kt in range(n_kt) for _ in range(n_mt) for t in range(n)]
    rots = lane_rotations(padded, cfg.k_tile, geo.rotation, order)     # all 0 if R = 1
    cls = cls.reshape(n, n_kt, s_n, g_n)                       # [t, kt, j, element]
    lane = []
    for (t, kt), r in zip(order, rots, strict=True):
        masks = []
        for ln in range(g_n):
            e = geo.lane_element(ln, r)
            mk = 0
            for j in range(s_n):
                c = cls[t, kt, j, e]
                mk |= (int(c != 0) << (2 * j)) | (int(c == HIGH) << (2 * j + 1))
            masks.append(mk)
        lane.append(masks)
    nz, hi = cls != 0, cls == HIGH
    weights_lo = 1 << (2 * np.arange(s_n))
    grp = (np.einsum("tkj,j->tk", nz.any(-1).astype(np.int64), weights_lo)
           + np.einsum("tkj,j->tk", hi.any(-1).astype(np.int64), 2 * weights_lo))
    # Lockstep op kinds per group pass: useful LOW, useful HIGH, idle lanes.
    low_n = (nz & ~hi).sum(-1)
    high_n = hi.sum(-1)
    return lane, grp.tolist(), low_n.tolist(), high_n.tolist()


def _lowbit(x):
    return (x & -x).bit_length() - 1


def _step(i: int, n: int) -> int:
    """``i + 1`` modulo ``n``."""
    return 0 if i == n - 1 else i + 1


def _compact_issue(rem, cur_kind, queues, used, depth_p, issued, push_close, loads) -> int:
    """One cycle of the compacting lane sequencers: each lane with remaining nibble ops issues
    its lowest (``issued``, ``push_close`` on its last), and a free lane with credit takes its
    queue's next bundle (``loads``). Returns the HIGH ops issued (the others are LOW)."""
    n_high = 0
    for lane, r in enumerate(rem):
        close = False
        if r:
            close = (r & (r - 1)) == 0
            issued[lane] = True
            n_high += bool(cur_kind[lane][_lowbit(r) >> 1])
        if (r == 0 or close) and queues[lane] and used[lane] < depth_p:
            loads[lane] = queues[lane][0]
        push_close[lane] = close
    return n_high


def _lockstep_issue(r: int, cur, low_n, high_n) -> tuple[bool, int, int]:
    """One cycle of the lockstep group sequencer on the remaining op mask ``r`` of the slice
    ``cur = (t, kt)``: whether this op closes the slice, and its HIGH and LOW lane ops (the
    other lanes run zero operands)."""
    if not r:
        return False, 0, 0
    b = _lowbit(r)
    j, second = b >> 1, b & 1
    t, kt = cur
    return (r & (r - 1)) == 0, high_n[t][kt][j], 0 if second else low_n[t][kt][j]


def _compact_update(rem, cur_kind, queues, used, loads, pop_mask: int):
    """Register update of the compacting lane sequencers: a loaded bundle replaces the lane's
    remaining ops (else its lowest op is done), and the credits follow loads and pops."""
    for lane in range(len(rem)):
        if loads[lane] is not None:
            queues[lane].popleft()
            rem[lane], cur_kind[lane] = loads[lane]
        elif rem[lane]:
            rem[lane] &= rem[lane] - 1
        used[lane] += int(loads[lane] is not None) - (pop_mask >> lane & 1)


def _compact_take(queues, masks, s_n: int) -> int:
    """A slice enters the compacting dispatcher: each lane with ops queues its bundle (op mask,
    HIGH flag per group); returns the slice's lane mask for the reduction."""
    for lane, mk in enumerate(masks):
        if mk:
            queues[lane].append((mk, [bool(mk >> (2 * j + 1) & 1) for j in range(s_n)]))
    return sum(1 << lane for lane, mk in enumerate(masks) if mk)


def _idle_cause(pending: bool, tile_ready: bool, waiting, queued: bool, no_credit: bool) -> str:
    """Why a lane that has started is idle this cycle (``CycleReport.accounts``)."""
    if not pending:
        return "drain"
    if not tile_ready and not waiting:
        return "load"
    if queued and no_credit:
        return "credit"
    return "starved"


def predict(cfg, enc, k: int, m: int, max_cycles: int = 50_000_000) -> CycleReport:
    """Cycles of one step of a ``K`` x ``M`` layer whose encoded difference is ``enc``
    (``enc.q`` is ``(N, K)``), on ``LinearLayer(cfg)``."""
    from dstar.hw.geometry import Geometry

    geo = Geometry(cfg)
    n = enc.q.shape[0]
    g_n, s_n = cfg.group, geo.slice_groups
    depth_q, depth_p = cfg.lane_fifo_depth, geo.psum_depth
    depth_t = geo.token_depth
    n_kt, n_mt = geo.n_kt(k), geo.n_mt(m)
    n_pass = n_kt * n_mt
    lane_masks, grp_masks, low_n, high_n = slice_masks(enc, geo, n_kt, n_mt)
    compact = LANE_QUEUES[cfg.packing]

    # Wrapper registers (state right after the start edge).
    l_active, l_row, l_p, l_kt, l_mt = 0, 0, 0, 0, 0
    f_p, f_t, f_kt, f_mt, d_p = 0, 0, 0, 0, 0
    cycles = stall_load = 0
    # Encoder pipeline: stage-1 and output registers hold (t, kt, last) or None.
    s1 = out = None
    f_s = 0                            # slices issued so far (index into lane_masks)
    # Reduction: slice queue of (mask, last), partial-sum levels, stage-B (valid, last).
    tokq = deque()
    plevel = [0] * g_n
    b_valid = b_last = False
    # Dispatcher.
    queues = [deque() for _ in range(g_n)]
    rem = [0] * g_n
    used = [0] * g_n
    cur_kind = [None] * g_n            # lockstep: (t, kt) of the slice in the sequencer
    ls_rem, ls_used, ls_cur = 0, 0, None
    started = [False] * g_n
    cnt_low = cnt_high = cnt_zero = 0
    acct = dict.fromkeys(("load", "fill", "drain", "credit", "starved", "zero"), 0)

    run = True
    while run:
        if cycles >= max_cycles:
            raise RuntimeError("cycle model did not finish")
        pending = f_p < n_pass
        # --- reduction, stage A ---
        fire, pop_mask, head_last = False, 0, False
        if tokq:
            mask, head_last = tokq[0]
            if all(plevel[lane] > 0 for lane in range(g_n) if mask >> lane & 1):
                fire, pop_mask = True, mask
        pass_done = b_valid and b_last
        tokq_rdy = len(tokq) < depth_t
        # --- dispatcher ---
        push_close = [False] * g_n
        loads = [None] * g_n
        issued = [False] * g_n
        if compact:
            n_high = _compact_issue(rem, cur_kind, queues, used, depth_p, issued, push_close,
                                    loads)
            cnt_high += n_high
            cnt_low += sum(issued) - n_high
            if out is not None:
                t, kt, last, si = out
                masks = lane_masks[si]
                room = all(masks[lane] == 0 or len(queues[lane]) < depth_q
                           for lane in range(g_n))
                ready = tokq_rdy and room
            else:
                ready = False
        else:
            close, hi, lo = _lockstep_issue(ls_rem, ls_cur, low_n, high_n)
            if ls_rem:
                cnt_high, cnt_low = cnt_high + hi, cnt_low + lo
                cnt_zero += g_n - hi - lo
                acct["zero"] += g_n - hi - lo
                issued, push_close = [True] * g_n, [close] * g_n
            free = ls_rem == 0 or close
            if out is not None:
                t, kt, last, _ = out
                nonzero = grp_masks[t][kt] != 0
                ready = tokq_rdy and free and (not nonzero or ls_used < depth_p)
            else:
                ready = False
        take = out is not None and ready
        adv = out is None or ready
        # --- front end ---
        cmd_valid = pending and f_p < l_p
        cmd_fire = cmd_valid and adv
        if pending and not f_p < l_p:
            stall_load += 1

        # --- account for idle lanes (before updating state) ---
        for lane in range(g_n):
            if issued[lane]:
                started[lane] = True
                continue
            if not started[lane]:
                acct["fill" if l_p > 0 or not pending else "load"] += 1
            else:
                waiting = queues[lane] if compact else ls_rem
                credit = used[lane] if compact else ls_used
                acct[_idle_cause(pending, f_p < l_p, waiting, bool(queues[lane]) or not compact,
                                 credit >= depth_p)] += 1

        # --- register updates ---
        # reduction
        if fire:
            tokq.popleft()
        for lane in range(g_n):
            p = pop_mask >> lane & 1
            plevel[lane] += int(push_close[lane]) - p
            if plevel[lane] > depth_p or plevel[lane] < 0:
                raise AssertionError("partial-sum queue over/underflow (model)")
        b_valid, b_last = fire, fire and head_last
        # dispatcher
        if compact:
            _compact_update(rem, cur_kind, queues, used, loads, pop_mask)
            if take:
                t, kt, last, si = out
                tokq.append((_compact_take(queues, lane_masks[si], s_n), last))
        else:
            nonzero_take = False
            if take:
                t, kt, last, _ = out
                ls_cur = (t, kt)
                ls_rem = grp_masks[t][kt]
                nonzero_take = ls_rem != 0
                tokq.append((((1 << g_n) - 1) if nonzero_take else 0, last))
            elif ls_rem:
                ls_rem &= ls_rem - 1
            ls_used += int(nonzero_take) - (pop_mask & 1)
        # encoder pipeline
        if adv:
            out = s1
            s1 = (f_t, f_kt, f_t == n - 1, f_s) if cmd_fire else None
            f_s += cmd_fire
        # front end: tokens innermost, then column blocks, then K tiles
        if cmd_fire:
            f_t = _step(f_t, n)
            if f_t == 0:
                f_p += 1
                f_mt, f_kt = _step(f_mt, n_mt), f_kt + (f_mt == n_mt - 1)
        # loader: one row per cycle, at most two tiles ahead of the finished passes
        if l_active:
            l_row = _step(l_row, cfg.k_tile)
            if l_row == 0:
                l_active, l_p = 0, l_p + 1
                l_mt, l_kt = _step(l_mt, n_mt), l_kt + (l_mt == n_mt - 1)
        elif l_p < n_pass and l_p < d_p + 2:
            l_active = 1
        # run / counters
        cycles += 1
        if pass_done:
            d_p += 1
            if d_p == n_pass:
                run = False
    rep = CycleReport(cycles, stall_load, cnt_low, cnt_high, cnt_zero, g_n, acct,
                      *group_flags(enc))
    assert rep.useful + sum(acct.values()) == g_n * cycles, "unaccounted lane cycles"
    return rep
