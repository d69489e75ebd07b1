"""Natural images for the second workload: 32x32 grayscale crops of the photos that ship inside
installed wheels (scikit-image 0.26's ``skimage/data`` and scikit-learn's ``load_sample_images``).

Each of the ``PHOTOS`` is one class (the DiT is conditioned on its source photo). A photo is read
with Pillow straight from the package folder (neither package is imported), converted to luma
(ITU-R 601), resized with Lanczos so that its shorter side is ``SHORT_SIDE`` pixels (a crop then
covers a fifth of the scene), and scaled to [-1, 1]. The rightmost ``HELD_OUT`` of every
photo's columns is held out: training crops never overlap it, so held-out crops measure the
samples' statistics against images the model has not seen.
"""

import functools
import importlib.util
from pathlib import Path

import numpy as np

__all__ = ["PHOTOS", "IMAGE_SIZE", "SHORT_SIDE", "HELD_OUT", "photo_path", "load_photos",
           "crop_boxes", "random_crops", "held_out_crops", "held_out_start"]

IMAGE_SIZE = 32
SHORT_SIDE = 160
HELD_OUT = 0.25

#: (package, path inside the package) of every photo; the index is the class label.
PHOTOS = (
    ("skimage", "data/astronaut.png"), ("skimage", "data/camera.png"),
    ("skimage", "data/chelsea.png"), ("skimage", "data/coffee.png"),
    ("skimage", "data/coins.png"), ("skimage", "data/moon.png"),
    ("skimage", "data/hubble_deep_field.jpg"), ("skimage", "data/retina.jpg"),
    ("skimage", "data/rocket.jpg"), ("skimage", "data/motorcycle_left.png"),
    ("skimage", "data/brick.png"), ("skimage", "data/grass.png"),
    ("skimage", "data/gravel.png"), ("skimage", "data/ihc.png"),
    ("sklearn", "datasets/images/china.jpg"), ("sklearn", "datasets/images/flower.jpg"),
)

_PINS = {"skimage": "scikit-image==0.26.0", "sklearn": "scikit-learn==1.9.1"}


def photo_path(package: str, rel: str) -> Path:
    """Where an installed package keeps a photo (found without importing the package)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the photos ship with {_PINS[package]}; install it")
    path = Path(spec.origin).parent / rel
    if not path.is_file():
        raise FileNotFoundError(f"{_PINS[package]} is installed but {path} is missing")
    return path


@functools.cache
def load_photos() -> tuple[np.ndarray, ...]:
    """Every photo as float32 ``(H, W)`` in [-1, 1], shorter side ``SHORT_SIDE``."""
    from PIL import Image

    out = []
    for package, rel in PHOTOS:
        with Image.open(photo_path(package, rel)) as im:
            rgb = np.asarray(im.convert("RGB"), dtype=np.float64)
        luma = rgb @ np.array([0.299, 0.587, 0.114])
        h, w = luma.shape
        s = SHORT_SIDE / min(h, w)
        size = (max(SHORT_SIDE, round(w * s)), max(SHORT_SIDE, round(h * s)))
        small = Image.fromarray(luma.astype(np.float32), mode="F").resize(size, Image.LANCZOS)
        out.append(np.clip(np.asarray(small, dtype=np.float32) / 127.5 - 1.0, -1.0, 1.0))
    return tuple(out)


def held_out_start(photo: np.ndarray) -> int:
    """First held-out column of ``photo``."""
    return photo.shape[1] - max(IMAGE_SIZE + 8, int(round(photo.shape[1] * HELD_OUT)))


def crop_boxes(rng: np.random.Generator, n: int, *, held_out: bool = False) -> np.ndarray:
    """``n`` random crop boxes as int64 rows ``(photo, y, x, flip)``: photos uniform, flips with
    probability 1/2; training boxes (``held_out=False``) lie left of every photo's held-out
    columns, held-out boxes inside them."""
    photos = load_photos()
    boxes = np.empty((n, 4), dtype=np.int64)
    boxes[:, 0] = rng.integers(0, len(photos), n)
    for i, lab in enumerate(boxes[:, 0]):
        h, w = photos[lab].shape
        cut = held_out_start(photos[lab])
        x_lo, x_hi = (cut, w - IMAGE_SIZE) if held_out else (0, cut - IMAGE_SIZE)
        boxes[i, 1:] = (rng.integers(0, h - IMAGE_SIZE + 1), rng.integers(x_lo, x_hi + 1),
                        rng.random() < 0.5)
    return boxes


def random_crops(rng: np.random.Generator, n: int, *, held_out: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The crops of ``crop_boxes(rng, n, held_out=...)``: float32 ``(n, 1, 32, 32)`` and their
    photo labels (int64)."""
    photos = load_photos()
    boxes = crop_boxes(rng, n, held_out=held_out)
    out = np.empty((n, 1, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    for i, (lab, y, x, flip) in enumerate(boxes):
        c = photos[lab][y:y + IMAGE_SIZE, x:x + IMAGE_SIZE]
        out[i, 0] = c[:, ::-1] if flip else c
    return out, boxes[:, 0].copy()


def held_out_crops(n: int = 1000, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """A fixed set of held-out crops (the reference of the sample-quality statistics)."""
    return random_crops(np.random.default_rng(seed), n, held_out=True)
