"""Cycles of the lean dense INT8 datapath (``dstar.hw.int8.Int8LinearLayer``) for one layer run:
exact, because its schedule does not depend on the data.

Timeline, cycle 0 being the first with ``busy`` high. A run is ``P * chunks`` chunks (``P``
passes; chunk ``q`` is chunk ``q % chunks`` of pass ``q // chunks``), each ``lanes`` weight rows
and ``T`` token cycles. Chunk ``q``'s rows are addressed one per cycle from cycle
``s_q = max(R_{q-1}, G_{q-2}) + 1`` (``R_{-1} = 0``; ``G_q`` the cycle after the front end
issued chunk ``q``'s last token, 0 for ``q < 0``) and are ready at ``R_q = s_q + lanes``. The
front end issues chunk ``q`` from ``F_q = max(R_q, G_{q-1})`` for ``T`` cycles, so
``G_q = F_q + T``; the last accumulator write is three cycles after the last token (stages E,
A, B): ``busy`` falls at ``G_{last} + 3``. ``stall_load`` counts the cycles the front end
waited for weights; it is zero after the first chunk when ``T >= lanes + 1``.
"""

from dstar.config import Datapath
from dstar.hw.geometry import DenseGeometry

from .dense_cycles import DenseCycles

__all__ = ["predict"]


def predict(cfg, n_tokens: int, k: int, m: int) -> DenseCycles:
    """Counters of one run of ``n_tokens`` x ``K`` activations on a ``K`` x ``M`` layer
    (``chunks`` of the report: the front end's token cycles)."""
    if cfg.datapath != Datapath.INT8:
        raise ValueError(f"the int8 cycle model needs datapath 'int8', got {cfg.datapath!r}")
    dg = DenseGeometry(cfg)
    passes = dg.n_passes(k, m)
    if passes == 0 or n_tokens == 0:
        return DenseCycles(0, 0, 0, 0)
    units = passes * dg.chunks
    ready = 0                       # R_{q-1}
    issued = [0, 0]                 # G_{q-2}, G_{q-1}
    for _ in range(units):
        ready = max(ready, issued[0]) + 1 + dg.lanes
        issued = [issued[1], max(ready, issued[1]) + n_tokens]
    f_end = issued[1]
    return DenseCycles(cycles=f_end + dg.acc_stages, stall_load=f_end - units * n_tokens,
                       passes=passes, chunks=units * n_tokens)
