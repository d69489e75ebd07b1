"""The PyTorch DiT (training, trace capture) and the NumPy golden DiT are the same model."""

import numpy as np
import pytest

from dstar.golden.dit import load_weights


def test_numpy_model_matches_pytorch(bundled_model):
    torch = pytest.importorskip("torch", reason="PyTorch (the train extra) is not installed")
    from dstar.torch_dit import DiT as TorchDiT
    from dstar.torch_dit import from_numpy_weights
    shape, w = load_weights()
    tm = from_numpy_weights(TorchDiT(shape), w).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 32, 32)).astype(np.float32)
    t, y = np.array([999, 400, 0]), np.array([3, 10, 7])
    with torch.no_grad():
        ref = tm(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(y)).numpy()
    got = bundled_model.forward(x, t, y)
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())
