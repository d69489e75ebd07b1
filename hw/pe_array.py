"""Differential-quantization PE array: weight-stationary nibble lanes, per-lane partial sums,
in-order reduction into the output accumulator memory.

Ref: dstar-spec.md section 5 ("Differential-quantization PE array").
"""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from dstar.config import WeightStore

from .geometry import Geometry, uwidth
from .layouts import lane_op_layout, token_layout, weight_row_layout

__all__ = ["PEArray", "pe_array_signature", "y_row_layout", "lane_weights"]


def y_row_layout(geo: Geometry) -> data.ArrayLayout:
    """A word of the accumulator memory: ``m_tile`` signed ``acc_bits`` accumulators."""
    return data.ArrayLayout(signed(geo.acc_bits), geo.cfg.m_tile)


def pe_array_signature(geo: Geometry, *, driver: bool = False,
                       host_writes: bool = False) -> wiring.Signature:
    """The signature of a ``PEArray`` of ``geo``; with ``driver``, of the side that drives it
    (every member's direction reversed): what the arrays' users that do not own them
    (``LinearLayer`` and ``AttentionEngine`` with ``shared``) take as members. (Written out
    instead of ``.flip()``: Amaranth 0.5 cannot flatten a flipped signature's array members.)
    ``host_writes`` adds the accumulators' host write port (``PEArray``)."""
    fwd, back = (Out, In) if driver else (In, Out)
    return wiring.Signature({
        **({"host_y_we": fwd(1), "host_y_waddr": fwd(uwidth(geo.y_depth)),
            "host_y_wdata": fwd(y_row_layout(geo))} if host_writes else {}),
        "i_op": fwd(stream.Signature(lane_op_layout(geo), always_ready=True)).array(geo.lanes),
        "i_token": fwd(stream.Signature(token_layout(geo))),
        "i_wrow": fwd(stream.Signature(weight_row_layout(geo), always_ready=True)),
        "o_pop": back(geo.lanes),
        "o_pass_done": back(1),
        "host_y_addr": fwd(uwidth(geo.y_depth)),
        "host_y_rdata": back(y_row_layout(geo)),
        **({"host_y2_addr": fwd(uwidth(geo.y_depth)),
            "host_y2_rdata": back(y_row_layout(geo))} if geo.y_readers == 2 else {}),
    })


def lane_weights(m: Module, wrow, k_tile: int, m_tile: int, store: WeightStore, sels: list,
                 rows: list) -> list:
    """Per-lane reads of the double-buffered ``k_tile x m_tile`` INT8 weight tile, written one
    row per beat of the ``weight_row_layout`` stream ``wrow`` (no back-pressure).

    ``sels[lane]`` is the lane's read key (a value); ``rows[lane]`` maps each key the lane may
    read to the ``(bank, row)`` it reads. Returns each lane's selected row (``m_tile`` signed
    8-bit weights), combinational from its key. A row written on an edge is read from the next
    cycle on (both stores).

    ``store`` (``Config.weight_store``, ``WEIGHT_STORES``): ``REGISTERS``, one shared tile of
    registers and a multiplexer per lane over its keys; ``LANE_RAM``, per lane a memory of its
    keys' rows with an asynchronous read port (LUT RAM on FPGAs), written with every beat of a
    row the lane reads: no wide multiplexers, but each row is stored once per lane that reads it.
    """
    row_l = data.ArrayLayout(signed(8), m_tile)
    out = [Signal(row_l, name=f"wsel_{lane}") for lane in range(len(sels))]
    WEIGHT_STORES[store](m, wrow, k_tile, row_l, sels, rows, out)
    return out


def _register_tile(m, wrow, k_tile, row_l, sels, rows, out):
    """``WeightStore.REGISTERS`` (``lane_weights``)."""
    wts = [[Signal(row_l, name=f"w{b}_{k}") for k in range(k_tile)] for b in range(2)]
    with m.If(wrow.valid):
        with m.Switch(wrow.payload.bank):
            for b in range(2):
                with m.Case(b):
                    with m.Switch(wrow.payload.row):
                        for k in range(k_tile):
                            with m.Case(k):
                                m.d.sync += wts[b][k].eq(wrow.payload.w)
    for lane, (sel, keys) in enumerate(zip(sels, rows, strict=True)):
        with m.Switch(sel):
            for key, (b, k) in keys.items():
                with m.Case(key):
                    m.d.comb += out[lane].eq(wts[b][k])


def _lane_rams(m, wrow, k_tile, row_l, sels, rows, out):
    """``WeightStore.LANE_RAM`` (``lane_weights``)."""
    for lane, (sel, keys) in enumerate(zip(sels, rows, strict=True)):
        where = {bk: key for key, bk in keys.items()}
        if len(where) != len(keys):
            raise ValueError(f"lane {lane} reads one weight row under two keys")
        mem = Memory(shape=row_l, depth=1 << len(sel), init=[])
        m.submodules[f"wmem_{lane}"] = mem
        wr, rd = mem.write_port(), mem.read_port(domain="comb")
        m.d.comb += [wr.data.eq(wrow.payload.w), rd.addr.eq(sel), out[lane].eq(rd.data)]
        # A beat writes the lane's copy only if the lane reads that row (at most one key).
        with m.If(wrow.valid):
            with m.Switch(Cat(wrow.payload.bank, wrow.payload.row)):
                for (b, k), key in sorted(where.items()):
                    with m.Case(b | k << 1):
                        m.d.comb += [wr.addr.eq(key), wr.en.eq(1)]


#: How ``lane_weights`` holds the tile, per ``WeightStore``.
WEIGHT_STORES = {WeightStore.REGISTERS: _register_tile, WeightStore.LANE_RAM: _lane_rams}


class PEArray(wiring.Component):
    """One array of ``G`` lanes by ``m_tile`` columns over a double-buffered ``k_tile x m_tile``
    INT8 weight tile.

    An op on lane ``l`` adds ``(nib * W[bank][row*G + i][c]) << shift`` to the lane's partial
    sum of column ``c``, ``i = Geometry.lane_element(l, rot)`` (``i = l`` without rotation)
    (``nib`` 5-bit signed: a LOW code, or a HIGH code's unsigned low / signed high nibble);
    with ``close`` the finished partial sum enters the lane's partial-sum queue
    (``psum_depth`` deep) and the lane's sum restarts at zero.

    The reduction takes the slices of ``i_token`` in order (a ``Geometry.token_depth``-deep queue):
    once every lane of the slice's ``mask`` has a partial sum queued, it adds them (lanes outside
    the mask add zero) and writes ``Y[y_addr] (+)= sum`` (``overwrite`` replaces), pulsing
    ``o_pop`` for the lanes it consumed (credits for the dispatcher) and ``o_pass_done`` when a
    slice with ``meta.last`` has been written. Sums are exact (no rounding); the accumulators
    are ``acc_bits`` wide, which the configuration sizes so they cannot overflow.

    Latency: an op affects the partial sum on the next edge; a slice's accumulator row is
    written two cycles after its last closing op, if it is then the oldest slice. Throughput:
    one op per lane per cycle, one slice reduction per cycle. Lane ops and weight rows have no
    back-pressure: the dispatcher must not close more slices on a lane than its credits
    (``psum_depth`` minus unreduced closes). ``i_token`` has back-pressure.
    Reset empties the queues and partial sums; weights and the accumulator memory survive.
    ``cfg.weight_store`` chooses how the tile is held (``lane_weights``); behaviour and timing
    are the same.

    Members
    -------
    i_op : In(stream.Signature(lane_op_layout, always_ready=True)).array(G)
    i_token : In(stream.Signature(token_layout))
    i_wrow : In(stream.Signature(weight_row_layout, always_ready=True))
        Writes row ``row`` of weight buffer ``bank``.
    o_pop : Out(G)
    o_pass_done : Out(1)
    host_y_addr, host_y_rdata :
        Accumulator read from outside, one cycle after the address, on the reduction's read
        port while no slice is reduced (always, once the layer is idle); with banks
        (``geo.y_banks``), on the read port of the bank addressed while no slice is reduced
        into that bank.
    host_y2_addr, host_y2_rdata :
        A second such reader (``geo.y_readers == 2``); where both address the same bank, the
        first is served.
    host_y_we, host_y_waddr, host_y_wdata :
        With ``host_writes``: writes the accumulator word at ``host_y_waddr`` (a saved ``Y``
        restored), on the reduction's write port, while no slice is reduced (the owner's
        contract: only while its layer is idle).
    """

    def __init__(self, geo: Geometry, *, host_writes: bool = False):
        self._geo = geo
        self._host_writes = host_writes
        super().__init__(pe_array_signature(geo, host_writes=host_writes))

    def elaborate(self, platform):
        geo, cfg = self._geo, self._geo.cfg
        g_n, s_n, m_n = geo.lanes, geo.slice_groups, cfg.m_tile
        m = Module()

        # Weight tile, two buffers: every lane reads its own row each cycle.
        ops = [self.i_op[lane].payload for lane in range(g_n)]
        wsel = lane_weights(
            m, self.i_wrow, cfg.k_tile, m_n, cfg.weight_store,
            [Cat(op.bank, op.row, op.rot) for op in ops],
            [{b | j << 1 | r << (1 + geo.row_bits): (b, j * g_n + geo.lane_element(lane, r))
              for r in range(geo.rotation) for j in range(s_n) for b in range(2)}
             for lane in range(g_n)])

        psum_l = data.ArrayLayout(signed(geo.psum_bits), m_n)
        fifos = []
        for lane in range(g_n):
            op, w = ops[lane], wsel[lane]
            acc = Signal(psum_l, name=f"acc_{lane}")
            nxt = Signal(psum_l, name=f"acc_next_{lane}")
            for c in range(m_n):
                m.d.comb += nxt[c].eq(acc[c] + ((op.nib * w[c]) << op.shift))
            fifo = SyncFIFO(width=psum_l.size, depth=geo.psum_depth)
            m.submodules[f"psum_{lane}"] = fifo
            fifos.append(fifo)
            m.d.comb += [fifo.w_data.eq(nxt), fifo.w_en.eq(self.i_op[lane].valid & op.close)]
            with m.If(self.i_op[lane].valid):
                m.d.sync += acc.eq(Mux(op.close, 0, nxt))

        # Reduction, stage A: pick the oldest slice once its lanes are in, sum their heads.
        tokq = SyncFIFO(width=token_layout(geo).size, depth=geo.token_depth)
        m.submodules.tokens = tokq
        m.d.comb += [tokq.w_data.eq(self.i_token.payload), tokq.w_en.eq(self.i_token.valid),
                     self.i_token.ready.eq(tokq.w_rdy)]
        tok = data.View(token_layout(geo), tokq.r_data)
        lanes_in = Signal()
        m.d.comb += lanes_in.eq(Cat(*[~tok.mask[lane] | fifos[lane].r_rdy
                                        for lane in range(g_n)]).all())
        fire = Signal()
        m.d.comb += [fire.eq(tokq.r_rdy & lanes_in), tokq.r_en.eq(fire)]
        for lane in range(g_n):
            m.d.comb += [fifos[lane].r_en.eq(fire & tok.mask[lane]),
                         self.o_pop[lane].eq(fire & tok.mask[lane])]
        sum_l = data.ArrayLayout(signed(geo.tile_sum_bits), m_n)
        total = Signal(sum_l)
        for c in range(m_n):
            terms = []
            for lane in range(g_n):
                head = data.View(psum_l, fifos[lane].r_data)
                terms.append(Mux(tok.mask[lane], head[c], 0))
            m.d.comb += total[c].eq(_tree_sum(terms))

        # Stage B: the read-modify-write.
        b_valid, b_over, b_last = Signal(), Signal(), Signal()
        b_addr = Signal.like(tok.meta.y_addr)
        b_sum = Signal(sum_l)
        m.d.sync += [b_valid.eq(fire), b_over.eq(tok.meta.overwrite), b_last.eq(tok.meta.last),
                     b_addr.eq(tok.meta.y_addr), b_sum.eq(total)]
        m.d.comb += self.o_pass_done.eq(b_valid & b_last)
        # Banks by the top address bits (geo.y_banks): the host reads some banks while slices
        # are reduced into another.
        nb = geo.y_banks
        bits = (geo.y_depth - 1).bit_length() - (nb.bit_length() - 1)
        readers = [(self.host_y_addr, self.host_y_rdata)]
        if geo.y_readers == 2:
            readers.append((self.host_y2_addr, self.host_y2_rdata))

        def bank_is(addr, k):
            return addr[bits:] == k if nb > 1 else 1

        r_banks = [Signal(range(nb), name=f"host_bank{j}") for j in range(len(readers))]
        if nb > 1:
            m.d.sync += [rb.eq(addr[bits:]) for rb, (addr, _) in zip(r_banks, readers, strict=True)]
        b_rdata = Signal(y_row_layout(geo))
        for k in range(nb):
            ymem = Memory(shape=y_row_layout(geo), depth=geo.y_depth // nb, init=[])
            m.submodules["y" if nb == 1 else f"y{k}"] = ymem
            y_wr = ymem.write_port()
            # Transparent: a slice reduced right after another one of the same row (one-token
            # layers) reads the value being written. The host reads through the same port
            # whenever no slice is reduced into this bank (a second, host-only port would
            # double the memory).
            y_rd = ymem.read_port(transparent_for=(y_wr,))
            # The first reader has priority where two address the same bank.
            host = readers[-1][0][:bits]
            for addr, _ in reversed(readers[:-1]):
                host = Mux(bank_is(addr, k), addr[:bits], host)
            m.d.comb += [y_rd.addr.eq(Mux(fire & bank_is(tok.meta.y_addr, k),
                                          tok.meta.y_addr[:bits], host)),
                         y_wr.en.eq(b_valid & bank_is(b_addr, k)), y_wr.addr.eq(b_addr[:bits])]
            for c in range(m_n):
                m.d.comb += y_wr.data[c].eq(Mux(b_over, b_sum[c], b_rdata[c] + b_sum[c]))
            if self._host_writes:
                with m.If(~b_valid & self.host_y_we & bank_is(self.host_y_waddr, k)):
                    m.d.comb += [y_wr.en.eq(1), y_wr.addr.eq(self.host_y_waddr[:bits]),
                                 y_wr.data.eq(self.host_y_wdata)]
            if nb == 1:
                m.d.comb += [b_rdata.eq(y_rd.data)] + [r.eq(y_rd.data) for _, r in readers]
            else:
                with m.If(b_addr[bits:] == k):
                    m.d.comb += b_rdata.eq(y_rd.data)
                for rb, (_, rdata) in zip(r_banks, readers, strict=True):
                    with m.If(rb == k):
                        m.d.comb += rdata.eq(y_rd.data)
        return m



def _tree_sum(terms):
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]
