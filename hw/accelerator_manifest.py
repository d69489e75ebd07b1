"""What the accelerator top's manifest states beyond its ports, layouts and sizes: the clock and
reset, the opcodes, the memories (id, depth, access, address rule), the ``din`` / ``dout`` beat,
the counters and the rules of driving the top (``driver``), all read from its
``AcceleratorGeometry`` (``AcceleratorGeometry.sections``; ``dstar.hw.generate.manifest`` puts
them beside the rest). docs/design/accelerator.md, "Driving the top", says the rules in words;
``tests/hw/test_accelerator_docs.py`` checks each on the RTL.
"""

from dstar.golden.attention import THETA_BITS

from .accelerator_geometry import AcceleratorGeometry, Mem, Opcode
from .geometry import COUNTER_BITS

__all__ = ["sections", "addresses", "RUN_OVERHEAD_CYCLES"]

#: Cycles a run command adds to its block's counter, from the cycle it is taken to ``done``.
RUN_OVERHEAD_CYCLES = 2
#: What clears a counter of ``READ_COUNTERS``, by name prefix (the others: reset only).
_COUNTER_RUNS = {"linear_": Opcode.RUN_LINEAR, "attention_": Opcode.RUN_ATTENTION}

#: The linear datapath's memories' address rules (``encoding = "nibble"``).
_LINEAR_ADDRESSES = {
    Mem.TARGET: "token * n_kt_max + kt (elements kt*k_tile ..; clipped to +-target_max)",
    Mem.STATE: "token * n_kt_max + kt",
    Mem.WEIGHTS: "w_base + (kt * n_mt + mt) * k_tile + r for row kt * k_tile + r, columns "
                 "mt * block_cols .. (a run's n_kt * n_mt tiles in run order, K tiles outer; "
                 "rows beyond K zero)",
    Mem.Y: "token * n_mt_max + mt (columns mt * block_cols ..)",
}
#: ``FmdqLinear``'s sub-channel words and packed column blocks (``encoding = "fmdq"``).
_FMDQ_ADDRESSES = {
    Mem.TARGET: "tile * max_k + k (tokens tile*token_tile ..; clipped to +-target_max)",
    Mem.STATE: "tile * max_k + k (tokens tile*token_tile ..)",
    Mem.WEIGHTS: "w_base + mt * K + k for row k, columns mt * block_cols .. (a run's n_mt "
                 "blocks of K rows)",
    Mem.Y: _LINEAR_ADDRESSES[Mem.Y],
}


def addresses(geo: AcceleratorGeometry) -> dict[Mem, str]:
    """The address rule of every ``Mem``: the linear datapath's, and the attention engine's
    own (``AttentionGeometry.addresses``, the engine's manifest's)."""
    rules = dict(_FMDQ_ADDRESSES if geo.fmdq else _LINEAR_ADDRESSES)
    rules.update({Mem[name.upper()]: rule for name, rule in geo.attention.addresses().items()})
    return rules


def _memories(geo: AcceleratorGeometry) -> dict:
    """Each ``Mem`` of this top (``depths``: v1 has no score cache, SAR no residual cache): id,
    depth, access (``rw``, ``w`` or ``r``: ``LOAD`` / ``READ``) and address rule."""
    rules, mems = addresses(geo), {}
    for mm in Mem:
        if mm.name not in geo.depths:
            continue
        access = ("rw" if mm in geo.writable and mm in geo.readable else
                  "w" if mm in geo.writable else "r")
        mems[mm.name] = {"id": int(mm), "depth": geo.depths[mm.name], "access": access,
                         "address": rules[mm]}
    return mems


def sections(geo: AcceleratorGeometry) -> dict:
    """The accelerator's manifest sections beyond ``config``, ``derived``, ``geometry`` (the
    linear datapath's), ``ports`` and ``layouts`` (the command word's and every memory word's):
    everything a driver needs, in any language. Clock ``clk`` and reset ``rst`` (synchronous,
    active high), the attention engine's geometry, the opcodes, the memories (``_memories``),
    the read latency, the ``din`` / ``dout`` beat width, the counters ``READ_COUNTERS`` sends,
    in order, and the rules of driving the top (``driver``: ``_driver_rules``)."""
    return {
        "clock": {"port": "clk", "edge": "rising"},
        "reset": {"port": "rst", "synchronous": True, "active": "high"},
        "attention_geometry": geo.attention.to_dict(),
        "opcodes": {op.name: int(op) for op in Opcode},
        "memories": _memories(geo),
        "data_bits": geo.data_bits,
        "read_latency": "a READ's words leave on dout in address order; the first no earlier "
                        "than 2 cycles after the command is taken",
        "counters": list(geo.counters),
        "counter_bits": COUNTER_BITS,
        "driver": _driver_rules(geo),
    }


def _driver_rules(geo: AcceleratorGeometry) -> dict:
    """The ``driver`` section: the rules of driving the top beyond ports and layouts, as data.
    Word counts are arithmetic expressions in ``N`` (``n_tokens``), ``ceil`` and the names of
    ``config`` and ``attention_geometry``.

    - ``beat``: a memory word sits in the low bits of its ``din`` / ``dout`` beat, one word a
      beat (above it: 0 on ``dout``, ignored on ``din``); in the arrays' memories array ``a``'s
      element ``e`` is the word's element ``a * m_tile + e``.
    - ``read_counters``: one counter a beat, in ``counters`` order, wrapping at
      ``2**counter_bits``.
    - ``counter_cleared_by``: each counter's lifetime: ``reset`` (counts from reset), or the
      run opcode whose start clears it (it then holds the last such run's value).
    - ``done``: the opcodes that pulse ``done`` (for one cycle), never for a refused command;
      ``run_overhead_cycles``: a run's cycles from taken to ``done`` beyond its counter.
    - ``key``: the ``key`` output is the counter ``counter`` of the last ``set_by`` run (set
      when it starts, held until the next; ``after_reset`` after reset).
    - ``error``: rises ``latency`` cycles after a refused command is taken, blocks nothing,
      one ``ACK_ERROR`` clears it whatever the number of refusals, ``errors`` keeps counting.
    - ``accepted``: per opcode, each argument's accepted range ``[lo, hi]``, bounds that are
      strings being expressions in the other arguments, ``depth`` (the memory's) and the
      names of ``config`` and ``geometry``; outside it the command is refused (a memory must
      also have the access: ``memories``). ``empty_run``: the ``RUN_LINEAR`` fields of which
      any one 0 makes an accepted run that writes nothing, leaves its counters 0 and is done
      ``done_after`` cycles after it is taken (``n_tokens`` 0 is refused instead). With
      ``encoding = "fmdq"`` only ``n_tokens`` is listed for ``RUN_LINEAR``, and no
      ``empty_run``: ``FmdqLinear``'s run limits are its own.
    - ``theta_q``: its meaningful range, and how the top treats the values outside it.
    - ``run_attention``: the words it needs loaded, those it needs on a reuse step, what it
      writes and overwrites, and its tile counts (the cycles: ``dstar.sim.attention_cycles``).
    """
    cfg, ag, lin = geo.cfg, geo.attention, geo.linear
    tokens = [1, cfg.max_tokens]
    linear = {"n_tokens": tokens}
    mem = {"addr": [0, "depth - 1"], "count": [1, "depth - addr"]}
    rules = {
        "beat": {"words_per_beat": 1, "word_lsb": 0, "dout_above_word": 0,
                 "din_above_word": "ignored", "array_element": "a * m_tile + e"},
        "read_counters": {"beats": len(geo.counters), "counters_per_beat": 1,
                          "order": "counters", "wraps_at": 1 << COUNTER_BITS},
        "counter_cleared_by": {
            name: next((op.name for pre, op in _COUNTER_RUNS.items() if name.startswith(pre)),
                       "reset")
            for name in geo.counters},
        "done": {"opcodes": [Opcode.RUN_LINEAR.name, Opcode.RUN_ATTENTION.name],
                 "pulse_cycles": 1, "on_refused": False},
        "run_overhead_cycles": RUN_OVERHEAD_CYCLES,
        "key": {"counter": "attention_key", "set_by": Opcode.RUN_ATTENTION.name,
                "after_reset": 0},
        "error": {"latency": 1, "blocks_commands": False, "cleared_by": Opcode.ACK_ERROR.name,
                  "acks_to_clear": 1, "counted_in": "errors", "ack_clears_count": False},
        "accepted": {
            Opcode.LOAD.name: mem, Opcode.READ.name: mem,
            Opcode.RUN_LINEAR.name: linear,
            Opcode.RUN_ATTENTION.name: {"n_tokens": tokens, "slot": [0, cfg.attn_slots - 1],
                                        "theta_q": [0, (1 << ag.theta_bits) - 1],
                                        "refresh": [0, (1 << ag.REFRESH_BITS) - 1]},
        },
        "theta_q": {"meaningful": [1, 1 << THETA_BITS], "below_as": 1,
                    "every_block_from": 1 << THETA_BITS, "read_on": "key steps"},
        "run_attention": {
            "needs": {"Q": ("ceil(N / q_tokens) * head_dim / 4" if ag.fmdq else "N * rows_q"),
                      "MS": "N", "KT": "head_dim * ceil(N / block_cols)",
                      "V": "ceil(N / group) * group * n_cp"},
            "needs_on_reuse": [Mem.MASK.name, Mem.RES.name, Mem.SLOT.name],
            "writes": {"O": "N * n_cp"},
            "writes_on_key": [Mem.MASK.name, Mem.RES.name],
            "advances": Mem.SLOT.name,
            "overwrites": [Mem.Y.name],
            "tiles": {"nqb": "ceil(N / block_q)", "nkb": "ceil(N / block_k)",
                      "key_step": "nqb * nkb", "reuse_step": "mask bits set in rows < nqb"},
            "cycles": "dstar.sim.attention_cycles.predict",
        },
    }
    if ag.sar:                                # cache steps and V-only reuse steps
        rules["run_attention"].update({
            "needs_on_reuse": [Mem.MASK.name, Mem.SC.name, Mem.RL.name, Mem.SLOT.name],
            "reads_on_reuse": [Mem.V.name],
            "needs_always": [Mem.MASK.name],
            "writes_on_key": [Mem.SC.name, Mem.RL.name],
            "tiles": {"nqb": "ceil(N / block_q)", "nkb": "ceil(N / block_k)",
                      "key_step": "mask bits set in rows < nqb (QK^T and PV)",
                      "reuse_step": "mask bits set in rows < nqb (PV only)"}})
        rules["theta_q"]["read_on"] = "never (SAR: the host's masks)"
    if not geo.fmdq:                          # FmdqLinear's run limits are its own
        linear |= {"n_kt": [0, lin.n_kt_max], "n_mt": [0, lin.n_mt_max],
                   "w_base": [0, "weight_depth - n_kt * n_mt * k_tile"]}
        rules["empty_run"] = {"opcode": Opcode.RUN_LINEAR.name,
                              "zero_fields": ["n_kt", "n_mt"], "done_after": RUN_OVERHEAD_CYCLES,
                              "writes": [], "counters": 0}
    return rules
