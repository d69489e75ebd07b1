"""The cycle model of each linear datapath (``dstar.config.Datapath``): the counters of one layer
run on the ``dstar_linear`` top that ``dstar.hw.generate`` builds for a configuration.

``DSTAR``: ``dstar.sim.cycle_model.predict`` (depends on the encoded data); ``DENSE``:
``dstar.sim.dense_cycles.predict`` and ``INT8``: ``dstar.sim.int8_cycles.predict`` (depend only
on the shape: ``enc`` gives the token count).
Either report's ``counters()`` equals the top's counter ports after the run.
"""

from collections.abc import Callable

from dstar.config import Datapath

from . import cycle_model, dense_cycles, int8_cycles

__all__ = ["LAYER_CYCLES", "predict"]

#: Per ``Datapath``: ``model(cfg, enc, k, m)`` -> the cycle report of one layer run.
LAYER_CYCLES: dict[Datapath, Callable] = {
    Datapath.DSTAR: cycle_model.predict,
    Datapath.DENSE: lambda cfg, enc, k, m: dense_cycles.predict(cfg, enc.q.shape[0], k, m),
    Datapath.INT8: lambda cfg, enc, k, m: int8_cycles.predict(cfg, enc.q.shape[0], k, m),
}


def predict(cfg, enc, k: int, m: int):
    """Cycles of one run of the ``(N, K)`` encoded step ``enc`` on a ``K`` x ``M`` layer, on the
    top of ``cfg.datapath``."""
    return LAYER_CYCLES[cfg.datapath](cfg, enc, k, m)
