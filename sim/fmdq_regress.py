"""The FMDQ linear steps of ``dstar regress`` (``encoding = "fmdq"``, the default top):
``dstar.sim.regress`` builds and drives every other part of a case (attention steps, refused
commands, ``NOP``, ``ACK_ERROR``, the stream profile) alike for both encodings.

A layer has any ``K`` (a ragged last sort window), ``M`` (one or more column blocks, a partial
last one) and ``N`` (a partial last token tile), its weights (INT8, -128 included) somewhere in
the weight memory. A step's targets come from ``regress``' data modes (drifting, still,
all-zero, small, large, shifted up to ``e_max``, sparse, extreme, flipped: saturated, beyond
``target_max``: clipped by the top) and FMDQ's own: ``widths`` (each sub-channel's codes in a
random width of ``golden.fmdq.WIDTHS`` at shift 0, so that one unit mixes every width) and
``zero_tiles`` (some token tiles unchanged: skipped sub-channels, maybe whole windows with no
group). The old state is the host's (the FMDQ top keeps none): the last step's, or a random one
with ``Y`` consistent with it; ``Y`` is kept on chip (when nothing ran since) or restored by a
``LOAD``. A key step streams a junk old state (the top must read it as 0), a partial last tile
junk padding rows (the same).

The run's target and state beats go in on ``din`` and the new state comes out on ``dout``
(``dstar.sim.fmdq_accel_io``'s packing): at full rate, or with idle cycles between ``din``
beats and ``dout`` stalls. Every step is checked bit for bit (``Y``, the new state) against
``golden.fmdq_pe.linear_step``; its counters against ``sim.fmdq_cycles.linear_cycles``, every
one when the run's streams were at full rate (the model's premise); with gaps or stalls, the
groups, units, clipped and saturated sub-channels exactly and the cycles at least the model's
(a gap or a stall only delays the run: ``FmdqLinear``'s contract).
"""

import numpy as np

from dstar.golden.fmdq import WIDTHS, schedule_tile
from dstar.golden.fmdq_pe import linear_step, unit_bubbles

from .accel_io import command
from .fmdq_accel_io import FmdqLinearStep
from .fmdq_cycles import linear_cycles
from .fmdq_linear_io import FmdqImage

__all__ = ["COUNTER_NAMES", "EXACT_WHEN_STALLED", "layer_shapes", "weights", "targets",
           "data_bins", "build_linear", "drive_linear", "refusal"]

#: The top's linear counters (``READ_COUNTERS``' names) and ``linear_cycles``' names for them.
COUNTER_NAMES = {"linear_cycles": "cycles", "linear_stall_load": "stall_load",
                 "linear_groups": "count_groups", "linear_units": "count_units",
                 "linear_clipped": "count_clipped", "linear_saturated": "count_saturated"}
#: The counters a gap on ``din`` or a stall on ``dout`` leaves alone (they count the data).
EXACT_WHEN_STALLED = ("linear_groups", "linear_units", "linear_clipped", "linear_saturated")

_MODES = ("drift", "same", "zero", "low", "high", "shifted", "sparse", "extreme", "flip",
          "beyond", "widths", "zero_tiles")
_MODE_P = (0.18, 0.04, 0.04, 0.08, 0.08, 0.1, 0.07, 0.07, 0.07, 0.06, 0.14, 0.07)


def _pick(rng, options, p=None):
    return options[int(rng.choice(len(options), p=p))]


def _geometry(cfg):
    from dstar.hw.fmdq.geometry import FmdqGeometry

    return FmdqGeometry(cfg)


def layer_shapes(rng, cfg, n_layers):
    """``n_layers`` (K, M, N) whose weights fit the weight memory together, and their spans
    (``n_mt * K`` words each)."""
    geo = _geometry(cfg)
    w, t = geo.window, geo.tokens
    while True:
        shapes = []
        for _ in range(n_layers):
            k = int(_pick(rng, [1, cfg.max_k, w * int(rng.integers(1, geo.n_win_max + 1)),
                                int(rng.integers(1, cfg.max_k + 1)),
                                int(rng.integers(1, cfg.max_k + 1))]))
            m = int(_pick(rng, [1, cfg.max_m, int(rng.integers(1, cfg.max_m + 1))]))
            n = int(_pick(rng, [1, cfg.max_tokens, t * int(rng.integers(1, geo.n_tiles_max + 1)),
                                int(rng.integers(1, cfg.max_tokens + 1))]))
            shapes.append((min(k, cfg.max_k), m, min(n, cfg.max_tokens)))
        spans = [-(-m // geo.block_cols) * k for k, m, _ in shapes]
        if sum(spans) <= geo.weight_depth:
            return shapes, spans


def weights(rng, k, m):
    if rng.random() < 0.15:
        return rng.choice([-128, -127, -1, 0, 1, 127], size=(k, m))
    return rng.integers(-128, 128, size=(k, m))


def targets(rng, cfg, prev, n, k, mode):
    """Raw targets of a step after ``prev`` (None on a first step): ``regress``' modes and
    FMDQ's ``widths`` and ``zero_tiles`` (module docstring)."""
    from .regress import _targets

    base = np.zeros((n, k), np.int64) if prev is None else prev
    top = (1 << (cfg.state_bits - 1)) - 1
    t = cfg.token_tile
    n_tiles = -(-n // t)
    if mode == "widths":                    # per sub-channel a width, its codes at shift 0
        wid = rng.choice(WIDTHS, size=(n_tiles, k))
        lo, hi = -(1 << np.maximum(wid - 1, 0)), (1 << np.maximum(wid - 1, 0)) - 1
        lo, hi = np.where(wid == 0, 0, lo), np.where(wid == 0, 0, hi)
        lo, hi = np.repeat(lo, t, axis=0)[:n], np.repeat(hi, t, axis=0)[:n]
        d = rng.integers(lo, hi + 1)
        edge = rng.random((n, k)) < 0.3            # the width's extremes, so it is the one
        d = np.where(edge, np.where(rng.random((n, k)) < 0.5, lo, hi), d)
        return np.clip(base + d, -top - 1, top)
    if mode == "zero_tiles":                # some token tiles, or one window, unchanged
        out = _targets(rng, cfg, prev, n, k, "drift")
        tiles = rng.random(n_tiles) < 0.5
        if rng.random() < 0.5:
            w = cfg.sort_window
            j = int(rng.integers(0, -(-k // w)))
            out[:, j * w:(j + 1) * w] = base[:, j * w:(j + 1) * w]
            return out
        rows = np.repeat(tiles, t)[:n]
        return np.where(rows[:, None], base, out)
    return _targets(rng, cfg, prev, n, k, mode)


def data_bins(cfg, enc, target) -> list[str]:
    """The coverage bins the encoded step ``enc`` (of raw ``target``) hits."""
    w = cfg.sort_window
    out = [f"data.width.{b}" for b in np.unique(enc.width)]
    out += [f"data.shift.{int(e)}" for e in np.unique(enc.shift)]
    if enc.clipped.any():
        out.append("data.clipped")
    if enc.saturated.any():
        out.append("data.saturated")
    if np.abs(target).max() > cfg.target_max:
        out.append("data.target_clipped")
    if (enc.width == 0).all(axis=1).any():
        out.append("data.tile_skipped")
    k = enc.width.shape[1]
    for c in range(0, k, w):
        wd, sh = enc.width[:, c:c + w], enc.shift[:, c:c + w]
        if (wd == 0).all():
            out.append("data.window_skipped")
        if unit_bubbles(sh, wd).any():
            out.append("data.bubbles")
        for tile in range(enc.n_tiles):
            ws = set(wd[tile].tolist())
            live = len(ws - {0})
            if live:
                out.append(f"data.unit_widths.{live}")
            if ws == set(WIDTHS):
                out.append("data.unit_widths.all")
            s = schedule_tile(sh[tile], wd[tile], w)
            if not s.groups:
                continue
            if (~s.valid).any():
                out.append("data.simd_group.padded")
            lanes = np.where(s.valid, wd[tile][np.clip(s.channel, 0, wd.shape[1] - 1)], -1)
            if any(len(set(g[g >= 0].tolist())) > 1 for g in lanes):
                out.append("data.simd_group.mixed_widths")
    if cfg.tau > 0:
        d = np.clip(target, -cfg.target_max, cfg.target_max)
        if ((enc.q == 0) & (d != 0)).any():
            out.append("data.dead_zone")
    return sorted(set(out))


def _junk(rng, shape, bound):
    return rng.integers(-bound, bound + 1, size=shape)


def build_linear(b, layer: dict) -> None:
    """Layer ``layer``'s next step, appended to the case builder ``b``
    (``regress._CaseBuilder``) with its golden results, counters and bins."""
    cfg, rng, geo = b.cfg, b.rng, _geometry(b.cfg)
    k, m, n = layer["k"], layer["m"], layer["n"]
    key = layer["xs"] is None or rng.random() < 0.15
    mode = _pick(rng, _MODES, p=_MODE_P)
    target = targets(rng, cfg, layer["raw"], n, k, mode)
    clipped = np.clip(target, -cfg.target_max, cfg.target_max)
    n_mt = -(-m // geo.block_cols)
    op = {"kind": "linear", "layer": layer["id"], "key": key, "k": k, "m": m, "n": n,
          "w_base": layer["base"], "w": None if layer["loaded"] else layer["w"], "y": None,
          "refuse_mid": b.refusals(0.3)}
    layer["loaded"] = True
    bins = [f"lin.n_win.{-(-k // geo.window)}", f"lin.n_tiles.{-(-n // geo.tokens)}",
            f"lin.n_mt.{n_mt}",
            "lin.k.ragged_window" if k % geo.window else "lin.k.whole_windows"]
    if k in (1, cfg.max_k):
        bins.append(f"lin.k.{'1' if k == 1 else 'max'}")
    if b.last is not None and b.last[0] == "att":
        bins.append("lin.after_attention")      # the arrays' accumulators were attention's
    if n == 1:
        bins.append("lin.tokens.1")
    if n == cfg.max_tokens:
        bins.append("lin.tokens.max")
    if n % geo.tokens:
        bins.append("lin.tokens.partial_tile")
    if m % geo.block_cols:
        bins.append("lin.m_partial")
    span = n_mt * k
    bins.append("lin.w_base." + ("0" if layer["base"] == 0 else "end"
                                 if layer["base"] + span == geo.weight_depth else "mid"))
    if key:
        xs, y = None, None
        bins.append("lin.key" if layer["xs"] is None else "lin.rekey")
        state_in = np.zeros((n, k), np.int64)
        if rng.random() < 0.5:              # ignored on a key step
            state_in = _junk(rng, (n, k), cfg.state_max)
            bins.append("lin.key_junk_state")
    else:
        xs, y = layer["xs"], layer["y"]
        if rng.random() < 0.15:             # a random state, Y consistent with it
            xs = np.clip(clipped + rng.integers(-40000, 40001, size=clipped.shape),
                         -cfg.state_max, cfg.state_max)
            y = xs @ layer["w"]
            op["y"] = y
            bins.append("lin.delta_random_state")
        elif b.last != ("lin", layer["id"]) or rng.random() < 0.3:
            op["y"] = y
            bins.append("lin.delta_restored")
        else:
            bins.append("lin.delta_kept")
        state_in = xs
    n_pad = -(-n // geo.tokens) * geo.tokens
    t_pad = np.zeros((n_pad, k), np.int64)
    s_pad = np.zeros((n_pad, k), np.int64)
    t_pad[:n], s_pad[:n] = target, state_in
    if n_pad > n and rng.random() < 0.5:    # rows past n_tokens: read as 0 by the top
        t_pad[n:] = _junk(rng, (n_pad - n, k), cfg.target_max)
        s_pad[n:] = _junk(rng, (n_pad - n, k), cfg.state_max)
        bins.append("lin.pad_junk")
    img = FmdqImage(geo.to_dict(), cfg.state_bits, cfg.max_k, k, m, n_pad)
    op["beats"] = img.sub_beats(t_pad, s_pad)
    full = rng.random() < 0.5
    op["din_gap"] = 0.0 if full else float(_pick(rng, [0.0, 0.1, 0.5]))
    op["dout_stall"] = 0.0 if full else float(_pick(rng, [0.0, 0.3, 0.8]))
    step = linear_step(clipped, xs, y, layer["w"], key=key, token_tile=cfg.token_tile,
                       window=cfg.sort_window, e_max=cfg.e_max, tau=cfg.tau)
    model = linear_cycles(step.enc, cfg.sort_window, n_mt)
    op["exp"] = {"y": step.y, "xs": step.xs,
                 "counters": [model[v] for v in COUNTER_NAMES.values()],
                 "clipped": int((np.abs(t_pad) > cfg.target_max).sum())}
    op["bins"] = bins + data_bins(cfg, step.enc, target)
    layer.update(xs=step.xs, y=step.y, raw=target)
    b.ops.append(op)
    b.last = ("lin", layer["id"])


async def _stream_run(drv, beats, gap: float, stall: float) -> tuple[list[int], dict]:
    """The run's ``din`` beats (an idle gap of 1-3 cycles after a beat with probability
    ``gap``; ``valid`` held until taken) and its ``dout`` words (not ready in a cycle with
    probability ``stall``); returns the words and what happened (``din_gap``,
    ``din_backpressure``, ``dout_backpressure``)."""
    from .regress import MAX_WAIT

    set_, get, tick, rng = drv.set, drv.get, drv.tick, drv.rng
    seen = dict.fromkeys(("din_gap", "din_backpressure", "dout_backpressure"), False)
    got, i, idle, wait = [], 0, 0, 0
    while i < len(beats) or len(got) < len(beats):
        offer = i < len(beats) and idle == 0
        set_("din__valid", int(offer))
        if offer:
            set_("din__payload", beats[i])
        ready = int(not (stall and rng.random() < stall))
        set_("dout__ready", ready)
        d_ready = get("din__ready")
        valid, word = get("dout__valid"), get("dout__payload")
        if offer and not d_ready:
            seen["din_backpressure"] = True
        if valid and not ready:
            seen["dout_backpressure"] = True
        await tick()
        wait = 0 if (offer and d_ready) or (valid and ready) else wait + 1
        if wait > MAX_WAIT:
            raise TimeoutError(f"RUN_LINEAR: {i} of {len(beats)} din beats taken, "
                               f"{len(got)} dout words after {MAX_WAIT} cycles without one")
        if offer and d_ready:
            i += 1
            # (A gap after the last beat is drawn but delays nothing: not a gap.)
            if gap and rng.random() < gap:
                idle = int(rng.integers(1, 4))
                seen["din_gap"] |= i < len(beats)
        elif idle:
            idle -= 1
        if valid and ready:
            got.append(word)
    set_("din__valid", 0)
    set_("dout__ready", 0)
    return got, seen


async def drive_linear(drv, op) -> None:
    """Run the step ``op`` (``build_linear``'s) through ``drv`` (``regress.Driver``) and
    check it."""
    man = drv.man
    step = FmdqLinearStep(man, op["k"], op["m"], op["n"])
    img = step.img
    if op["w"] is not None:
        await drv.load("WEIGHTS", img.weight_words(op["w"], op["w_base"]))
    if op["y"] is not None:
        await drv.load("Y", step.y_words(op["y"]))
    for r in op["refuse_mid"]:
        await drv._refuse(dict(zip(("reason", "word", "stream"), r, strict=True)))
    beats = op["beats"]
    early = drv.rng.random() < drv.prof["overlap"]
    if early:                               # offered before the command: back-pressure
        drv.set("din__payload", beats[0])
        drv.set("din__valid", 1)
    if drv.error:
        drv.cov.hit("error.run_while_set")
    args = dict(n_tokens=op["n"], n_k=op["k"], n_mt=img.n_mt, key=int(op["key"]),
                w_base=op["w_base"])
    await drv.command(command(man, "RUN_LINEAR", **args), "RUN_LINEAR")
    if early:
        drv.cov.hit("stream.din_backpressure")
    if drv.get("error") != drv.error:
        drv.set("din__valid", 0)
        drv.fail(f"RUN_LINEAR {args} refused")
        drv.error = 1
        return
    drv.clipped += op["exp"]["clipped"]
    words, seen = await _stream_run(drv, beats, op["din_gap"], op["dout_stall"])
    full = not (seen["din_gap"] or seen["dout_backpressure"])
    drv.cov.hit("lin.run.full_rate" if full else "lin.run.din_gap" if seen["din_gap"]
                else "lin.run.dout_backpressure")
    if seen["din_gap"] and seen["dout_backpressure"]:
        drv.cov.hit("lin.run.dout_backpressure")
    if seen["din_backpressure"]:
        drv.cov.hit("lin.run.din_backpressure")
    if drv.rng.random() >= drv.prof["pipeline"]:
        await drv._wait("done")
    cnt = await drv.counters()
    xs = img.state_from(words)
    y = step.y_from(await drv.read("Y", step.y_addrs()))
    exp = op["exp"]
    if not np.array_equal(y, exp["y"]):
        drv.fail(f"Y differs in {int((y != exp['y']).sum())} of {y.size} values")
    if not np.array_equal(xs, exp["xs"]):
        drv.fail(f"state differs in {int((xs != exp['xs']).sum())} of {xs.size} values")
    names = list(COUNTER_NAMES)
    got = [cnt[c] for c in names]
    want = dict(zip(names, exp["counters"], strict=True))
    if full:
        bad = got != exp["counters"]
    else:
        bad = (any(cnt[c] != want[c] for c in EXACT_WHEN_STALLED)
               or cnt["linear_cycles"] < want["linear_cycles"])
        if cnt["linear_cycles"] > want["linear_cycles"]:
            drv.cov.hit("lin.run.slowed")           # the gaps or stalls reached the datapath
    if bad:
        drv.fail(f"counters {dict(zip(names, got, strict=True))}, cycle model {want}"
                 + ("" if full else " (stalled run: cycles at least the model's)"))
    for name in op["bins"]:
        drv.cov.hit(name)


def _field(man, name: str) -> int:
    """The width of the command word's field ``name``."""
    return next(f["width"] for f in man["layouts"]["command"]["fields"] if f["name"] == name)


def refusal(rng, man, cfg, reason, lin_cmd) -> tuple[int, str] | None:
    """A command the FMDQ top refuses for its own ``reason`` (``coverage.FMDQ_REFUSALS``:
    ``stream_mem``, ``lin_k``, ``lin_mt``, ``lin_weights``) and the stream it would have used
    (a refused ``RUN_LINEAR`` must take no ``din`` beat: ``load``); None for the reasons both
    tops share. ``lin_cmd(**args)``: a ``RUN_LINEAR`` word."""
    geo = _geometry(cfg)
    if reason == "stream_mem":
        op = _pick(rng, ["LOAD", "READ"])
        mem = _pick(rng, ["TARGET", "STATE"])
        word = command(man, op, mem=mem, addr=int(rng.integers(0, 4)),
                       count=int(rng.integers(1, 5)))
        return word, op.lower()
    if reason == "lin_k":
        n_k = int(rng.integers(cfg.max_k + 1, 1 << _field(man, "args.linear.n_k")))
        return lin_cmd(n_k=n_k, n_mt=1), "load"
    if reason == "lin_mt":
        return lin_cmd(n_k=1, n_mt=geo.n_mt_max + 1), "load"
    if reason == "lin_weights":
        # span >= 2: w_base = weight_depth - 1 (the field's largest value, at a power of two)
        # still overflows.
        n_k, n_mt = int(rng.integers(2, cfg.max_k + 1)), int(rng.integers(1, geo.n_mt_max + 1))
        span = n_k * n_mt
        top = min(geo.weight_depth, (1 << _field(man, "args.linear.w_base")) - 1)
        w_base = int(rng.integers(geo.weight_depth - span + 1, top + 1))
        return lin_cmd(n_k=n_k, n_mt=n_mt, w_base=w_base), "load"
    if reason == "lin_tokens":
        return lin_cmd(n_tokens=_pick(rng, [0, cfg.max_tokens + 1]), n_k=1, n_mt=1), "load"
    return None
