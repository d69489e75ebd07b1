"""Diffusion schedule and the deterministic DDIM sampler's time grid (shared by training,
the NumPy sampler and the PyTorch checks).

Training uses DiT's/ADM's linear beta schedule (1e-4 to 0.02, T = 1000). Sampling uses DDIM with
eta = 0 on ``steps`` timesteps spaced uniformly from T-1 down to 0.
"""

import numpy as np

__all__ = ["NUM_TIMESTEPS", "alphas_cumprod", "ddim_timesteps"]

NUM_TIMESTEPS = 1000


def alphas_cumprod(num_timesteps: int = NUM_TIMESTEPS) -> np.ndarray:
    betas = np.linspace(1e-4, 0.02, num_timesteps, dtype=np.float64)
    return np.cumprod(1.0 - betas)


def ddim_timesteps(steps: int, num_timesteps: int = NUM_TIMESTEPS) -> np.ndarray:
    """Timesteps visited by DDIM, in sampling order (``T-1`` first, ``0`` last)."""
    if steps < 1 or steps > num_timesteps:
        raise ValueError(f"steps must be in [1, {num_timesteps}], got {steps}")
    return np.round(np.linspace(num_timesteps - 1, 0, steps)).astype(np.int64)
