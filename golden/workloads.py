"""The bundled workloads: which DiT weights ship for each ``dstar.config.Workload``, what its
class labels mean and how its samples' quality is measured without a pretrained network.

* ``digits``: the class-conditional DiT on the MNIST-5k digits; quality = the kNN class accuracy
  of the samples (``dstar.golden.classifier``), the legibility check.
* ``photos``: the DiT on 32x32 grayscale crops of natural photos, conditioned on the source
  photo (``dstar.golden.photos``); quality = the samples' distances to held-out crops in
  per-image mean, contrast and power spectrum (``dstar.golden.image_stats``).

Both are the same architecture family (``dstar.golden.dit.DiTShape``: 256 tokens, patch 2,
adaLN-Zero); each one's weights are package data (``dstar.golden`` ``data/``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dstar.config import Workload

__all__ = ["WorkloadInfo", "WORKLOADS", "weights_path", "sample_quality", "denoising_psnr"]


def _digits(n: int):
    from .mnist import load_mnist
    images, labels = load_mnist()
    return images[:n], labels[:n]


def _held_out(n: int):
    from .photos import held_out_crops
    return held_out_crops(n)


def _class_accuracy(images, labels) -> dict:
    from .classifier import DigitClassifier
    return {"class_accuracy": DigitClassifier().accuracy(images, labels)}


def _photo_stats(images, labels) -> dict:
    from .image_stats import image_distances
    from .photos import held_out_crops
    return image_distances(images, held_out_crops()[0])


@dataclass(frozen=True)
class WorkloadInfo:
    """One bundled workload: its weights file (``dstar.golden`` package data), a title for
    reports, what a class label is, its quality check ``(images, labels) -> {figure: value}``
    and real images ``n -> (images, labels)`` (the digits' training set, held-out photo
    crops)."""
    weights: str
    title: str
    labels: str
    quality: Callable[[np.ndarray, np.ndarray], dict]
    real: Callable[[int], tuple[np.ndarray, np.ndarray]]


#: The registry of bundled workloads, keyed by the enum (one entry per member).
WORKLOADS: dict[Workload, WorkloadInfo] = {
    Workload.DIGITS: WorkloadInfo(
        "dit_mnist.npz", "bundled DiT (hidden 128, depth 6, 4 heads, patch 2) on MNIST-5k",
        "digit class", _class_accuracy, _digits),
    Workload.PHOTOS: WorkloadInfo(
        "dit_photos.npz", "bundled DiT (hidden 128, depth 6, 4 heads, patch 2) on 32x32 "
        "grayscale crops of 16 photos", "source photo", _photo_stats, _held_out),
}


def weights_path(workload: Workload | str = Workload.DIGITS) -> Path:
    """The installed weights file of ``workload``."""
    from dstar.paths import package_data
    return package_data("dstar.golden", "data", WORKLOADS[Workload(workload)].weights)


def sample_quality(workload: Workload | str, images, labels) -> dict:
    """``workload``'s quality figures of generated ``images`` of classes ``labels``."""
    return WORKLOADS[Workload(workload)].quality(images, labels)


def denoising_psnr(model, workload: Workload | str, n: int = 32, t: int = 100,
                   seed: int = 0) -> dict:
    """A PSNR sanity check of ``model`` (a ``dstar.golden.dit.DiT``) on ``n`` of ``workload``'s
    real images: noised to timestep ``t`` of the training schedule, then the model's one-step
    estimate of the clean image (``x0`` from its predicted noise, clipped to [-1, 1]) against
    the noisy image itself rescaled (``x_t / sqrt(alpha_bar)``, clipped). A model that learned
    the images denoises: ``denoised_psnr_db`` well above ``noisy_psnr_db``."""
    from .diffusion import alphas_cumprod
    from .image_stats import psnr

    x0, labels = WORKLOADS[Workload(workload)].real(n)
    x0 = np.asarray(x0, dtype=np.float32)
    a = float(alphas_cumprod()[t])
    noise = np.random.default_rng(seed).standard_normal(x0.shape, dtype=np.float32)
    xt = (np.sqrt(a) * x0 + np.sqrt(1 - a) * noise).astype(np.float32)
    eps = model.forward(xt, np.full(len(xt), t), np.asarray(labels, dtype=np.int64))
    est = np.clip((xt - np.sqrt(1 - a) * eps) / np.sqrt(a), -1, 1)
    return {"t": t, "images": len(x0), "noisy_psnr_db": psnr(np.clip(xt / np.sqrt(a), -1, 1), x0),
            "denoised_psnr_db": psnr(est, x0)}
