"""Delta encoder: target rows and the stored state in, encoded slices out, state written back.

Ref: dstar-spec.md section 3 ("Encoding: group shift, element precision"); the bit-exact
contract is ``dstar.golden.encoder.encode`` / ``dstar.golden.difflinear.encode_step``.
"""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .geometry import COUNTER_BITS, Geometry, uwidth
from .layouts import encoded_slice_layout, slice_cmd_layout

__all__ = ["DeltaEncoder", "row_layouts"]


def row_layouts(geo: Geometry):
    """Words of the target and state memories: one token's slice of ``k_tile`` elements."""
    k = geo.cfg.k_tile
    return (data.ArrayLayout(signed(geo.target_bits), k),
            data.ArrayLayout(signed(geo.cfg.state_bits), k))


class DeltaEncoder(wiring.Component):
    """Encode one token slice per cycle: ``D = target - state`` (state read as 0 on key steps),
    one shift per group and one code per element exactly as ``dstar.golden.encoder.encode``
    (``tau`` dead zone, smallest fitting shift, else ``e_max`` with codes saturated to INT8;
    rounding ``(D + 2**(e-1)) >> e``, half up). With ``commit`` the new state
    ``state + (q << e)`` is written back; without it the state is untouched, so every pass over
    the same K range sees the same old state and encodes identically.

    The encoder owns the target and state memories (``row_depth`` words of ``k_tile``
    elements, address ``token * n_kt_max + kt``). Targets must already be clipped to
    ``[-target_max, target_max]`` (then the state cannot overflow).

    Latency 2 cycles (memory read, then the registered slice), throughput one slice per cycle,
    full back-pressure: ``o.ready`` low freezes the pipeline and ``i`` with it. Reset empties
    the pipeline; memory contents survive reset.

    Members
    -------
    i : In(stream.Signature(slice_cmd_layout))
        Slices to encode.
    o : Out(stream.Signature(encoded_slice_layout))
        Encoded slices, in command order, ``meta`` passed through.
    clear, count_clipped, count_saturated :
        The groups of committed slices (one per token slice and step) that were clipped (no
        shift up to ``e_tol`` fits) and saturated (none fits), counted; ``clear`` zeroes them.
    host_* :
        Memory access from outside while no command is in flight: ``host_addr`` selects a
        word; ``host_target_we``/``host_state_we`` write ``host_*_wdata``; ``host_state_rdata``
        is the state word at ``host_addr`` one cycle after it was set. The host shares the
        engine's state read port: a host read is valid only while the encoder is idle (``i``
        not valid and ``o`` not stalled, i.e. ``o.valid`` low or ``o.ready`` high) both in the
        cycle ``host_addr`` is set and the next one; while a command is offered,
        ``host_state_rdata`` shows the engine's reads instead.
    """

    def __init__(self, geo: Geometry):
        self._geo = geo
        t_layout, s_layout = row_layouts(geo)
        abits = uwidth(geo.row_depth)
        super().__init__({
            "i": In(stream.Signature(slice_cmd_layout(geo))),
            "o": Out(stream.Signature(encoded_slice_layout(geo))),
            "host_addr": In(abits),
            "host_target_we": In(1),
            "host_target_wdata": In(t_layout),
            "host_state_we": In(1),
            "host_state_wdata": In(s_layout),
            "host_state_rdata": Out(s_layout),
            "clear": In(1),
            "count_clipped": Out(COUNTER_BITS),
            "count_saturated": Out(COUNTER_BITS),
        })

    def elaborate(self, platform):
        geo, cfg = self._geo, self._geo.cfg
        t_layout, s_layout = row_layouts(geo)
        m = Module()
        m.submodules.target = tmem = Memory(shape=t_layout, depth=geo.row_depth, init=[])
        m.submodules.state = smem = Memory(shape=s_layout, depth=geo.row_depth, init=[])
        t_wr, s_wr = tmem.write_port(), smem.write_port()
        t_rd, s_rd = tmem.read_port(), smem.read_port()

        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]

        # Stage 1: the memory read of the accepted command.
        cmd = self.i.payload
        addr = Signal(range(geo.row_depth))
        # The host reads the state through the engine's port whenever no command is offered
        # (a second, host-only port would double the state memory); a read without a command
        # leaves stage 1 empty, so its data is never encoded.
        m.d.comb += [
            addr.eq(cmd.meta.token * geo.n_kt_max + cmd.kt),
            t_rd.addr.eq(addr), s_rd.addr.eq(Mux(self.i.valid, addr, self.host_addr)),
            t_rd.en.eq(adv), s_rd.en.eq(adv),
        ]
        v1 = Signal()
        cmd1 = Signal(slice_cmd_layout(geo))
        addr1 = Signal.like(addr)
        with m.If(adv):
            m.d.sync += [v1.eq(self.i.valid), cmd1.eq(cmd), addr1.eq(addr)]

        # Stage 2: encode from the read data (held by the ports while the pipeline is frozen).
        enc = Signal(encoded_slice_layout(geo))
        new_state = Signal(s_layout)
        clipped, saturated = [], []             # per group of the slice
        m.d.comb += enc.meta.eq(cmd1.meta)
        g_size = cfg.group
        for j in range(geo.slice_groups):
            olds, ds, rss = [], [], []        # per lane: old state, D, round_shift(D, e) per e
            for lane in range(g_size):
                k = j * g_size + lane
                old = Signal(signed(cfg.state_bits), name=f"old_{k}")
                d = Signal(signed(geo.delta_bits), name=f"d_{k}")
                m.d.comb += [old.eq(Mux(cmd1.key, 0, s_rd.data[k])), d.eq(t_rd.data[k] - old)]
                rs = []
                for e in range(cfg.e_max + 1):
                    r = Signal(signed(geo.delta_bits), name=f"rs_{k}_{e}")
                    m.d.comb += r.eq((d + ((1 << (e - 1)) if e else 0)) >> e)
                    rs.append(r)
                olds.append(old)
                ds.append(d)
                rss.append(rs)
            fit = []
            for e in range(cfg.e_max + 1):
                f = Signal(name=f"fit_{j}_{e}")
                m.d.comb += f.eq(Cat(*[(rs[e] <= 127) & (rs[e] >= -128) for rs in rss]).all())
                fit.append(f)
            # Fitting is monotone in e, so the first fitting shift is the spec's choice whether
            # or not it is within e_tol (e_tol only decides whether the group counts as clipped).
            shift = Signal(range(cfg.e_max + 1), name=f"shift_{j}")
            sel = cfg.e_max
            for e in reversed(range(cfg.e_max + 1)):
                sel = Mux(fit[e], e, sel)
            m.d.comb += [shift.eq(sel), enc.groups[j].shift.eq(shift)]
            # Monotone fitting again: clipped iff no shift up to e_tol fits, saturated iff none.
            clipped.append(~fit[cfg.e_tol])
            saturated.append(~fit[cfg.e_max])
            for lane in range(g_size):
                k = j * g_size + lane
                picked = rss[lane][cfg.e_max]
                for e in reversed(range(cfg.e_max)):
                    picked = Mux(shift == e, rss[lane][e], picked)
                sat = Mux(picked > 127, 127, Mux(picked < -128, -128, picked))
                q = Signal(signed(8), name=f"q_{k}")
                dead = (ds[lane] <= cfg.tau) & (ds[lane] >= -cfg.tau)
                m.d.comb += [q.eq(Mux(dead, 0, sat)), enc.groups[j].q[lane].eq(q),
                             new_state[k].eq(olds[lane] + (q << shift))]

        with m.If(adv):
            m.d.sync += [self.o.valid.eq(v1), self.o.payload.eq(enc)]

        # State write-back: the engine's commit wins over the host (the host writes only while
        # the encoder is idle).
        commit = adv & v1 & cmd1.commit
        # Each slice is committed once per step (its last column pass): the counts are the
        # step's clipped and saturated groups, as dstar.golden.stats counts them.
        with m.If(self.clear):
            m.d.sync += [self.count_clipped.eq(0), self.count_saturated.eq(0)]
        with m.Elif(commit):
            m.d.sync += [
                self.count_clipped.eq(self.count_clipped + sum(c.as_unsigned() for c in clipped)),
                self.count_saturated.eq(self.count_saturated
                                        + sum(c.as_unsigned() for c in saturated))]
        m.d.comb += [
            s_wr.en.eq(commit | self.host_state_we),
            s_wr.addr.eq(Mux(commit, addr1, self.host_addr)),
            s_wr.data.eq(Mux(commit, new_state, self.host_state_wdata)),
            t_wr.en.eq(self.host_target_we),
            t_wr.addr.eq(self.host_addr),
            t_wr.data.eq(self.host_target_wdata),
            self.host_state_rdata.eq(s_rd.data),
        ]
        return m

