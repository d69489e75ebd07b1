"""The step driver (``dstar.sim.layer_io.run_step``) on Amaranth's simulator, for tests and the
benchmark's RTL sample."""

from amaranth.sim import Simulator

from dstar.hw.generate import manifest, top_of

from .layer_io import LayerImage, SimIO, run_step

__all__ = ["simulate", "io_adapter", "run_layer_pysim"]


def simulate(dut, *benches) -> None:
    """Run the async testbenches ``benches`` against ``dut`` on one clock (``sync``, 100 MHz
    simulated) until every one of them returns."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for bench in benches:
        sim.add_testbench(bench)
    sim.run()


def io_adapter(ctx, dut):
    """The three-call adapter (``set``, ``get``, ``tick``) of ``dstar.sim.layer_io`` on an
    Amaranth testbench context: ports named as in the Verilog (``host_y_rdata__0``,
    ``cmd__payload``: ``__`` between members, array indices as numbers)."""
    def port(name):
        obj = dut
        for part in name.split("__"):
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
        return obj.as_value() if hasattr(obj, "as_value") else obj

    def set_(name, value):
        ctx.set(port(name), value)

    def get(name):
        return int(ctx.get(port(name)))

    async def until(name, max_cycles=None):     # unbounded: Amaranth's trigger has no limit
        await ctx.tick().until(port(name))

    return SimIO(set_, get, ctx.tick, until)


def run_layer_pysim(cfg, w_q, steps, state=None):
    """Run steps on the Amaranth simulator: ``steps`` is a list of ``(target, key)``; the weights
    are loaded once (``state`` preloads the state memory before the first step). Returns a list
    of ``StepOutcome``. Any datapath's top (``top_of(cfg)``); a dense INT8 top takes its INT8
    activations as the targets (``run_step``)."""
    dut = top_of(cfg)
    man = manifest(dut)
    n, k = steps[0][0].shape
    img = LayerImage(man, k, w_q.shape[1], n)
    outs = []

    async def bench(ctx):
        io = io_adapter(ctx, dut)
        for i, (target, key) in enumerate(steps):
            outs.append(await run_step(io, img, target, key=key, w_q=w_q if i == 0 else None,
                                       state=state if i == 0 else None))

    simulate(dut, bench)
    return outs
