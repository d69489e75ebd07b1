"""Capture a dstar trace (``golden.trace``) from any PyTorch DiT: forward pre-hooks on its
``nn.Linear`` modules, and its ``F.scaled_dot_product_attention`` calls. Needs the ``train``
extra (PyTorch).

Usage::

    cap = TraceCapture(model)                      # the blocks' per-token linears, or names=[...]
    with cap:
        for t in timesteps:
            cap.next_step(t)
            model(x, t, y)                         # your sampler's network evaluation
    cap.save("my_dit.npz")

Which layers: by default the linear layers that run on the accelerator, found by structure: an
``nn.Linear`` inside a repeated block (a member of an ``nn.ModuleList``, e.g. ``blocks.3``)
whose input has a token axis (``(B, N, K)``). Per-sample linears (adaLN modulation, timestep
and label embedders) and layers outside the blocks (the final layer) are left out; ``names=``
chooses layers explicitly. Each layer's input is flattened to ``(rows, K)`` = batch x tokens
(the tokens per sequence are recorded); calls of one module within a step are concatenated
along rows.

Attention: within the ``with`` block every ``torch.nn.functional.scaled_dot_product_attention``
call with 4-D ``(B, H, N, Dh)`` inputs, no mask, no dropout, not causal and the default scale is
recorded under the name of the innermost module that made it (``blocks.3.attn``); other calls
run unrecorded and are counted in ``skipped_attention``. ``record_attention`` adds inputs by
hand (for models that compute attention themselves).

Scale: each finished step is spilled to a temporary folder (``spill_dir``, default: the system
temporary folder) and the file is written layer by layer from there, so memory holds one step,
not the whole run. ``dtype="float16"`` halves the spill and the file; ``token_stride=n`` keeps
every n-th token of each sequence in the linear inputs (attention stays whole); ``cfg=True``
marks every step's batch as the doubled guidance batch ``[cond; uncond]``.
"""

import contextlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dstar.golden.trace import Stacked, Trace, save_trace

__all__ = ["TraceCapture", "accelerator_linears"]


def accelerator_linears(model: nn.Module) -> dict[str, nn.Linear]:
    """The ``nn.Linear`` modules inside repeated blocks (members of an ``nn.ModuleList``), by
    name: the candidates for the accelerator (``TraceCapture`` keeps those that see tokens)."""
    in_blocks = set()
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ModuleList):
            in_blocks |= {f"{name}.{i}" if name else str(i) for i in range(len(mod))}
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)
            and any(n.startswith(b + ".") for b in in_blocks)}


class TraceCapture:
    """Records a sampling run of a PyTorch model as a dstar trace (see the module docstring)."""

    def __init__(self, model: nn.Module, names=None, *, dtype="float32", token_stride: int = 1,
                 cfg: bool = False, spill_dir=None):
        if names is None:
            self.modules = accelerator_linears(model)
            if not self.modules:
                raise ValueError("the model has no nn.Linear modules inside repeated blocks "
                                 "(nn.ModuleList); name the layers to capture with names=[...]")
        else:
            if isinstance(names, str):
                raise ValueError(f"names must be a list of layer names, got the string "
                                 f"{names!r} (write names=[{names!r}])")
            every = {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}
            missing = sorted(set(names) - every.keys())
            if missing:
                raise ValueError(f"no nn.Linear named {missing[0]!r} in the model")
            self.modules = {n: every[n] for n in names}
            if not self.modules:
                raise ValueError("names=[] selects no layer to capture")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float16, np.float32):
            raise ValueError(f"dtype must be float16 or float32, got {dtype!r}")
        if not isinstance(token_stride, int) or token_stride < 1:
            raise ValueError(f"token_stride must be an integer >= 1, got {token_stride!r}")
        if spill_dir is not None and not Path(spill_dir).is_dir():
            raise ValueError(f"spill_dir {str(spill_dir)!r} is not an existing folder")
        self.model, self.explicit = model, names is not None
        self.token_stride, self.cfg = token_stride, cfg
        self._spill_root = spill_dir
        self._spill: Path | None = None
        self._handles, self._stack = [], []
        self._step: dict[str, list[np.ndarray]] = {}
        self._attn_step: dict[str, tuple] = {}
        self._shapes: dict[str, list] = {}          # name -> per step (rows, K) or None
        self._attn_shapes: dict[str, list] = {}
        self.tokens: dict[str, int] = {}
        self.per_sample: set[str] = set()           # layers seen without a token axis
        self.timesteps: list[int] = []
        self.skipped_attention = 0
        self._closed = False                        # close() removed spilled steps
        self._flushed = 0                           # steps spilled to disk

    # ----- hooks -----
    def __enter__(self):
        if self in _ACTIVE:
            raise RuntimeError("TraceCapture: this capture is already active (a nested `with` "
                               "of the same capture); enter it once")
        for name, mod in self.modules.items():
            self._handles.append(mod.register_forward_pre_hook(self._hook(name)))
        # The stack of running modules names the module an attention call comes from. (A hook
        # that returns a value replaces the module's input or output: these return None.)
        def enter(name):
            def pre(_m, _a):
                self._stack.append(name)
            return pre

        def leave(_m, _a, _o):
            if self._stack:
                self._stack.pop()

        for name, mod in self.model.named_modules():
            self._handles.append(mod.register_forward_pre_hook(enter(name)))
            self._handles.append(mod.register_forward_hook(leave))
        _attach(self)
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._stack.clear()
        _detach(self)

    def _hook(self, name):
        def hook(module, args):
            if not self.timesteps:
                raise RuntimeError("TraceCapture: call next_step() before running the model")
            x = args[0].detach()
            if x.dim() < 3:
                self.per_sample.add(name)
                if not self.explicit:
                    return
                x = x.reshape(-1, 1, module.in_features)
            x = x.reshape(-1, x.shape[-2], module.in_features)
            self.tokens.setdefault(name, -(-x.shape[1] // self.token_stride))
            x = x[:, ::self.token_stride].reshape(-1, module.in_features)
            self._step.setdefault(name, []).append(x.float().cpu().numpy().astype(self.dtype))
        return hook

    def _attention(self, q, k, v, attn_mask, dropout_p, is_causal, scale, kw) -> None:
        """One ``scaled_dot_product_attention`` call seen while active (``_dispatch``)."""
        plain = (attn_mask is None and dropout_p == 0.0 and not is_causal and scale is None
                 and not kw and q.dim() == 4 and q.shape == k.shape == v.shape)
        if plain and self.timesteps and self._stack:
            self.record_attention(self._stack[-1], q, k, v)
        else:
            self.skipped_attention += 1

    # ----- steps -----
    def next_step(self, timestep: int | None = None):
        """Start a network evaluation (a sampling step); ``timestep``: its diffusion timestep."""
        self._flush()
        self.timesteps.append(-1 if timestep is None else int(timestep))

    def record_attention(self, name: str, q, k, v):
        """Record one attention's inputs ``(B, H, N, Dh)`` (before the 1/sqrt(Dh) scale)."""
        if not self.timesteps:
            raise RuntimeError("TraceCapture: call next_step() before recording attention")
        self._attn_step[name] = tuple(torch.as_tensor(a).detach().float().cpu().numpy()
                                      .astype(self.dtype) for a in (q, k, v))

    def _spill_path(self) -> Path:
        if self._spill is None:
            self._spill = Path(tempfile.mkdtemp(prefix="dstar-capture-", dir=self._spill_root))
        return self._spill

    def _flush(self):
        """Spill the finished step's arrays to disk and forget them (once per step)."""
        s = len(self.timesteps) - 1
        if s < self._flushed:
            return
        self._flushed = s + 1
        for name in self.modules:
            parts = self._step.pop(name, None)
            shapes = self._shapes.setdefault(name, [None] * s)
            if parts is None:
                shapes.append(None)
                continue
            x = np.concatenate(parts)
            np.save(self._spill_path() / f"x{list(self.modules).index(name)}_{s}.npy", x)
            shapes.append(x.shape)
        for name, qkv in self._attn_step.items():
            shapes = self._attn_shapes.setdefault(name, [None] * s)
            shapes += [None] * (s - len(shapes))
            for what, a in zip("qkv", qkv, strict=True):
                np.save(self._spill_path() / f"a_{_safe(name)}_{what}_{s}.npy", a)
            shapes.append(qkv[0].shape)
        self._attn_step = {}

    # ----- output -----
    def trace(self) -> Trace:
        """The captured run as a ``Trace`` whose inputs are ``Stacked`` arrays streamed from the
        spill folder (valid until ``close``; ``np.asarray`` loads one whole). Layers used on
        only some steps, or with a row count that changes, are refused (choose the layers to
        capture with ``names=`` to leave them out)."""
        if self._closed:
            raise ValueError("the capture was closed: close() removed its spilled steps; "
                             "save or trace it before close()")
        if not self.timesteps:
            raise ValueError("nothing captured: no next_step() call")
        self._flush()
        steps = len(self.timesteps)
        tr = Trace(steps=steps, timesteps=np.array(self.timesteps, np.int64), cfg_halves=self.cfg)
        for i, (name, mod) in enumerate(self.modules.items()):
            shapes = self._shapes.get(name, [])
            shapes += [None] * (steps - len(shapes))
            if all(sh is None for sh in shapes) and not self.explicit:
                continue                                # never ran on tokens: not a block linear
            seen = [s for s, sh in enumerate(shapes) if sh is not None]
            if len(seen) != steps:
                raise ValueError(f"layer {name!r} ran on {len(seen)} of {steps} steps; a trace "
                                 "needs every layer on every step (choose layers with names=)")
            if len({sh for sh in shapes}) != 1:
                raise ValueError(f"layer {name!r}: the number of rows changes across steps "
                                 f"{sorted({sh[0] for sh in shapes})}")
            files = [self._spill / f"x{i}_{s}.npy" for s in range(steps)]
            tr.linear_x[name] = Stacked((steps, *shapes[0]), self.dtype, _loader(files))
            tr.linear_w[name] = mod.weight.detach().float().cpu().numpy()
            tr.linear_b[name] = (None if mod.bias is None
                                 else mod.bias.detach().float().cpu().numpy())
            tr.linear_tokens[name] = self.tokens[name]
        for name, shapes in self._attn_shapes.items():
            shapes += [None] * (steps - len(shapes))
            if any(sh is None for sh in shapes) or len(set(shapes)) != 1:
                raise ValueError(f"attention {name!r} was not recorded with one shape on every "
                                 "step")
            tr.attn[name] = tuple(
                Stacked((steps, *shapes[0]), self.dtype, _loader(
                    [self._spill / f"a_{_safe(name)}_{what}_{s}.npy" for s in range(steps)]))
                for what in "qkv")
        if not tr.linear_x:
            raise ValueError("no layer of the blocks ran on tokens; name the layers to capture "
                             "with names=[...]")
        return tr

    def save(self, path, compress: bool = True) -> Path:
        """Write the trace (``golden.trace.save_trace``: all-or-nothing) and return its path."""
        return save_trace(path, self.trace(), compress)

    def close(self):
        """Remove the spill folder (the captured data)."""
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None
            self._closed = True

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


#: The captures inside their ``with`` block, in entry order. While any is, PyTorch's
#: ``F.scaled_dot_product_attention`` is ``_dispatch``; the last to leave, in whatever order,
#: puts the original back (a capture that swapped in its own function and restored what it
#: found would leave the function patched when captures nest or leave out of order).
_ACTIVE: list[TraceCapture] = []
_ORIGINAL_SDPA = []                  # the function _dispatch replaced, while it is installed


def _dispatch(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    """PyTorch's attention, then shown to every active capture."""
    out = _ORIGINAL_SDPA[0](q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                            is_causal=is_causal, scale=scale, **kw)
    for cap in list(_ACTIVE):
        cap._attention(q, k, v, attn_mask, dropout_p, is_causal, scale, kw)
    return out


def _attach(cap: TraceCapture) -> None:
    if F.scaled_dot_product_attention is not _dispatch:
        _ORIGINAL_SDPA[:] = [F.scaled_dot_product_attention]
        F.scaled_dot_product_attention = _dispatch
    _ACTIVE.append(cap)


def _detach(cap: TraceCapture) -> None:
    if cap in _ACTIVE:
        _ACTIVE.remove(cap)
    # Put the original back unless someone patched it over ours since (their function may
    # call ours: _dispatch then keeps passing calls on to the original).
    if not _ACTIVE and F.scaled_dot_product_attention is _dispatch:
        F.scaled_dot_product_attention = _ORIGINAL_SDPA[0]


def _loader(files):
    """``Stacked.chunks``: each spilled step of one array, as a ``(1, ...)`` chunk."""
    return lambda: (np.load(f)[None] for f in files)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
