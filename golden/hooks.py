"""Linear-layer hooks for ``dstar.golden.dit.DiT``: dense W8A8 and DSTAR's differential layers."""

import numpy as np

from .difflinear import ENCODINGS, DiffLinear
from .dit import LINEAR_TYPES
from .host import BlockHost, GoldenEngine
from .quant import quantize_weights, w8a8_linear

__all__ = ["layer_type", "W8A8Linears", "DStarLinears"]


def layer_type(name: str) -> str:
    """``blocks.3.mlp.fc1`` -> ``fc1``."""
    return name.rsplit(".", 1)[-1]


class W8A8Linears:
    """Dense per-token INT8 activations x per-channel INT8 weights, re-quantized every step."""

    def __init__(self):
        self._wq = {}

    def __call__(self, name, x, w, b, step):
        if name not in self._wq:
            w_q, s_w = quantize_weights(w)
            self._wq[name] = (w_q.astype(np.float32), s_w)      # exact: |w_q| <= 127
        w_q, s_w = self._wq[name]
        return w8a8_linear(x, w_q, s_w, b, dtype=np.float32)


class DStarLinears:
    """The linear hook of the host (``golden.host.BlockHost.linear_step``) on the golden engine
    (``host``: one ``BlockHost`` on one ``GoldenEngine`` for every layer, as the accelerator's
    host runs the DiT's blocks), each layer seen as a ``DiffLinear`` (``layers``, created on
    first use); counts operations per step (``stats``: the ``cfg.encoding``'s,
    ``golden.stats.OpStats`` or ``golden.fmdq_stats.FmdqStats``) and hands each step's
    ``StepResult`` to ``on_result(name, step, res)``."""

    def __init__(self, cfg, layer_types=LINEAR_TYPES, on_result=None):
        self.cfg = cfg
        self.host = BlockHost(cfg, None, GoldenEngine(cfg))
        self.layers: dict[str, DiffLinear] = {}
        self.stats = ENCODINGS[cfg.encoding].stats(layer_types)
        self.on_result = on_result

    def __call__(self, name, x, w, b, step):
        layer = self.layers.get(name)
        if layer is None:
            layer = self.layers[name] = DiffLinear(w, b, self.cfg, name, self.host)
        res = layer(x, step, dtype=np.float32)
        self.stats.add_counts(step, layer_type(name), res.counts)
        if self.on_result is not None:
            self.on_result(name, step, res)
        return res.y
