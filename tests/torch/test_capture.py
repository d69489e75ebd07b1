"""Trace capture from a PyTorch model (forward pre-hooks on nn.Linear)."""

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
    cap = TraceCapture(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="nothing captured"):
        cap.trace()
