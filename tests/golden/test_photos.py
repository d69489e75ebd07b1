"""The natural-image workload's data: the shipped photos, crops that respect the held-out split,
and the patch statistics that judge samples."""

import numpy as np
import pytest

from dstar.golden.image_stats import image_distances, radial_spectrum, wasserstein1
from dstar.golden.photos import (
    IMAGE_SIZE,
    PHOTOS,
    SHORT_SIDE,
    crop_boxes,
    held_out_crops,
    held_out_start,
    load_photos,
    random_crops,
)


def test_every_photo_ships_and_loads_in_range():
    photos = load_photos()
    assert len(photos) == len(PHOTOS) == 16
    for p in photos:
        assert p.dtype == np.float32 and min(p.shape) == SHORT_SIDE
        assert -1.0 <= p.min() < p.max() <= 1.0
        assert p.shape[1] - held_out_start(p) >= IMAGE_SIZE + 8


@pytest.mark.parametrize("held_out", [False, True])
def test_crops_stay_on_their_side_of_the_split(held_out):
    photos = load_photos()
    boxes = crop_boxes(np.random.default_rng(3), 2000, held_out=held_out)
    assert set(boxes[:, 0]) == set(range(len(photos)))
    assert set(boxes[:, 3]) == {0, 1}
    for lab, y, x, _ in boxes:
        cut = held_out_start(photos[lab])
        assert 0 <= y <= photos[lab].shape[0] - IMAGE_SIZE
        if held_out:
            assert cut <= x <= photos[lab].shape[1] - IMAGE_SIZE
        else:
            assert 0 <= x and x + IMAGE_SIZE <= cut


def test_crops_are_the_boxes_pixels():
    photos = load_photos()
    x, y = random_crops(np.random.default_rng(5), 20)
    boxes = crop_boxes(np.random.default_rng(5), 20)
    assert np.array_equal(y, boxes[:, 0])
    for img, (lab, r, c, flip) in zip(x, boxes, strict=True):
        win = photos[lab][r:r + IMAGE_SIZE, c:c + IMAGE_SIZE]
        assert np.array_equal(img[0], win[:, ::-1] if flip else win)


def test_statistics_tell_images_from_noise_and_flat_fields():
    ref, _ = held_out_crops(400)
    train, _ = random_crops(np.random.default_rng(1), 400)
    rng = np.random.default_rng(2)
    noise = np.clip(rng.standard_normal(ref.shape), -1, 1)
    same = image_distances(train, ref)
    assert same["spectrum_db"] < 3 and same["mean_w1"] < 0.15 and same["std_w1"] < 0.1
    far = image_distances(noise, ref)
    assert far["spectrum_db"] > 10 and far["std_w1"] > 0.3
    assert image_distances(ref, ref) == {"mean_w1": 0.0, "std_w1": 0.0, "spectrum_db": 0.0}


def test_radial_spectrum_and_w1_on_known_inputs():
    # A horizontal cosine of 4 cycles puts its power in radial bin 4 only.
    t = np.arange(32)
    img = np.tile(np.cos(2 * np.pi * 4 * t / 32), (32, 1))[None]
    spec = radial_spectrum(img)
    assert spec.shape == (16,) and spec.argmax() == 3 and np.isclose(spec.sum(), spec[3])
    assert np.isclose(wasserstein1(np.zeros(10), np.full(10, 0.5)), 0.5)
