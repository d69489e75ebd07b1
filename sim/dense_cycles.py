"""Cycles of the dense INT8 baseline (``dstar.hw.dense.DenseLinearLayer``) for one layer run: exact,
because the dense engine's schedule does not depend on the data.

Timeline, cycle 0 being the first with ``busy`` high: tile ``p`` is addressed one row per cycle
from cycle ``s_p = max(R_{p-1}, D_{p-2}) + 1`` (``R_{-1} = 0``; ``D_q`` the cycle the count of
finished passes reaches ``q + 1``, 0 for ``q < 0``) and is ready at ``R_p = s_p + k_tile``. Pass
``p``'s front end starts at ``F_p = max(R_p, F_{p-1} + T * chunks)`` and issues ``T * chunks``
chunks back to back (``T`` tokens); its last accumulator write is three cycles after its last
chunk (stages E, A, B), so ``D_p = F_p + T * chunks + 3``, and ``busy`` falls at ``D_{P-1}``.
``stall_load`` counts the cycles the front end waited for a tile.
"""

from dataclasses import dataclass

from dstar.config import Datapath
from dstar.hw.geometry import DenseGeometry

__all__ = ["DenseCycles", "predict"]


@dataclass(frozen=True)
class DenseCycles:
    cycles: int
    stall_load: int
    passes: int
    chunks: int         # chunk cycles of the front end (T * chunks per pass)

    def counters(self) -> dict:
        """The design's counter ports after the run."""
        return {"cycles": self.cycles, "stall_load": self.stall_load}

    @property
    def macs_per_cycle(self) -> float:
        """Achieved 8x8 products per cycle per array column and lane (1.0: every lane busy)."""
        return self.chunks / self.cycles if self.cycles else 0.0


def predict(cfg, n_tokens: int, k: int, m: int) -> DenseCycles:
    """Counters of one run of ``n_tokens`` x ``K`` activations on a ``K`` x ``M`` layer."""
    if cfg.datapath != Datapath.DENSE:
        raise ValueError(f"the dense cycle model needs datapath 'dense', got {cfg.datapath!r}")
    dg = DenseGeometry(cfg)
    chunks, passes = dg.chunks, dg.n_passes(k, m)
    if passes == 0 or n_tokens == 0:
        return DenseCycles(0, 0, 0, 0)
    per_pass = n_tokens * chunks
    ready, done = [], []
    f_end = 0                       # first free cycle of the front end
    for p in range(passes):
        prev_ready = ready[p - 1] if p else 0
        freed = done[p - 2] if p >= 2 else 0
        ready.append(max(prev_ready, freed) + 1 + cfg.k_tile)
        f_start = max(ready[p], f_end)
        f_end = f_start + per_pass
        done.append(f_end + dg.acc_stages)
    cycles = done[-1]
    return DenseCycles(cycles=cycles, stall_load=f_end - passes * per_pass, passes=passes,
                       chunks=passes * per_pass)
