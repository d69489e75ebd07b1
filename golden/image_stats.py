"""Sample-quality statistics that need no pretrained network: how far a set of generated images
is from a reference set (held-out crops) in per-image mean and contrast and in power spectrum,
and the PSNR of one image set against another.

* ``mean_w1``, ``std_w1``: 1-D Wasserstein-1 distance between the two sets' distributions of the
  per-image mean and of the per-image standard deviation (images in [-1, 1]).
* ``spectrum_db``: RMS over radial frequency bins of the difference, in dB, between the two sets'
  radially averaged power spectra (each image's mean removed), so 0 means the same texture scale
  and an all-noise or an all-flat set sits tens of dB away.
"""

import numpy as np

__all__ = ["psnr", "radial_spectrum", "wasserstein1", "image_distances"]


def psnr(a, b, peak_to_peak: float = 2.0) -> float:
    """PSNR of ``a`` against ``b`` in dB (images in [-1, 1]: peak-to-peak 2); inf if equal."""
    mse = float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(peak_to_peak ** 2 / mse)


def radial_spectrum(images) -> np.ndarray:
    """Mean power per radial frequency bin (``size // 2`` bins) of ``(N, [C,] H, W)`` images."""
    x = np.asarray(images, dtype=np.float64)
    x = x.reshape(-1, x.shape[-2], x.shape[-1])
    x = x - x.mean(axis=(1, 2), keepdims=True)
    p = (np.abs(np.fft.fft2(x)) ** 2).mean(axis=0)
    h, w = p.shape
    fy, fx = np.meshgrid(np.fft.fftfreq(h) * h, np.fft.fftfreq(w) * w, indexing="ij")
    r = np.hypot(fy, fx).astype(np.int64)
    nb = min(h, w) // 2
    keep = (r >= 1) & (r <= nb)
    sums = np.bincount(r[keep], weights=p[keep], minlength=nb + 1)[1:]
    counts = np.bincount(r[keep], minlength=nb + 1)[1:]
    return sums / counts


def wasserstein1(a, b) -> float:
    """W1 distance of two 1-D empirical distributions (by quantiles on a common grid)."""
    q = np.linspace(0.0, 1.0, 201)
    return float(np.abs(np.quantile(np.ravel(a), q) - np.quantile(np.ravel(b), q)).mean())


def image_distances(samples, reference) -> dict:
    """``{"mean_w1", "std_w1", "spectrum_db"}`` of ``samples`` against ``reference``."""
    s = np.asarray(samples, dtype=np.float64).reshape(len(samples), -1)
    r = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
    spec = 10 * np.log10(radial_spectrum(samples) / radial_spectrum(reference))
    return {"mean_w1": wasserstein1(s.mean(axis=1), r.mean(axis=1)),
            "std_w1": wasserstein1(s.std(axis=1), r.std(axis=1)),
            "spectrum_db": float(np.sqrt(np.mean(spec ** 2)))}
