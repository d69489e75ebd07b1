"""Word layouts of the attention engine's memories (``params.json`` ``attention.layouts``).

Every factory takes the engine's ``AttentionGeometry``; the host packs and unpacks words
through the manifest's field lists (``dstar.sim.tb_attention``), never through widths of its own.
"""

from amaranth import signed, unsigned
from amaranth.lib import data

from ..geometry import AttentionGeometry, SoftmaxGeometry, uwidth
from ..softmax import row_sum_layout

__all__ = ["ms_layout", "p_word_layout", "q_tile_word_layout", "memory_layouts",
           "block_list_layouts", "rl_word_layout"]


def ms_layout() -> data.StructLayout:
    """A query row's logit multiplier ``(m, sh)`` (``dstar.golden.softmax.logit_multiplier``)."""
    return data.StructLayout({"m": unsigned(SoftmaxGeometry.MANT_BITS),
                              "sh": unsigned(SoftmaxGeometry.SH_BITS)})


def p_word_layout(ag: AttentionGeometry) -> data.StructLayout:
    """A P word: the 8-bit mantissas of one group of ``G`` keys (``dstar.golden.softmax`` group
    format; zeros past a ragged end) and the group's shift ``e_max - e_g``."""
    return data.StructLayout({"p": data.ArrayLayout(unsigned(SoftmaxGeometry.P_BITS),
                                                    ag.cfg.group),
                              "shift": unsigned(ag.cfg.shift_bits)})


def rl_word_layout(ag: AttentionGeometry) -> data.StructLayout:
    """A score-cache row word: the row's reciprocal ``r`` and ``L = bit_length(l)``
    (``dstar.golden.softmax.reciprocal``), as the softmax unit's row sum carries them."""
    lay = row_sum_layout(ag.n_max, ag.cfg.e_max)
    return data.StructLayout({"r": lay.members["r"], "big_l": lay.members["big_l"]})


def q_tile_word_layout(tokens: int) -> data.ArrayLayout:
    """A Q word for the FMDQ arrays: the INT8 ``Q`` of 4 consecutive dimensions for each of a
    token tile's ``tokens`` rows (element ``[t][i]``: row ``t``, dimension ``i``)."""
    return data.ArrayLayout(data.ArrayLayout(signed(8), 4), tokens)


def block_list_layouts(ag: AttentionGeometry) -> tuple[data.ArrayLayout, data.ArrayLayout]:
    """The selected key blocks of a query block, as the engine's parts read them: their
    indices (``0 .. nkb - 1``, ascending) and their lengths (``1 .. block_k``; the last block
    may be ragged)."""
    return (data.ArrayLayout(unsigned(uwidth(ag.nkb + 1)), ag.nkb),
            data.ArrayLayout(unsigned(uwidth(ag.cfg.block_k + 1)), ag.nkb))


def memory_layouts(ag: AttentionGeometry) -> dict:
    """The host-visible memory words, by name: Q (``G`` INT8; FMDQ: ``q_tile_word_layout``),
    K^T and V (``m_tile`` INT8), ``(m, sh)``, the output ``O`` and the residual ``R``
    (``block_cols`` columns of a row each), the mask (bit ``J``: key block ``J``) and a slot's
    step counter (``valid``: stepped since the last clear; ``phase``: its calls modulo
    ``refresh``). SAR (``ag.sar``) has no residual word; its score cache has P words
    (``sc_word``, ``p_word_layout``) and row words (``rl_word``, ``rl_word_layout``)."""
    g, mt, bc = ag.cfg.group, ag.cfg.m_tile, ag.block_cols
    if ag.sar:
        lays = _memory_layouts(ag, g, mt, bc)
        del lays["res_word"]
        return {**lays, "sc_word": p_word_layout(ag), "rl_word": rl_word_layout(ag)}
    return _memory_layouts(ag, g, mt, bc)


def _memory_layouts(ag, g, mt, bc) -> dict:
    return {
        "q_word": q_tile_word_layout(ag.q_tokens) if ag.fmdq else data.ArrayLayout(signed(8), g),
        "kt_word": data.ArrayLayout(signed(8), mt),
        "v_word": data.ArrayLayout(signed(8), mt),
        "ms_word": ms_layout(),
        "o_word": data.ArrayLayout(signed(ag.out_bits), bc),
        "res_word": data.ArrayLayout(signed(ag.res_bits), bc),
        "mask_word": unsigned(ag.nkb),
        "slot_word": data.StructLayout({"valid": unsigned(1),
                                        "phase": unsigned(ag.REFRESH_BITS)}),
    }
