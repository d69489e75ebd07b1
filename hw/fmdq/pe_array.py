"""The SIMD-4 2b x 8b PE array of FMDQ (spec section 7.4): ``T`` tokens x ``M`` columns of PEs,
each the 4-lane inner product of 2-bit activation slices with 8-bit weights, accumulated in
Horner form. Golden twin: ``dstar.golden.fmdq_pe`` (``run_unit``, ``pe_array_y``); cycles:
``dstar.sim.fmdq_cycles``.

Orientation: a group's four weight rows are read once per column from the array's weight
window and broadcast along the column's ``T`` tokens; a token's slices are broadcast along the
``M`` columns. Nothing per PE chooses among weight rows: the per-column work (row selection,
the multiples ``w``, ``+-2w``, ``3w`` / ``-w`` of each lane's weight) is shared by ``T`` PEs, and
a PE only picks one of its lane's three multiples by the slice's code and adds four of them.
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.golden.fmdq import LANES
from dstar.golden.fmdq_pe import MAX_STEP, acc_bits

from ..geometry import uwidth
from .layouts import slice_group_layout, total_shift_bits

__all__ = ["issue_gap", "must_wait", "weight_window_row_layout", "group_op_layout",
           "token_shift_bits", "lend_signature", "FmdqPEArray"]

#: Bits of one lane's multiple of a weight (``3 * -128`` .. ``3 * 127``).
_MULT_BITS = 10


def weight_window_row_layout(columns: int, window: int) -> data.StructLayout:
    """One row of the weight window: channel ``row`` (the channel index modulo ``window``) of
    buffer ``bank``, the ``columns`` INT8 weights of that channel."""
    return data.StructLayout({
        "bank": unsigned(1),
        "row": unsigned(uwidth(window)),
        "w": data.ArrayLayout(signed(8), columns),
    })


def group_op_layout(tokens: int, channel_bits: int, e_max: int, y_depth: int, *,
                    token_shifts: bool = False, y_steps: bool = False) -> data.StructLayout:
    """One group for the array: the quantization unit's ``group``
    (``hw.fmdq.layouts.slice_group_layout``; its ``last`` ends a *unit*, one token tile's groups
    of one sort window) plus the sequencer's fields: the weight buffer ``bank`` the unit's
    window is in, and, read with the unit's last group, the accumulator row ``y_addr`` of the
    tile's first token, the tile's tokens ``n_tok`` (1 .. ``tokens``) and ``overwrite``
    (replace the rows instead of adding to them). With ``token_shifts``, also read with the
    unit's last group: ``tok_shift``, one extra left shift per token (``0 .. e_max``: the
    attention's per-row probability shifts); with ``y_steps``: ``y_step``, the distance between
    the tile's consecutive rows in ``Y`` (``0 .. y_depth - 1``)."""
    return data.StructLayout({
        "group": slice_group_layout(tokens, channel_bits, e_max),
        "bank": unsigned(1),
        "y_addr": unsigned(uwidth(y_depth)),
        "n_tok": unsigned(tokens.bit_length()),
        "overwrite": unsigned(1),
        **({"tok_shift": data.ArrayLayout(unsigned(token_shift_bits(e_max)), tokens)}
           if token_shifts else {}),
        **({"y_step": unsigned(uwidth(y_depth))} if y_steps else {}),
    })


def token_shift_bits(e_max: int) -> int:
    """Bits of a per-token extra shift ``0 .. e_max``."""
    return max(1, e_max.bit_length())


def _delayed(m: Module, value, name: str) -> Signal:
    """``value`` registered (one pipeline stage), in a signal named ``name``."""
    reg = Signal.like(value, name=name)
    m.d.sync += reg.eq(value)
    return reg


def issue_gap(m: Module, s_prev, shift, name: str) -> Signal:
    """The accumulators' total shift ``s_prev`` less a group's ``shift`` (one bit wider)."""
    gap = Signal(len(s_prev) + 1, name=f"{name}_gap")
    m.d.comb += gap.eq(s_prev - shift)
    return gap


def must_wait(fresh, gap):
    """Whether a group waits for a bubble: its shift more than ``MAX_STEP`` below the
    accumulators' (``gap``, ``issue_gap``) in a unit (not ``fresh``). One rule for the array and
    for a source that decides from its own registers and the array's ``o_sprev`` / ``o_fresh``
    whether the array takes its group (``FmdqLinear``)."""
    return ~fresh & (gap > MAX_STEP)


def lend_signature(args: dict) -> wiring.Signature:
    """What a user of an ``FmdqPEArray(**args)`` it does not own drives (``FmdqLinear`` and
    ``AttentionEngine`` with ``shared``; the owner, ``dstar.hw.accelerator.Accelerator``,
    connects the array to one of them at a time): the ops, the weight rows, the unit-done
    pulse and the extra readers. The host ports of ``Y`` stay with the owner."""
    y_row = data.ArrayLayout(signed(args["y_bits"]), args["columns"])
    op = group_op_layout(args["tokens"], args["channel_bits"], args["e_max"], args["y_depth"],
                         token_shifts=args.get("token_shifts", False),
                         y_steps=args.get("y_steps", False))
    readers = args.get("readers", 0)
    return wiring.Signature({
        "i_op": Out(stream.Signature(op)),
        "i_wrow": Out(stream.Signature(weight_window_row_layout(args["columns"], args["window"]),
                                       always_ready=True)),
        "o_unit_done": In(1),
        "o_hold": In(1),
        "o_sprev": In(total_shift_bits(args["e_max"])),
        "o_fresh": In(1),
        **({"rd_addr": Out(uwidth(args["y_depth"])).array(readers),
            "rd_data": In(y_row).array(readers)} if readers else {}),
    })


class FmdqPEArray(wiring.Component):
    """``tokens`` x ``columns`` SIMD-4 PEs over a double-buffered weight window of ``window``
    channel rows (a power of two, at least 2; a unit's channels must lie in one aligned
    window, as ``golden.fmdq.schedule_tile`` makes them), with the accumulator memory ``Y``
    (``y_depth`` rows of ``columns`` signed ``y_bits`` integers). The window is a memory of
    ``2 * window`` rows with four synchronous read ports, one per lane, addressed by the lane's
    channel modulo ``window`` (``weights = "memory"``), or registers with a row multiplexer
    per lane (``"registers"``); both give every column its four weights per cycle.

    A unit (groups of one token tile and one window, total shifts not increasing, ended by
    ``group.last``) adds, for every token ``t < n_tok`` and column ``m``::

        Y[y_addr + t * y_stride][m] += sum_g (sum_i act_g[t][i] * W[k_gi][m]) << s_g

    exactly, with no rounding or saturation (``overwrite`` replaces; the caller keeps ``Y``
    within ``y_bits``). ``act[t][i]`` reads as signed [-2, 1] if ``lane[i].signed``, else
    unsigned [0, 3]; lanes with ``valid`` low count as zero. Each PE accumulates the unit in
    Horner form (``golden.fmdq_pe``): an ``acc_bits(window, e_max)``-bit register, shifted by
    0, 1 or 2 per group, never overflowing; at the unit's end it is copied into the PE's drain
    register (the drain registers of a column form a chain towards token 0) and the unit's
    rows are written out one per cycle, shifted by the last group's total shift once per
    column, while the next unit runs.

    Latency: a group accepted in cycle ``c`` has its weights read at the end of cycle ``c``
    (stage R) and registered again at the end of cycle ``c + 1`` (stage E: the lane multiples
    start from a register, not from the window's memory), its products registered at the end
    of cycle ``c + 2`` (stage X) and updates the accumulators at the end of cycle ``c + 3``; a
    unit whose last group is accepted in cycle ``L`` writes its row ``r`` at the end of cycle
    ``L + 5 + r`` and pulses ``o_unit_done`` in cycle ``L + 4 + n_tok``.
    Throughput and back-pressure: one group per cycle, except that (a) a group whose total
    shift lies ``D > 2`` below its predecessor's in the unit waits ``(D - 1) // 2`` cycles
    (``golden.fmdq_pe.bubbles``), and (b) a unit's last group is accepted at least ``n_tok``
    cycles (of the previous unit) after the previous unit's last group. ``i_op.ready``
    depends combinationally on ``i_op.valid`` and its payload. A weight row written on an edge
    is read by groups accepted from the next cycle on. Reset clears the control state (a
    partly accumulated unit and a pending write-out are dropped); weights, accumulators and
    ``Y`` keep their contents. ``host_y_addr`` reads ``Y`` (``host_y_rdata`` one cycle later)
    while no row is being written out (``host_y_addr`` is ignored in the cycles a unit's rows
    are read). With ``host_writes``, ``host_y_we`` writes ``host_y_wdata`` into row
    ``host_y_addr`` (a saved ``Y`` restored), only while no unit's rows are written out.

    Options for the attention engine (``dstar.hw.attention``), which runs ``Q K^T`` and ``P V``
    on the same arrays: with ``token_shifts`` a unit's row ``t`` is written out shifted by the
    unit's last total shift plus the op's ``tok_shift[t]`` (computed at ``y_bits``: the caller
    keeps every shifted row within them); with ``y_steps`` the rows are ``y_addr + t * y_step``
    (the op's) instead of ``y_addr + t * y_stride``; ``readers`` adds that many read ports of
    ``Y`` (``rd_addr[i]``, ``rd_data[i]`` one cycle later, available in every cycle; a row
    written in the cycle it is read reads as before the write).

    Members
    -------
    i_op : In(stream.Signature(group_op_layout))
    i_wrow : In(stream.Signature(weight_window_row_layout, always_ready=True))
    o_unit_done : Out(1)
    o_hold : Out(1)
        High while a unit's last group would wait (the previous unit's rows are still being
        written out): a source whose groups never wait for a bubble (each shift at most
        ``MAX_STEP`` below its predecessor's in a unit) may take ``~(last & o_hold)`` as
        ``i_op.ready``, from registers alone.
    o_sprev, o_fresh : Out
        The issue state (the accumulators' total shift, a unit starts next): with ``o_hold``
        and ``issue_gap`` / ``must_wait`` a source computes ``i_op.ready`` from its own group's
        registers.
    host_y_addr, host_y_rdata
    rd_addr : In(range(y_depth)).array(readers), rd_data : Out(Y row).array(readers)
    """

    def __init__(self, *, tokens: int, columns: int, window: int, e_max: int,
                 channel_bits: int, y_depth: int, y_bits: int, y_stride: int = 1,
                 weights: str = "memory", host_writes: bool = False,
                 token_shifts: bool = False, y_steps: bool = False, readers: int = 0):
        if window < 2 or window & (window - 1):
            raise ValueError(f"window must be a power of two >= 2, got {window}")
        if weights not in ("memory", "registers"):
            raise ValueError(f"weights must be 'memory' or 'registers', got {weights!r}")
        self.weights = weights
        self.tokens, self.columns, self.window, self.e_max = tokens, columns, window, e_max
        self.channel_bits, self.y_depth, self.y_bits = channel_bits, y_depth, y_bits
        self.y_stride, self.host_writes = y_stride, host_writes
        self.token_shifts, self.y_steps, self.readers = token_shifts, y_steps, readers
        self.acc_bits = acc_bits(window, e_max)
        if y_bits < self.acc_bits:
            raise ValueError(f"y_bits={y_bits} is narrower than a unit's sum ({self.acc_bits})")
        y_row = data.ArrayLayout(signed(y_bits), columns)
        super().__init__({
            "i_op": In(stream.Signature(group_op_layout(tokens, channel_bits, e_max, y_depth,
                                                        token_shifts=token_shifts,
                                                        y_steps=y_steps))),
            "i_wrow": In(stream.Signature(weight_window_row_layout(columns, window),
                                          always_ready=True)),
            "o_unit_done": Out(1),
            "o_hold": Out(1),
            "o_sprev": Out(total_shift_bits(e_max)),
            "o_fresh": Out(1),
            "host_y_addr": In(uwidth(y_depth)),
            "host_y_rdata": Out(y_row),
            **({"host_y_we": In(1), "host_y_wdata": In(y_row)} if host_writes else {}),
            **({"rd_addr": In(uwidth(y_depth)).array(readers), "rd_data": Out(y_row).array(readers)}
               if readers else {}),
        })

    def elaborate(self, platform):
        n_t, n_m = self.tokens, self.columns
        a_bits = self.acc_bits
        m = Module()

        # --- issue: bubbles, the Horner step and the write-out hold ---
        op, grp = self.i_op.payload, self.i_op.payload.group
        sh_bits = total_shift_bits(self.e_max)
        s_prev = Signal(sh_bits)               # the accumulators' current total shift
        fresh = Signal(init=1)                 # the next group starts a unit
        hold = Signal(range(max(n_t, 2)))      # cycles before a unit's last group may issue
        # hold != 0, registered beside it: o_hold (which every owner's acceptance reads) starts
        # from a flip-flop (the Fmax path runs on from it into the owners' enables).
        holding = Signal()
        gap = issue_gap(m, s_prev, grp.shift, "issue")
        bubble = self.i_op.valid & must_wait(fresh, gap)
        take = ~bubble & (~grp.last | ~holding)
        accept = self.i_op.valid & take
        m.d.comb += [self.i_op.ready.eq(take), self.o_hold.eq(holding),
                     self.o_sprev.eq(s_prev), self.o_fresh.eq(fresh)]
        with m.If(holding):
            m.d.sync += [hold.eq(hold - 1), holding.eq(hold != 1)]
        with m.If(accept):
            m.d.sync += [s_prev.eq(grp.shift), fresh.eq(grp.last)]
            with m.If(grp.last):
                nxt = Signal.like(hold, name="hold_next")
                m.d.comb += nxt.eq(op.n_tok - 1)
                m.d.sync += [hold.eq(nxt), holding.eq(nxt != 0)]
        with m.Elif(bubble):
            m.d.sync += s_prev.eq(s_prev - MAX_STEP)

        # --- stage R registers: the group's slices, its lanes' weights (the window's read), the
        # step ---
        act_l = data.ArrayLayout(data.ArrayLayout(unsigned(2), LANES), n_t)
        r_act = Signal(act_l, reset_less=True)
        r_live = Signal(LANES)                 # lane carries a slice (accepted op, valid lane)
        r_sgn = Signal(LANES)
        r_step = Signal(MAX_STEP + 1)          # one-hot shift 0, 1, 2; none: first group
        r_last = Signal()
        r_shift = Signal(sh_bits)
        r_addr, r_ntok = Signal.like(op.y_addr), Signal.like(op.n_tok)
        r_over = Signal()
        e_w = self._lane_weights(m, op, grp)
        m.d.sync += [r_act.eq(grp.act), r_shift.eq(grp.shift), r_addr.eq(op.y_addr),
                     r_ntok.eq(op.n_tok), r_over.eq(op.overwrite),
                     r_sgn.eq(Cat(grp.lane[i].signed for i in range(LANES))),
                     r_live.eq(Mux(accept, Cat(grp.lane[i].valid for i in range(LANES)), 0)),
                     r_last.eq(accept & grp.last)]
        with m.If(accept):
            with m.If(fresh):
                m.d.sync += r_step.eq(0)
            with m.Else():
                m.d.sync += r_step.eq(1 << gap[:2])
        with m.Elif(bubble):
            m.d.sync += r_step.eq(1 << MAX_STEP)
        with m.Else():
            m.d.sync += r_step.eq(1)

        # --- stage E registers: stage R's, one cycle later, beside the weights' copy ---
        r_regs = {"act": r_act, "live": r_live, "sgn": r_sgn, "step": r_step, "last": r_last,
                  "shift": r_shift, "addr": r_addr, "ntok": r_ntok, "over": r_over}
        e_act, e_live, e_sgn, e_step, e_last, e_shift, e_addr, e_ntok, e_over = (
            _delayed(m, v, f"e_{k}") for k, v in r_regs.items())

        # --- stage E: per column the lanes' multiples, per PE the Horner step ---
        mult = signed(_MULT_BITS)
        acc = [[Signal(signed(a_bits), name=f"acc_{t}_{c}", reset_less=True) for c in range(n_m)]
               for t in range(n_t)]
        drain = [[Signal(signed(a_bits), name=f"dr_{t}_{c}", reset_less=True) for c in range(n_m)]
                 for t in range(n_t)]
        codes = [[[Signal(name=f"code{v}_{t}_{i}") for v in (1, 2, 3)] for i in range(LANES)]
                 for t in range(n_t)]
        for t in range(n_t):
            for i in range(LANES):
                a = e_act[t][i]
                m.d.comb += [codes[t][i][v - 1].eq(a == v) for v in (1, 2, 3)]
        steps = [Signal(name=f"step{k}") for k in range(MAX_STEP + 1)]
        # Stage X: the products registered (narrow: it also keeps Yosys from merging the four
        # lane terms and the accumulator into one wide multi-operand adder).
        x_step, x_last = Signal.like(e_step), Signal()
        x_shift, x_addr, x_ntok, x_over = (Signal.like(v) for v in (e_shift, e_addr, e_ntok,
                                                                     e_over))
        m.d.sync += [x_step.eq(e_step), x_last.eq(e_last), x_shift.eq(e_shift),
                     x_addr.eq(e_addr), x_ntok.eq(e_ntok), x_over.eq(e_over)]
        extra = self._unit_fields(m, op)
        m.d.comb += [steps[k].eq(x_step[k]) for k in range(MAX_STEP + 1)]
        for c in range(n_m):
            lanes = []
            for i in range(LANES):
                w = e_w[c][i]
                # Code 1: w; code 2: 2w (unsigned) or -2w (signed); code 3: 3w or -w.
                neg, three = Signal(mult, name=f"neg_{c}_{i}"), Signal(mult, name=f"w3_{c}_{i}")
                m.d.comb += [neg.eq(-w), three.eq(w + (w << 1))]
                m1, m2, m3 = (Signal(mult, name=f"m{v}_{c}_{i}") for v in (1, 2, 3))
                live = e_live[i]
                m.d.comb += [m1.eq(Mux(live, w, 0)),
                             m2.eq(Mux(live, Mux(e_sgn[i], neg << 1, w << 1), 0)),
                             m3.eq(Mux(live, Mux(e_sgn[i], neg, three), 0))]
                lanes.append((m1, m2, m3))
            for t in range(n_t):
                terms = []
                for i, (m1, m2, m3) in enumerate(lanes):
                    k1, k2, k3 = codes[t][i]
                    v = Signal(mult, name=f"v_{t}_{c}_{i}")
                    m.d.comb += v.eq((m1 & k1.replicate(_MULT_BITS))
                                     | (m2 & k2.replicate(_MULT_BITS))
                                     | (m3 & k3.replicate(_MULT_BITS)))
                    terms.append(v)
                a = acc[t][c]
                held = Signal(signed(a_bits), name=f"held_{t}_{c}")
                m.d.comb += held.eq((a & steps[0].replicate(a_bits))
                                    | ((a << 1)[:a_bits] & steps[1].replicate(a_bits))
                                    | ((a << 2)[:a_bits] & steps[2].replicate(a_bits)))
                # The group's product at its own width (12 bits), then one add at a_bits.
                p01 = Signal(signed(_MULT_BITS + 1), name=f"p01_{t}_{c}")
                p23 = Signal(signed(_MULT_BITS + 1), name=f"p23_{t}_{c}")
                prod = Signal(signed(_MULT_BITS + 2), name=f"p_{t}_{c}", reset_less=True)
                m.d.comb += [p01.eq(terms[0] + terms[1]), p23.eq(terms[2] + terms[3])]
                m.d.sync += prod.eq(p01 + p23)
                nxt = Signal(signed(a_bits), name=f"next_{t}_{c}")
                m.d.comb += nxt.eq(held + prod)
                m.d.sync += a.eq(nxt)
                # The drain registers of a column are a chain towards token 0: loaded at a
                # unit's end, shifted every other cycle (their contents matter only while a
                # unit's rows are written out, so they need no hold).
                m.d.sync += drain[t][c].eq(Mux(x_last, nxt, drain[(t + 1) % n_t][c]))

        self._write_out(m, drain, x_last, x_ntok, x_shift, x_addr, x_over, extra)
        return m

    def _lane_weights(self, m, op, grp):
        """The weight window (two buffers of ``window`` rows, written by ``i_wrow``) and each
        lane's row of the accepted group read from it: ``e_w[c][i]``, column ``c``'s weight of
        lane ``i``, registered twice (stage R's read, stage E's copy)."""
        n_m, n_w = self.columns, self.window
        row_l = data.ArrayLayout(signed(8), n_m)
        wr = self.i_wrow
        if self.weights == "registers":
            wbuf = [[Signal(row_l, name=f"w{b}_{r}", reset_less=True) for r in range(n_w)]
                    for b in range(2)]
            with m.If(wr.valid):
                for b in range(2):
                    for r in range(n_w):
                        with m.If((wr.payload.bank == b) & (wr.payload.row == r)):
                            m.d.sync += wbuf[b][r].eq(wr.payload.w)
        else:
            m.submodules.wmem = wmem = Memory(shape=row_l, depth=2 * n_w, init=[])
            w_wr = wmem.write_port()
            m.d.comb += [w_wr.en.eq(wr.valid), w_wr.addr.eq(Cat(wr.payload.row, wr.payload.bank)),
                         w_wr.data.eq(wr.payload.w)]

        r_bits = uwidth(n_w)
        e_w = [[None] * LANES for c in range(n_m)]
        if self.weights == "registers":
            active = [Signal(row_l, name=f"wa_{r}") for r in range(n_w)]   # the op's buffer
            for r in range(n_w):
                m.d.comb += active[r].eq(Mux(op.bank, wbuf[1][r], wbuf[0][r]))
        for i in range(LANES):
            ch = grp.lane[i].channel[:r_bits]
            if self.weights == "registers":
                fetched = Signal(row_l, name=f"fetch_{i}")
                with m.Switch(ch):
                    for r in range(n_w):
                        with m.Case(r):
                            m.d.comb += fetched.eq(active[r])
                got = Signal(row_l, name=f"r_w_{i}", reset_less=True)
                m.d.sync += got.eq(fetched)
            else:                       # a synchronous read port: its register is stage R's
                rd = wmem.read_port()
                m.d.comb += rd.addr.eq(Cat(ch, op.bank))
                got = rd.data
            # Stage E's copy of the weights: a block RAM's output is slow (the ECP5's DP16KD
            # 5.8 ns clock to output, then routed to the column's lane multiples), so the lane
            # multiples start from a register instead (fmdq-hw.md, ECP5 Fmax).
            e_got = Signal(row_l, name=f"e_w_{i}", reset_less=True)
            m.d.sync += e_got.eq(got)
            for c in range(n_m):
                e_w[c][i] = e_got[c]
        return e_w

    @staticmethod
    def _unit_fields(m, op) -> dict:
        """The attention's per-unit fields of ``op`` (those it has), carried through stages R,
        E and X along with the unit's last group."""
        extra = {}
        for name in ("tok_shift", "y_step"):
            if name in op.shape().members:
                v = op[name]
                for stage in "rex":
                    v = _delayed(m, v, f"{stage}_{name}")
                extra[name] = v
        return extra

    def _write_out(self, m, drain, x_last, x_ntok, x_shift, x_addr, x_over, extra):
        """Stages D and A: a finished unit's rows leave the drain chain one per cycle, each
        shifted by the unit's total shift and added to (or written over) its ``Y`` row."""
        n_t, n_m, a_bits = self.tokens, self.columns, self.acc_bits
        sh_bits = total_shift_bits(self.e_max)
        op = self.i_op.payload
        # --- write-out (stage D): one row per cycle from token 0 of the chain, shifted once
        # per column; Y is read in the same cycle ---
        d_left = Signal(range(n_t + 1))
        d_shift = Signal(sh_bits)
        d_addr, d_over = Signal.like(op.y_addr), Signal()
        a_valid, a_over, a_done = Signal(), Signal(), Signal()
        a_addr = Signal.like(op.y_addr)
        v_bits = self.y_bits if self.token_shifts else a_bits
        a_val = [Signal(signed(v_bits), name=f"a_val{c}", reset_less=True) for c in range(n_m)]
        m.d.sync += [a_valid.eq(d_left != 0), a_over.eq(d_over), a_addr.eq(d_addr),
                     a_done.eq(d_left == 1)]
        row_shift = d_shift
        if self.token_shifts:
            # The tokens' shifts travel with the drain chain: token 0's is always in front.
            ts = extra["tok_shift"]
            d_ts = [Signal.like(ts[t], name=f"d_ts{t}") for t in range(n_t)]
            for t in range(n_t):
                m.d.sync += d_ts[t].eq(Mux(x_last, ts[t], d_ts[(t + 1) % n_t]))
            row_shift = Signal(sh_bits + 1, name="row_shift")
            m.d.comb += row_shift.eq(d_shift + d_ts[0])
        m.d.sync += [a_val[c].eq((drain[0][c].as_signed() << row_shift)[:v_bits])
                     for c in range(n_m)]
        step = self.y_stride
        if self.y_steps:
            step = d_step = Signal.like(extra["y_step"], name="d_step")
            with m.If(x_last):
                m.d.sync += d_step.eq(extra["y_step"])
        with m.If(d_left != 0):
            m.d.sync += [d_left.eq(d_left - 1), d_addr.eq(d_addr + step)]
        with m.If(x_last):
            m.d.sync += [d_left.eq(x_ntok), d_shift.eq(x_shift), d_addr.eq(x_addr),
                         d_over.eq(x_over)]

        # --- stage A: write Y (read in stage D) ---
        y_l = data.ArrayLayout(signed(self.y_bits), n_m)
        m.submodules.y = ymem = Memory(shape=y_l, depth=self.y_depth, init=[])
        y_wr = ymem.write_port()
        y_rd = ymem.read_port(transparent_for=(y_wr,))
        m.d.comb += [y_rd.addr.eq(Mux(d_left != 0, d_addr, self.host_y_addr)),
                     self.host_y_rdata.eq(y_rd.data)]
        for i in range(self.readers):
            rd = ymem.read_port()
            m.d.comb += [rd.addr.eq(self.rd_addr[i]), self.rd_data[i].eq(rd.data)]
        m.d.comb += [y_wr.en.eq(a_valid), y_wr.addr.eq(a_addr),
                     self.o_unit_done.eq(a_valid & a_done)]
        for c in range(n_m):
            m.d.comb += y_wr.data[c].eq(Mux(a_over, a_val[c], y_rd.data[c] + a_val[c]))
        if self.host_writes:
            with m.If(~a_valid):
                m.d.comb += [y_wr.en.eq(self.host_y_we), y_wr.addr.eq(self.host_y_addr),
                             y_wr.data.eq(self.host_y_wdata)]
