"""Lean dense INT8 datapath (``datapath = "int8"``): the baseline every DSTAR ratio is measured
against. What one would build for dense W8A8 at the peak 8-bit rate of a DSTAR array: a
weight-stationary grid of ``lanes x m_tile`` 8x8 MACs per array, each holding its own weight
(double-buffered, no row multiplexer), with the tokens streamed past them and the column sums
accumulated in the accumulator memory.

Ref: dstar-spec.md sections 2 and 6; golden counterpart: ``exact_matmul(x_q, w_q)`` of
``dstar.golden.quant`` (the integer part of ``w8a8_linear``).

Equal peak 8-bit throughput (as ``dstar.hw.dense``): ``lanes = G / 2`` 8x8 MACs per column,
``G * m_tile / 2`` products per cycle per array. A tile's ``k_tile`` rows are run in ``chunks =
k_tile / lanes`` *chunks* of ``lanes`` consecutive rows: chunk ``j`` holds rows ``j * lanes ..``
stationary in its MACs (MAC ``(l, c)`` holds ``W[j * lanes + l][c]``) while every token's
elements of those rows pass, one token per cycle, so a pass still takes ``n_tokens * chunks``
cycles. The weight loader (``dstar.hw.linear.load_tiles`` with ``unit_rows = lanes``) fills
the other buffer with the next chunk's ``lanes`` rows while a chunk runs, so chunks follow
each other without a gap when a pass has at least ``lanes + 1`` tokens. Tiles, ``n_arrays``,
the weight memories, the host ports and the address rules are those of ``LinearLayer``;
``dstar.sim.int8_cycles.predict`` gives the counters exactly.
"""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .dense import _tree_sum, target_row_layout, y_row_layout
from .geometry import DenseGeometry, uwidth
from .layouts import weight_row_layout
from .linear import layer_ports, load_tiles, run_control

__all__ = ["Int8Array", "Int8LinearLayer", "token_op_layout"]


def token_op_layout(dg: DenseGeometry) -> data.StructLayout:
    """One cycle of a chunk for every array: one token's ``lanes`` activations of the chunk's
    rows, the weight buffer holding the chunk, the accumulator row the column sums go to,
    whether they replace it (``overwrite``: the first chunk of the first K tile) and whether it
    is the pass's last (last chunk, last token)."""
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), dg.lanes),
        "bank": unsigned(1),
        "y_addr": unsigned(uwidth(dg.base.y_depth)),
        "overwrite": unsigned(1),
        "last": unsigned(1),
    })


class Int8Array(wiring.Component):
    """One array of ``lanes x m_tile`` weight-stationary 8x8 MACs over two weight buffers of
    ``lanes`` rows (``m_tile`` INT8 each), loaded through ``i_wrow`` (``row`` < ``lanes``).

    An op adds ``sum_l x[l] * W[bank][l][c]`` to ``Y[y_addr][c]`` for every column ``c``
    (``overwrite`` replaces). Sums are exact (no rounding, no saturation: ``acc_bits`` holds
    any ``max_k``-term INT8 dot product).

    Latency: the products are registered one cycle after the op (stage E), their column sums
    one cycle later (stage A, where the accumulator row is read), and the row is written the
    cycle after (stage B), when ``o_pass_done`` pulses for a ``last`` op. Throughput: one op per
    cycle, no back-pressure (``i_op`` is always ready); an op may hit the row of the op before
    it (the read port is transparent to the write). A weight row written on an edge is used
    from the next cycle's op on. Reset clears the stage registers; weights and the accumulator
    memory survive.

    Members
    -------
    i_op : In(stream.Signature(token_op_layout, always_ready=True))
    i_wrow : In(stream.Signature(weight_row_layout, always_ready=True))
        Writes row ``row`` of weight buffer ``bank``.
    o_pass_done : Out(1)
    host_y_addr, host_y_rdata :
        Accumulator read from outside, one cycle after the address, on the engine's read
        port while no op is in stage A (always, while the layer is idle).
    """

    def __init__(self, dg: DenseGeometry):
        self._dg = dg
        super().__init__({
            "i_op": In(stream.Signature(token_op_layout(dg), always_ready=True)),
            "i_wrow": In(stream.Signature(weight_row_layout(dg.base), always_ready=True)),
            "o_pass_done": Out(1),
            "host_y_addr": In(uwidth(dg.base.y_depth)),
            "host_y_rdata": Out(y_row_layout(dg)),
        })

    def elaborate(self, platform):
        dg, cfg = self._dg, self._dg.cfg
        n_l, m_n = dg.lanes, cfg.m_tile
        m = Module()

        # The stationary weights: per MAC one register per buffer.
        row_l = data.ArrayLayout(signed(8), m_n)
        wts = [[Signal(row_l, name=f"w{b}_{lane}") for lane in range(n_l)] for b in range(2)]
        wrow = self.i_wrow
        with m.If(wrow.valid):
            with m.Switch(wrow.payload.bank):
                for b in range(2):
                    with m.Case(b):
                        with m.Switch(wrow.payload.row):
                            for lane in range(n_l):
                                with m.Case(lane):
                                    m.d.sync += wts[b][lane].eq(wrow.payload.w)

        # Stage E: the products, registered (a register between the multipliers and the
        # column sum also keeps Yosys from merging them into multiply-accumulate cells, which
        # ABC maps very slowly).
        op = self.i_op.payload
        prod_l = data.ArrayLayout(signed(16), m_n)
        prods = []
        for lane in range(n_l):
            p = Signal(prod_l, name=f"prod_{lane}")
            m.d.sync += [p[c].eq(op.x[lane] * Mux(op.bank, wts[1][lane][c], wts[0][lane][c]))
                         for c in range(m_n)]
            prods.append(p)
        a_valid, a_over, a_last = (Signal(name=f"a_{n}") for n in ("valid", "over", "last"))
        a_addr = Signal.like(op.y_addr, name="a_addr")
        m.d.sync += [a_valid.eq(self.i_op.valid), a_over.eq(op.overwrite),
                     a_last.eq(op.last), a_addr.eq(op.y_addr)]

        # Stage A: the column sums; read the accumulator row.
        m.submodules.y = ymem = Memory(shape=y_row_layout(dg), depth=dg.base.y_depth, init=[])
        y_wr = ymem.write_port()
        # Transparent: with one token per pass an op adds to the row the op before it writes.
        y_rd = ymem.read_port(transparent_for=(y_wr,))
        m.d.comb += [y_rd.addr.eq(Mux(a_valid, a_addr, self.host_y_addr)),
                     self.host_y_rdata.eq(y_rd.data)]
        sum_l = data.ArrayLayout(signed(dg.chunk_bits), m_n)
        b_valid, b_over, b_last = Signal(), Signal(), Signal()
        b_addr, b_sum = Signal.like(a_addr), Signal(sum_l)
        m.d.sync += [b_valid.eq(a_valid), b_over.eq(a_over), b_last.eq(a_last),
                     b_addr.eq(a_addr)]
        m.d.sync += [b_sum[c].eq(_tree_sum([p[c] for p in prods])) for c in range(m_n)]

        # Stage B: the read-modify-write.
        m.d.comb += [y_wr.en.eq(b_valid), y_wr.addr.eq(b_addr),
                     self.o_pass_done.eq(b_valid & b_last)]
        for c in range(m_n):
            m.d.comb += y_wr.data[c].eq(Mux(b_over, b_sum[c], y_rd.data[c] + b_sum[c]))
        return m


class Int8LinearLayer(wiring.Component):
    """Run one dense W8A8 layer ``Y_int = W_q^T . X_int`` (``golden.quant.exact_matmul`` of the
    INT8 activations and weights) on ``Int8Array``s (module docstring).

    Memories and ports: exactly those of ``dstar.hw.dense.DenseLinearLayer`` (target words of
    ``k_tile`` INT8 ``X_int`` at ``token * n_kt_max + kt``; weights and accumulators as
    ``LinearLayer``; no state memory, no ``key``, no lane-op counters; every run overwrites
    ``Y`` on its first K tile).

    ``start`` (while idle; ignored while busy) runs ``n_tokens`` rows over ``n_kt`` x ``n_mt``
    weight tiles, K outer, columns inner (if any of them is zero, nothing runs); within a pass,
    chunks outer, tokens inner: one op per cycle, broadcast to every array, once the chunk's
    rows are loaded. ``busy`` falls once the last accumulator write is done; ``cycles`` then
    holds the cycles ``busy`` was high and ``stall_load`` those in which the front end waited
    for a chunk's weights (cleared by ``start``; ``dstar.sim.int8_cycles.predict`` gives both
    exactly). Host writes while ``busy`` are not allowed. Reset stops a run; the memories keep
    their contents.
    """

    def __init__(self, cfg):
        self._dg = dg = DenseGeometry(cfg)
        run, status, host_rows, host_wy = layer_ports(dg.base, target_row_layout(dg).size,
                                                      y_row_layout(dg).size)
        super().__init__({**run, **status, **host_rows, **host_wy})

    @property
    def geometry(self) -> DenseGeometry:
        return self._dg

    def layouts(self) -> dict:
        """The memory-word layouts a testbench needs (``params.json`` ``layouts``)."""
        dg = self._dg
        return {"target_row": target_row_layout(dg), "y_row": y_row_layout(dg),
                "weight_row": weight_row_layout(dg.base).members["w"],
                "token_op": token_op_layout(dg)}

    def elaborate(self, platform):
        dg, cfg = self._dg, self._dg.cfg
        geo = dg.base
        n_l, n_c = dg.lanes, dg.chunks
        m = Module()
        arrays = []
        for a in range(cfg.n_arrays):
            arr = Int8Array(dg)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)
            m.d.comb += [arr.host_y_addr.eq(self.host_y_addr),
                         self.host_y_rdata[a].eq(arr.host_y_rdata)]

        run = Signal()
        n_pass = Signal(range(geo.n_kt_max * geo.n_mt_max + 1))
        n_unit = Signal(range(geo.n_kt_max * geo.n_mt_max * n_c + 1))
        m.d.comb += [n_pass.eq(self.n_kt * self.n_mt), n_unit.eq(n_pass * n_c),
                     self.busy.eq(run)]
        d_p = Signal(range(geo.n_kt_max * geo.n_mt_max + 3))
        unit_bits = range(geo.n_kt_max * geo.n_mt_max * n_c + 3)
        l_q, f_q = Signal(unit_bits), Signal(unit_bits)      # chunks loaded, chunks issued
        restart = self.start & ~run
        # A chunk's buffer is free once the front end has issued the chunk after it.
        load_tiles(m, geo, self, arrays, run, n_unit, l_q, f_q, restart, unit_rows=n_l)

        m.submodules.target = tmem = Memory(shape=target_row_layout(dg), depth=geo.row_depth,
                                            init=[])
        t_wr, t_rd = tmem.write_port(), tmem.read_port()
        m.d.comb += [t_wr.en.eq(self.host_target_we), t_wr.addr.eq(self.host_row_addr),
                     t_wr.data.eq(self.host_target_wdata)]

        # --- front end (stage F): one token of the chunk per cycle once the chunk is loaded ---
        f_kt, f_mt = Signal(range(geo.n_kt_max + 1)), Signal(range(geo.n_mt_max + 1))
        f_t = Signal(range(cfg.max_tokens + 1))
        f_j = Signal(range(n_c))
        pending = run & (f_q < n_unit)
        go = pending & (f_q < l_q)
        m.d.comb += t_rd.addr.eq(f_t * geo.n_kt_max + f_kt)
        op_l = token_op_layout(dg)
        e = {name: Signal(op_l.members[name], name=f"e_{name}")
             for name in ("bank", "y_addr", "overwrite", "last")}
        e_valid, e_j = Signal(), Signal.like(f_j, name="e_chunk")
        m.d.sync += [e_valid.eq(go), e_j.eq(f_j), e["bank"].eq(f_q[0]),
                     e["y_addr"].eq(f_t * geo.n_mt_max + f_mt),
                     e["overwrite"].eq((f_kt == 0) & (f_j == 0)),
                     e["last"].eq((f_j == n_c - 1) & (f_t == self.n_tokens - 1))]
        with m.If(go):
            m.d.sync += f_t.eq(f_t + 1)
            with m.If(f_t == self.n_tokens - 1):
                m.d.sync += [f_t.eq(0), f_q.eq(f_q + 1), f_j.eq(f_j + 1)]
                with m.If(f_j == n_c - 1):
                    m.d.sync += f_j.eq(0)
                    with m.If(f_mt == self.n_mt - 1):
                        m.d.sync += [f_mt.eq(0), f_kt.eq(f_kt + 1)]
                    with m.Else():
                        m.d.sync += f_mt.eq(f_mt + 1)

        # --- stage E: the chunk's activations out of the token's slice word, to every array ---
        x = Signal(data.ArrayLayout(signed(8), n_l), name="e_x")
        with m.Switch(e_j):
            for j in range(n_c):
                with m.Case(j):
                    m.d.comb += [x[lane].eq(t_rd.data[j * n_l + lane]) for lane in range(n_l)]
        for arr in arrays:
            m.d.comb += [arr.i_op.valid.eq(e_valid), arr.i_op.payload.x.eq(x)]
            m.d.comb += [arr.i_op.payload[name].eq(sig) for name, sig in e.items()]

        # --- start / done / counters ---
        run_control(m, self, arrays, run, restart, n_pass, pending & ~(f_q < l_q), d_p,
                    [f_q, d_p, f_kt, f_mt, f_t, f_j])
        return m

