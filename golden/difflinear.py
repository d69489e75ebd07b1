"""Differential linear layers (spec section 3): ``Y_t = Y_{t-1} + W_q^T . decode(enc(D))``.

One ``DiffLinear`` is one layer through the host's linear step (``golden.host.BlockHost
.linear_step``: the lattice ``d`` fixed at key steps, the integer targets, the float output) on
the golden engine (``golden.host.GoldenEngine``: the layer's ``golden.linear_state
.LinearState``, its reconstruction ``Xs_int``, accumulator ``Y_int`` and invariant checks), the
one path the golden pipeline's hooks and the accelerator's host take; on its own, for the
analysis tools that follow one layer. A step's result also carries its code and counts
(``ENCODINGS``: v1's ``stats.count_encoded``, FMDQ's ``fmdq_stats.count_fmdq``).

Lattice refinement (``Config.refine_max`` > 0) is the host's and the engine's together
(``golden.host_side.LinearSide``, ``lattice_refinements``).
"""

import functools

import numpy as np

from .encoder import Encoded
from .fmdq import FmdqEncoded
from .host import BlockHost, GoldenEngine, run_sync
from .host_side import LATTICES, LinearSide, key_lattice, lattice_refinements, linear_output
from .linear_state import (
    CHECK_VECTORS,
    CHUNK_ELEMENTS,
    ENCODINGS,
    Coding,
    InvariantError,
    LinearState,
    encode_step,
)

__all__ = ["DiffLinear", "InvariantError", "StepResult", "encode_step", "lattice_refinements",
           "CHECK_VECTORS", "CHUNK_ELEMENTS", "ENCODINGS", "Coding", "LATTICES", "key_lattice",
           "linear_output"]


class StepResult:
    """One step's output ``y`` (float64 ``(N, M)``), clipped target ``X_int`` ``(N, K)``, whether
    it was a key step, the counts of its encoded difference (``Coding.count``: v1's
    ``stats.count_encoded``, FMDQ's ``fmdq_stats.count_fmdq``) and that difference ``enc`` (an
    ``Encoded`` or ``FmdqEncoded``, joined from the layer's row chunks when first read);
    ``refine``: each token's lattice halvings before this step (int64 ``(N,)``, zeros on key
    steps and without refinement)."""

    def __init__(self, y, parts: list, target, key: bool, counts, refine=None):
        self.y, self.target, self.key, self.counts = y, target, key, counts
        self.refine = np.zeros(len(y), np.int64) if refine is None else refine
        self._parts = parts

    @functools.cached_property
    def enc(self) -> Encoded | FmdqEncoded:
        enc = type(self._parts[0]).concat(self._parts)
        enc.q = enc.q.astype(np.int64, copy=False)
        return enc


class DiffLinear:
    """One differential linear layer ``y = x @ w.T + b`` with DSTAR's integer state, on the
    host's path over the golden engine (module docstring).

    ``w`` is ``(M, K)`` float (PyTorch layout); ``cfg`` a ``dstar.config.Config``; ``name``
    prefixes errors and seeds the invariant check's vectors. With ``encoding = "nibble"`` ``K``
    must be a multiple of ``group`` (a ``ValueError`` otherwise). ``host``: a ``BlockHost`` on
    a ``GoldenEngine`` whose layer ``name`` this becomes (the pipeline's hooks share one, as
    the blocks of a DiT do; ``golden.hooks.DStarLinears``); by default its own."""

    def __init__(self, w, b, cfg, name: str = "linear", host: BlockHost | None = None):
        self.name, self.cfg = name, cfg
        self.host = BlockHost(cfg, None, GoldenEngine(cfg)) if host is None else host
        self.engine = self.host.engine
        if not isinstance(self.engine, GoldenEngine):
            raise TypeError(f"{name}: a DiffLinear runs on a GoldenEngine, not "
                            f"{type(self.engine).__name__}")
        self.side = self.host.lin[name] = LinearSide(w, b, cfg)
        self.state = self.engine.layers[name] = LinearState(self.side.w_q, cfg, name)
        self.coding = self.state.coding
        self.w_q, self.s_w = self.side.w_q, self.side.s_w
        self.steps_done = 0

    @property
    def bias(self):
        """The bias (float64 ``(M,)``) or None."""
        return self.side.bias

    @property
    def d(self):
        """The rows' lattice (float64 ``(N,)``; ``None`` before the first step)."""
        return self.side.d

    @property
    def refined(self):
        """Each row's lattice halvings since its key step (int64 ``(N,)``)."""
        return self.side.refined

    @property
    def xs(self):
        """The reconstruction ``Xs_int`` (int64 ``(N, K)``; ``None`` before the first step)."""
        return self.state.xs

    @property
    def y_int(self):
        """The accumulator ``Y_int`` ``(N, M)`` as int64 (a copy); assign to replace it."""
        return self.state.y_int

    @y_int.setter
    def y_int(self, value):
        self.state.y_int = value

    def is_key(self, step: int) -> bool:
        return self.side.is_key(step)

    def __call__(self, x, step: int, dtype=np.float64) -> StepResult:
        """One step on the rows ``x`` ``(N, K)``; the result's ``y`` is ``dtype`` (computed in
        float64)."""
        res = run_sync(self.host.linear_step(self.name, x, None, None, step, dtype))
        self.steps_done += 1
        last = self.state.last
        return StepResult(y=res.y, parts=last.parts, target=res.target, key=res.key,
                          counts=last.counts, refine=res.refine)
