"""Functional coverage of the constrained-random regression (``dstar.sim.regress``): named bins
of the accelerator top's command stream, data and streams, and their hit counts.

The bins of a configuration (``bin_names``) are fixed before a run, so that a report's percentage
is over a known set; hitting a name that is not a bin is an error (a typo would otherwise be a
bin that can never be hit, or a hit that counts for nothing). The linear datapath's bins depend
on the encoding: v1's (``encoding = "nibble"``) record its groups' classes, FMDQ's
(``dstar.sim.fmdq_regress``) its sub-channels' widths and the streams of a run.
"""

__all__ = ["OPCODES", "REFUSALS", "FMDQ_REFUSALS", "WRITABLE", "READABLE", "STREAM_BINS",
           "FMDQ_WIDTHS", "fmdq_widths", "bin_names", "refusals", "writable", "readable",
           "is_fmdq", "Coverage"]

#: The opcodes of the top (``dstar.hw.accelerator.Opcode``), each a bin ``op.<name>``.
OPCODES = ("NOP", "LOAD", "READ", "RUN_LINEAR", "RUN_ATTENTION", "CLEAR_SLOTS", "READ_COUNTERS",
           "ACK_ERROR")
#: Every reason v1's top refuses a command for (``Accelerator``'s ``cmd``), a bin
#: ``refuse.<reason>`` each: an unknown opcode; a LOAD of a memory that cannot be written; a READ
#: of one that cannot be read; an address range past the memory's end; ``count`` 0;
#: ``RUN_LINEAR``'s ``n_tokens`` outside ``1 .. max_tokens``, its tiles beyond the geometry's,
#: its weights past the weight memory; ``RUN_ATTENTION``'s ``n_tokens``, its slot.
REFUSALS = ("opcode", "load_mem", "read_mem", "range", "count0", "lin_tokens", "lin_tiles",
            "lin_weights", "att_tokens", "att_slot")
#: The FMDQ top's (``encoding = "fmdq"``): v1's, with ``RUN_LINEAR``'s ``n_k`` beyond
#: ``max_k`` (``lin_k``) and ``n_mt`` beyond ``n_mt_max`` (``lin_mt``) for its tiles, its
#: weights ``w_base + n_k * n_mt`` past the weight memory, and a LOAD or READ of ``TARGET`` or
#: ``STATE`` (``stream_mem``: depth 0, the targets and states stream through ``RUN_LINEAR``).
FMDQ_REFUSALS = ("opcode", "load_mem", "read_mem", "range", "count0", "stream_mem",
                 "lin_tokens", "lin_k", "lin_mt", "lin_weights", "att_tokens", "att_slot")
#: The memories a LOAD may write and a READ may read (bins ``load.<mem>``, ``read.<mem>``).
WRITABLE = ("TARGET", "STATE", "WEIGHTS", "Y", "Q", "KT", "V", "MS", "RES", "MASK", "SLOT")
READABLE = ("STATE", "Y", "O", "RES", "MASK", "SLOT")
#: Back-pressure (valid while not ready) and idle patterns on each stream.
STREAM_BINS = ("stream.cmd_backpressure", "stream.cmd_idle", "stream.din_backpressure",
               "stream.din_gap", "stream.dout_backpressure")
#: Which classes (Z: ZERO, L: LOW, H: HIGH) the encoded elements of one v1 linear step take.
CLASS_MIXES = ("Z", "L", "H", "ZL", "ZH", "LH", "ZLH")
#: FMDQ's sub-channel widths (``golden.fmdq.WIDTHS``; 0: skipped), a bin ``data.width.<b>`` each.
FMDQ_WIDTHS = (0, 2, 4, 6, 8)


def is_fmdq(cfg) -> bool:
    from dstar.config import Encoding

    return cfg.encoding is Encoding.FMDQ


def writable(cfg) -> tuple[str, ...]:
    """The memories a LOAD of ``cfg``'s top writes (FMDQ: no ``TARGET`` or ``STATE``)."""
    return tuple(m for m in WRITABLE if not (is_fmdq(cfg) and m in ("TARGET", "STATE")))


def readable(cfg) -> tuple[str, ...]:
    return tuple(m for m in READABLE if not (is_fmdq(cfg) and m == "STATE"))


def fmdq_widths(cfg) -> tuple[int, ...]:
    """The sub-channel widths ``cfg``'s lossless rule can give: 0, 8 and each narrower width
    ``b`` whose most negative code ``-2**(b-1)`` lies outside the dead zone ``|D| <= tau`` (a
    narrow code is a shift-0 code: a sub-channel shifted by ``p > 0`` has a code of at least
    64 in magnitude, else ``p - 1`` would have fitted INT8)."""
    return tuple(b for b in FMDQ_WIDTHS if b in (0, 8) or (1 << (b - 1)) > cfg.tau)


def refusals(cfg) -> tuple[str, ...]:
    """The refusal reasons (``REFUSALS``, FMDQ: ``FMDQ_REFUSALS``) a command word of ``cfg``
    can express: a slot beyond ``attn_slots`` only when the slot field has room for one
    (``attn_slots`` not a power of two)."""
    from dstar.hw.geometry import uwidth

    reasons = FMDQ_REFUSALS if is_fmdq(cfg) else REFUSALS
    if (1 << uwidth(cfg.attn_slots)) > cfg.attn_slots:
        return reasons
    return tuple(r for r in reasons if r != "att_slot")


def _v1_linear_bins(cfg) -> list[str]:
    from dstar.hw.geometry import AttentionGeometry

    lin = AttentionGeometry(cfg, shared=True).lin
    names = ["lin.key", "lin.delta_kept", "lin.delta_restored", "lin.delta_random_state"]
    names += [f"lin.n_kt.{i}" for i in range(1, lin.n_kt_max + 1)]
    names += [f"lin.n_mt.{i}" for i in range(1, lin.n_mt_max + 1)]
    names += ["lin.tokens.1", "lin.tokens.mid", "lin.tokens.max", "lin.m_partial",
              "lin.w_base.0", "lin.w_base.mid", "lin.w_base.end"]
    names += [f"data.mix.{x}" for x in CLASS_MIXES] + ["data.group_widths.all"]
    names += [f"data.shift.{e}" for e in range(cfg.e_max + 1)]
    names += ["data.clipped_groups", "data.saturated_groups", "data.target_clipped"]
    return names


def _fmdq_linear_bins(cfg) -> list[str]:
    """FMDQ linear steps: kinds (a first key step, a later one, a key step's junk old state,
    ``Y`` kept, restored or consistent with a random state, a step after an attention step on
    the shared arrays, junk in a partial tile's padding rows), shapes (windows, token tiles,
    column blocks, ``K`` of 1, ``max_k``, ragged, a partial last tile), the weights' place, the
    run's streams (full rate, ``din`` gaps, ``din`` held by the datapath, ``dout`` stalls, a run
    the gaps or stalls made slower than the model's full-rate cycles); the encoded data:
    sub-channels of each width, the distinct widths of one unit (a tile's sort window), a
    SIMD-4 group of slices of channels of different widths and one with empty lanes, every
    shift, clipped, saturated and skipped sub-channels, a skipped token tile and a window with
    no group, Horner bubbles."""
    from dstar.hw.fmdq.geometry import FmdqGeometry

    geo = FmdqGeometry(cfg)
    names = ["lin.key", "lin.rekey", "lin.key_junk_state", "lin.delta_kept",
             "lin.delta_restored", "lin.delta_random_state", "lin.after_attention",
             "lin.pad_junk"]
    names += [f"lin.n_win.{i}" for i in range(1, geo.n_win_max + 1)]
    names += [f"lin.n_tiles.{i}" for i in range(1, geo.n_tiles_max + 1)]
    names += [f"lin.n_mt.{i}" for i in range(1, geo.n_mt_max + 1)]
    names += ["lin.k.1", "lin.k.max", "lin.k.ragged_window", "lin.k.whole_windows",
              "lin.tokens.1",
              "lin.tokens.partial_tile", "lin.tokens.max", "lin.m_partial",
              "lin.w_base.0", "lin.w_base.mid", "lin.w_base.end",
              "lin.run.full_rate", "lin.run.din_gap", "lin.run.din_backpressure",
              "lin.run.dout_backpressure", "lin.run.slowed"]
    widths = fmdq_widths(cfg)
    names += [f"data.width.{b}" for b in widths]
    names += [f"data.unit_widths.{i}" for i in range(1, len(widths))]
    if widths == FMDQ_WIDTHS:
        names.append("data.unit_widths.all")
    names += ["data.simd_group.mixed_widths", "data.simd_group.padded"]
    names += [f"data.shift.{e}" for e in range(cfg.e_max + 1)]
    names += ["data.clipped", "data.saturated", "data.target_clipped", "data.tile_skipped",
              "data.window_skipped", "data.bubbles"]
    return names


def bin_names(cfg) -> list[str]:
    """Every bin of a regression of configuration ``cfg`` (a ``dstar.config.Config``), in
    report order."""
    names = [f"op.{o}" for o in OPCODES]
    names += [f"refuse.{r}" for r in refusals(cfg)]
    names += [f"load.{m}" for m in writable(cfg)] + [f"read.{m}" for m in readable(cfg)]
    names += [*STREAM_BINS, "error.acked", "error.run_while_set"]
    # Linear steps: kinds, shapes, where the weights are; their encoded data.
    names += _fmdq_linear_bins(cfg) if is_fmdq(cfg) else _v1_linear_bins(cfg)
    if cfg.tau > 0:
        names.append("data.dead_zone")
    # Attention steps.
    names += ["att.key", "att.reuse", "att.tokens.1", "att.tokens.one_block", "att.tokens.mid",
              "att.tokens.max", "att.theta.1", "att.theta.lt1", "att.mask_sparse",
              "att.clear_slots_key", "att.slot_swapped", "att.read_state"]
    names += [f"att.slot.{s}" for s in range(cfg.attn_slots)]
    names += [f"att.refresh.{r}" for r in range(4)]
    return names


class Coverage:
    """Hit counts of a fixed set of bins."""

    def __init__(self, names):
        self.hits = dict.fromkeys(names, 0)

    def hit(self, name: str, n: int = 1) -> None:
        if name not in self.hits:
            raise KeyError(f"{name!r} is not a coverage bin")
        self.hits[name] += n

    def merge(self, hits: dict) -> None:
        for name, n in hits.items():
            self.hit(name, n)

    @property
    def percent(self) -> float:
        """Bins hit at least once, in percent of all bins."""
        return 100.0 * sum(1 for n in self.hits.values() if n) / len(self.hits)

    def missed(self) -> list[str]:
        return [name for name, n in self.hits.items() if not n]
