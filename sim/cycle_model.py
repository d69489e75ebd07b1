"""Exact cycle model of the ``dstar_linear`` wrapper (``dstar.hw.linear.LinearLayer``).

Given a layer's shape and the encoded difference of a step (``dstar.golden.encoder.Encoded``), it
returns the cycles ``busy`` is high, the op counters, and an account of every lane cycle that is
not a useful nibble op:

``load``
    the front end waits for a weight tile (the first tile of a run, or a tile that is not
    loaded yet because slices are fewer than the ``k_tile`` cycles a load takes);
``fill``
    before the lane's first op of the run (encoder and dispatcher pipeline);
``drain``
    after the front end has issued every slice (lanes that finished early, and the reduction's
    write-back at the end);
``credit``
    the lane has a bundle queued but all its partial-sum credits are taken (it runs too far ahead
    of the slowest lane: imbalance);
``starved``
    the lane has nothing queued while the front end is running (the front end's one slice per
    cycle, or back-pressure from another lane's full queue: imbalance);
``zero``
    lockstep only: a lane issuing an op on a ZERO element or the empty second pass of a LOW one.

``lane_cycles = G * cycles = useful + sum(account)`` holds by construction.

How: instead of replaying the wrapper cycle by cycle (``dstar.sim.cycle_reference``, the executable
specification this model is tested against), it computes, slice by slice in issue order, the
cycle of each event as the maximum of the events it waits for (every wait in the wrapper is on a
condition that, once true, stays true until the event happens):

* ``C[s]`` the front end issues slice ``s`` (its tile is loaded, the encoder pipeline moves);
* ``O[s]`` it reaches the encoder's output register, ``P[s]`` the dispatcher takes it (room in
  the queues of the lanes it needs, in the reduction's slice queue; lockstep: sequencer free,
  a partial-sum credit);
* ``L[s, l]`` lane ``l`` loads its bundle (lane free, bundle queued, credit back), its ops
  issue in the next ``cost`` cycles;
* ``F[s]`` the reduction takes the slice (in order, once every lane of it has closed); the
  weight loader starts tile ``p`` once pass ``p - 2`` is written back.

The compacting dispatcher's rotation of each slice depends only on the slice sequence
(``slice_rotations``), so the lane costs are known before the recurrences run. The recurrences
run over a batch of encodings of the same layer shape at once (NumPy over batch x lanes), then
the idle lane cycles are classified gap by gap from those event times. ``predict_batch`` is
what the benchmark uses; the RTL tests (``tests/hw/test_linear.py`` and the cocotb tests)
assert ``predict`` equals the measured counters, and ``tests/sim/test_cycle_model.py`` that it
equals the reference model.
"""

from dataclasses import dataclass, field

import numpy as np

from dstar.config import Packing
from dstar.golden.encoder import HIGH, LOW

__all__ = ["CycleReport", "predict", "predict_batch", "slice_costs", "EVENT_MODELS"]

ACCOUNTS = ("load", "fill", "drain", "credit", "starved", "zero")


@dataclass
class CycleReport:
    cycles: int
    stall_load: int
    count_low: int
    count_high: int
    count_zero: int
    lanes: int
    account: dict = field(default_factory=dict)
    count_clipped: int = 0          # the step's clipped and saturated groups (the encoder's)
    count_saturated: int = 0

    @property
    def useful(self) -> int:
        return self.count_low + self.count_high

    @property
    def utilization(self) -> float:
        """Useful lane cycles over all lane cycles."""
        return self.useful / (self.lanes * self.cycles) if self.cycles else 0.0

    def counters(self) -> dict:
        return {"cycles": self.cycles, "stall_load": self.stall_load,
                "count_low": self.count_low, "count_high": self.count_high,
                "count_zero": self.count_zero, "count_clipped": self.count_clipped,
                "count_saturated": self.count_saturated}


def group_flags(enc) -> tuple[int, int]:
    """The clipped and saturated groups of an encoded step (the encoder's counters)."""
    return int(np.count_nonzero(enc.clipped)), int(np.count_nonzero(enc.saturated))


def slice_costs(enc, geo, n_kt: int):
    """``(element, group)``: per slice ``[t, kt]``, the nibble ops of each in-group element
    over the slice's groups (``(N, n_kt, G)``; the compacting strategy gives each to one lane)
    and the lockstep sequencer's group passes (``(N, n_kt)``)."""
    cfg = geo.cfg
    g_n, s_n = cfg.group, cfg.k_tile // cfg.group
    n, k = enc.q.shape
    cls = np.zeros((n, n_kt * cfg.k_tile), dtype=np.int8)
    cls[:, :k] = enc.cls
    cls = cls.reshape(n, n_kt, s_n, g_n)                       # [t, kt, j, element]
    ops = (cls != 0).astype(np.int32) + (cls == HIGH)
    group = ((cls != 0).any(-1).astype(np.int32) + (cls == HIGH).any(-1)).sum(-1)
    return ops.sum(2), group


def slice_rotations(geo, elem, n_mt):
    """Rotation the compacting dispatcher gives every slice, in issue order, ``(n_pass * N,
    B)`` (``elem[t, kt, b, e]``: ops of each element); the rule is
    ``dstar.golden.dispatch.lane_rotations``'s, which ``tests/sim/test_cycle_model.py`` checks this
    against."""
    n, n_kt, batch, g_n = elem.shape
    s_n = n_kt * n_mt * n
    r_n = geo.rotation
    rot = np.zeros((s_n, batch), dtype=np.int64)
    if r_n == 1:
        return rot
    perm = np.array([[geo.lane_element(lane, r) for lane in range(g_n)] for r in range(r_n)])
    excess = np.zeros((batch, g_n), dtype=np.int64)
    rows = np.arange(batch)
    for i in range(s_n):
        t, kt = i % n, i // (n * n_mt)
        cand = elem[t, kt][:, perm]                            # [b, r, l]
        score = np.einsum("bl,brl->br", excess, cand)
        r = (score * r_n + (np.arange(r_n) - t) % r_n).argmin(-1)
        rot[i] = r
        excess = excess + cand[rows, r]
        excess = np.minimum(excess - excess.min(-1, keepdims=True), geo.excess_max)
    return rot


def lane_costs(geo, elem, n_mt):
    """Ops of each lane's bundle of every slice in issue order, ``(n_pass * N, B, G)``."""
    n, n_kt, batch, g_n = elem.shape
    rot = slice_rotations(geo, elem, n_mt)
    perm = np.array([[geo.lane_element(lane, r) for lane in range(g_n)]
                     for r in range(geo.rotation)])
    s = np.arange(rot.shape[0])
    e = elem[(s % n)[:, None], (s // (n * n_mt))[:, None], np.arange(batch)[None, :]]
    return np.take_along_axis(e, perm[rot], axis=2)


def predict(cfg, enc, k: int, m: int) -> CycleReport:
    """Cycles of one step of a ``K`` x ``M`` layer whose encoded difference is ``enc``
    (``enc.q`` is ``(N, K)``), on ``LinearLayer(cfg)``."""
    return predict_batch(cfg, [enc], k, m)[0]


def predict_batch(cfg, encs, k: int, m: int) -> list[CycleReport]:
    """``predict`` for several encodings of the same layer (same ``N``, ``K``, ``M``)."""
    from dstar.hw.geometry import Geometry

    geo = Geometry(cfg)
    n = encs[0].q.shape[0]
    if any(e.q.shape != encs[0].q.shape for e in encs):
        raise ValueError("predict_batch: encodings of different shapes "
                         f"{sorted({e.q.shape for e in encs})}")
    n_kt, n_mt = geo.n_kt(k), geo.n_mt(m)
    n_pass, g_n = n_kt * n_mt, cfg.group
    lows = [n_mt * int(np.count_nonzero(e.cls == LOW)) for e in encs]
    highs = [2 * n_mt * int(np.count_nonzero(e.cls == HIGH)) for e in encs]
    if n == 0 or n_pass == 0:           # the wrapper does not start
        return [CycleReport(0, 0, 0, 0, 0, g_n, dict.fromkeys(ACCOUNTS, 0)) for _ in encs]
    events, account = EVENT_MODELS[cfg.packing]
    ev = events(geo, geo.token_depth, [slice_costs(e, geo, n_kt) for e in encs], n, n_kt, n_mt)
    reps = []
    for b in range(len(encs)):
        cycles = int(ev["F"][-1, b]) + 2
        w_lo, w_hi = ev["w_lo"][:, b], ev["w_hi"][:, b]
        stall = int(np.maximum(w_hi - w_lo, 0).sum())
        acct = account(geo, ev, b, cycles, lows[b] + highs[b])
        rep = CycleReport(cycles, stall, lows[b], highs[b], acct["zero"], g_n, acct,
                          *group_flags(encs[b]))
        assert rep.useful + sum(acct.values()) == g_n * cycles, "unaccounted lane cycles"
        reps.append(rep)
    return reps


def _front(st, c_prev, t_tile):
    """Front end and encoder pipeline: ``(C, O)`` of the next slice (see the module docstring).
    The pipeline moves unless its output register holds a slice the dispatcher does not take,
    i.e. outside ``[O, P)`` of the two slices ahead."""
    c = np.maximum(c_prev + 1, t_tile)
    c = np.where((c >= st["O2"]) & (c < st["P2"]), st["P2"], c)
    c = np.where((c >= st["O1"]) & (c < st["P1"]), st["P1"], c)
    return c, np.maximum(c + 1, st["P1"]) + 1


def _run(geo, depth_t, n, n_kt, n_mt, batch, slice_step):
    """Slice loop shared by both strategies: passes, weight loader, front end, slice queue and
    in-order reduction; ``slice_step(s, kt, t, O, tq, F_prev)`` returns ``(P, F)``."""
    k_tile = geo.cfg.k_tile
    n_pass = n_kt * n_mt
    s_n = n_pass * n
    big = np.full(batch, -10, dtype=np.int64)
    st = {"O1": big, "P1": big, "O2": big, "P2": big}
    F = np.empty((s_n, batch), dtype=np.int64)
    P = np.empty((s_n, batch), dtype=np.int64)
    C = np.empty((s_n, batch), dtype=np.int64)
    w_lo = np.empty((n_pass, batch), dtype=np.int64)
    w_hi = np.empty((n_pass, batch), dtype=np.int64)
    a_prev = None
    c_prev = np.full(batch, -1, dtype=np.int64)
    f_prev = np.full(batch, -1, dtype=np.int64)
    s = 0
    for p in range(n_pass):
        kt = p // n_mt
        # Loader: tile p starts once tile p-1 is in and pass p-2 is written back
        # (d_p counts a pass two cycles after its last slice's reduction).
        a = np.zeros(batch, dtype=np.int64) if a_prev is None else a_prev + k_tile + 1
        if p >= 2:
            a = np.maximum(a, F[(p - 1) * n - 1] + 2)
        a_prev = a
        t_tile = a + k_tile + 1
        w_lo[p], w_hi[p] = c_prev + 1, t_tile
        for t in range(n):
            c, o = _front(st, c_prev, t_tile)
            tq = F[s - depth_t] + 1 if s >= depth_t else 0
            P[s], F[s] = slice_step(s, kt, t, o, tq, f_prev)
            C[s] = c
            st = {"O2": st["O1"], "P2": st["P1"], "O1": o, "P1": P[s]}
            c_prev, f_prev = c, F[s]
            s += 1
    return {"F": F, "P": P, "C": C, "w_lo": w_lo, "w_hi": w_hi}


def _events_compact(geo, depth_t, costs, n, n_kt, n_mt):
    """Event times of the compacting strategy (``costs``: ``slice_costs`` per encoding)."""
    elem = np.stack([c[0] for c in costs], axis=2)                 # [t, kt, b, e]
    lane = lane_costs(geo, elem, n_mt)                             # [s, b, l]: ops per bundle
    depth_q, depth_p = geo.cfg.lane_fifo_depth, geo.psum_depth
    batch, g_n = lane.shape[1], lane.shape[2]
    rows = np.arange(batch)[:, None]
    cols = np.arange(g_n)[None, :]
    ring_l = np.full((batch, g_n, depth_q), -1, dtype=np.int64)   # L of the last bundles
    ring_f = np.full((batch, g_n, depth_p), -1, dtype=np.int64)   # F of the last bundles
    idx = np.zeros((batch, g_n), dtype=np.int64)                  # bundles so far per lane
    end = np.zeros((batch, g_n), dtype=np.int64)                  # lane's last close cycle
    L = np.full((batch, g_n, n_kt * n_mt * n), -1, dtype=np.int32)

    def step(s, kt, t, o, tq, f_prev):
        nonlocal end, idx
        cost = lane[s]
        need = cost > 0
        iq, ip = idx % depth_q, idx % depth_p
        room = np.where(need, ring_l[rows, cols, iq] + 1, 0).max(1)
        p_s = np.maximum(np.maximum(o, room), tq)
        ld = np.maximum(np.maximum(end, p_s[:, None] + 1), ring_f[rows, cols, ip] + 1)
        done = np.where(need, ld + cost + 1, 0).max(1)
        f_s = np.maximum(np.maximum(f_prev + 1, p_s + 1), done)
        ld = np.where(need, ld, -1)
        L[:, :, s] = ld
        end = np.where(need, ld + cost, end)
        ring_l[rows, cols, iq] = np.where(need, ld, ring_l[rows, cols, iq])
        ring_f[rows, cols, ip] = np.where(need, f_s[:, None], ring_f[rows, cols, ip])
        idx = idx + need
        return p_s, f_s

    ev = _run(geo, depth_t, n, n_kt, n_mt, batch, step)
    ev["L"] = L
    ev["cost"] = lane
    return ev


def _events_lockstep(geo, depth_t, costs, n, n_kt, n_mt):
    """Event times of the lockstep strategy (``costs``: ``slice_costs`` per encoding)."""
    group = np.stack([c[1] for c in costs], axis=2)                # [t, kt, b]: group passes
    depth_p = geo.psum_depth
    batch = group.shape[2]
    rows = np.arange(batch)
    ring_f = np.full((batch, depth_p), -1, dtype=np.int64)        # F of the last non-zero
    idx = np.zeros(batch, dtype=np.int64)
    free = np.zeros(batch, dtype=np.int64)                        # sequencer free from

    def step(s, kt, t, o, tq, f_prev):
        nonlocal free, idx
        cost = group[t, kt]
        nz = cost > 0
        ip = idx % depth_p
        credit = np.where(nz, ring_f[rows, ip] + 1, 0)
        p_s = np.maximum(np.maximum(o, tq), np.maximum(free, credit))
        free = p_s + np.maximum(cost, 1)
        f_s = np.maximum(np.maximum(f_prev + 1, p_s + 1), np.where(nz, p_s + cost + 1, 0))
        ring_f[rows, ip] = np.where(nz, f_s, ring_f[rows, ip])
        idx = idx + nz
        return p_s, f_s

    ev = _run(geo, depth_t, n, n_kt, n_mt, batch, step)
    ev["cost"] = group
    return ev


def _span(lo, hi):
    """Cycles in ``[lo, hi]`` (0 if empty)."""
    return np.maximum(hi - lo + 1, 0)


def _classify(geo, ev, b, cycles, gaps, fresh, queued):
    """Account of the idle lane cycles, gap by gap.

    ``gaps = (a, z, q0, cr)``: idle cycles ``[a, z]`` of a lane after its first op, its next
    bundle queued from ``q0`` on (compact; ``queued`` False: lockstep, no queue), its partial-sum
    credits all taken through cycle ``cr``. ``fresh``: the last idle cycle before each lane's
    first op (``cycles - 1`` for lanes that never issue)."""
    a, z, q0, cr = gaps
    c_last = ev["C"][-1, b]                       # pending while c <= c_last
    t0 = ev["w_hi"][0, b]                         # the first tile is in (l_p > 0)
    waiting = _intervals(ev["w_lo"][:, b], ev["w_hi"][:, b], cycles)
    w_cum = np.concatenate([[0], np.cumsum(waiting)])

    def w_in(lo, hi):
        lo, hi = np.clip(lo, 0, cycles), np.clip(hi + 1, 0, cycles)
        return np.where(hi > lo, w_cum[hi] - w_cum[np.minimum(lo, hi)], 0)

    fresh_load = _span(0, np.minimum(np.minimum(fresh, t0 - 1), c_last))
    drain = _span(np.maximum(a, c_last + 1), z)
    hi = np.minimum(z, c_last)
    if queued:
        e_hi = np.minimum(hi, q0 - 1)             # queue empty: waiting for a tile or starved
        load = w_in(a, e_hi)
        credit = _span(np.maximum(a, q0), np.minimum(hi, cr))
    else:
        load = w_in(a, hi)
        c_hi = np.minimum(hi, cr)
        credit = _span(a, c_hi) - w_in(a, c_hi)
    starved = _span(a, hi) - load - credit
    return {"load": int(fresh_load.sum() + load.sum()),
            "fill": int(_span(0, fresh).sum() - fresh_load.sum()),
            "drain": int(drain.sum()), "credit": int(credit.sum()),
            "starved": int(starved.sum()), "zero": 0}


def _intervals(starts, stops, cycles):
    """Per-cycle indicator of the union of ``[start, stop)`` intervals (empty ones ignored)."""
    starts, stops = np.clip(starts, 0, cycles), np.clip(stops, 0, cycles)
    keep = stops > starts
    diff = np.bincount(starts[keep], minlength=cycles + 1) \
        - np.bincount(stops[keep], minlength=cycles + 1)
    return np.cumsum(diff)[:cycles] > 0


def _gaps(lanes, start, cost, f_s, depth_p, cycles, g_n):
    """Per lane (``lanes`` sorted, events in order): idle gap before each op burst
    ``[start + 1, start + cost]`` after the lane's first, the final gap of each lane, and the
    cycle through which each gap's credits are all taken (the pop of the bundle ``depth_p``
    earlier on the same lane)."""
    n = len(lanes)
    ends = start + cost
    new = np.ones(n, dtype=bool)
    new[1:] = lanes[1:] != lanes[:-1]
    a = np.empty(n, dtype=np.int64)
    a[1:] = ends[:-1] + 1
    cr = np.full(n, -1, dtype=np.int64)
    if n > depth_p:
        same = lanes[depth_p:] == lanes[:-depth_p]
        cr[depth_p:] = np.where(same, f_s[:-depth_p], -1)
    last = np.ones(n, dtype=bool)
    last[:-1] = new[1:]
    fresh = np.full(g_n, cycles - 1, dtype=np.int64)
    fresh[lanes[new]] = start[new]
    mid = ~new
    # Final gaps: credits of the last depth_p bundles may still be out (lockstep only counts).
    cr_end = np.full(n, -1, dtype=np.int64)
    if n >= depth_p:
        idx = np.arange(n) - depth_p + 1
        ok = (idx >= 0)
        ok[ok] &= lanes[idx[ok]] == lanes[ok]
        cr_end[ok] = f_s[idx[ok]]
    return (a[mid], start[mid], mid.nonzero()[0]), (ends[last] + 1, cr_end[last]), cr[mid], \
        fresh


def _account_compact(geo, ev, b, cycles, useful):
    g_n = geo.lanes
    ld = ev["L"][b]                                                # [l, s]
    lanes, s_idx = np.nonzero(ld >= 0)
    cost = ev["cost"][s_idx, b, lanes].astype(np.int64)
    start = ld[lanes, s_idx].astype(np.int64)
    f_s, p_s = ev["F"][s_idx, b], ev["P"][s_idx, b]
    (a, z, sel), (fa, _), cr, fresh = _gaps(lanes, start, cost, f_s, geo.psum_depth,
                                            cycles, g_n)
    n_fin = len(fa)
    gaps = (np.concatenate([a, fa]), np.concatenate([z, np.full(n_fin, cycles - 1)]),
            np.concatenate([p_s[sel] + 1, np.full(n_fin, cycles)]),
            np.concatenate([cr, np.full(n_fin, -1)]))
    return _classify(geo, ev, b, cycles, gaps, fresh, True)


def _account_lockstep(geo, ev, b, cycles, useful):
    cost = ev["cost"][:, :, b]                                     # [t, kt]
    n, n_kt = cost.shape
    s_n = ev["P"].shape[0]
    s = np.arange(s_n)
    c_s = cost[s % n, s // (s_n // n_kt)].astype(np.int64)
    nz = np.nonzero(c_s > 0)[0]
    lanes = np.zeros(len(nz), dtype=np.int64)
    (a, z, sel), (fa, fcr), cr, fresh = _gaps(lanes, ev["P"][nz, b], c_s[nz], ev["F"][nz, b],
                                              geo.psum_depth, cycles, 1)
    gaps = (np.concatenate([a, fa]), np.concatenate([z, np.full(len(fa), cycles - 1)]),
            None, np.concatenate([cr, fcr]))
    one = _classify(geo, ev, b, cycles, gaps, fresh, False)
    acct = {k: geo.lanes * v for k, v in one.items()}
    acct["zero"] = geo.lanes * int(c_s.sum()) - useful      # every lane issues each group pass
    return acct


#: Per ``Packing``: ``(events, account)``. ``events(geo, token_depth, costs, n, n_kt, n_mt)``
#: returns the event times of a batch (``costs``: ``slice_costs`` per encoding);
#: ``account(geo, ev, b, cycles, useful)`` the lane-cycle account of encoding ``b``
#: (``ACCOUNTS`` keys; ``zero``: the idle ops its lanes issue).
EVENT_MODELS = {
    Packing.LOCKSTEP: (_events_lockstep, _account_lockstep),
    Packing.COMPACT: (_events_compact, _account_compact),
}
