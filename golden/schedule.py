"""The key-step rule of dstar's temporal reuse, stated once: which calls of a reusing layer
recompute in full (a linear layer's new lattice, an attention layer's new masks and residuals;
SAR: a cache step) and which reuse the last key step's state.
"""

__all__ = ["is_key_step"]


def is_key_step(index: int, refresh: int) -> bool:
    """Whether call ``index`` (0, 1, 2, ...) of a layer is a key step under ``refresh``
    (``Config.refresh_linear`` or ``refresh_attn``): the first, then every ``refresh``-th;
    ``refresh`` 0 makes only the first one a key step. ``index`` is the sampling step for the
    golden hooks and the host (whose first call of a layer is a key step whatever its step), and
    the count of a slot's calls for the accelerator's attention slots (the engine's step
    counter, ``dstar.hw.attention.AttentionEngine``, is this rule in RTL)."""
    return index == 0 or (refresh > 0 and index % refresh == 0)
