"""Capture a dstar trace (``golden.trace``) from any PyTorch model with forward pre-hooks on its
``nn.Linear`` modules. Needs the ``train`` extra (PyTorch).

Usage::

    cap = TraceCapture(model)                      # every nn.Linear, or names=[...]
    with cap:
        for t in timesteps:
            cap.next_step(t)
            model(x, t, y)                         # your sampler's network evaluation
    cap.save("my_dit.npz")

Each hooked module's input is flattened to ``(rows, K)``; calls of one module within a step are
concatenated along rows. Attention inputs can be added with ``record_attention``.
"""

import numpy as np
import torch
from torch import nn

from dstar.golden.trace import Trace, save_trace

__all__ = ["TraceCapture"]


class TraceCapture:
    def __init__(self, model: nn.Module, names=None):
        self.modules = {n: m for n, m in model.named_modules()
                        if isinstance(m, nn.Linear) and (names is None or n in names)}
        if names is not None:
            missing = sorted(set(names) - self.modules.keys())
            if missing:
                raise ValueError(f"no nn.Linear named {missing[0]!r} in the model")
        if not self.modules:
            raise ValueError("the model has no nn.Linear modules to capture")
        self._handles = []
        self._steps: list[dict[str, list[np.ndarray]]] = []
        self._attn: list[dict[str, tuple]] = []
        self.timesteps: list[int] = []

    def __enter__(self):
        for name, mod in self.modules.items():
            self._handles.append(mod.register_forward_pre_hook(self._hook(name)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _hook(self, name):
        def hook(module, args):
            if not self._steps:
                raise RuntimeError("TraceCapture: call next_step() before running the model")
            x = args[0].detach().float().reshape(-1, module.in_features).cpu().numpy()
            self._steps[-1].setdefault(name, []).append(x)
        return hook

    def next_step(self, timestep: int | None = None):
        self._steps.append({})
        self._attn.append({})
        self.timesteps.append(-1 if timestep is None else int(timestep))

    def record_attention(self, name: str, q, k, v):
        """Record one attention's inputs ``(B, H, N, Dh)`` (before the 1/sqrt(Dh) scale)."""
        self._attn[-1][name] = tuple(torch.as_tensor(a).detach().float().cpu().numpy()
                                     for a in (q, k, v))

    def trace(self) -> Trace:
        if not self._steps:
            raise ValueError("nothing captured: no next_step() call")
        tr = Trace(steps=len(self._steps), timesteps=np.array(self.timesteps, np.int64))
        for name, mod in self.modules.items():
            per_step = [np.concatenate(s[name]) if name in s else None for s in self._steps]
            if any(p is None for p in per_step):
                continue                                # not used in every step: skip it
            rows = {p.shape[0] for p in per_step}
            if len(rows) != 1:
                raise ValueError(f"{name}: the number of rows changes across steps {rows}")
            tr.linear_x[name] = np.stack(per_step)
            tr.linear_w[name] = mod.weight.detach().float().cpu().numpy()
            tr.linear_b[name] = (None if mod.bias is None
                                 else mod.bias.detach().float().cpu().numpy())
        names = self._attn[0].keys()
        for name in names:
            if all(name in a for a in self._attn):
                tr.attn[name] = tuple(np.stack([a[name][i] for a in self._attn])
                                      for i in range(3))
        return tr

    def save(self, path, compress: bool = True) -> None:
        save_trace(path, self.trace(), compress)
