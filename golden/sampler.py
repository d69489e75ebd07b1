"""Class-conditional DDIM sampling (eta = 0) with classifier-free guidance, in NumPy.

Follows DiT's ``sample.py`` / ADM's ``ddim_sample``: the model runs on the doubled batch
``[cond; uncond]`` (when ``cfg_scale > 1``), ``eps = eps_u + s * (eps_c - eps_u)``, the predicted
``x0`` is clipped to [-1, 1] and epsilon is re-derived from it before the DDIM update.
"""

import numpy as np

from dstar.config import Config

from .diffusion import alphas_cumprod, ddim_timesteps
from .dit import DiT, float_attention, float_linear

__all__ = ["CFG_SCALE", "initial_noise", "sample_labels", "ddim_sample"]

#: The guidance scale of the analysis runs (``Config.cfg_scale``'s default).
CFG_SCALE = Config.cfg_scale


def sample_labels(samples: int, num_classes: int = 10) -> np.ndarray:
    """The class labels of ``samples`` images: ``0, 1, ...`` cycling over at most 10 classes."""
    return np.arange(samples, dtype=np.int64) % min(10, num_classes)


def initial_noise(samples: int, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((samples, shape.in_channels, shape.image_size, shape.image_size),
                               dtype=np.float32)


def ddim_sample(model: DiT, labels, noise, steps: int, cfg_scale: float = CFG_SCALE, *,
                linear=float_linear, attention=float_attention, on_step=None):
    """Run ``steps`` DDIM steps from ``noise``; returns final images ``(B, C, H, W)`` in [-1, 1].

    ``linear``/``attention`` are the model hooks (see ``DiT.forward``); they receive the step
    index (0 = first network evaluation), so stateful hooks can tell key steps from delta steps.
    ``on_step(step, t)`` is called before each network evaluation."""
    ab = alphas_cumprod()
    ts = ddim_timesteps(steps)
    x = np.asarray(noise, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    cfg = cfg_scale > 1.0
    null = model.shape.num_classes
    for i, t in enumerate(ts):
        if on_step is not None:
            on_step(i, int(t))
        if cfg:
            xin = np.concatenate([x, x])
            yin = np.concatenate([labels, np.full_like(labels, null)])
        else:
            xin, yin = x, labels
        eps = model.forward(xin, np.full(len(xin), t), yin, linear=linear, attention=attention,
                            step=i)
        if cfg:
            e_c, e_u = np.split(eps, 2)
            eps = e_u + np.float32(cfg_scale) * (e_c - e_u)
        a_t = ab[t]
        a_prev = ab[ts[i + 1]] if i + 1 < len(ts) else 1.0
        x0 = np.clip((x - np.sqrt(1 - a_t) * eps) / np.sqrt(a_t), -1.0, 1.0)
        eps = (x - np.sqrt(a_t) * x0) / np.sqrt(1 - a_t)
        x = (np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps).astype(np.float32)
    return x
