"""Attention-reuse controller: one head, one step of DSTAR's sparse attention with reuse.

Ref: dstar-spec.md sections 4 and 5; the bit-exact contract is ``golden/ATTENTION.md``.

* ``engine``: ``AttentionEngine``, the top (sequencer, memories, host ports): v1's residual
  reuse, or with ``attention = "sar"`` the paper's SAR (host masks, the score cache);
* ``tile_runner``: ``TileRunner``, QK^T and PV tiles on the PE arrays;
* ``softmax_feed``: accumulators -> ``SoftmaxUnit``, and its P words, block sums and masses;
* ``mask_select``: ``MaskSelector``, the key blocks of a query block from their masses;
* ``norm``: the normalization stage and the residual add;
* ``layouts``: the memory-word layouts.

Sizes come from ``dstar.hw.geometry.AttentionGeometry``.
"""

from ..geometry import AttentionGeometry
from .engine import AttentionEngine
from .layouts import memory_layouts, ms_layout, p_word_layout
from .mask_select import MaskSelector
from .tile_runner import TileRunner

__all__ = ["AttentionEngine", "AttentionGeometry", "MaskSelector", "TileRunner",
           "memory_layouts", "ms_layout", "p_word_layout"]
