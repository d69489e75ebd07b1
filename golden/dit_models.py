"""Shapes of the DiTs the evaluation (``dstar report``) runs, and every GEMM and attention
operation of one sampling step of each, per CFG branch.

Each ``ModelShape`` cites its sources per field group (``sources``); the facts come from
``shared/research/eval-anchors.md`` section 6.1 and ``peers.md`` section 3.1 (their tags: [V]
primary source, [V2] secondary, [U] common knowledge not re-verified). Where a figure is ours
(derived, or chosen where no source gives it) the source says so and how it was derived.

``operations(shape)`` lists one step's work for **one** CFG branch (``Op``): every linear layer
as a GEMM ``(m, k, n)`` (``m`` rows = tokens, ``k`` reduction, ``n`` outputs), with ``count``
instances, the layer type whose measured element mix it takes (``qkv``, ``proj``, ``fc1``,
``fc2``: the bundled DiT's four; ``adaln``: the timestep modulation, one row) and whether it is
step-invariant (cross-attention K/V of the text, computed once per image by an accelerator); the
attention GEMMs ``qk`` (``m = Nq``, ``k = Dh``, ``n = Nk``) and ``pv`` (``m = Nq``, ``k = Nk``,
``n = Dh``), ``count`` = heads x sequences x blocks; and vector-unit element counts (``vpu_*``).

Counted as the DiT paper counts "Gflops" (multiply-accumulates of the linears and of
``Q K^T`` and ``P V``): ``macs(ops, exclude=("adaln",))``. Ignored: embeddings, the final layer,
the text encoder and the VAE. FLUX's single blocks' fused input (``3D + 4D`` outputs) and output
(``D + 4D`` inputs) are split into their attention part (``qkv``, ``proj``) and MLP part
(``fc1``, ``fc2``), the same MACs.
"""

from dataclasses import dataclass, field, fields, replace

__all__ = ["ModelShape", "Op", "MODELS", "REPORT_MODELS", "CALIBRATION_MODELS", "operations",
           "macs", "linear_params", "modulation_params", "bundled_shape", "shape_from_dict",
           "ShapeError"]

KINDS = ("dit", "pixart", "mmdit", "flux", "latte")


class ShapeError(ValueError):
    """A shapes entry that cannot describe a model; the message names the field and value."""


@dataclass(frozen=True)
class ModelShape:
    """One DiT at one resolution. ``kind``: ``dit`` (adaLN-Zero, class label), ``pixart``
    (adaLN-single, cross-attention to ``text_tokens``), ``mmdit`` (SD3: joint attention of image
    and text streams; ``dual_blocks`` blocks with a second image-only self-attention), ``flux``
    (``blocks`` double-stream MMDiT blocks + ``single_blocks`` fused blocks), ``latte``
    (``blocks`` spatial blocks with cross-attention + ``blocks`` temporal blocks over
    ``frames``)."""
    name: str
    title: str
    kind: str
    blocks: int
    hidden: int
    heads: int
    mlp: int
    tokens: int                     # image tokens (per frame for Latte)
    steps: int
    branches: int                   # CFG batch: 2 with classifier-free guidance, 1 without
    text_tokens: int = 0
    frames: int = 1
    single_blocks: int = 0
    dual_blocks: int = 0
    params_b: float | None = None   # the published parameter count (billions), if any
    gmacs_published: float | None = None   # published MACs per forward pass (one branch)
    sources: dict = field(default_factory=dict)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class Op:
    """One operation of a step (one CFG branch): ``kind`` ``linear``, ``qk`` or ``pv``."""
    name: str
    kind: str
    layer_type: str
    m: int
    k: int
    n: int
    count: int = 1
    invariant: bool = False

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n * self.count


_EA = "shared/research/eval-anchors.md 6.1"
_DIT = {"shape": f"[V] github.com/facebookresearch/DiT models.py ({_EA}; peers.md 3.1)",
        "tokens": "[V] 256 at 256^2, 1024 at 512^2 (patch 2 on the img/8 latent; peers.md 3.1)",
        "steps": "ours: 50 (DDIM; the DSTAR setting is unknown, 10-50 in the paper; eval-anchors "
                 "6.2 counts 50); CFG 2 branches [V] sample.py",
        "params": "[V] 675 M (peers.md 3.1)",
        "gmacs": "[U] DiT paper 'Gflops' (eval-anchors 6.2; issue 30 part 4)"}


def _m(name, title, kind, blocks, hidden, heads, mlp, tokens, steps, branches, sources, **kw):
    return ModelShape(name, title, kind, blocks, hidden, heads, mlp, tokens, steps, branches,
                      sources=sources, **kw)


#: Every model the report knows, by name.
MODELS: dict[str, ModelShape] = {m.name: m for m in (
    _m("dit-xl-256", "DiT-XL/2 256^2", "dit", 28, 1152, 16, 4608, 256, 50, 2, _DIT,
       params_b=0.675, gmacs_published=118.6),
    _m("dit-xl-512", "DiT-XL/2 512^2", "dit", 28, 1152, 16, 4608, 1024, 50, 2, _DIT,
       params_b=0.675, gmacs_published=524.6),
    _m("pixart-sigma-1024", "PixArt-Sigma 1024^2", "pixart", 28, 1152, 16, 4608, 4096, 20, 2,
       {"shape": f"[V] PixArt_XL_2 backbone ({_EA}; peers.md 3.1)",
        "tokens": "[I] 1024^2 -> 128^2 latent -> 4096 tokens; T5 300 tokens [U] (eval-anchors)",
        "steps": "[U] 20 DPM-Solver, CFG 4.5 (2 branches)", "params": "[V] 0.6 B"},
       text_tokens=300, params_b=0.6),
    _m("sd35-medium", "SD3.5-Medium 1024^2", "mmdit", 24, 1536, 24, 6144, 4096, 40, 2,
       {"shape": "[V2] fastvideo SD3Transformer2DArchConfig: 24 layers, head_dim 64, dual "
                 f"attention layers 0-12 ({_EA})",
        "tokens": "[I] 4096 image tokens; 333 text (77 CLIP + 256 T5) [U]",
        "steps": "[U] 40, CFG 4.5 (2 branches)", "params": "[U] 2.5 B"},
       text_tokens=333, dual_blocks=13, params_b=2.5),
    _m("sd35-large", "SD3.5-Large 1024^2", "mmdit", 38, 2432, 38, 9728, 4096, 28, 2,
       {"shape": f"[V] config: 38 layers, 38 heads x 64 ({_EA}; peers.md 3.1)",
        "tokens": "[I] 4096 image tokens; 333 text [U]", "steps": "[U] 28, CFG 3.5",
        "params": "[V2] HF blog '8B'; 8.1 B (eval-anchors)"},
       text_tokens=333, params_b=8.1),
    _m("flux1-dev", "FLUX.1-dev 1024^2", "flux", 19, 3072, 24, 12288, 4096, 28, 1,
       {"shape": f"[V] transformer config.json: 19 double + 38 single blocks, 24 x 128 ({_EA})",
        "tokens": "[I] 4096 image tokens; 512 T5 tokens [U]",
        "steps": "[U] 28; guidance-distilled, no CFG batch [V]", "params": "[V] 12 B"},
       text_tokens=512, single_blocks=38, params_b=12.0),
    _m("flux1-schnell", "FLUX.1-schnell 1024^2", "flux", 19, 3072, 24, 12288, 4096, 4, 1,
       {"shape": f"[V] as FLUX.1-dev ({_EA})", "tokens": "[I] 4096 image tokens; 256 T5 [V2]",
        "steps": "[V2] 4 steps, no CFG (MaxDiffusion table, black-forest-labs/flux#415)",
        "params": "[V] 12 B"},
       text_tokens=256, single_blocks=38, params_b=12.0),
    _m("latte-512", "Latte-1 T2V 512^2 x 16 frames", "latte", 28, 1152, 16, 4608, 1024, 50, 2,
       {"shape": "[V] diffusers LatteTransformer3DModel: 28 spatial (cross-attention) + 28 "
                 f"temporal blocks, 16 x 72 ({_EA})",
        "tokens": "[V] Vchitect/Latte t2v_sample.yaml: 512^2, 16 frames -> 16 x 1024 tokens; "
                  "T5 120 tokens", "steps": "[V] 50 DDIM, CFG 7.5 (2 branches)",
        "params": "[I] about 1.0 B (eval-anchors 6.1)"},
       text_tokens=120, frames=16, params_b=1.0),
    # Calibration only (the A100's measured step time, eval-anchors 3.1).
    _m("pixart-alpha-1024", "PixArt-alpha 1024^2 (A100 calibration)", "pixart", 28, 1152, 16,
       4608, 4096, 20, 2,
       {"shape": "[V] PixArt_XL_2 (peers.md 3.1)", "tokens": "[U] T5 120 tokens; 4096 image",
        "steps": "[V] onediff pixart_alpha README: 20 steps, CFG"},
       text_tokens=120, params_b=0.6),
)}


def bundled_shape(workload: str) -> ModelShape:
    """The bundled DiT of ``workload`` (``golden.workloads``), from its weights' ``DiTShape``;
    50 DDIM steps and CFG as the project's default run (``dstar.config``)."""
    from .dit import load_weights
    s, _ = load_weights(workload=workload)
    return ModelShape(
        f"bundled-{workload}", f"bundled DiT ({workload}; hidden {s.hidden}, depth {s.depth})",
        "dit", s.depth, s.hidden, s.heads, s.mlp_hidden, s.tokens, 50, 2,
        sources={"shape": f"ours: golden/data weights of the {workload} workload (DiTShape)",
                 "steps": "ours: dstar.config defaults (50 DDIM steps, cfg_scale 2.5)"})


#: The models of the report by default: the paper's seven (DiT-XL/2 at two resolutions), then
#: the two bundled DiTs.
REPORT_MODELS = ("dit-xl-256", "dit-xl-512", "pixart-sigma-1024", "sd35-medium", "sd35-large",
                 "flux1-dev", "flux1-schnell", "latte-512", "bundled-digits", "bundled-photos")
#: Models with a measured A100 step time (eval-anchors 3.1), for the calibration.
CALIBRATION_MODELS = ("pixart-alpha-1024", "latte-512")


def _block(pre, n, d, mlp, *, adaln=0, modulate=True):
    """The linears of one transformer stream on ``n`` tokens (qkv, proj, fc1, fc2) and its
    adaLN modulation (``adaln`` x ``d`` outputs, one row) where the block has its own."""
    ops = [Op(f"{pre}.qkv", "linear", "qkv", n, d, 3 * d), Op(f"{pre}.proj", "linear", "proj",
                                                               n, d, d),
           Op(f"{pre}.fc1", "linear", "fc1", n, d, mlp), Op(f"{pre}.fc2", "linear", "fc2",
                                                             n, mlp, d)]
    if adaln and modulate:
        ops.append(Op(f"{pre}.adaln", "linear", "adaln", 1, d, adaln * d))
    return ops


def _attn(pre, nq, nk, heads, dh, seqs=1):
    return [Op(f"{pre}.qk", "qk", "attn", nq, dh, nk, heads * seqs),
            Op(f"{pre}.pv", "pv", "attn", nq, nk, dh, heads * seqs)]


def _times(ops, c):
    return [Op(o.name, o.kind, o.layer_type, o.m, o.k, o.n, o.count * c, o.invariant)
            for o in ops]


def _cross(pre, n, d, lt, heads, dh, seqs=1):
    """Cross-attention to ``lt`` text tokens: q and out on the image rows, k and v on the text
    (step-invariant), and its attention."""
    return [Op(f"{pre}.xq", "linear", "qkv", n, d, d), Op(f"{pre}.xo", "linear", "proj", n, d, d),
            Op(f"{pre}.xkv", "linear", "qkv", lt, d, 2 * d, invariant=True),
            *_attn(f"{pre}.x", n // seqs, lt, heads, dh, seqs)]


def _dit_ops(s):
    n, d = s.tokens, s.hidden
    one = _block("block", n, d, s.mlp, adaln=6) + _attn("block.self", n, n, s.heads, s.head_dim)
    return _times(one, s.blocks)


def _pixart_ops(s):
    n, d = s.tokens, s.hidden
    one = (_block("block", n, d, s.mlp) + _attn("block.self", n, n, s.heads, s.head_dim)
           + _cross("block", n, d, s.text_tokens, s.heads, s.head_dim))
    return _times(one, s.blocks) + [Op("adaln_single", "linear", "adaln", 1, d, 6 * d)]


def _mmdit_ops(s):
    n, lt, d = s.tokens, s.text_tokens, s.hidden
    joint = (_block("img", n, d, s.mlp, adaln=6) + _block("txt", lt, d, s.mlp, adaln=6)
             + _attn("joint", n + lt, n + lt, s.heads, s.head_dim))
    dual = [Op("img.qkv2", "linear", "qkv", n, d, 3 * d), Op("img.proj2", "linear", "proj",
                                                              n, d, d),
            Op("img.adaln2", "linear", "adaln", 1, d, 3 * d),
            *_attn("img.self2", n, n, s.heads, s.head_dim)]
    return _times(joint, s.blocks) + _times(dual, s.dual_blocks)


def _flux_ops(s):
    ops = _mmdit_ops(replace(s, dual_blocks=0))
    r, d = s.tokens + s.text_tokens, s.hidden
    single = [Op("single.in_qkv", "linear", "qkv", r, d, 3 * d),
              Op("single.in_mlp", "linear", "fc1", r, d, s.mlp),
              Op("single.out_attn", "linear", "proj", r, d, d),
              Op("single.out_mlp", "linear", "fc2", r, s.mlp, d),
              Op("single.adaln", "linear", "adaln", 1, d, 3 * d),
              *_attn("single", r, r, s.heads, s.head_dim)]
    return ops + _times(single, s.single_blocks)


def _latte_ops(s):
    n, f, d = s.tokens, s.frames, s.hidden
    rows = n * f
    spatial = (_block("spatial", rows, d, s.mlp) + _attn("spatial.self", n, n, s.heads,
                                                         s.head_dim, f)
               + _cross("spatial", rows, d, s.text_tokens, s.heads, s.head_dim, f))
    temporal = _block("temporal", rows, d, s.mlp) + _attn("temporal.self", f, f, s.heads,
                                                          s.head_dim, n)
    return (_times(spatial, s.blocks) + _times(temporal, s.blocks)
            + [Op("adaln_single", "linear", "adaln", 1, d, 6 * d)])


_OPS = {"dit": _dit_ops, "pixart": _pixart_ops, "mmdit": _mmdit_ops, "flux": _flux_ops,
        "latte": _latte_ops}


def operations(s: ModelShape) -> list[Op]:
    """Every operation of one step of ``s``, one CFG branch (module docstring)."""
    return _OPS[s.kind](s)


def macs(ops, exclude=("adaln",)) -> int:
    """Multiply-accumulates of ``ops`` (one branch), leaving out layer types ``exclude``."""
    return sum(o.macs for o in ops if o.layer_type not in exclude)


def linear_params(ops) -> int:
    """Weights of the linear layers other than the modulation (one copy of each)."""
    return sum(o.k * o.n * o.count for o in ops if o.kind == "linear" and o.layer_type != "adaln")


def modulation_params(ops) -> int:
    return sum(o.k * o.n * o.count for o in ops if o.layer_type == "adaln")


def vpu_elements(s: ModelShape, ops) -> dict[str, int]:
    """Vector-unit work of one step, one branch: softmax over every score, GELU over every MLP
    hidden value, a normalization per linear input row element (LayerNorm/RMSNorm, ours: one per
    qkv and fc1 input)."""
    soft = sum(o.m * o.n * o.count for o in ops if o.kind == "qk")
    gelu = sum(o.m * o.n * o.count for o in ops if o.layer_type == "fc1")
    norm = sum(o.m * o.k * o.count for o in ops if o.layer_type in ("qkv", "fc1")
               and not o.invariant)
    return {"softmax": soft, "gelu": gelu, "norm": norm}


_INT_FIELDS = ("blocks", "hidden", "heads", "mlp", "tokens", "steps", "branches", "text_tokens",
               "frames", "single_blocks", "dual_blocks")


def shape_from_dict(d: dict) -> ModelShape:
    """A ``ModelShape`` from a shapes file's entry; ``ShapeError`` naming the bad field."""
    if not isinstance(d, dict):
        raise ShapeError(f"a model entry must be a table, got {d!r}")
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise ShapeError(f"model entry without a name: {d!r}")
    known = {f.name for f in fields(ModelShape)}
    for key in d:
        if key not in known:
            raise ShapeError(f"model {name!r}: unknown field {key!r}")
    if d.get("kind") not in KINDS:
        raise ShapeError(f"model {name!r}: kind {d.get('kind')!r} is not one of {KINDS}")
    for key in _INT_FIELDS:
        v = d.get(key, 0 if key in ("text_tokens", "single_blocks", "dual_blocks") else None)
        lo = 0 if key in ("text_tokens", "single_blocks", "dual_blocks") else 1
        if key == "frames" and v is None:
            v = 1
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ShapeError(f"model {name!r}: {key} = {v!r} (an integer >= {lo})")
    if d["hidden"] % d["heads"]:
        raise ShapeError(f"model {name!r}: hidden = {d['hidden']} is not a multiple of heads = "
                         f"{d['heads']}")
    if d["branches"] not in (1, 2):
        raise ShapeError(f"model {name!r}: branches = {d['branches']!r} (1 or 2)")
    if d["kind"] in ("pixart", "latte", "mmdit", "flux") and d.get("text_tokens", 0) < 1:
        raise ShapeError(f"model {name!r}: text_tokens = {d.get('text_tokens')!r} (a {d['kind']} "
                         "model needs text tokens)")
    return ModelShape(**{"title": name, "sources": {"shape": "user shapes file"}, **d})
