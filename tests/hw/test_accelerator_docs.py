"""The accelerator top driven as an integrator would, from its manifest and the rules of
docs/design/accelerator.md ("Driving the top") alone: beats and counters, ``error`` that does
not block and one ``ACK_ERROR``, ``done`` for runs only, the empty ``RUN_LINEAR``, ``theta_q``
out of its range, ``key``, what ``RUN_ATTENTION`` needs loaded, and the cycle table, with the
outputs compared to the golden model. Every rule the manifest states as data (its ``driver``
section) is read from there and checked on the RTL."""

import math
from pathlib import Path

import numpy as np

from dstar.config import preset
from dstar.golden.attention import (
    THETA_BITS,
    attention_head,
    quantize_per_head,
    quantize_per_token,
)
from dstar.golden.softmax import logit_multiplier
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import manifest
from dstar.sim.accel_io import AttentionStep, LinearStep, command, receive, send
from dstar.sim.attention_cycles import predict
from dstar.sim.pysim_driver import io_adapter, simulate

N = 8


def _head(cfg, seed=0):
    """INT8 Q, K, V and the rows' logit multipliers of a random head of ``N`` rows."""
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal((N, cfg.head_dim)) for _ in range(3))
    (q_i, s_q), (k_i, s_k), (v_i, _) = quantize_per_token(q), quantize_per_head(k), \
        quantize_per_head(v)
    m, sh = logit_multiplier(s_q * s_k / np.sqrt(cfg.head_dim), cfg.attn_frac_bits)
    return q_i, k_i, v_i, m, sh


async def _watch(io, cycles):
    """``done`` and ``error`` in each of the next ``cycles`` cycles."""
    _, get, tick = io
    seen = []
    for _ in range(cycles):
        seen.append((get("done"), get("error")))
        await tick()
    return seen


def test_the_top_behaves_as_its_manifest_and_the_docs_say():
    cfg = preset("tiny", encoding="nibble")
    dut = Accelerator(cfg)
    man = manifest(dut)
    names = man["counters"]
    out = {}

    async def counters(io):
        await send(io, "cmd", [command(man, "READ_COUNTERS")])
        beats = await receive(io, "dout", len(names))      # one counter per beat, in order
        assert all(0 <= b < 1 << man["counter_bits"] for b in beats)
        return dict(zip(names, beats, strict=True))

    async def body(io, man):
        out["key_at_reset"] = io[1]("key")
        # Two refusals; error stays up, does not block a LOAD and a READ; one ACK_ERROR clears.
        for bad in (command(man, "RUN_LINEAR", n_tokens=0, n_kt=1, n_mt=1),
                    command(man, "RUN_ATTENTION", slot=0, n_tokens=0)):
            await send(io, "cmd", [bad])
            out.setdefault("refused", []).append(await _watch(io, 3))
        await send(io, "cmd", [command(man, "LOAD", mem="STATE", addr=5, count=1)])
        await send(io, "din", [0x1234])
        out["load_done"] = await _watch(io, 3)             # no done for LOAD
        await send(io, "cmd", [command(man, "READ", mem="STATE", addr=5, count=1)])
        out["read_back"] = await receive(io, "dout", 1)
        out["before_ack"] = await counters(io)
        await send(io, "cmd", [command(man, "ACK_ERROR")])
        out["after_ack"] = await _watch(io, 2)
        # The empty RUN_LINEAR: accepted, done two cycles after it is taken, counters 0.
        await send(io, "cmd", [command(man, "RUN_LINEAR", n_tokens=1, n_kt=0, n_mt=1)])
        out["empty_run"] = await _watch(io, 4)
        out["after_empty"] = await counters(io)
        # A key step at theta_q = 65536 and the reuse step after it (refresh 2) of slot 1,
        # then a key step with theta_q = 0 (accepted) on slot 2.
        step = AttentionStep(man, N)
        q, k, v, m, sh = _head(cfg)
        out["key"] = await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        out["key_port"] = io[1]("key")
        out["reuse"] = await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        out["reuse_port"] = io[1]("key")
        out["theta0"] = await step.run(io, q, k, v, m, sh, slot=2, theta_q=0, refresh=2)
        return out

    async def bench(ctx):
        await body(io_adapter(ctx, dut), man)

    simulate(dut, bench)
    # error rises the cycle after a refused command is taken and stays; no done for a refusal
    rules = man["driver"]
    assert out["key_at_reset"] == rules["key"]["after_reset"]
    err = rules["error"]
    assert out["refused"][0] == [(0, 1)] * 3 and out["refused"][1] == [(0, 1)] * 3
    assert err["latency"] == 1 and not rules["done"]["on_refused"]
    assert out["load_done"] == [(0, 1)] * 3 and out["read_back"] == [0x1234]
    assert not err["blocks_commands"] and "LOAD" not in rules["done"]["opcodes"]
    c = out["before_ack"]
    assert c["errors"] == 2 and c["commands"] == 5       # this READ_COUNTERS included
    assert out["after_ack"][-1] == (0, 0) and err["acks_to_clear"] == 1     # one for both
    assert out["empty_run"] == [(0, 0), (1, 0), (0, 0), (0, 0)]
    c = out["after_empty"]
    assert all(c[n] == 0 for n in names if n.startswith("linear_"))
    assert c["errors"] == 2 and not err["ack_clears_count"]
    # The key step's output is the full attention; the docs' cycle table (tiny, N = 8).
    want = attention_head(*_head(cfg), block_q=cfg.block_q, block_k=cfg.block_k,
                          frac_bits=cfg.attn_frac_bits, group=cfg.group, e_max=cfg.e_max)[0]
    o, _, mask, cnt = out["key"]
    np.testing.assert_array_equal(o, want)
    key = rules["key"]
    assert key["counter"] == "attention_key" and key["set_by"] == "RUN_ATTENTION"
    assert mask.all() and out["key_port"] == 1 and cnt["attention_key"] == 1
    assert (cnt["attention_cycles"], cnt["attention_qk_tiles"], cnt["attention_pv_tiles"]) == (
        827, 1, 1)
    o, _, _, cnt = out["reuse"]
    np.testing.assert_array_equal(o, want)               # unchanged inputs: the same output
    assert out["reuse_port"] == cnt[key["counter"]] == 0
    assert cnt["attention_cycles"] == 504 and cnt["errors"] == 2
    _, _, mask, cnt = out["theta0"]
    assert cnt["errors"] == 2 and mask.any(axis=1).all()     # theta_q 0 is accepted


def _expr(man, text, **names):
    """A manifest expression (``driver``: word counts and bounds) evaluated in ``names``,
    ``ceil`` and the names of ``config``, ``geometry`` and ``attention_geometry``."""
    scope = {**man["config"], **man["geometry"], **man["attention_geometry"], **names,
             "ceil": math.ceil}
    return eval(text, {"__builtins__": {}}, scope) if isinstance(text, str) else text


async def _until_done(io, limit=100_000):
    """Cycles from the command taken (``send`` has just returned: the cycle after it) to
    ``done``."""
    _, get, tick = io
    for i in range(limit):
        if get("done"):
            return i + 1
        await tick()
    raise TimeoutError("no done")


def test_the_manifest_states_the_driver_rules_the_top_follows():
    """The manifest's ``driver`` section, rule by rule, against the RTL: beats, counter
    lifetimes, ``done`` and the run overhead, ``error``, the accepted ranges at their edges,
    the empty run, and what ``RUN_ATTENTION`` needs, writes and counts."""
    cfg = preset("tiny", encoding="nibble")
    dut = Accelerator(cfg)
    man = manifest(dut)
    rules, names = man["driver"], man["counters"]
    acc = rules["accepted"]
    out = {}

    async def counters(io):
        await send(io, "cmd", [command(man, "READ_COUNTERS")])
        beats = await receive(io, "dout", rules["read_counters"]["beats"])
        return dict(zip(names, beats, strict=True))

    async def refused(io, op, **args):
        """Whether the top refuses ``op`` (errors counted; ``error`` acknowledged after)."""
        before = (await counters(io))["errors"]
        await send(io, "cmd", [command(man, op, **args)])
        refused = (await counters(io))["errors"] == before + 1      # waits for a run's end
        await send(io, "cmd", [command(man, "ACK_ERROR")])
        return refused

    async def body(io):
        # Beats: the word in the low bits; bits above it ignored on din, 0 on dout.
        width = man["layouts"]["RES"]["width"]                 # narrower than a beat
        await send(io, "cmd", [command(man, "LOAD", mem="RES", addr=0, count=1)])
        await send(io, "din", [(1 << (man["data_bits"] - 1)) | 0x1234])
        await send(io, "cmd", [command(man, "READ", mem="RES", addr=0, count=1)])
        out["beat"] = (await receive(io, "dout", 1))[0], width
        # The accepted ranges at their edges.
        edges = []
        for op, args in [("RUN_LINEAR", {"n_kt": 0, "n_mt": 1}),
                         ("RUN_ATTENTION", {"slot": 0})]:
            lo, hi = acc[op]["n_tokens"]
            for n, want in ((lo - 1, True), (hi + 1, True)):
                edges.append((op, n, want, await refused(io, op, n_tokens=n, **args)))
        edges.append(("n_tokens", hi, False, await refused(io, "RUN_LINEAR", n_tokens=hi,
                                                           n_kt=0, n_mt=1)))
        s_hi = acc["RUN_ATTENTION"]["slot"][1]
        edges.append(("slot", s_hi, False, await refused(io, "RUN_ATTENTION", slot=s_hi,
                                                         n_tokens=1, theta_q=1 << 16)))
        for field in ("n_kt", "n_mt"):
            hi = acc["RUN_LINEAR"][field][1]
            args = {"n_kt": 1, "n_mt": 1} | {field: hi + 1}
            edges.append((field, hi + 1, True,
                          await refused(io, "RUN_LINEAR", n_tokens=1, **args)))
        w_hi = _expr(man, acc["RUN_LINEAR"]["w_base"][1], n_kt=1, n_mt=1)
        edges.append(("w_base", w_hi + 1, True, await refused(
            io, "RUN_LINEAR", n_tokens=1, n_kt=1, n_mt=1, w_base=w_hi + 1)))
        depth = man["memories"]["STATE"]["depth"]
        for count, want in ((0, True), (2, True)):
            edges.append(("count", count, want, await refused(
                io, "READ", mem="STATE", addr=depth - 1, count=count)))
        await send(io, "cmd", [command(man, "READ", mem="STATE", addr=depth - 1, count=1)])
        await receive(io, "dout", 1)
        out["edges"] = edges
        # A linear step: its counters live until the next RUN_LINEAR, an attention step's
        # until the next RUN_ATTENTION.
        r = np.random.default_rng(3)
        lin = LinearStep(man, 16, 8, 2)
        await lin.run(io, r.integers(-100, 100, (2, 16)), key=True,
                      w_q=r.integers(-127, 128, (16, 8)))
        c_lin = await counters(io)
        step = AttentionStep(man, N)
        q, k, v, m, sh = _head(cfg)
        _, _, _, c_att = await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        await send(io, "cmd", [command(man, "RUN_LINEAR", n_tokens=1, n_kt=0, n_mt=1)])
        out["empty_cycles"] = await _until_done(io)
        c_empty = await counters(io)
        out["lives"] = c_lin, c_att, c_empty
        # The reuse step and a third call (a key step at refresh 2) with nothing reloaded.
        await step.run(io, q, k, v, m, sh, slot=1, theta_q=1 << 16, refresh=2)
        await send(io, "cmd", [command(man, "RUN_ATTENTION", slot=1, n_tokens=N,
                                       theta_q=1 << 16, refresh=2)])
        out["key_cycles"] = await _until_done(io)
        out["key_counters"] = await counters(io)
        out["needs"] = {"Q": len(step.img.q_words(q)), "MS": len(step.img.ms_words(m, sh)),
                        "KT": len(step.k_words(k)), "V": len(step.v_words(v)),
                        "O": len(step.img.o_addrs())}

    async def bench(ctx):
        await body(io_adapter(ctx, dut))

    simulate(dut, bench)
    word, width = out["beat"]
    assert rules["beat"]["word_lsb"] == 0 and rules["beat"]["dout_above_word"] == 0
    assert width < man["data_bits"] and word == 0x1234      # din's high bit ignored
    for what, value, want, got in out["edges"]:
        assert got == want, f"{what} = {value}: refused {got}, the manifest says {want}"
    # Counter lifetimes as counter_cleared_by says.
    c_lin, c_att, c_empty = out["lives"]
    assert c_lin["linear_cycles"] > 0 and c_att["attention_cycles"] > 0
    for name, by in rules["counter_cleared_by"].items():
        if by == "RUN_LINEAR":           # kept through the attention step, cleared by a run
            assert c_att[name] == c_lin[name] and c_empty[name] == rules["empty_run"][
                "counters"], name
        elif by == "RUN_ATTENTION":      # kept through the empty linear run
            assert c_empty[name] == c_att[name], name
        else:                            # from reset: only ever counts up
            assert by == "reset" and c_lin[name] <= c_att[name] <= c_empty[name], name
    assert out["empty_cycles"] == rules["empty_run"]["done_after"]
    assert rules["empty_run"]["zero_fields"] == ["n_kt", "n_mt"]
    # A run's cycles from taken to done: its counter plus the overhead; the tiles as stated.
    c = out["key_counters"]
    assert out["key_cycles"] == c["attention_cycles"] + rules["run_overhead_cycles"]
    ra = rules["run_attention"]
    nqb, nkb = (_expr(man, ra["tiles"][t], N=N) for t in ("nqb", "nkb"))
    assert c["attention_key"] == 1
    assert c["attention_qk_tiles"] == c["attention_pv_tiles"] == _expr(
        man, ra["tiles"]["key_step"], nqb=nqb, nkb=nkb)
    # The words RUN_ATTENTION needs and writes: the counts the (working) host uses.
    for mem, words in {**ra["needs"], **ra["writes"]}.items():
        assert _expr(man, words, N=N) == out["needs"][mem], mem


def _cycle_table() -> list[tuple[str, int, int, int]]:
    """The docs' table of fixed attention cycles: ``(preset, N, key step, reuse step)``."""
    doc = Path(__file__).parents[2] / "docs" / "design" / "accelerator.md"
    rows = []
    for line in doc.read_text().splitlines():
        cells = [c.strip(" `") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in ("tiny", "default") and cells[1].isdigit():
            rows.append((cells[0], *(int(c) for c in cells[1:])))
    return rows


def test_the_docs_cycle_table_is_the_cycle_models():
    """Every row of the docs' cycle table (a key step at ``theta_q = 65536``, every block, and
    the reuse step after it) is what ``dstar.sim.attention_cycles.predict`` gives (the model the
    RTL's counters equal: the tiny N = 8 row is checked on the RTL above)."""
    rows = _cycle_table()
    assert len(rows) == 5, rows
    for name, n, key, reuse in rows:
        cfg = preset(name, encoding="nibble")
        mask = np.ones((-(-n // cfg.block_q), -(-n // cfg.block_k)), dtype=bool)
        got = (predict(cfg, n, mask, True, 1 << THETA_BITS).cycles,
               predict(cfg, n, mask, False, 1 << THETA_BITS).cycles)
        assert got == (key, reuse), (name, n)
