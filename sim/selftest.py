"""The board self-test's program, built from a golden-model workload, and its run in Amaranth's
simulator.

``program_ops`` turns a stored layer run into the ``dstar.hw.board.selftest.SelfTest`` ROM
operations: the memory words come from ``dstar.sim.layer_io.LayerImage`` of the layer's
manifest, as the host driver (``layer_io.run_step``) writes them, and the expected accumulator
words from the golden model's ``Y_int`` (``golden.difflinear.encode_step`` +
``golden.quant.exact_matmul``). ``selftest`` builds the component, ``simulate`` runs it.
"""

import numpy as np

from dstar.golden.difflinear import encode_step
from dstar.golden.quant import exact_matmul
from dstar.hw.board.selftest import OP_CHECK, OP_END, OP_START, OP_TARGET, OP_WEIGHT, SelfTest
from dstar.hw.board.ulx3s import board_config
from dstar.hw.generate import manifest
from dstar.hw.linear import LinearLayer

from .layer_io import LayerImage, pack
from .pysim_driver import simulate as _simulate

__all__ = ["Workload", "make_workload", "program_ops", "selftest", "simulate"]


class Workload:
    """One stored layer run: ``w_q`` (K, M) INT8, ``targets`` (steps of (N, K) rows, the first
    a key step) and the golden ``y`` (N, M) after the last step."""

    def __init__(self, w_q, targets, y):
        self.w_q, self.targets, self.y = w_q, targets, y


def make_workload(cfg, n: int = 3, k: int | None = None, m: int | None = None, steps: int = 2,
                  seed: int = 7) -> Workload:
    """A deterministic workload: random INT8 weights, a drifting activation (key step, then
    ``steps - 1`` differential steps), K = two weight tiles and M = two column blocks unless
    given (so several passes run), and the golden ``Y_int`` after the last step."""
    k = k or min(cfg.max_k, 2 * cfg.k_tile)
    m = m or min(cfg.max_m, 2 * cfg.m_tile * cfg.n_arrays)
    rng = np.random.default_rng(seed)
    w_q = rng.integers(-127, 128, size=(k, m), dtype=np.int64)
    x = rng.standard_normal((n, k)) * 60.0
    targets = []
    for _ in range(steps):
        targets.append(np.clip(np.rint(x), -cfg.target_max, cfg.target_max).astype(np.int64))
        x = x + rng.standard_normal((n, k)) * 2.0
    xs = np.zeros((n, k), dtype=np.int64)
    y = np.zeros((n, m), dtype=np.int64)
    for t in targets:
        enc, xs = encode_step(t, xs, cfg)
        y = y + exact_matmul(enc.decode(), w_q)
    return Workload(w_q, targets, y)


def program_ops(man: dict, wl: Workload) -> list[tuple]:
    """The self-test program ``(op, sel, addr, data)`` of ``wl`` for the layer ``man``
    describes (its ``params.json`` manifest): weights, then per step the target rows and a
    start, then a check of every accumulator word, then the end."""
    n, k = wl.targets[0].shape
    m = wl.w_q.shape[1]
    img = LayerImage(man, k, m, n)
    ports = man["ports"]
    n_arr = man["config"]["n_arrays"]
    y_lay = man["layouts"]["y_row"]
    ops = []
    for a, words in enumerate(img.weight_words(wl.w_q)):
        ops += [(OP_WEIGHT, 1 << a, addr, word) for addr, word in sorted(words.items())]
    nb = {p: ports[p]["width"] for p in ("n_tokens", "n_kt", "n_mt")}
    sizes = img.n | img.n_kt << nb["n_tokens"] | img.n_mt << (nb["n_tokens"] + nb["n_kt"])
    for s, target in enumerate(wl.targets):
        ops += [(OP_TARGET, 0, addr, word)
                for addr, word in sorted(img.row_words(target, "target").items())]
        ops.append((OP_START, int(s == 0), 0, sizes))
    bc = img.m_tile * n_arr
    for addr in img.y_addrs():
        t, mt = divmod(addr, img.n_mt_max)
        word = 0
        for a in range(n_arr):
            c0 = mt * bc + a * img.m_tile
            cols = list(wl.y[t, c0:c0 + img.m_tile])
            cols += [0] * (img.m_tile - len(cols))
            word |= pack(cols, y_lay) << (a * y_lay["width"])
        ops.append((OP_CHECK, 0, addr, word))
    ops.append((OP_END, 0, 0, 0))
    return ops


def selftest(cfg=None, workload: Workload | None = None) -> SelfTest:
    """The ``SelfTest`` of ``cfg`` (default: ``board_config()``) running ``workload`` (default:
    ``make_workload(cfg)``)."""
    cfg = cfg or board_config()
    layer = LinearLayer(cfg)
    wl = workload if workload is not None else make_workload(cfg)
    return SelfTest(layer, program_ops(manifest(layer), wl))


def simulate(cfg=None, workload: Workload | None = None, max_cycles: int = 200_000) -> dict:
    """Run ``selftest(cfg, workload)`` in Amaranth's simulator: ``{"done", "passed", "failed",
    "cycles"}``."""
    st = selftest(cfg, workload)
    out = {}

    async def bench(ctx):
        cycles = 0
        while cycles < max_cycles and not ctx.get(st.done):
            await ctx.tick()
            cycles += 1
        out.update(done=bool(ctx.get(st.done)), passed=bool(ctx.get(st.passed)),
                   failed=bool(ctx.get(st.failed)), cycles=cycles)

    _simulate(st, bench)
    return out
