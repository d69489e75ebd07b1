"""The dstar trace format: per-step inputs of a DiT's linear layers (and optionally attention).

A trace is one ``.npz`` file (``numpy.savez``/``savez_compressed``) with these entries:

=============================  ===============  ==============================================
key                            dtype, shape      meaning
=============================  ===============  ==============================================
``format``                     str, ()           ``"dstar-trace/1"``
``steps``                      int, ()           S, the number of sampling steps recorded
``timesteps``                  int, (S,)         optional: the diffusion timestep of each step
``linear/<name>/x``            float, (S, N, K)  input rows of linear layer ``<name>`` per step
``linear/<name>/weight``       float, (M, K)     its weight (PyTorch layout)
``linear/<name>/bias``         float, (M,)       optional: its bias
``linear/<name>/tokens``       int, ()           optional: tokens per sequence (N = batch x tokens)
``cfg_halves``                 int, ()           optional: 1 if every step's batch is the doubled
                                                 classifier-free-guidance batch [cond; uncond]
``attn/<name>/q``, ``k``, ``v``  float, (S, B, H, N, Dh)  optional: attention inputs per head,
                                                 before the 1/sqrt(Dh) scale
=============================  ===============  ==============================================

Rows ``N`` are all tokens of all sequences of the step (batch-major), fixed across steps.
Inputs (``x``, ``q``, ``k``, ``v``) may be float16 to halve the file; weights are float32.
Layer names are free-form (``blocks.3.mlp.fc1``); the analysis groups layers by the last
dot-separated part of the name (``fc1``). ``load_trace`` validates everything and raises
``TraceError`` with a message naming the file, the key and what is wrong.
"""

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dstar.outputs import atomic_file

__all__ = ["FORMAT", "TraceError", "Trace", "Stacked", "load_trace", "save_trace", "trace_path",
           "TraceRecorder"]

FORMAT = "dstar-trace/1"


class TraceError(ValueError):
    """A trace file is missing, malformed or inconsistent."""


@dataclass
class Trace:
    steps: int
    linear_x: dict[str, np.ndarray] = field(default_factory=dict)      # name -> (S, N, K)
    linear_w: dict[str, np.ndarray] = field(default_factory=dict)      # name -> (M, K)
    linear_b: dict[str, np.ndarray | None] = field(default_factory=dict)
    attn: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    timesteps: np.ndarray | None = None
    linear_tokens: dict[str, int] = field(default_factory=dict)         # name -> tokens
    cfg_halves: bool = False


@dataclass(frozen=True)
class Stacked:
    """An array of ``shape`` and ``dtype`` that ``save_trace`` writes from ``chunks()`` (a new
    iterable of arrays, on each call, that concatenate along axis 0 to it) without holding it
    whole."""
    shape: tuple
    dtype: np.dtype
    chunks: object

    def __array__(self, dtype=None, copy=None):
        return np.concatenate(list(self.chunks())).astype(dtype or self.dtype)


def _write_npy(zf: zipfile.ZipFile, key: str, arr) -> None:
    """One ``.npy`` member of an ``.npz``, streamed chunk by chunk for a ``Stacked`` array."""
    if isinstance(arr, Stacked):
        dtype, shape, chunks = np.dtype(arr.dtype), tuple(arr.shape), arr.chunks()
    else:
        arr = np.asarray(arr)
        dtype, shape, chunks = arr.dtype, arr.shape, (arr,)
    with zf.open(key + ".npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_2_0(
            fh, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                 "shape": shape})
        written = 0
        for c in chunks:
            c = np.ascontiguousarray(c, dtype=dtype)
            fh.write(c.tobytes())
            written += c.size
        if written != int(np.prod(shape)):
            raise ValueError(f"{key}: chunks hold {written} values, the shape {shape} "
                             f"{int(np.prod(shape))}")


def trace_path(path) -> Path:
    """The file ``save_trace(path)`` writes: ``path`` with ``.npz`` appended unless it ends so."""
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_name(path.name + ".npz")


def save_trace(path, trace: Trace, compress: bool = True) -> Path:
    """Write ``trace`` to ``trace_path(path)`` all-or-nothing (a temporary file beside it, then
    a rename), and return that path. Arrays may be ``Stacked`` (written chunk by chunk)."""
    path = trace_path(path)
    out = {"format": np.array(FORMAT), "steps": np.array(trace.steps)}
    if trace.timesteps is not None:
        out["timesteps"] = np.asarray(trace.timesteps, dtype=np.int64)
    if trace.cfg_halves:
        out["cfg_halves"] = np.array(1)
    for name, x in trace.linear_x.items():
        out[f"linear/{name}/x"] = x
        out[f"linear/{name}/weight"] = trace.linear_w[name]
        if trace.linear_b.get(name) is not None:
            out[f"linear/{name}/bias"] = trace.linear_b[name]
        if name in trace.linear_tokens:
            out[f"linear/{name}/tokens"] = np.array(int(trace.linear_tokens[name]))
    for name, (q, k, v) in trace.attn.items():
        out[f"attn/{name}/q"], out[f"attn/{name}/k"], out[f"attn/{name}/v"] = q, k, v
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_file(path) as fh, zipfile.ZipFile(fh, "w", compression=mode,
                                                  allowZip64=True) as zf:
        for key, arr in out.items():
            _write_npy(zf, key, arr)
    return path


def _fail(path, msg):
    raise TraceError(f"trace {str(path)!r}: {msg}")


def _entry(path, f, key) -> np.ndarray:
    """One entry of the open archive, or a ``TraceError`` naming it (bad CRC, truncation, ...)."""
    try:
        arr = f[key]
    except Exception as e:  # noqa: BLE001 (a damaged member is the file's fault, not ours)
        _fail(path, f"entry {key!r} is unreadable ({type(e).__name__}: {e}); the file is "
                    "damaged or was not completely written")
    if not isinstance(arr, np.ndarray):     # NumPy hands back the raw bytes of such a member
        _fail(path, f"entry {key!r} is not a NumPy array (no .npy header in member "
                    f"{key + '.npy'!r})")
    return arr


def load_trace(path) -> Trace:
    path = Path(path)
    if path.is_dir():
        _fail(path, "is a folder, not a file")
    if not path.is_file():
        _fail(path, "file does not exist")
    if not zipfile.is_zipfile(path):
        _fail(path, "not an .npz archive (numpy.savez writes one)")
    try:
        f = np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 (any unreadable file is the user's error)
        _fail(path, f"not a readable .npz file ({type(e).__name__}: {e})")
    with f:
        if not hasattr(f, "files"):
            _fail(path, "holds a single array, not an .npz archive of named entries")
        keys = set(f.files)
        if "format" not in keys:
            _fail(path, f"no 'format' entry (expected {FORMAT!r})")
        fmt = _entry(path, f, "format")
        fmt = str(fmt) if fmt.shape == () else repr(fmt.tolist())
        if fmt != FORMAT:
            _fail(path, f"format is {fmt!r}, expected {FORMAT!r}")
        if "steps" not in keys:
            _fail(path, "no 'steps' entry")
        steps = _entry(path, f, "steps")
        if steps.shape != () or not np.issubdtype(steps.dtype, np.integer):
            _fail(path, f"steps must be one integer, got {steps.dtype} of shape {steps.shape}")
        steps = int(steps)
        if steps < 1:
            _fail(path, f"steps must be >= 1, got {steps}")
        tr = Trace(steps=steps)
        if "timesteps" in keys:
            tr.timesteps = _entry(path, f, "timesteps")
            if not np.issubdtype(tr.timesteps.dtype, np.integer):
                _fail(path, f"timesteps must be integers, got {tr.timesteps.dtype}")
            if tr.timesteps.shape != (steps,):
                _fail(path, f"timesteps has shape {tr.timesteps.shape}, expected ({steps},)")
        if "cfg_halves" in keys:
            halves = _entry(path, f, "cfg_halves")
            if halves.shape != () or not np.issubdtype(halves.dtype, np.integer) \
                    or int(halves) not in (0, 1):
                _fail(path, "cfg_halves must be one integer, 0 or 1")
            tr.cfg_halves = bool(halves)
        known = {"format", "steps", "timesteps", "cfg_halves"}
        for key in sorted(keys - known):
            parts = key.split("/")
            if len(parts) != 3 or parts[0] not in ("linear", "attn") or not parts[1]:
                _fail(path, f"unknown entry {key!r}")
            kind, name, what = parts
            arr = _entry(path, f, key)
            if kind == "linear" and what == "tokens":
                if arr.shape != () or not np.issubdtype(arr.dtype, np.integer) or int(arr) < 1:
                    _fail(path, f"{key} must be one integer >= 1, got {arr.dtype} of shape "
                                f"{arr.shape}")
                tr.linear_tokens[name] = int(arr)
                continue
            if not np.issubdtype(arr.dtype, np.floating):
                _fail(path, f"{key} must be floating point, got {arr.dtype}")
            if not np.isfinite(arr).all():
                _fail(path, f"{key} holds non-finite values")
            if kind == "linear":
                if what == "x":
                    if arr.ndim != 3 or arr.shape[0] != steps or 0 in arr.shape:
                        _fail(path, f"{key} must be (steps={steps}, N, K) with N, K >= 1, got "
                                    f"{arr.shape}")
                    tr.linear_x[name] = arr
                elif what == "weight":
                    if arr.ndim != 2 or 0 in arr.shape:
                        _fail(path, f"{key} must be (M, K) with M, K >= 1, got {arr.shape}")
                    tr.linear_w[name] = arr
                elif what == "bias":
                    tr.linear_b[name] = arr
                else:
                    _fail(path, f"unknown entry {key!r}")
            else:
                if what not in ("q", "k", "v"):
                    _fail(path, f"unknown entry {key!r}")
                if arr.ndim != 5 or arr.shape[0] != steps or 0 in arr.shape:
                    _fail(path, f"{key} must be (steps={steps}, B, H, N, Dh) with B, H, N, "
                                f"Dh >= 1, got {arr.shape}")
                tr.attn.setdefault(name, {})[what] = arr
    for name in tr.linear_x.keys() | tr.linear_w.keys() | tr.linear_b.keys() | \
            tr.linear_tokens.keys():
        if name not in tr.linear_x:
            _fail(path, f"linear/{name}/x is missing")
        if name not in tr.linear_w:
            _fail(path, f"linear/{name}/weight is missing")
        k = tr.linear_x[name].shape[2]
        m, kw = tr.linear_w[name].shape
        if kw != k:
            _fail(path, f"linear/{name}/weight has K={kw} but linear/{name}/x has K={k}")
        b = tr.linear_b.get(name)
        if b is not None and b.shape != (m,):
            _fail(path, f"linear/{name}/bias has shape {b.shape}, expected ({m},)")
        tr.linear_b.setdefault(name, None)
        tok, rows = tr.linear_tokens.get(name), tr.linear_x[name].shape[1]
        if tok is not None and rows % tok:
            _fail(path, f"linear/{name}/tokens={tok} does not divide its {rows} rows")
    for name, d in list(tr.attn.items()):
        missing = [w for w in "qkv" if w not in d]
        if missing:
            _fail(path, f"attn/{name}/{missing[0]} is missing")
        if not (d["q"].shape == d["k"].shape == d["v"].shape):
            _fail(path, f"attn/{name}: q, k, v shapes differ")
        tr.attn[name] = (d["q"], d["k"], d["v"])
    if not tr.linear_x:
        _fail(path, "holds no linear layers (entries linear/<name>/x)")
    return tr


class TraceRecorder:
    """Wraps ``DiT.forward`` hooks to record a ``Trace`` while the model runs.

    ``layers``: an optional set of layer names to record (default: all)."""

    def __init__(self, linear, attention, layers=None, record_attention=True):
        self._linear, self._attention = linear, attention
        self.layers = None if layers is None else set(layers)
        self.record_attention = record_attention
        self._x: dict[str, list] = {}
        self._w, self._b = {}, {}
        self._attn: dict[str, list] = {}
        self.timesteps: list[int] = []

    def on_step(self, step, t):
        self.timesteps.append(t)

    def linear(self, name, x, w, b, step):
        if self.layers is None or name in self.layers:
            self._x.setdefault(name, []).append(np.asarray(x, np.float32).copy())
            self._w[name], self._b[name] = w, b
        return self._linear(name, x, w, b, step)

    def attention(self, name, q, k, v, step):
        if self.record_attention:
            self._attn.setdefault(name, []).append(tuple(np.asarray(a, np.float32).copy()
                                                         for a in (q, k, v)))
        return self._attention(name, q, k, v, step)

    def trace(self) -> Trace:
        tr = Trace(steps=len(self.timesteps), timesteps=np.array(self.timesteps, np.int64))
        for name, xs in self._x.items():
            tr.linear_x[name] = np.stack(xs)
            tr.linear_w[name] = np.asarray(self._w[name], np.float32)
            tr.linear_b[name] = None if self._b[name] is None else np.asarray(self._b[name],
                                                                              np.float32)
        for name, qkv in self._attn.items():
            tr.attn[name] = tuple(np.stack([s[i] for s in qkv]) for i in range(3))
        return tr
