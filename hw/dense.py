"""Heavier dense INT8 datapath: the same layer top as ``dstar.hw.linear`` with 8-bit x 8-bit lanes,
no delta encoder and no precision dispatcher (``datapath = "dense"``). Its lanes read a register
tile through a per-lane row multiplexer, like DSTAR's; it stays as a comparison point, and the
lean ``dstar.hw.int8`` is the baseline the ratios are measured against (``dstar.synth.report``,
``dstar.synth.efficiency``).

Ref: dstar-spec.md sections 2 and 6; golden counterpart: the dense W8A8 reference
``dstar.golden.quant.w8a8_linear`` (its integer part ``exact_matmul(x_q, w_q)``).

Equal peak 8-bit throughput. A DSTAR array has ``G`` (= ``group``) lanes, each one 5-bit x
8-bit nibble op per column per cycle; an INT8 (HIGH) activation takes two nibble ops (low,
then high nibble), so an array's peak on 8-bit activations is ``G * m_tile / 2`` 8x8 products
per cycle, and an all-HIGH slice of ``k_tile`` elements takes ``2 * k_tile / G`` cycles. A
dense array here has ``G / 2`` lanes of 8x8 multipliers per column: ``G * m_tile / 2``
products per cycle, and every slice takes ``chunks = 2 * k_tile / G`` cycles whatever its
values. Tiles (``k_tile`` x ``m_tile`` per array), ``n_arrays``, the weight memories and their
loader (``dstar.hw.linear.load_tiles``), the host ports and the memory address rules are those of
``LinearLayer``. DSTAR's advantage is that ZERO and LOW elements take zero or one op instead
of the dense array's fixed two-op equivalent.
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .geometry import DenseGeometry, uwidth
from .layouts import weight_row_layout
from .linear import layer_ports, load_tiles, run_control
from .pe_array import lane_weights

__all__ = ["DenseArray", "DenseLinearLayer", "chunk_layout",
           "target_row_layout", "y_row_layout"]

def target_row_layout(dg: DenseGeometry) -> data.ArrayLayout:
    """A word of the target memory: one token's slice, ``k_tile`` INT8 activations ``X_int``."""
    return data.ArrayLayout(signed(8), dg.cfg.k_tile)


def y_row_layout(dg: DenseGeometry) -> data.ArrayLayout:
    """A word of the accumulator memory: ``m_tile`` signed ``acc_bits`` accumulators."""
    return data.ArrayLayout(signed(dg.acc_bits), dg.cfg.m_tile)


def chunk_layout(dg: DenseGeometry) -> data.StructLayout:
    """One cycle of a slice for every array: the ``lanes`` activations of chunk ``chunk``
    (elements ``chunk * lanes + l`` of the slice), the weight bank of its pass, whether it
    opens (``first``) or closes (``close``) the slice, where the slice's sum goes, whether it
    replaces (``overwrite``, the first K tile) and whether it is the pass's last chunk."""
    b = dg.base
    return data.StructLayout({
        "x": data.ArrayLayout(signed(8), dg.lanes),
        "chunk": unsigned(uwidth(dg.chunks)),
        "bank": unsigned(1),
        "first": unsigned(1),
        "close": unsigned(1),
        "y_addr": unsigned(uwidth(b.y_depth)),
        "overwrite": unsigned(1),
        "last": unsigned(1),
    })


class DenseArray(wiring.Component):
    """One array of ``lanes`` 8x8 lanes by ``m_tile`` columns over a double-buffered
    ``k_tile x m_tile`` INT8 weight tile (registers, loaded through ``i_wrow`` as in
    ``dstar.hw.pe_array.PEArray``).

    A chunk adds ``sum_l x[l] * W[bank][chunk * lanes + l][c]`` to column ``c``'s slice sum
    (``first`` restarts it); after the ``close`` chunk the slice sum is written
    ``Y[y_addr] (+)= sum`` (``overwrite`` replaces). Sums are exact (no rounding, no
    saturation: ``acc_bits`` holds any ``max_k``-term INT8 dot product).

    Latency: the products are registered (stage A, one cycle after the chunk), where their lane
    sum is added to the slice sum and, on a closing chunk, the accumulator row is read; the row
    is written one cycle later (stage B), when ``o_pass_done`` pulses for a ``last`` chunk.
    Throughput: one chunk per cycle, no back-pressure (``i_chunk`` is always ready). A row is
    read and rewritten at most once per ``chunks >= 2`` cycles, so its read needs no bypass of
    the write. Reset clears the stage registers; weights and the accumulator memory survive.

    Members
    -------
    i_chunk : In(stream.Signature(chunk_layout, always_ready=True))
    i_wrow : In(stream.Signature(weight_row_layout, always_ready=True))
        Writes row ``row`` of weight buffer ``bank``.
    o_pass_done : Out(1)
    host_y_addr, host_y_rdata :
        Accumulator read from outside, one cycle after the address, on the engine's read
        port while no slice closes (always, while the layer is idle).
    """

    def __init__(self, dg: DenseGeometry):
        self._dg = dg
        super().__init__({
            "i_chunk": In(stream.Signature(chunk_layout(dg), always_ready=True)),
            "i_wrow": In(stream.Signature(weight_row_layout(dg.base), always_ready=True)),
            "o_pass_done": Out(1),
            "host_y_addr": In(uwidth(dg.base.y_depth)),
            "host_y_rdata": Out(y_row_layout(dg)),
        })

    def elaborate(self, platform):
        dg, cfg = self._dg, self._dg.cfg
        n_l, n_c, m_n = dg.lanes, dg.chunks, cfg.m_tile
        m = Module()

        ck = self.i_chunk.payload
        wsel = lane_weights(m, self.i_wrow, cfg.k_tile, m_n, cfg.weight_store,
                            [Cat(ck.bank, ck.chunk)] * n_l,
                            [{b | j << 1: (b, j * n_l + lane) for j in range(n_c)
                              for b in range(2)} for lane in range(n_l)])

        # Stage E (combinational from the chunk): weight rows and products, registered (a
        # register between the multipliers and the lane sum also keeps Yosys from merging
        # them into one multiply-accumulate cell per column, which ABC maps very slowly).
        prod_l = data.ArrayLayout(signed(16), m_n)
        prods = []
        for lane in range(n_l):
            w = wsel[lane]
            p = Signal(prod_l, name=f"prod_{lane}")
            m.d.sync += [p[c].eq(ck.x[lane] * w[c]) for c in range(m_n)]
            prods.append(p)
        a_valid, a_first, a_close, a_over, a_last = (Signal(name=f"a_{n}") for n in
                                                     ("valid", "first", "close", "over",
                                                      "last"))
        a_addr = Signal.like(ck.y_addr, name="a_addr")
        m.d.sync += [a_valid.eq(self.i_chunk.valid), a_first.eq(ck.first),
                     a_close.eq(ck.close), a_over.eq(ck.overwrite), a_last.eq(ck.last),
                     a_addr.eq(ck.y_addr)]

        # Stage A: the lane sum into the slice sum; on the closing chunk, read the row of Y.
        acc_l = data.ArrayLayout(signed(dg.slice_bits), m_n)
        acc, nxt = Signal(acc_l, name="acc"), Signal(acc_l, name="acc_next")
        for c in range(m_n):
            m.d.comb += nxt[c].eq(Mux(a_first, 0, acc[c]) + _tree_sum([p[c] for p in prods]))
        with m.If(a_valid):
            m.d.sync += acc.eq(nxt)

        m.submodules.y = ymem = Memory(shape=y_row_layout(dg), depth=dg.base.y_depth, init=[])
        y_wr, y_rd = ymem.write_port(), ymem.read_port()
        a_read = a_valid & a_close
        m.d.comb += [y_rd.addr.eq(Mux(a_read, a_addr, self.host_y_addr)),
                     self.host_y_rdata.eq(y_rd.data)]

        # Stage B: the read-modify-write.
        b_valid, b_over, b_last = Signal(), Signal(), Signal()
        b_addr, b_sum = Signal.like(a_addr), Signal(acc_l)
        m.d.sync += [b_valid.eq(a_read), b_over.eq(a_over), b_last.eq(a_last),
                     b_addr.eq(a_addr), b_sum.eq(nxt)]
        m.d.comb += [y_wr.en.eq(b_valid), y_wr.addr.eq(b_addr),
                     self.o_pass_done.eq(b_valid & b_last)]
        for c in range(m_n):
            m.d.comb += y_wr.data[c].eq(Mux(b_over, b_sum[c], y_rd.data[c] + b_sum[c]))
        return m


class DenseLinearLayer(wiring.Component):
    """Run one dense W8A8 layer ``Y_int = W_q^T . X_int`` (``golden.quant.exact_matmul`` of the
    INT8 activations and weights), the baseline of ``hw.linear.LinearLayer`` (module docstring).

    Memories (loaded and read through the ``host_*`` ports while ``busy`` is low; word layouts
    in ``params.json``): target, ``row_depth`` words of ``k_tile`` INT8 ``X_int``, address
    ``token * n_kt_max + kt`` (elements beyond K must be zero); weights and accumulators
    exactly as ``LinearLayer`` (accumulators ``acc_bits`` of ``DenseGeometry`` wide). There is
    no state memory, no ``key`` input and no lane-op counters: every run overwrites ``Y`` on
    its first K tile.

    ``start`` (while idle; ignored while busy) runs ``n_tokens`` rows over ``n_kt`` x ``n_mt``
    weight tiles, K outer, columns inner, tokens innermost (if any of them is zero, nothing
    runs); each tile is loaded one row per cycle into the free half of the arrays' double
    buffer while the previous one runs (``load_tiles``). A token slice takes ``chunks`` cycles,
    one chunk of ``lanes`` elements per cycle, broadcast to every array. ``busy`` falls once the
    last accumulator write is done; ``cycles`` then holds the cycles ``busy`` was high and
    ``stall_load`` those in which the front end waited for a tile (cleared by ``start``;
    ``dstar.sim.dense_cycles.predict`` gives both exactly). Host writes while ``busy`` are not
    allowed. Reset stops a run; the memories keep their contents.
    """

    def __init__(self, cfg):
        self._dg = dg = DenseGeometry(cfg)
        geo = dg.base
        run, status, host_rows, host_wy = layer_ports(geo, target_row_layout(dg).size,
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
                "chunk": chunk_layout(dg)}

    def elaborate(self, platform):
        dg, cfg = self._dg, self._dg.cfg
        geo = dg.base
        n_l, n_c = dg.lanes, dg.chunks
        m = Module()
        arrays = []
        for a in range(cfg.n_arrays):
            arr = DenseArray(dg)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)
            m.d.comb += [arr.host_y_addr.eq(self.host_y_addr),
                         self.host_y_rdata[a].eq(arr.host_y_rdata)]

        run = Signal()
        n_pass = Signal(range(geo.n_kt_max * geo.n_mt_max + 1))
        m.d.comb += [n_pass.eq(self.n_kt * self.n_mt), self.busy.eq(run)]
        pass_bits = range(geo.n_kt_max * geo.n_mt_max + 3)
        l_p, f_p, d_p = Signal(pass_bits), Signal(pass_bits), Signal(pass_bits)
        restart = self.start & ~run
        load_tiles(m, geo, self, arrays, run, n_pass, l_p, d_p, restart)

        m.submodules.target = tmem = Memory(shape=target_row_layout(dg), depth=geo.row_depth,
                                            init=[])
        t_wr, t_rd = tmem.write_port(), tmem.read_port()
        m.d.comb += [t_wr.en.eq(self.host_target_we), t_wr.addr.eq(self.host_row_addr),
                     t_wr.data.eq(self.host_target_wdata)]

        # --- front end (stage F): one chunk per cycle once its tile is loaded ---
        f_kt, f_mt = Signal(range(geo.n_kt_max + 1)), Signal(range(geo.n_mt_max + 1))
        f_t = Signal(range(cfg.max_tokens + 1))
        f_c = Signal(range(n_c))
        pending = run & (f_p < n_pass)
        go = pending & (f_p < l_p)
        # The slice's row is read every cycle of the slice: the word seen in stage E always
        # belongs to the chunk registered there.
        m.d.comb += t_rd.addr.eq(f_t * geo.n_kt_max + f_kt)
        ck_l = chunk_layout(dg)
        e = {name: Signal(ck_l.members[name], name=f"e_{name}")
             for name in ("chunk", "bank", "first", "close", "y_addr", "overwrite", "last")}
        e_valid = Signal()
        m.d.sync += [e_valid.eq(go), e["chunk"].eq(f_c), e["bank"].eq(f_p[0]),
                     e["first"].eq(f_c == 0), e["close"].eq(f_c == n_c - 1),
                     e["y_addr"].eq(f_t * geo.n_mt_max + f_mt), e["overwrite"].eq(f_kt == 0),
                     e["last"].eq((f_c == n_c - 1) & (f_t == self.n_tokens - 1))]
        with m.If(go):
            m.d.sync += f_c.eq(f_c + 1)
            with m.If(f_c == n_c - 1):
                m.d.sync += f_c.eq(0)
                with m.If(f_t == self.n_tokens - 1):
                    m.d.sync += [f_t.eq(0), f_p.eq(f_p + 1)]
                    with m.If(f_mt == self.n_mt - 1):
                        m.d.sync += [f_mt.eq(0), f_kt.eq(f_kt + 1)]
                    with m.Else():
                        m.d.sync += f_mt.eq(f_mt + 1)
                with m.Else():
                    m.d.sync += f_t.eq(f_t + 1)

        # --- stage E: the chunk's activations out of the slice word, to every array ---
        x = Signal(data.ArrayLayout(signed(8), n_l), name="e_x")
        with m.Switch(e["chunk"]):
            for j in range(n_c):
                with m.Case(j):
                    m.d.comb += [x[lane].eq(t_rd.data[j * n_l + lane]) for lane in range(n_l)]
        for arr in arrays:
            m.d.comb += [arr.i_chunk.valid.eq(e_valid), arr.i_chunk.payload.x.eq(x)]
            m.d.comb += [arr.i_chunk.payload[name].eq(sig) for name, sig in e.items()]

        # --- start / done / counters ---
        run_control(m, self, arrays, run, restart, n_pass, pending & ~(f_p < l_p), d_p,
                    [f_p, d_p, f_kt, f_mt, f_t, f_c])
        return m


def _tree_sum(terms):
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]
