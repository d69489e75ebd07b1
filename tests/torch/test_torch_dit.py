"""The PyTorch DiT (training, trace capture) and the NumPy golden DiT are the same model, for
every bundled workload; the training registry covers every workload."""

import numpy as np
import pytest

from dstar.config import Workload
from dstar.golden.dit import DiT, load_weights


@pytest.mark.parametrize("workload", list(Workload))
def test_numpy_model_matches_pytorch(workload):
    torch = pytest.importorskip("torch", reason="PyTorch (the train extra) is not installed")
    from dstar.torch_dit import DiT as TorchDiT
    from dstar.torch_dit import from_numpy_weights
    shape, w = load_weights(workload=workload)
    tm = from_numpy_weights(TorchDiT(shape), w).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1, 32, 32)).astype(np.float32)
    # A class label, the null (unconditional) label, another class.
    t, y = np.array([999, 400, 0]), np.array([3, shape.num_classes, 7])
    with torch.no_grad():
        ref = tm(torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(y)).numpy()
    got = DiT(shape, w).forward(x, t, y)
    assert np.abs(got - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_training_registry_covers_every_workload():
    pytest.importorskip("torch", reason="PyTorch (the train extra) is not installed")
    from dstar.train import TRAINING
    assert set(TRAINING) == set(Workload)
    for workload, (shape, _, _) in TRAINING.items():
        assert shape == load_weights(workload=workload)[0], workload
