"""The accelerator top's command protocol and sizes: the opcodes (``Opcode``), the memories a
command addresses (``Mem``), the counters ``READ_COUNTERS`` sends and every size of the top
(``AcceleratorGeometry``), the command word's layout among them. What a driver sees of
``dstar.hw.accelerator.Accelerator``; the manifest states it (``AcceleratorGeometry.sections``).

Ref: dstar-spec.md section 5 (the top level and its command stream).
"""

from dataclasses import dataclass
from functools import cached_property

from amaranth import Shape, signed, unsigned
from amaranth.lib import data, enum

from dstar.config import Config, Encoding

from .attention.layouts import memory_layouts
from .encoder import row_layouts
from .fmdq.geometry import FmdqGeometry, attention_array_args
from .fmdq.linear import sub_pair_layout, sub_word_layout
from .geometry import COUNTER_BITS, AttentionGeometry, uwidth
from .layouts import weight_row_layout
from .pe_array import y_row_layout

__all__ = ["AcceleratorGeometry", "Opcode", "Mem", "COUNTERS", "FMDQ_COUNTERS"]


class Opcode(enum.IntEnum, shape=4):
    """What a command does (``AcceleratorGeometry.command``'s ``op``)."""
    #: Nothing (counted as a command).
    NOP = 0
    #: ``args.mem``: the next ``count`` beats of ``din`` are words ``addr ..`` of memory
    #: ``mem``. Targets are clipped to ``+-target_max`` as they are written (counted in
    #: ``target_clipped``).
    LOAD = 1
    #: ``args.mem``: words ``addr .. addr + count - 1`` of memory ``mem`` go out on ``dout``,
    #: one per beat, in address order.
    READ = 2
    #: ``args.linear``: one differential linear step (``LinearLayer``) of ``n_tokens`` rows
    #: over ``n_kt`` x ``n_mt`` weight tiles stored from ``w_base`` on, a linear key step if
    #: ``key``. With ``encoding = "fmdq"``: ``FmdqLinear``, ``n_k`` channels instead of
    #: ``n_kt`` tiles, and the targets and old state are not in memories: they come on
    #: ``din`` during the run, one sub-channel per beat (``FmdqGeometry.beats`` order), and
    #: the new state goes out on ``dout`` in the same order; ``done`` follows the last one.
    RUN_LINEAR = 3
    #: ``args.attention``: one attention step (``AttentionEngine``) of ``n_tokens`` rows of
    #: slot ``slot`` with ``theta_q`` and ``refresh``.
    RUN_ATTENTION = 4
    #: Forget every attention slot's step counter (the next call of each is a key step).
    CLEAR_SLOTS = 5
    #: The counters (``COUNTERS``, in that order) go out on ``dout``, one per beat.
    READ_COUNTERS = 6
    #: Clear the ``error`` flag (the ``errors`` counter keeps counting).
    ACK_ERROR = 7


class Mem(enum.IntEnum, shape=4):
    """The memories a ``LOAD`` or ``READ`` addresses (``args.mem.mem``); their word layouts and
    depths are in the manifest (``AcceleratorGeometry.words``, ``.depths``). The arrays' memories
    (weights, accumulators, K^T, V) are read and written all arrays at once: a word holds a
    whole row of a column block, array ``a``'s ``m_tile`` values at element ``a * m_tile``."""
    TARGET = 0      # linear targets, write only (fmdq: none, depth 0: RUN_LINEAR streams them)
    STATE = 1       # linear state (fmdq: none, depth 0: RUN_LINEAR streams it)
    WEIGHTS = 2     # linear weights, write only
    Y = 3           # linear accumulators: saved and restored between steps
    Q = 4           # attention Q, write only
    KT = 5          # attention K^T, write only
    V = 6           # attention V, write only
    MS = 7          # attention (m, sh) per query row, write only
    O = 8           # attention output, read only  # noqa: E741
    RES = 9         # attention residual caches: saved and restored with a slot (v1 only)
    MASK = 10       # attention masks: saved and restored with a slot (SAR: the host's)
    SLOT = 11       # attention slots' step counters: saved and restored with a slot
    SC = 12         # SAR's score cache, P words: saved and restored with a slot (SAR only)
    RL = 13         # SAR's score cache, a row's (r, L): saved and restored with a slot (SAR only)


_WRITABLE = (Mem.TARGET, Mem.STATE, Mem.WEIGHTS, Mem.Y, Mem.Q, Mem.KT, Mem.V, Mem.MS,
             Mem.RES, Mem.MASK, Mem.SLOT)
_READABLE = (Mem.STATE, Mem.Y, Mem.O, Mem.RES, Mem.MASK, Mem.SLOT)
#: With ``attention = "sar"``: the score cache instead of the residual cache.
_SAR_WRITABLE = tuple(mm for mm in _WRITABLE if mm is not Mem.RES) + (Mem.SC, Mem.RL)
_SAR_READABLE = tuple(mm for mm in _READABLE if mm is not Mem.RES) + (Mem.SC, Mem.RL)

#: The counters ``READ_COUNTERS`` sends, in order (``COUNTER_BITS`` each, wrapping).
COUNTERS = ("commands", "errors", "target_clipped",
            "linear_cycles", "linear_stall_load", "linear_low", "linear_high", "linear_zero",
            "linear_clipped_groups", "linear_saturated_groups",
            "attention_cycles", "attention_qk_tiles", "attention_pv_tiles", "attention_key")
#: The counters with ``encoding = "fmdq"``: the linear datapath's are ``FmdqLinear``'s.
FMDQ_COUNTERS = ("commands", "errors", "target_clipped",
                 "linear_cycles", "linear_stall_load", "linear_groups", "linear_units",
                 "linear_clipped", "linear_saturated",
                 "attention_cycles", "attention_qk_tiles", "attention_pv_tiles", "attention_key")


@dataclass(frozen=True)
class AcceleratorGeometry:
    """Every size of the accelerator top for ``cfg``, in one place: the attention engine's
    geometry (``AttentionGeometry(cfg, shared=True)``), the shared PE arrays' (v1: its
    ``lin``; FMDQ: ``FmdqPEArray(**array_args)``), the linear datapath's (``Geometry`` or
    ``FmdqGeometry``), each ``Mem``'s word layout and depth, the ``din`` / ``dout`` beat, the
    command word and the counters. The top, its manifest and the formal harnesses read it."""
    cfg: Config

    @property
    def fmdq(self) -> bool:
        """The linear datapath is ``FmdqLinear`` on SIMD-4 arrays (``encoding = "fmdq"``)."""
        return self.cfg.encoding is Encoding.FMDQ

    @property
    def writable(self) -> tuple:
        """The ``Mem`` a ``LOAD`` may write (SAR: the score cache, no residual cache)."""
        return _SAR_WRITABLE if self.attention.sar else _WRITABLE

    @property
    def readable(self) -> tuple:
        """The ``Mem`` a ``READ`` may read."""
        return _SAR_READABLE if self.attention.sar else _READABLE

    @cached_property
    def attention(self) -> AttentionGeometry:
        return AttentionGeometry(self.cfg, shared=True)

    @property
    def arrays(self):
        """The v1 arrays' ``Geometry`` (``encoding = "nibble"``), lent to the linear layer: the
        accumulators are the engine's four banks (``AttentionGeometry.lin``; ``shared`` sizes
        them to hold the linear layer's ``Y`` too)."""
        return self.attention.lin

    @cached_property
    def array_args(self) -> dict:
        """``FmdqPEArray``'s parameters (``encoding = "fmdq"``): the attention's options and a
        host write port for ``Y``."""
        return {**attention_array_args(self.cfg, True), "host_writes": True}

    @cached_property
    def linear(self):
        """The linear datapath's geometry: the shared arrays' ``Geometry`` or
        ``FmdqGeometry``."""
        return FmdqGeometry(self.cfg) if self.fmdq else self.arrays

    @property
    def counters(self) -> tuple[str, ...]:
        """The counters ``READ_COUNTERS`` sends, in order."""
        return FMDQ_COUNTERS if self.fmdq else COUNTERS

    def layouts(self) -> dict:
        """The command word's layout (``command``) and each ``Mem``'s word layout, by name."""
        return {"command": self.command, **self.words}

    def to_dict(self) -> dict:
        """The manifest's ``geometry``: the linear datapath's sizes (``linear``), those a
        linear top's manifest gives too; the engine's are in ``sections()``."""
        return self.linear.to_dict()

    def sections(self) -> dict:
        """The manifest's sections beyond ``geometry``: the protocol a driver follows
        (``dstar.hw.accelerator_manifest.sections``)."""
        # Imported here: that module imports this one.
        from .accelerator_manifest import sections

        return sections(self)

    @cached_property
    def words(self) -> dict:
        """The word layout of each ``Mem``, by name."""
        ag, lin = self.attention, self.linear
        al = memory_layouts(ag)
        bc = ag.block_cols

        def block(per_array):       # every array's word of a per-array memory, side by side
            return data.ArrayLayout(per_array.elem_shape, bc)

        if self.fmdq:
            t_l = s_l = sub_word_layout(lin)
            w_l, y_l = data.ArrayLayout(signed(8), bc), data.ArrayLayout(signed(lin.y_bits), bc)
        else:
            t_l, s_l = row_layouts(lin)
            w_l, y_l = block(weight_row_layout(lin).members["w"]), block(y_row_layout(lin))
        if ag.sar:
            att = {Mem.MASK.name: al["mask_word"], Mem.SLOT.name: al["slot_word"],
                   Mem.SC.name: al["sc_word"], Mem.RL.name: al["rl_word"]}
        else:
            att = {Mem.RES.name: al["res_word"], Mem.MASK.name: al["mask_word"],
                   Mem.SLOT.name: al["slot_word"]}
        return {Mem.TARGET.name: t_l, Mem.STATE.name: s_l,
                Mem.WEIGHTS.name: w_l,
                Mem.Y.name: y_l,
                Mem.Q.name: al["q_word"], Mem.KT.name: block(al["kt_word"]),
                Mem.V.name: block(al["v_word"]),
                Mem.MS.name: al["ms_word"], Mem.O.name: al["o_word"], **att}

    @cached_property
    def depths(self) -> dict:
        """Words of each ``Mem``, by name (FMDQ: no ``TARGET`` or ``STATE``, they stream
        through ``RUN_LINEAR``)."""
        ag, lin = self.attention, self.linear
        rows = 0 if self.fmdq else lin.row_depth
        if ag.sar:
            att = {Mem.MASK.name: ag.mask_depth, Mem.SLOT.name: self.cfg.attn_slots,
                   Mem.SC.name: ag.sc_depth * ag.p_banks, Mem.RL.name: ag.rl_depth}
        else:
            att = {Mem.RES.name: ag.res_depth, Mem.MASK.name: ag.mask_depth,
                   Mem.SLOT.name: self.cfg.attn_slots}
        return {Mem.TARGET.name: rows, Mem.STATE.name: rows,
                Mem.WEIGHTS.name: lin.weight_depth, Mem.Y.name: lin.y_depth,
                Mem.Q.name: ag.q_depth, Mem.KT.name: ag.kt_depth, Mem.V.name: ag.v_depth,
                Mem.MS.name: ag.n_max, Mem.O.name: ag.o_depth, **att}

    @cached_property
    def data_bits(self) -> int:
        """Width of a ``din`` / ``dout`` beat: the widest memory word, counter or (``encoding =
        "fmdq"``) linear stream beat (``sub_pair_layout``); a narrower word sits in the low
        bits (the rest are zero on ``dout``, ignored on ``din``)."""
        widths = [Shape.cast(w).width for w in self.words.values()]
        if self.fmdq:
            widths.append(sub_pair_layout(self.linear).size)
        return max(COUNTER_BITS, *widths)

    @cached_property
    def command(self) -> data.StructLayout:
        """A command: ``op`` (``Opcode``) and its arguments, one of ``args.mem`` (``LOAD``,
        ``READ``), ``args.linear`` (``RUN_LINEAR``), ``args.attention`` (``RUN_ATTENTION``)."""
        cfg, ag, lin = self.cfg, self.attention, self.linear
        depth = max(self.depths.values())
        count = ("n_k", cfg.max_k) if self.fmdq else ("n_kt", lin.n_kt_max)
        linear = data.StructLayout({"n_tokens": unsigned(uwidth(cfg.max_tokens + 1)),
                                    count[0]: unsigned(uwidth(count[1] + 1)),
                                    "n_mt": unsigned(uwidth(lin.n_mt_max + 1)),
                                    "key": unsigned(1),
                                    "w_base": unsigned(uwidth(lin.weight_depth))})
        return data.StructLayout({
            "op": Opcode,
            "args": data.UnionLayout({
                "mem": data.StructLayout({"mem": Mem, "addr": unsigned(uwidth(depth)),
                                          "count": unsigned(uwidth(depth + 1))}),
                "linear": linear,
                "attention": data.StructLayout({"slot": unsigned(uwidth(cfg.attn_slots)),
                                                "n_tokens": unsigned(uwidth(cfg.max_tokens + 1)),
                                                "theta_q": unsigned(ag.theta_bits),
                                                "refresh": unsigned(ag.REFRESH_BITS)}),
            }),
        })
