"""DeltaEncoder against golden.difflinear.encode_step, with random gaps and back-pressure."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.difflinear import encode_step
from dstar.hw.encoder import DeltaEncoder
from dstar.hw.geometry import Geometry
from dstar.sim.pysim_driver import simulate


async def write_rows(ctx, dut, geo, target, state):
    """Host writes of each token's target and state rows (first reduction tile)."""
    for t in range(target.shape[0]):
        ctx.set(dut.host_addr, t * geo.n_kt_max)
        ctx.set(dut.host_target_we, 1)
        ctx.set(dut.host_state_we, 1)
        ctx.set(dut.host_target_wdata, [int(x) for x in target[t]])
        ctx.set(dut.host_state_wdata, [int(x) for x in state[t]])
        await ctx.tick()
    ctx.set(dut.host_target_we, 0)
    ctx.set(dut.host_state_we, 0)


def run_encoder(cfg, target, state, cmds, rng, p_valid=1.0, p_ready=1.0):
    """Load rows (token t at kt 0), run ``cmds`` = [(token, key, commit)], return the emitted
    slices as (token, shifts, codes) and the state rows afterwards."""
    geo = Geometry(cfg)
    dut = DeltaEncoder(geo)
    got, states = [], []

    async def bench(ctx):
        await write_rows(ctx, dut, geo, target, state)
        i, guard = 0, 0
        while len(got) < len(cmds):
            guard += 1
            assert guard < 100 * len(cmds) + 100, "encoder stalled"
            offer = i < len(cmds) and rng.random() < p_valid
            if offer:
                t, key, commit = cmds[i]
                ctx.set(dut.i.payload, {"kt": 0, "key": key, "commit": commit,
                                        "meta": {"token": t, "last": int(i == len(cmds) - 1)}})
            ctx.set(dut.i.valid, int(offer))
            ctx.set(dut.o.ready, int(rng.random() < p_ready))
            _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if iv and ir:
                i += 1
            if ov and orr:
                s_n = geo.slice_groups
                got.append((int(op.meta.token),
                            [int(op.groups[j].shift) for j in range(s_n)],
                            [int(op.groups[j].q[lane]) for j in range(s_n)
                             for lane in range(cfg.group)]))
        ctx.set(dut.i.valid, 0)
        for t in range(target.shape[0]):
            ctx.set(dut.host_addr, t * geo.n_kt_max)
            await ctx.tick()
            states.append([int(x) for x in ctx.get(dut.host_state_rdata)])

    simulate(dut, bench)
    return got, np.array(states, dtype=np.int64)


def rows(rng, cfg, n):
    """Targets and states of assorted magnitudes, plus adversarial rows."""
    k = cfg.k_tile
    scale = rng.choice([1, 4, 60, 300, 4000, 40000], size=(n, 1))
    target = np.clip(rng.integers(-scale, scale + 1, size=(n, k)), -cfg.target_max,
                     cfg.target_max)
    state = np.clip(target + rng.integers(-scale, scale + 1, size=(n, k)) // 3,
                    -cfg.state_max, cfg.state_max)
    target[0], state[0] = cfg.target_max, -cfg.state_max          # saturated at e_max
    target[1], state[1] = -cfg.target_max, cfg.state_max
    target[2] = state[2] = rng.integers(-100, 100, size=k)        # all ZERO
    target[3] = np.where(np.arange(k) % 2, 127, -128)             # all HIGH at shift 0
    state[3] = 0
    target[4] = 128 * 2 ** 5 - 1                                 # an exact shift boundary
    state[4] = 0
    return target, state


@pytest.mark.parametrize("tau", [0, 1, 5])
@pytest.mark.parametrize("p_valid,p_ready", [(1.0, 1.0), (0.6, 0.5)])
def test_encoder_matches_golden(tau, p_valid, p_ready):
    cfg = preset("tiny").replace(tau=tau)
    rng = np.random.default_rng(tau * 10 + int(p_ready * 10))
    n = 10
    target, state = rows(rng, cfg, n)
    # Delta slices without commit, then key slices without commit, then delta with commit.
    cmds = ([(t, 0, 0) for t in range(n)] + [(t, 1, 0) for t in range(n)]
            + [(t, 0, 1) for t in range(n)])
    got, final = run_encoder(cfg, target, state, cmds, rng, p_valid, p_ready)
    enc_d, xs_d = encode_step(target, state, cfg)
    enc_k, _ = encode_step(target, np.zeros_like(state), cfg)
    assert len(got) == len(cmds)
    for (t, key, _), (tok, shifts, codes) in zip(cmds, got, strict=True):
        ref = enc_k if key else enc_d
        assert tok == t
        assert shifts == ref.shift[t].tolist()
        assert codes == ref.q[t].tolist()
    assert np.array_equal(final, xs_d)
    assert enc_d.saturated.any() and (enc_d.cls == 2).any() and (enc_d.cls == 0).any()


def test_host_reads_state_while_idle():
    """The host reads the state through the engine's read port: one cycle after ``host_addr``,
    whenever no command is offered, including in a gap between commands; the engine's commits
    show up in the next idle read."""
    cfg = preset("tiny")
    geo = Geometry(cfg)
    dut = DeltaEncoder(geo)
    rng = np.random.default_rng(3)
    n = 4
    target, state = rows(rng, cfg, 5)
    target, state = target[:n], state[:n]
    _, committed = encode_step(target, state, cfg)
    reads = []

    async def read_all(ctx):
        out = []
        for t in reversed(range(n)):                  # reversed: each read must follow addr
            ctx.set(dut.host_addr, t * geo.n_kt_max)
            await ctx.tick()
            out.append([int(x) for x in ctx.get(dut.host_state_rdata)])
        return out[::-1]

    async def bench(ctx):
        await write_rows(ctx, dut, geo, target[:n], state[:n])
        ctx.set(dut.o.ready, 1)
        reads.append(await read_all(ctx))             # before any command
        for t in range(n):
            ctx.set(dut.i.payload, {"kt": 0, "key": 0, "commit": 1,
                                    "meta": {"token": t, "last": int(t == n - 1)}})
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
            ctx.set(dut.i.valid, 0)
            if t == 1:                                # a gap: tokens 0 and 1 are committed
                await ctx.tick()
                await ctx.tick()
                reads.append(await read_all(ctx))
        await ctx.tick()
        await ctx.tick()
        reads.append(await read_all(ctx))             # after the last commit

    simulate(dut, bench)
    assert reads[0] == state.tolist()
    assert reads[1] == committed[:2].tolist() + state[2:].tolist()
    assert reads[2] == committed.tolist()
    assert not np.array_equal(committed, state)
