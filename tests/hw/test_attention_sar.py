"""AttentionEngine with ``attention = "sar"`` (the paper's sparse attention reuse: host-loaded
masks, a score cache, PV-only reuse steps) on Amaranth's simulator against ``dstar.golden.sar``:
ragged random heads (N not a multiple of ``block_q``) over a cache step and reuse steps, the
score cache's contents against the golden cached weights and reciprocals, a slot saved,
overwritten by another head and restored; outputs bit-exact and every step's counters equal to
``dstar.sim.attention_cycles.predict``. Both encodings (FMDQ arrays and v1's nibble lanes)."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.sar import sar_cache_step, sar_reuse_step, score_cache_bits
from dstar.golden.schedule import is_key_step
from dstar.golden.softmax import reciprocal
from dstar.hw.attention import AttentionEngine, AttentionGeometry
from dstar.hw.generate import ATTN_TOP_NAME, manifest
from dstar.paths import build_dir
from dstar.sim.attention_cycles import dense_cycles, predict
from dstar.sim.layer_io import pack_named, unpack_named
from dstar.sim.pysim_driver import simulate
from dstar.sim.tb_attention import HeadImage, read_words, restore_slot, run_head, save_slot
from tests.hw.cases.attention import random_step
from tests.hw.fixtures import run_generated


def sar_cfg(encoding):
    """The tiny preset, Dh = 16, SAR; the encoding pinned (the default may change)."""
    return preset("tiny").replace(encoding=encoding, attention="sar", head_dim=16)


def golden_steps(cfg, steps, mask, refresh):
    """The golden SAR steps of one slot: per step ``(cache, o, w, l)`` (``w``, ``l`` those of
    the step's cache, the last cache step's on reuse steps)."""
    kw = dict(block_q=cfg.block_q, block_k=cfg.block_k, frac_bits=cfg.attn_frac_bits,
              out_frac_bits=cfg.attn_out_frac_bits, group=cfg.group, e_max=cfg.e_max)
    out, w, lsum = [], None, None
    for i, (q, k, v, m, sh) in enumerate(steps):
        cache = is_key_step(i, refresh)
        if cache:
            o, w, lsum = sar_cache_step(q, k, v, m, sh, mask, **kw)
        else:
            o = sar_reuse_step(w, lsum, v, e_max=cfg.e_max, out_frac_bits=cfg.attn_out_frac_bits)
        out.append((cache, o, w, lsum))
    return out


def sparse_mask(rng, n, cfg):
    """A random mask with a kept block in every query block and some dropped."""
    nqb, nkb = -(-n // cfg.block_q), -(-n // cfg.block_k)
    while True:
        mask = rng.random((nqb, nkb)) < 0.6
        if mask.any(axis=1).all() and not mask.all():
            return mask


def run_sar(cfg, script, zero=None):
    """Simulate one engine over ``script``: a list of ``("step", kwargs of run_head)``,
    ``("save", slot)``, ``("restore", slot)``, ``("cache", slot)`` (its score cache's words),
    ``("clear", None)``; returns what each entry
    gave (``HeadOutcome``, the saved state, ``(sc, rl)`` words). ``zero = (slot, kg)``: the
    restored P word of the slot's row 0, key group ``kg``, has its ``p`` zeroed."""
    dut = AttentionEngine(cfg)
    man = manifest(dut)
    outs, saved = [], {}

    async def bench(ctx):
        io = (lambda n, v: ctx.set(getattr(dut, n), v),
              lambda n: int(ctx.get(getattr(dut, n))), ctx.tick)
        for kind, arg in script:
            if kind == "step":
                img = HeadImage(man, np.asarray(arg["v"]).shape[0])
                outs.append(await run_head(io, img, read_res=False, **arg))
            elif kind == "save":
                saved[arg] = await save_slot(io, HeadImage(man, 1), arg)
                outs.append(saved[arg])
            elif kind == "restore":
                state = saved[arg]
                if zero is not None:
                    state = {**state, "sc": dict(state["sc"])}
                    a = HeadImage(man, 1).sc_addr(zero[0], 0, zero[1])
                    state["sc"][a] = _zero_p(man, state["sc"][a])
                await restore_slot(io, arg, state)
                outs.append(None)
            elif kind == "clear":
                ctx.set(dut.clear, 1)
                await ctx.tick()
                ctx.set(dut.clear, 0)
                outs.append(None)
            else:
                img = HeadImage(man, 1)
                outs.append((await read_words(io, "host_sc_addr", "host_sc_rdata",
                                              img.sc_addrs(arg)),
                             await read_words(io, "host_rl_addr", "host_rl_rdata",
                                              img.rl_addrs(arg))))

    simulate(dut, bench)
    return man, outs


def _zero_p(man, word):
    """A P word with every ``p`` 0 (its shift kept)."""
    lay = man["layouts"]["sc_word"]
    return pack_named({"shift": unpack_named(word, lay)["shift"]}, lay)


def step_args(step, cache, slot, refresh, mask=None):
    q, k, v, m, sh = step
    if not cache:                           # a reuse step needs V only
        q = k = m = sh = None
    return {"q": q, "k": k, "v": v, "m": m, "sh": sh, "slot": slot, "theta_q": 1 << 16,
            "refresh": refresh, "mask": mask}


def check_step(cfg, out, n, mask, cache, o, what):
    want = predict(cfg, n, mask, cache, 1 << 16).counters()
    assert out.key == cache, f"{what}: cache step {out.key}"
    assert np.array_equal(out.o, o), f"{what}: O differs in {(out.o != o).sum()} elements"
    assert out.counters == want, f"{what}: counters {out.counters} != model {want}"


def check_cache(man, words, slot, n, mask, w, lsum, cfg, what):
    """The score cache's words of ``slot`` hold the golden ``w`` on the kept keys and the
    rows' ``reciprocal(l)``."""
    img = HeadImage(man, n)
    got_w, got_rl = img.score_cache(*words, slot)
    kept = np.kron(mask, np.ones((cfg.block_q, cfg.block_k), dtype=bool))[:n, :n]
    assert np.array_equal(np.where(kept, got_w, 0), w), f"{what}: cached weights differ"
    r, big_l = reciprocal(lsum)
    assert np.array_equal(got_rl, np.stack([r, big_l], axis=-1)), f"{what}: (r, L) differ"


@pytest.mark.parametrize("encoding", ["fmdq", "nibble"])
def test_cache_reuse_save_restore(encoding):
    """Slot 1: N = 27 (ragged query and key blocks; on FMDQ a partial token tile), a sparse
    host mask, refresh 4: a cache step and two reuse steps with fresh V; the score cache read
    back equals the golden cache. Then slot 1 is saved, every slot cleared, slot 1 overwritten
    by another head's cache step (N = 20, another mask), restored, and its next call is the
    third reuse step of the first head's cache."""
    cfg = sar_cfg(encoding)
    rng = np.random.default_rng(29)
    n, dh, slot, refresh = 27, cfg.head_dim, 1, 4
    mask = sparse_mask(rng, n, cfg)
    steps = [random_step(rng, n, dh, 2.0, sink=4) for _ in range(4)]
    gold = golden_steps(cfg, steps, mask, refresh)
    assert [g[0] for g in gold] == [True, False, False, False]
    other_n, other_mask = 20, np.array([[True, False], [True, True]])
    other = random_step(rng, other_n, dh, 2.0)
    (_, o_other, _, _), = golden_steps(cfg, [other], other_mask, refresh)
    script = [("step", step_args(steps[0], True, slot, refresh, mask)),
              ("step", step_args(steps[1], False, slot, refresh)),
              ("step", step_args(steps[2], False, slot, refresh)),
              ("cache", slot), ("save", slot), ("clear", None),
              ("step", step_args(other, True, slot, refresh, other_mask)),
              ("restore", slot),
              ("step", step_args(steps[3], False, slot, refresh))]
    # The restored cache is the saved one with row 0's first kept P word zeroed (the host
    # owns the cache): the reuse step must follow it, so a cache ignored or mis-addressed
    # fails, as the unmodified golden output shows.
    j0 = int(np.flatnonzero(mask[0])[0]) * cfg.block_k // cfg.group
    w_mod = gold[0][2].copy()
    w_mod[0, j0 * cfg.group:(j0 + 1) * cfg.group] = 0
    o_mod = sar_reuse_step(w_mod, gold[0][3], steps[3][2], e_max=cfg.e_max,
                           out_frac_bits=cfg.attn_out_frac_bits)
    assert not np.array_equal(o_mod, gold[3][1])
    man, outs = run_sar(cfg, script, zero=(slot, j0))
    for s in range(3):
        check_step(cfg, outs[s], n, mask, gold[s][0], gold[s][1], f"step {s}")
    check_cache(man, outs[3], slot, n, mask, gold[0][2], gold[0][3], cfg, "score cache")
    check_step(cfg, outs[6], other_n, other_mask, True, o_other, "other head")
    check_step(cfg, outs[8], n, mask, False, o_mod, "restored slot")


def _unelaborated(cfg) -> AttentionEngine:
    """An engine for its ports only (never elaborated: no warning when it is collected)."""
    top = AttentionEngine(cfg)
    top._MustUse__silence = True
    return top


@pytest.mark.parametrize("encoding", ["fmdq", "nibble"])
def test_score_cache_size_ports_and_model(encoding):
    """No simulation: the score cache holds every slot's dense cache (``golden.sar``'s bits
    with every block kept, per slot); the manifest has its words and no residual; the cycle
    model's cache step is a v1 reuse step on the same mask, its reuse step runs no QK^T and
    costs less; v1's engine keeps its ports."""
    cfg = sar_cfg(encoding)
    ag = AttentionGeometry(cfg)
    n = cfg.max_tokens
    dense = score_cache_bits(np.ones((ag.nqb, ag.nkb), dtype=bool), n, cfg.block_q,
                             cfg.block_k, cfg.group, cfg.e_max)
    assert ag.score_cache_bits() == cfg.attn_slots * dense
    man = manifest(_unelaborated(cfg))
    assert {"sc_word", "rl_word"} <= set(man["layouts"]) and "res_word" not in man["layouts"]
    names = set(man["ports"])
    assert {"host_sc_we", "host_sc_addr", "host_rl_we", "host_rl_addr"} <= names
    assert not any(p.startswith("host_res") for p in names)
    v1 = cfg.replace(attention="residual")
    v1_ports = _unelaborated(v1).signature.members
    assert "host_res_we" in v1_ports and "host_sc_we" not in v1_ports
    mask = np.array([[True, False], [False, True]])
    cache, reuse = predict(cfg, n, mask, True, 0), predict(cfg, n, mask, False, 0)
    assert cache.counters() == predict(v1, n, mask, False, 1 << 16).counters()
    assert (reuse.count_qk, reuse.count_pv, cache.count_qk) == (0, 2, 2)
    assert reuse.cycles < cache.cycles < dense_cycles(v1, n)


def sar_icarus_case(cfg, steps, mask, refresh, slot):
    """The arrays of one SAR case of ``sim/tb_attention.py``: one slot's steps, the host mask,
    the golden outputs and the cycle model's counters."""
    gold = golden_steps(cfg, steps, mask, refresh)
    n = steps[0][2].shape[0]
    return {"n": np.array(n), "slot": np.array(slot), "theta_q": np.array(1 << 16),
            "refresh": np.array(refresh),
            **{k: np.stack([np.asarray(st[i], dtype=np.int64) for st in steps])
               for i, k in enumerate(("q", "k", "v", "m", "sh"))},
            "keys": np.array([g[0] for g in gold], dtype=np.int64),
            "o": np.stack([g[1] for g in gold]), "mask": np.asarray(mask, dtype=bool),
            "counters": np.array([list(predict(cfg, n, mask, g[0], 1 << 16).counters().values())
                                  for g in gold], dtype=np.int64)}


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["fmdq", "nibble"])
def test_generated_verilog_on_icarus(encoding):
    """cocotb on Icarus: the generated SAR engine (tiny preset), a ragged head (N = 27) with a
    sparse host mask, a cache step and two reuse steps, bit-exact, counters equal to the
    model."""
    cfg = preset("tiny").replace(encoding=encoding, attention="sar")
    rng = np.random.default_rng(31)
    n = 27
    mask = sparse_mask(rng, n, cfg)
    steps = [random_step(rng, n, cfg.head_dim, 2.0, sink=4) for _ in range(3)]
    case = sar_icarus_case(cfg, steps, mask, 3, 2)
    assert case["keys"].tolist() == [1, 0, 0]
    run_generated(cfg, build_dir("cocotb") / f"tiny-attention-sar-{encoding}", ATTN_TOP_NAME,
                  "dstar.sim.tb_attention", {"ragged27": case}, "DSTAR_ATTN", "attn_cases.npz",
                  build="icarus_attn")


@pytest.mark.slow
def test_real_head_against_the_hook(real_head):
    """The first 32 tokens of a real head (layer 0, head 3 of the bundled DiT, FMDQ arrays) with
    the bundled digits mask of that head cut to them (key block 0 kept, so every query block
    keeps a block; block (1, 1) stays dropped): a cache step and two reuse steps, the engine's
    outputs equal to the ``SparseAttentionReuse`` hook's on the float inputs (its
    quantization, its score cache)."""
    from dstar.golden.attention import quantize_per_head, quantize_per_token
    from dstar.golden.sar import SparseAttentionReuse, default_masks_path, load_masks
    from dstar.golden.softmax import logit_multiplier

    cfg = preset("tiny").replace(encoding="fmdq", attention="sar", refresh_attn=3)
    n = cfg.max_tokens
    nb = n // cfg.block_q
    mask = load_masks(default_masks_path("digits")).mask[0, 3, :nb, :nb].copy()
    mask[:, 0] = True
    assert not mask.all()                   # block (1, 1) dropped
    hook = SparseAttentionReuse(cfg, mask[None, None], ["blocks.0.attn"])
    calls, want = [], []
    for s, (q, k, v) in enumerate(tuple(a[:n] for a in st) for st in real_head):
        want.append(hook("blocks.0.attn", q[None, None], k[None, None], v[None, None], s)[0, 0])
        v_int, s_v = quantize_per_head(v)
        q_int, s_q = quantize_per_token(q)
        k_int, s_k = quantize_per_head(k)
        m, sh = logit_multiplier(s_q * s_k / np.sqrt(cfg.head_dim), cfg.attn_frac_bits)
        calls.append((q_int, k_int, v_int, m, sh, s_v))
    script = [("step", step_args(c[:5], s == 0, 0, 3, mask if s == 0 else None))
              for s, c in enumerate(calls)]
    _, outs = run_sar(cfg, script)
    for s, (out, c) in enumerate(zip(outs, calls, strict=True)):
        o = (out.o * (c[5] / float(1 << cfg.attn_out_frac_bits))).astype(np.float32)
        assert out.key == (s == 0) and np.array_equal(o, want[s]), f"step {s}"
