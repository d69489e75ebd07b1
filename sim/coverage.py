"""Functional coverage of the constrained-random regression (``dstar.sim.regress``): named bins
of the accelerator top's command stream, data and streams, and their hit counts.

The bins of a configuration (``bin_names``) are fixed before a run, so that a report's percentage
is over a known set; hitting a name that is not a bin is an error (a typo would otherwise be a
bin that can never be hit, or a hit that counts for nothing).
"""

__all__ = ["OPCODES", "REFUSALS", "WRITABLE", "READABLE", "STREAM_BINS", "bin_names", "refusals",
           "Coverage"]

#: The opcodes of the top (``dstar.hw.accelerator.Opcode``), each a bin ``op.<name>``.
OPCODES = ("NOP", "LOAD", "READ", "RUN_LINEAR", "RUN_ATTENTION", "CLEAR_SLOTS", "READ_COUNTERS",
           "ACK_ERROR")
#: Every reason the top refuses a command for (``Accelerator``'s ``cmd``), a bin
#: ``refuse.<reason>`` each: an unknown opcode; a LOAD of a memory that cannot be written; a READ
#: of one that cannot be read; an address range past the memory's end; ``count`` 0;
#: ``RUN_LINEAR``'s ``n_tokens`` outside ``1 .. max_tokens``, its tiles beyond the geometry's,
#: its weights past the weight memory; ``RUN_ATTENTION``'s ``n_tokens``, its slot.
REFUSALS = ("opcode", "load_mem", "read_mem", "range", "count0", "lin_tokens", "lin_tiles",
            "lin_weights", "att_tokens", "att_slot")
#: The memories a LOAD may write and a READ may read (bins ``load.<mem>``, ``read.<mem>``).
WRITABLE = ("TARGET", "STATE", "WEIGHTS", "Y", "Q", "KT", "V", "MS", "RES", "MASK", "SLOT")
READABLE = ("STATE", "Y", "O", "RES", "MASK", "SLOT")
#: Back-pressure (valid while not ready) and idle patterns on each stream.
STREAM_BINS = ("stream.cmd_backpressure", "stream.cmd_idle", "stream.din_backpressure",
               "stream.din_gap", "stream.dout_backpressure")
#: Which classes (Z: ZERO, L: LOW, H: HIGH) the encoded elements of one linear step take.
CLASS_MIXES = ("Z", "L", "H", "ZL", "ZH", "LH", "ZLH")


def refusals(cfg) -> tuple[str, ...]:
    """The ``REFUSALS`` a command word of ``cfg`` can express: a slot beyond ``attn_slots``
    only when the slot field has room for one (``attn_slots`` not a power of two)."""
    from dstar.hw.geometry import uwidth

    if (1 << uwidth(cfg.attn_slots)) > cfg.attn_slots:
        return REFUSALS
    return tuple(r for r in REFUSALS if r != "att_slot")


def bin_names(cfg) -> list[str]:
    """Every bin of a regression of configuration ``cfg`` (a ``dstar.config.Config``), in
    report order."""
    from dstar.hw.geometry import AttentionGeometry

    lin = AttentionGeometry(cfg, shared=True).lin
    names = [f"op.{o}" for o in OPCODES]
    names += [f"refuse.{r}" for r in refusals(cfg)]
    names += [f"load.{m}" for m in WRITABLE] + [f"read.{m}" for m in READABLE]
    names += [*STREAM_BINS, "error.acked", "error.run_while_set"]
    # Linear steps: kinds, shapes, where the weights are.
    names += ["lin.key", "lin.delta_kept", "lin.delta_restored", "lin.delta_random_state"]
    names += [f"lin.n_kt.{i}" for i in range(1, lin.n_kt_max + 1)]
    names += [f"lin.n_mt.{i}" for i in range(1, lin.n_mt_max + 1)]
    names += ["lin.tokens.1", "lin.tokens.mid", "lin.tokens.max", "lin.m_partial",
              "lin.w_base.0", "lin.w_base.mid", "lin.w_base.end"]
    # The encoded data of linear steps.
    names += [f"data.mix.{x}" for x in CLASS_MIXES] + ["data.group_widths.all"]
    names += [f"data.shift.{e}" for e in range(cfg.e_max + 1)]
    names += ["data.clipped_groups", "data.saturated_groups", "data.target_clipped"]
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
