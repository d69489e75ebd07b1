"""Linear-layer wrapper: one differential linear layer step, all weight tiles and token rows,
from on-chip memories, with flat ports a testbench can drive.

Ref: dstar-spec.md sections 3 and 5; golden counterpart ``dstar.golden.difflinear.DiffLinear``.
"""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .dispatcher import bundle_layout, make_dispatcher
from .encoder import DeltaEncoder, row_layouts
from .geometry import COUNTER_BITS, Geometry, uwidth
from .layouts import (
    encoded_slice_layout,
    lane_op_layout,
    slice_cmd_layout,
    token_layout,
    weight_row_layout,
)
from .pe_array import PEArray, pe_array_signature, y_row_layout

__all__ = ["LinearLayer", "load_tiles"]


class LinearLayer(wiring.Component):
    """Run one step of a differential linear layer ``Y_int (+)= W_q^T . decode(enc(X - Xs))``.

    Memories (all loaded and read through the ``host_*`` ports while ``busy`` is low; word
    layouts are in ``params.json``):

    * target and state: ``row_depth`` words of ``k_tile`` elements, address
      ``token * n_kt_max + kt`` (elements beyond K must be zero);
    * weights, one memory per array: ``weight_depth`` words of ``m_tile`` INT8, tile by tile
      in the order a run loads them: row ``kt * k_tile + r`` of column block ``mt`` at address
      ``w_base + (kt * n_mt + mt) * k_tile + r`` (``n_mt`` the run's; ``w_base`` 0 unless
      ``shared``), array ``a`` holding columns ``(mt * n_arrays + a) * m_tile ..`` (rows beyond
      K, up to ``n_kt * k_tile``, and columns beyond M must be zero);
    * accumulators, one per array: ``y_depth`` words of ``m_tile`` ``acc_bits`` integers,
      address ``token * n_mt_max + mt``.

    ``start`` (while idle; ignored while busy) runs ``n_tokens`` rows over ``n_kt`` x ``n_mt``
    weight tiles, K outer, columns inner, tokens innermost (if any of them is zero, nothing
    runs). With ``key`` the state reads as zero and the first K tile overwrites ``Y`` (a key
    step needs no memory clearing). Each tile is loaded at one row per cycle into the free half
    of the arrays' double buffer while the previous tile runs. ``busy`` falls once the last
    accumulator write is done; ``cycles`` then holds the cycles ``busy`` was high,
    ``stall_load`` those in which the front end waited for a tile, ``count_clipped`` /
    ``count_saturated`` the step's clipped and saturated groups (``DeltaEncoder``), and
    ``count_low`` / ``count_high`` / ``count_zero`` the dispatcher's lane-op counts (each op
    runs on every array at once, so they count once per column block; all cleared by
    ``start``; ``dstar.sim.cycle_model`` predicts them all exactly).
    Results are exact integers (no rounding or saturation beyond the encoder's, see
    ``DeltaEncoder``); host writes while ``busy`` are not allowed.

    Latency and throughput: one token slice per cycle into the encoder once its tile is loaded,
    the PE lanes one nibble op per lane per cycle; see ``sim.cycle_model`` for the exact count.
    Reset stops a run and empties every queue; the memories keep their contents.

    Ports are flat vectors (no structs) so that cocotb drives them directly.

    With ``shared`` (the lent arrays' ``Geometry``: ``AcceleratorGeometry.arrays``) the layer
    owns no PE arrays: it drives the ``pe`` members (one ``pe_array_signature`` per array of
    that geometry) and the arrays' owner (``dstar.hw.accelerator.Accelerator``) lends them;
    ``host_w_wdata`` is then a whole row of a column block (array ``a``'s ``m_tile`` weights at
    element ``a * m_tile``), written into the arrays ``host_w_we`` selects, and ``w_base`` (read
    with ``start``) places a run's weights, so that several layers' weights can stay loaded.
    """

    def __init__(self, cfg, *, shared: Geometry | None = None):
        self._shared = shared is not None
        self._geo = geo = shared if shared is not None else Geometry(cfg)
        t_l, s_l = row_layouts(geo)
        run, status, host_rows, host_wy = layer_ports(geo, t_l.size, y_row_layout(geo).size)
        if shared:                  # a whole tile row per write: every array's m_tile weights
            host_wy["host_w_wdata"] = In(8 * cfg.m_tile * cfg.n_arrays)
            run["w_base"] = In(uwidth(geo.weight_depth))
        super().__init__({
            **run,
            "key": In(1),
            **status,
            "count_low": Out(COUNTER_BITS),
            "count_high": Out(COUNTER_BITS),
            "count_zero": Out(COUNTER_BITS),
            "count_clipped": Out(COUNTER_BITS),
            "count_saturated": Out(COUNTER_BITS),
            **host_rows,
            "host_state_we": In(1),
            "host_state_wdata": In(s_l.size),
            "host_state_rdata": Out(s_l.size),
            **host_wy,
            **({"pe": Out(pe_array_signature(geo, driver=True)).array(cfg.n_arrays)}
               if shared else {}),
        })

    @property
    def geometry(self) -> Geometry:
        return self._geo

    def layouts(self) -> dict:
        """The memory-word and stream-payload layouts a testbench needs (``params.json``
        ``layouts``)."""
        geo = self._geo
        t_l, s_l = row_layouts(geo)
        return {
            "target_row": t_l, "state_row": s_l, "y_row": y_row_layout(geo),
            "weight_row": weight_row_layout(geo).members["w"],
            "slice_cmd": slice_cmd_layout(geo),
            "encoded_slice": encoded_slice_layout(geo),
            "lane_op": lane_op_layout(geo),
            "token": token_layout(geo),
            "bundle": bundle_layout(geo),
        }

    def elaborate(self, platform):
        geo, cfg = self._geo, self._geo.cfg
        m = Module()
        m.submodules.encoder = enc = DeltaEncoder(geo)
        m.submodules.dispatcher = disp = make_dispatcher(geo)
        arrays = list(self.pe) if self._shared else []
        for a in range(0 if self._shared else cfg.n_arrays):
            arr = PEArray(geo)
            m.submodules[f"array_{a}"] = arr
            arrays.append(arr)

        # --- host access ---
        # The host's state reads share the encoder's engine read port, so they are valid only
        # while ``busy`` is low (the front end offers the encoder nothing then).
        m.d.comb += [
            enc.host_addr.eq(self.host_row_addr),
            enc.host_target_we.eq(self.host_target_we),
            enc.host_target_wdata.eq(self.host_target_wdata),
            enc.host_state_we.eq(self.host_state_we),
            enc.host_state_wdata.eq(self.host_state_wdata),
            self.host_state_rdata.eq(enc.host_state_rdata),
        ]
        for a, arr in enumerate(arrays):
            m.d.comb += [arr.host_y_addr.eq(self.host_y_addr),
                         self.host_y_rdata[a].eq(arr.host_y_rdata)]

        # --- datapath: encoder -> dispatcher -> arrays (ops and slices broadcast) ---
        wiring.connect(m, enc.o, disp.i)
        for arr in arrays:
            for lane in range(geo.lanes):
                m.d.comb += [arr.i_op[lane].valid.eq(disp.o_op[lane].valid),
                             arr.i_op[lane].payload.eq(disp.o_op[lane].payload)]
        readies = [arr.i_token.ready for arr in arrays]
        all_ready = readies[0]
        for r in readies[1:]:
            all_ready = all_ready & r
        m.d.comb += disp.o_token.ready.eq(all_ready)
        for a, arr in enumerate(arrays):
            others = [r for b, r in enumerate(readies) if b != a]
            v = disp.o_token.valid
            for r in others:
                v = v & r
            m.d.comb += [arr.i_token.valid.eq(v), arr.i_token.payload.eq(disp.o_token.payload)]
        # The arrays run identical schedules, so array 0 speaks for all of them.
        m.d.comb += disp.i_pop.eq(arrays[0].o_pop)

        # --- sequencer state ---
        run = Signal()
        n_pass = Signal(range(geo.n_kt_max * geo.n_mt_max + 1))
        m.d.comb += [n_pass.eq(self.n_kt * self.n_mt), self.busy.eq(run)]
        pass_bits = range(geo.n_kt_max * geo.n_mt_max + 3)
        l_p, f_p, d_p = Signal(pass_bits), Signal(pass_bits), Signal(pass_bits)

        # --- weight loader: tile l_p into bank l_p % 2 once pass l_p - 2 is done ---
        load_tiles(m, geo, self, arrays, run, n_pass, l_p, d_p, self.start & ~run,
                   base=self.w_base if self._shared else 0)

        # --- front end: one slice command per cycle once its tile is loaded ---
        f_kt, f_mt = Signal(range(geo.n_kt_max + 1)), Signal(range(geo.n_mt_max + 1))
        f_t = Signal(range(cfg.max_tokens + 1))
        pending = run & (f_p < n_pass)
        cmd = enc.i.payload
        m.d.comb += [
            enc.i.valid.eq(pending & (f_p < l_p)),
            cmd.kt.eq(f_kt),
            cmd.key.eq(self.key),
            cmd.commit.eq(f_mt == self.n_mt - 1),
            cmd.meta.token.eq(f_t),
            cmd.meta.bank.eq(f_p[0]),
            cmd.meta.y_addr.eq(f_t * geo.n_mt_max + f_mt),
            cmd.meta.overwrite.eq(self.key & (f_kt == 0)),
            cmd.meta.last.eq(f_t == self.n_tokens - 1),
        ]
        with m.If(enc.i.valid & enc.i.ready):
            with m.If(f_t == self.n_tokens - 1):
                m.d.sync += [f_t.eq(0), f_p.eq(f_p + 1)]
                with m.If(f_mt == self.n_mt - 1):
                    m.d.sync += [f_mt.eq(0), f_kt.eq(f_kt + 1)]
                with m.Else():
                    m.d.sync += f_mt.eq(f_mt + 1)
            with m.Else():
                m.d.sync += f_t.eq(f_t + 1)

        # --- start / done / counters ---
        m.d.comb += [disp.clear.eq(self.start & ~run), enc.clear.eq(self.start & ~run),
                     self.count_clipped.eq(enc.count_clipped),
                     self.count_saturated.eq(enc.count_saturated),
                     self.count_low.eq(disp.count_low), self.count_high.eq(disp.count_high),
                     self.count_zero.eq(disp.count_zero)]
        run_control(m, self, arrays, run, self.start & ~run, n_pass, pending & ~(f_p < l_p), d_p,
                    [f_p, d_p, f_kt, f_mt, f_t])
        return m


def run_control(m, top, arrays, run, restart, n_pass, waiting, d_p, cleared):
    """The run state and counters both layer tops share: ``restart`` (``start`` while idle)
    clears ``top.cycles``, ``top.stall_load`` and the ``cleared`` registers and raises ``run``
    unless the layer is empty (no tokens or no passes: it then finishes at once instead of
    hanging); while ``run``, ``cycles`` counts, ``stall_load`` counts the cycles ``waiting``
    (the front end waits for a tile), and ``run`` falls when the ``n_pass``-th pass is done
    (``d_p`` counts them)."""
    with m.If(restart):
        m.d.sync += [run.eq((n_pass != 0) & (top.n_tokens != 0)),
                     top.cycles.eq(0), top.stall_load.eq(0), *[r.eq(0) for r in cleared]]
    with m.Elif(run):
        m.d.sync += top.cycles.eq(top.cycles + 1)
        with m.If(waiting):
            m.d.sync += top.stall_load.eq(top.stall_load + 1)
        # The arrays run identical schedules, so array 0 speaks for all of them.
        with m.If(arrays[0].o_pass_done):
            m.d.sync += d_p.eq(d_p + 1)
            with m.If(d_p + 1 == n_pass):
                m.d.sync += run.eq(0)


def layer_ports(geo: Geometry, target_bits: int, y_bits: int) -> tuple[dict, dict, dict, dict]:
    """The ports the layer tops (``LinearLayer``, ``hw.dense``, ``hw.int8``) share, as four
    dicts in port order: run inputs, status outputs, host target-row ports and host weight /
    accumulator ports (``target_bits`` / ``y_bits``: the target and accumulator word widths)."""
    cfg = geo.cfg
    run = {"start": In(1), "n_tokens": In(uwidth(cfg.max_tokens + 1)),
           "n_kt": In(uwidth(geo.n_kt_max + 1)), "n_mt": In(uwidth(geo.n_mt_max + 1))}
    status = {"busy": Out(1), "cycles": Out(COUNTER_BITS), "stall_load": Out(COUNTER_BITS)}
    host_rows = {"host_row_addr": In(uwidth(geo.row_depth)), "host_target_we": In(1),
                 "host_target_wdata": In(target_bits)}
    host_wy = {"host_w_addr": In(uwidth(geo.weight_depth)), "host_w_we": In(cfg.n_arrays),
               "host_w_wdata": In(8 * cfg.m_tile), "host_y_addr": In(uwidth(geo.y_depth)),
               "host_y_rdata": Out(y_bits).array(cfg.n_arrays)}
    return run, status, host_rows, host_wy


def load_tiles(m, geo, top, arrays, run, n_pass, l_p, d_p, restart, unit_rows=None, base=0):
    """The weight loader of the layer tops (``LinearLayer``, ``dstar.hw.dense.DenseLinearLayer``,
    ``dstar.hw.int8.Int8LinearLayer``).

    Owns one weight memory per array (``weights_<a>``, ``weight_depth`` words of ``m_tile``
    INT8, written through ``top.host_w_*``) and, while ``run``, loads unit ``l_p`` into bank
    ``l_p % 2`` of every array's ``i_wrow``, one row per cycle (the row reaches the array one
    cycle after its address, numbered within its unit), as soon as ``l_p < d_p + 2`` (unit
    ``l_p - 2`` is done with its bank: ``d_p`` units done) and ``l_p < n_pass``; ``l_p``
    counts the units completely addressed. A unit is a whole tile (K tiles outer, ``top.n_mt``
    column blocks inner) unless ``unit_rows`` is given: then the tile's consecutive runs of
    ``unit_rows`` rows, tile by tile. The rows are read in address order from ``base``
    (``LinearLayer``'s weight address rule). ``restart`` rewinds the loader to unit 0 and the
    address to ``base``."""
    cfg = geo.cfg
    rows = cfg.k_tile if unit_rows is None else unit_rows
    wmems = []
    for a in range(cfg.n_arrays):
        wm = Memory(shape=weight_row_layout(geo).members["w"], depth=geo.weight_depth,
                    init=[])
        m.submodules[f"weights_{a}"] = wm
        wmems.append(wm)
    l_active = Signal()
    l_row = Signal(range(rows))
    w_valid, w_row, w_bank = Signal(), Signal.like(l_row), Signal()
    # Tiles are stored in the order they are loaded, so the address is a counter (no
    # multiplier, no tile indices).
    w_addr = Signal(range(geo.weight_depth))
    for a, wm in enumerate(wmems):
        wr, rd = wm.write_port(), wm.read_port()
        row_bits = 8 * cfg.m_tile       # a whole block row (shared tops) or one array's
        wdata = (top.host_w_wdata.word_select(a, row_bits)
                 if len(top.host_w_wdata) > row_bits else top.host_w_wdata)
        m.d.comb += [wr.en.eq(top.host_w_we[a]), wr.addr.eq(top.host_w_addr),
                     wr.data.eq(wdata), rd.addr.eq(w_addr)]
        arr = arrays[a]
        m.d.comb += [arr.i_wrow.valid.eq(w_valid), arr.i_wrow.payload.bank.eq(w_bank),
                     arr.i_wrow.payload.row.eq(w_row), arr.i_wrow.payload.w.eq(rd.data)]
    m.d.sync += [w_valid.eq(l_active), w_row.eq(l_row), w_bank.eq(l_p[0])]

    with m.If(l_active):
        m.d.sync += [l_row.eq(l_row + 1), w_addr.eq(w_addr + 1)]
        with m.If(l_row == rows - 1):
            m.d.sync += [l_active.eq(0), l_p.eq(l_p + 1), l_row.eq(0)]
    with m.Elif(run & (l_p < n_pass) & (l_p < d_p + 2)):
        m.d.sync += l_active.eq(1)
    with m.If(restart):
        m.d.sync += [l_p.eq(0), l_row.eq(0), w_addr.eq(base)]

