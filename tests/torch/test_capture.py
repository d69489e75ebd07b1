"""Trace capture from a PyTorch model: forward pre-hooks on its nn.Linear modules (by default the
blocks' per-token linears) and its scaled_dot_product_attention calls."""

import numpy as np
import pytest

from dstar.golden.trace import load_trace

torch = pytest.importorskip("torch", reason="PyTorch (the train extra) is not installed")


def test_capture_of_the_pytorch_dit_matches_the_numpy_recording(tmp_path, bundled_model):
    from dstar.capture import TraceCapture
    from dstar.golden.dit import float_attention, float_linear
    from dstar.golden.trace import TraceRecorder
    from dstar.torch_dit import DiT as TorchDiT
    from dstar.torch_dit import from_numpy_weights
    model = from_numpy_weights(TorchDiT(bundled_model.shape), bundled_model.w).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 1, 32, 32)).astype(np.float32)
    y = np.array([3, 10])
    ts = [999, 500]
    names = ["blocks.0.attn.qkv", "blocks.2.mlp.fc2"]
    cap = TraceCapture(model, names=names)
    with cap, torch.no_grad():
        for t in ts:
            cap.next_step(t)
            model(torch.from_numpy(x), torch.full((2,), t), torch.from_numpy(y))
    f = tmp_path / "cap.npz"
    cap.save(f)
    tr = load_trace(f)
    assert tr.steps == 2 and tr.timesteps.tolist() == ts
    assert set(tr.linear_x) == set(names)
    assert tr.linear_x["blocks.2.mlp.fc2"].shape == (2, 2 * 256, 512)
    rec = TraceRecorder(float_linear, float_attention, names, record_attention=False)
    for i, t in enumerate(ts):
        rec.on_step(i, t)
        bundled_model.forward(x, np.full(2, t), y, linear=rec.linear, step=i)
    ref = rec.trace()
    for n in names:
        assert np.allclose(tr.linear_x[n], ref.linear_x[n], atol=1e-4, rtol=1e-4)
        assert np.array_equal(tr.linear_w[n], ref.linear_w[n])
    # Hooks are removed on exit: running the model again records nothing more.
    with torch.no_grad():
        model(torch.from_numpy(x), torch.full((2,), 0), torch.from_numpy(y))
    assert cap.trace().steps == 2


def test_capture_errors():
    from dstar.capture import TraceCapture
    with pytest.raises(ValueError, match="no nn.Linear named 'nope'"):
        TraceCapture(torch.nn.Sequential(torch.nn.Linear(4, 4)), names=["nope"])
    with pytest.raises(ValueError, match="no nn.Linear modules"):
        TraceCapture(torch.nn.Sequential(torch.nn.ReLU()))
    cap = TraceCapture(torch.nn.Linear(4, 4), names=[""])
    with pytest.raises(ValueError, match="nothing captured"):
        cap.trace()
    with pytest.raises(ValueError, match="token_stride must be"):
        TraceCapture(torch.nn.Linear(4, 4), names=[""], token_stride=0)


def _torch_dit(bundled_model):
    from dstar.torch_dit import DiT as TorchDiT
    from dstar.torch_dit import from_numpy_weights
    return from_numpy_weights(TorchDiT(bundled_model.shape), bundled_model.w).eval()


def test_default_capture_is_the_accelerators_layers_and_attention(tmp_path, bundled_model):
    """Without names: the 24 per-token linears of the blocks (no embedder, adaLN or final
    layer), their token count, and every block's attention through SDPA, equal to the NumPy
    model's own recording; the spill folder goes on close."""
    from dstar.capture import TraceCapture
    from dstar.golden.dit import float_attention, float_linear
    from dstar.golden.trace import TraceRecorder
    model = _torch_dit(bundled_model)
    x = np.random.default_rng(1).standard_normal((2, 1, 32, 32)).astype(np.float32)
    y, ts = np.array([3, 10]), [999, 400]
    cap = TraceCapture(model, cfg=True)
    with cap, torch.no_grad():
        for t in ts:
            cap.next_step(t)
            model(torch.from_numpy(x), torch.full((2,), t), torch.from_numpy(y))
    tr = load_trace(cap.save(tmp_path / "d"))
    assert set(tr.linear_x) == set(bundled_model.linear_names())
    assert set(tr.linear_tokens.values()) == {256} and tr.cfg_halves
    assert set(tr.attn) == {f"blocks.{i}.attn" for i in range(6)}
    assert "blocks.0.adaLN_modulation.1" in cap.per_sample and cap.skipped_attention == 0
    rec = TraceRecorder(float_linear, float_attention)
    for i, t in enumerate(ts):
        rec.on_step(i, t)
        bundled_model.forward(x, np.full(2, t), y, linear=rec.linear, attention=rec.attention,
                              step=i)
    ref = rec.trace()
    for n in ("blocks.0.attn.qkv", "blocks.5.mlp.fc2"):
        assert np.allclose(tr.linear_x[n], ref.linear_x[n], atol=1e-4, rtol=1e-4)
    for got, want in zip(tr.attn["blocks.3.attn"], ref.attn["blocks.3.attn"], strict=True):
        assert np.allclose(got, want, atol=1e-4, rtol=1e-4)
    spill = cap._spill
    assert spill is not None and spill.is_dir()
    cap.close()
    assert not spill.exists()


def test_float16_and_token_stride_and_a_layer_missing_on_a_step(tmp_path, bundled_model):
    from dstar.capture import TraceCapture
    model = _torch_dit(bundled_model)
    x = torch.from_numpy(np.random.default_rng(2).standard_normal((1, 1, 32, 32))
                         .astype(np.float32))
    name = "blocks.1.mlp.fc1"
    cap = TraceCapture(model, names=[name], dtype="float16", token_stride=4)
    with cap, torch.no_grad():
        cap.next_step(999)
        model(x, torch.full((1,), 999), torch.tensor([3]))
    tr = load_trace(cap.save(tmp_path / "h"))
    assert tr.linear_x[name].dtype == np.float16 and tr.linear_x[name].shape == (1, 64, 128)
    assert tr.linear_tokens[name] == 64
    with cap, torch.no_grad():
        cap.next_step(500)                 # the model does not run on this step
    with pytest.raises(ValueError, match="ran on 1 of 2 steps"):
        cap.trace()
    cap.close()



class _Block(torch.nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.qkv, self.fc = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, 2, d // 2).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.fc(o.transpose(1, 2).reshape(b, n, d))


class _Toy(torch.nn.Module):
    """Two blocks of a linear, an SDPA attention and a linear (the probe's K20/K21 model)."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def test_nested_or_out_of_order_captures_leave_attention_unpatched():
    from dstar.capture import TraceCapture
    F = torch.nn.functional
    original = F.scaled_dot_product_attention
    model, x = _Toy(), torch.randn(2, 8, 32)
    cap = TraceCapture(model)
    with pytest.raises(RuntimeError, match="already active"), cap, cap:   # K20
        pass
    assert F.scaled_dot_product_attention is original
    a, b = TraceCapture(model), TraceCapture(model)                         # K21
    a.__enter__()
    b.__enter__()
    a.next_step(0)
    b.next_step(0)
    model(x)
    a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    assert F.scaled_dot_product_attention is original
    assert model(x).shape == (2, 8, 32)
    for c in (a, b):                        # both saw the attention while both were active
        assert set(c.trace().attn) == {"blocks.0", "blocks.1"}
        c.close()


def test_capture_misuse_names_the_cause(tmp_path):
    from dstar.capture import TraceCapture
    model, x = _Toy(), torch.randn(2, 8, 32)
    with pytest.raises(ValueError, match="got the string 'blocks.0.fc'"):           # K16
        TraceCapture(model, names="blocks.0.fc")
    with pytest.raises(ValueError, match="spill_dir '/nonexistent/spill'"):          # K19
        TraceCapture(model, spill_dir="/nonexistent/spill")
    c = TraceCapture(model)
    with c:
        for t in range(2):
            c.next_step(t)
            model(x)
    c.close()
    with pytest.raises(ValueError, match="closed"):                                 # K9
        c.save(tmp_path / "d.npz")
