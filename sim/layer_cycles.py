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

__all__ = ["LAYER_CYCLES", "SHAPE_MODELS", "predict"]

#: The datapaths whose cycles depend only on the shape: ``model(cfg, n_tokens, k, m)``.
SHAPE_MODELS: dict[Datapath, Callable] = {
    Datapath.DENSE: dense_cycles.predict,
    Datapath.INT8: int8_cycles.predict,
}


def _shape_only(model):
    return lambda cfg, enc, k, m: model(cfg, enc.q.shape[0], k, m)


#: Per ``Datapath``: ``model(cfg, enc, k, m)`` -> the cycle report of one layer run.
LAYER_CYCLES: dict[Datapath, Callable] = {
    Datapath.DSTAR: cycle_model.predict,
    **{d: _shape_only(model) for d, model in SHAPE_MODELS.items()},
}


def predict(cfg, enc, k: int, m: int):
    """Cycles of one run of the ``(N, K)`` encoded step ``enc`` on a ``K`` x ``M`` layer, on the
    top of ``cfg.datapath``."""
    return LAYER_CYCLES[cfg.datapath](cfg, enc, k, m)
