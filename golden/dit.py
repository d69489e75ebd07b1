"""NumPy DiT (Peebles & Xie): the workload model, with hooks for quantized linear layers.

Shapes and module names follow facebookresearch/DiT ``models.py``; ``dstar.torch_dit`` is the
PyTorch twin used for training, and the two are checked against each other in the tests.
"""

import inspect
from dataclasses import dataclass

import numpy as np

from dstar.config import Workload

__all__ = ["DiTShape", "pos_embed_2d"]


@dataclass(frozen=True)
class DiTShape:
    """Architecture hyper-parameters of a DiT (the bundled one is ``DiTShape()``)."""
    image_size: int = 32
    patch: int = 2
    in_channels: int = 1
    hidden: int = 128
    depth: int = 6
    heads: int = 4
    mlp_ratio: float = 4.0
    num_classes: int = 10
    freq_dim: int = 256

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden * self.mlp_ratio)


def _sincos_1d(dim: int, pos: np.ndarray) -> np.ndarray:
    omega = 1.0 / 10000 ** (np.arange(dim // 2, dtype=np.float64) / (dim / 2.0))
    out = np.einsum("m,d->md", pos.reshape(-1).astype(np.float64), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def pos_embed_2d(dim: int, grid: int) -> np.ndarray:
    """Fixed 2-D sin-cos position embedding (MAE / DiT), ``(grid*grid, dim)`` float32."""
    gh, gw = np.meshgrid(np.arange(grid, dtype=np.float64), np.arange(grid, dtype=np.float64))
    # DiT stacks (w, h) and embeds half the channels from each axis.
    emb = np.concatenate([_sincos_1d(dim // 2, gh), _sincos_1d(dim // 2, gw)], axis=1)
    return emb.astype(np.float32)


__all__ += ["DiT", "drive", "drive_async", "run_sync", "apply", "LinearOp", "AttentionOp",
            "LINEAR_TYPES", "BLOCK_OPS", "load_weights", "bundled_weights_path", "ATTN_SUFFIX"]

#: A block's linear layer types (the last part of their names).
LINEAR_TYPES = ("qkv", "proj", "fc1", "fc2")
#: A block's accelerator operations in the order ``DiT.block_ops`` yields them: its linears by
#: type and its attention.
BLOCK_OPS = ("qkv", "attention", "proj", "fc1", "fc2")
_LAYER_PATHS = {"qkv": "attn.qkv", "proj": "attn.proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2"}
ATTN_SUFFIX = "attn"


def bundled_weights_path(workload=Workload.DIGITS):
    """The installed weights file of a bundled workload (``dstar.golden.workloads``)."""
    from .workloads import weights_path
    return weights_path(workload)


def load_weights(path=None, workload=Workload.DIGITS) -> tuple[DiTShape, dict[str, np.ndarray]]:
    """Load a DiT weight file (``state_dict`` keys, float32, plus ``meta.*`` shape entries);
    without ``path``, the bundled weights of ``workload``."""
    from pathlib import Path
    path = Path(path) if path is not None else bundled_weights_path(workload)
    if not path.is_file():
        raise FileNotFoundError(f"DiT weight file {str(path)!r} does not exist")
    with np.load(path) as f:
        data = {k: f[k] for k in f.files}
    meta = {k[5:]: v for k, v in data.items() if k.startswith("meta.")}
    fields = DiTShape.__dataclass_fields__
    shape = DiTShape(**{k: type(fields[k].default)(v) for k, v in meta.items() if k in fields})
    weights = {k: v.astype(np.float32) for k, v in data.items() if not k.startswith("meta.")}
    return shape, weights


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _gelu_tanh(x):
    """``0.5 x (1 + tanh(c (x + a x^3)))`` in float32, evaluated in that order in place."""
    c, a = np.float32(0.7978845608028654), np.float32(0.044715)
    t = x * x
    t *= x
    t *= a
    t += x
    t *= c
    np.tanh(t, out=t)
    t += np.float32(1.0)
    y = np.float32(0.5) * x
    y *= t
    return y


def _layernorm(x, eps=1e-6):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def _modulate(x, shift, scale):
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


def float_linear(name, x, w, b, step):
    """Default linear hook: ``x @ w.T + b`` in float32."""
    y = x @ w.T
    return y if b is None else y + b


def float_attention(name, q, k, v, step):
    """Default attention hook: ``softmax(q k^T / sqrt(Dh)) v`` in float32 (``(B, H, N, Dh)``)."""
    # Contiguous operands let NumPy's stacked matmul use BLAS per head; one batch element at a
    # time, in place, keeps the scores in cache (the same operations on every row).
    q, v = np.ascontiguousarray(q), np.ascontiguousarray(v)
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2))
    scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
    out = np.empty(q.shape[:-1] + v.shape[-1:], np.result_type(q, k, v))
    for b in range(q.shape[0]):
        s = q[b] @ kt[b]
        s *= scale
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        np.matmul(s, v[b], out=out[b])
    return out


@dataclass(frozen=True)
class LinearOp:
    """A linear layer's work in a block (``DiT.block_ops``): ``x @ w.T + b`` of layer
    ``name`` (``x`` ``(rows, K)``, ``w`` ``(M, K)``, ``b`` ``(M,)`` or None)."""
    name: str
    x: np.ndarray
    w: np.ndarray
    b: np.ndarray | None


@dataclass(frozen=True)
class AttentionOp:
    """An attention layer's work in a block (``DiT.block_ops``): softmax attention of layer
    ``name`` on ``q``, ``k``, ``v`` ``(B, H, N, Dh)``."""
    name: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


def apply(op: LinearOp | AttentionOp, linear, attention, step):
    """``op``'s result by the hooks: ``linear(name, x, w, b, step)`` or ``attention(name, q,
    k, v, step)`` (the host's are coroutines: then this is one to await)."""
    match op:
        case LinearOp(name, x, w, b):
            return linear(name, x, w, b, step)
        case AttentionOp(name, q, k, v):
            return attention(name, q, k, v, step)
    raise TypeError(f"not a block operation: {op!r}")


def drive(ops, linear, attention, step):
    """Run a generator of accelerator operations (``DiT.block_ops``) with the hooks ``linear``
    and ``attention`` at sampling step ``step`` (``apply``); returns the generator's result.
    The sync face of ``drive_async``: hooks that are coroutines must never wait on a
    simulator (``run_sync``)."""
    return run_sync(drive_async(ops, linear, attention, step))


async def drive_async(ops, linear, attention, step):
    """``drive`` as a coroutine, the one loop over a block's operations: each hook's result is
    awaited when it is awaitable (the host's hooks, ``dstar.golden.host.BlockHost``, inside a
    simulator's testbench), else sent as it is (the golden pipeline's plain hooks)."""
    try:
        op = next(ops)
        while True:
            res = apply(op, linear, attention, step)
            if inspect.isawaitable(res):
                res = await res
            op = ops.send(res)
    except StopIteration as done:
        return done.value


def run_sync(coro):
    """The result of a coroutine that never suspends (``drive_async`` with plain hooks, or
    ``BlockHost`` on ``GoldenEngine``); a ``RuntimeError`` if it waits on something."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the coroutine waited on something: it needs an event loop")


class DiT:
    """NumPy DiT forward pass with pluggable per-token linear layers and attention.

    ``linear(name, x, w, b, step)`` computes the four per-token linears of every block
    (``name`` like ``blocks.3.mlp.fc1``; ``x`` is ``(rows, K)`` with rows = batch * tokens,
    ``w`` ``(M, K)``); ``attention(name, q, k, v, step)`` gets ``(B, H, N, Dh)`` arrays
    (``name`` like ``blocks.3.attn``). Everything else (embedders, adaLN, LayerNorm, GELU,
    final layer) runs in float32, as spec section 1 leaves it on the host.
    """

    def __init__(self, shape: DiTShape, weights: dict[str, np.ndarray]):
        self.shape, self.w = shape, weights
        missing = [k for k in self._required_keys() if k not in weights]
        if missing:
            raise ValueError(f"DiT weights lack {len(missing)} tensors, e.g. {missing[0]!r}")
        self.pos_embed = pos_embed_2d(shape.hidden, shape.image_size // shape.patch)

    @classmethod
    def bundled(cls, workload=Workload.DIGITS) -> "DiT":
        """The bundled DiT of ``workload`` (``dstar.config.Workload``)."""
        return cls(*load_weights(workload=workload))

    def _required_keys(self):
        keys = ["x_embedder.proj.weight", "t_embedder.mlp.0.weight",
                "y_embedder.embedding_table.weight", "final_layer.linear.weight",
                "final_layer.adaLN_modulation.1.weight"]
        for i in range(self.shape.depth):
            keys += [f"blocks.{i}.{p}.weight" for p in _LAYER_PATHS.values()]
            keys.append(f"blocks.{i}.adaLN_modulation.1.weight")
        return keys

    def linear_names(self) -> list[str]:
        return [f"blocks.{i}.{_LAYER_PATHS[t]}" for i in range(self.shape.depth)
                for t in LINEAR_TYPES]

    def attention_names(self) -> list[str]:
        return [f"blocks.{i}.{ATTN_SUFFIX}" for i in range(self.shape.depth)]

    def _lin(self, name, x):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def patchify(self, x):
        s = self.shape
        b, g, p = x.shape[0], s.image_size // s.patch, s.patch
        x = x.reshape(b, s.in_channels, g, p, g, p).transpose(0, 2, 4, 1, 3, 5)
        return x.reshape(b, g * g, s.in_channels * p * p)

    def unpatchify(self, x):
        s = self.shape
        b, g, p, c = x.shape[0], s.image_size // s.patch, s.patch, s.in_channels
        x = x.reshape(b, g, g, p, p, c).transpose(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, s.image_size, s.image_size)

    def embed_timestep(self, t):
        half = self.shape.freq_dim // 2
        freqs = np.exp(-np.log(10000.0) * np.arange(half, dtype=np.float32) / half)
        args = np.asarray(t, dtype=np.float32)[:, None] * freqs[None].astype(np.float32)
        emb = np.concatenate([np.cos(args), np.sin(args)], axis=-1).astype(np.float32)
        h = _silu(self._lin("t_embedder.mlp.0", emb))
        return self._lin("t_embedder.mlp.2", h)

    def block_ops(self, i, h, sc):
        """Block ``i`` on the hidden states ``h`` ``(B, N, D)`` with the conditioning ``sc``
        (``silu(c)``, ``(B, D)``), as a generator of its accelerator operations: it yields
        ``LinearOp`` and ``AttentionOp``, is sent each one's result (``apply``), and returns the
        block's output. Everything between them (adaLN modulation, LayerNorm, GELU, the gated
        residual adds) runs here in float32 (``drive`` runs it with hooks, such as
        ``golden.host.BlockHost``'s on an engine)."""
        s, w = self.shape, self.w
        h, sc = np.asarray(h), np.asarray(sc)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < s.depth:
            raise ValueError(f"block {i!r} is not a block of this DiT (0 .. {s.depth - 1})")
        if h.ndim != 3 or 0 in h.shape or h.shape[2] != s.hidden:
            raise ValueError(f"h must be (B, N, hidden={s.hidden}) with B, N >= 1, got "
                             f"{h.shape}")
        if sc.shape != (h.shape[0], s.hidden):      # no silent broadcast of one sample's
            raise ValueError(f"sc must be (B={h.shape[0]}, hidden={s.hidden}), h's batch, "
                             f"got {sc.shape}")
        b, n, dim = h.shape
        heads, dh = s.heads, dim // s.heads
        pre = f"blocks.{i}"
        mod = self._lin(f"{pre}.adaLN_modulation.1", sc)
        sh1, sc1, g1, sh2, sc2, g2 = np.split(mod, 6, axis=1)

        def lin(path, a):
            name = f"{pre}.{path}"
            out = yield LinearOp(name, a.reshape(-1, a.shape[-1]), w[name + ".weight"],
                                 w[name + ".bias"])
            return np.asarray(out, dtype=np.float32).reshape(*a.shape[:-1], -1)

        a = _modulate(_layernorm(h), sh1, sc1)
        qkv = (yield from lin("attn.qkv", a)).reshape(b, n, 3, heads, dh).transpose(2, 0, 3, 1, 4)
        o = yield AttentionOp(f"{pre}.{ATTN_SUFFIX}", qkv[0], qkv[1], qkv[2])
        o = np.asarray(o, dtype=np.float32).transpose(0, 2, 1, 3).reshape(b, n, dim)
        h = h + g1[:, None, :] * (yield from lin("attn.proj", o))
        a = _modulate(_layernorm(h), sh2, sc2)
        f1 = yield from lin("mlp.fc1", a)
        return h + g2[:, None, :] * (yield from lin("mlp.fc2", _gelu_tanh(f1)))

    def forward(self, x, t, y, *, linear=float_linear, attention=float_attention, step=0):
        """Predict epsilon for images ``x`` ``(B, C, H, W)`` at timesteps ``t`` with labels ``y``
        (``num_classes`` is the null label of classifier-free guidance)."""
        s, w = self.shape, self.w
        x = np.asarray(x, dtype=np.float32)
        kw = w["x_embedder.proj.weight"].reshape(s.hidden, -1)
        h = self.patchify(x) @ kw.T + w["x_embedder.proj.bias"] + self.pos_embed
        c = self.embed_timestep(t) + w["y_embedder.embedding_table.weight"][np.asarray(y)]
        sc = _silu(c)
        for i in range(s.depth):
            h = drive(self.block_ops(i, h, sc), linear, attention, step)
        fm = self._lin("final_layer.adaLN_modulation.1", sc)
        shift, scale = np.split(fm, 2, axis=1)
        out = self._lin("final_layer.linear", _modulate(_layernorm(h), shift, scale))
        return self.unpatchify(out)
