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
with the RTL exactly; ``tests/test_cycle_model.py`` checks ``dstar.sim.cycle_model`` against it.
"""

from collections import deque

import numpy as np
from dstar.golden.encoder import HIGH
from dstar.sim.cycle_model import CycleReport

__all__ = ["predict", "slice_masks"]


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
    rots = (lane_rotations(padded, cfg.k_tile, geo.rotation, order)
            if cfg.packing == "compact" else [0] * len(order))
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


def predict(cfg, enc, k: int, m: int, lane_rotation: int = 0,
            max_cycles: int = 50_000_000) -> CycleReport:
    """Cycles of one step of a ``K`` x ``M`` layer whose encoded difference is ``enc``
    (``enc.q`` is ``(N, K)``), on ``LinearLayer(cfg, lane_rotation)``."""
    from dstar.hw.geometry import Geometry

    geo = Geometry(cfg, lane_rotation)
    n = enc.q.shape[0]
    g_n, s_n = cfg.group, geo.slice_groups
    depth_q, depth_p = cfg.lane_fifo_depth, geo.psum_depth
    depth_t = geo.token_depth
    n_kt, n_mt = geo.n_kt(k), geo.n_mt(m)
    n_pass = n_kt * n_mt
    lane_masks, grp_masks, low_n, high_n = slice_masks(enc, geo, n_kt, n_mt)
    compact = cfg.packing == "compact"

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
            for lane in range(g_n):
                r = rem[lane]
                close = False
                if r:
                    rest = r & (r - 1)
                    close = rest == 0
                    issued[lane] = True
                    b = _lowbit(r)
                    j = b >> 1
                    if cur_kind[lane][j]:
                        cnt_high += 1
                    else:
                        cnt_low += 1
                if (r == 0 or close) and queues[lane] and used[lane] < depth_p:
                    loads[lane] = queues[lane][0]
                push_close[lane] = close
            if out is not None:
                t, kt, last, si = out
                masks = lane_masks[si]
                room = all(masks[lane] == 0 or len(queues[lane]) < depth_q
                           for lane in range(g_n))
                ready = tokq_rdy and room
            else:
                ready = False
        else:
            r = ls_rem
            close = False
            if r:
                rest = r & (r - 1)
                close = rest == 0
                b = _lowbit(r)
                j, second = b >> 1, b & 1
                t0, kt0 = ls_cur
                lo, hi = low_n[t0][kt0][j], high_n[t0][kt0][j]
                useful = hi + (0 if second else lo)
                cnt_high += hi
                cnt_low += 0 if second else lo
                cnt_zero += g_n - useful
                acct["zero"] += g_n - useful
                for lane in range(g_n):
                    issued[lane] = True
                    push_close[lane] = close
            free = r == 0 or close
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
            elif not pending:
                acct["drain"] += 1
            elif pending and not (f_p < l_p) and not (queues[lane] if compact else ls_rem):
                acct["load"] += 1
            elif compact and queues[lane] and used[lane] >= depth_p:
                acct["credit"] += 1
            elif not compact and ls_used >= depth_p:
                acct["credit"] += 1
            else:
                acct["starved"] += 1

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
            for lane in range(g_n):
                if loads[lane] is not None:
                    queues[lane].popleft()
                    rem[lane], cur_kind[lane] = loads[lane]
                elif rem[lane]:
                    rem[lane] &= rem[lane] - 1
                used[lane] += int(loads[lane] is not None) - (pop_mask >> lane & 1)
            if take:
                t, kt, last, si = out
                masks = lane_masks[si]
                for lane in range(g_n):
                    if masks[lane]:
                        mk = masks[lane]
                        kinds = [bool(mk >> (2 * j + 1) & 1) for j in range(s_n)]
                        queues[lane].append((mk, kinds))
                tokq.append((sum(1 << lane for lane in range(g_n) if masks[lane]), last))
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
        # front end
        if cmd_fire:
            if f_t == n - 1:
                f_t, f_p = 0, f_p + 1
                if f_mt == n_mt - 1:
                    f_mt, f_kt = 0, f_kt + 1
                else:
                    f_mt += 1
            else:
                f_t += 1
        # loader
        if l_active:
            if l_row == cfg.k_tile - 1:
                l_active, l_p, l_row = 0, l_p + 1, 0
                if l_mt == n_mt - 1:
                    l_mt, l_kt = 0, l_kt + 1
                else:
                    l_mt += 1
            else:
                l_row += 1
        elif l_p < n_pass and l_p < d_p + 2:
            l_active = 1
        # run / counters
        cycles += 1
        if pass_done:
            d_p += 1
            if d_p == n_pass:
                run = False
    rep = CycleReport(cycles, stall_load, cnt_low, cnt_high, cnt_zero, g_n, acct)
    assert rep.useful + sum(acct.values()) == g_n * cycles, "unaccounted lane cycles"
    return rep
