"""What a synthesis report places and routes for Fmax, and the nextpnr runs.

Fmax (``dstar.synth.report.run(fmax=...)``): nextpnr-ecp5 out of context on the ECP5 netlists
with DSPs (``FMAX_FLOW``) of the PE array block alone and of the whole top
(``dstar.synth.fmax``): without MULT18X18D the ``tiny`` top (about 94k LUT4) does not fit the
LFE5U-85F's 84k LUT4. The whole top is synthesized by the ``ecp5_dsp_top`` flow (``TOP_FLOW``):
``synth_ecp5 -noflatten`` up to LUT mapping (so Yosys's ``share`` pass, which ran for more than
13 minutes on the flattened ``tiny`` top, works on one block at a time), then ``flatten`` and
LUT mapping of the whole design, so nextpnr and its timing see one flat netlist. Each figure
says what it is (``status``, ``dstar.synth.fmax``): routed, only placed (routing did not finish
within the timeout: nextpnr's placement estimate) or does not fit: a top whose PE arrays alone
need more MULT18X18D than the device has (the ``default`` preset: 2 x 128 > 156 on the
LFE5U-85F) is not synthesized for nextpnr at all, and the report gives that reason instead of a
figure. The figures are for the configuration as given: with ``weight_store = "registers"``
(the default, smallest on an ASIC) the lanes' weight-row multiplexers congest the routing of
the ``default`` PE array and the ``tiny`` top; ``weight_store = "lane_ram"`` is the FPGA form
that routes (figures in ``docs/design/hardware-figures.md``), and the table says so next to an
unrouted figure.
"""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import fmax as _fmax

__all__ = ["FMAX_BLOCKS", "FMAX_KINDS", "FMAX_CHOICES", "FMAX_TOPS", "TOP_FLOW", "FMAX_FLOW",
           "fmax_selection", "synth_jobs", "top_misfit", "run_fmax"]

#: What ``fmax=True`` places and routes.
FMAX_BLOCKS = ("pe_array", "top")
#: Blocks of the linear datapath that nextpnr can place and route alone (``fmax`` may name
#: them; the sequencer holds the others as black boxes, so it cannot).
FMAX_KINDS = ("pe_array", "encoder", "dispatcher")
#: ``dstar synth --fmax`` choices (``accelerator``: the accelerator top, ``dstar.v``, whole,
#: by ``TOP_FLOW`` as the linear top; not part of ``all``).
FMAX_CHOICES = ("all", "blocks", *FMAX_KINDS, "top", "accelerator")
#: Report names of the tops placed whole, in report order after the blocks.
FMAX_TOPS = ("top", "accelerator")
#: The flow of the whole top for nextpnr: hierarchical ECP5 synthesis, flattened after the
#: coarse passes (``dstar.synth.flows``), since a flat synth_ecp5 of the top stalls in ``share``.
TOP_FLOW = "ecp5_dsp_top"
#: The flow of the blocks placed and routed for Fmax.
FMAX_FLOW = "ecp5_dsp"


def fmax_selection(arg: str | None) -> tuple:
    """What a ``--fmax`` argument places and routes: ``all`` the PE array and the top,
    ``blocks`` each block of ``FMAX_KINDS`` alone, else the one it names (None: nothing)."""
    if arg is None:
        return ()
    return {"all": FMAX_BLOCKS, "blocks": FMAX_KINDS}.get(arg, (arg,))


def _placed_alone(block: dict, fmax: tuple) -> bool:
    return block["kind"] in fmax and block["kind"] in FMAX_KINDS and block.get("part") is None


def synth_jobs(blks: list, targets: tuple, fmax: tuple) -> list:
    """The Yosys runs ``(target, block, netlist)`` of a report: every block for every target,
    with the ``FMAX_FLOW`` netlist of each block ``fmax`` places alone, and (``FMAX_FLOW`` not a
    target) the netlists to place plus the PE array's, whose MULT18X18D count decides whether
    the whole top fits (``top_misfit``)."""
    jobs = [(t, b, t == FMAX_FLOW and _placed_alone(b, fmax)) for t in targets for b in blks]
    if FMAX_FLOW not in targets:
        jobs += [(FMAX_FLOW, b, _placed_alone(b, fmax)) for b in blks if _placed_alone(b, fmax)
                 or (b["kind"] == "pe_array" and set(FMAX_TOPS) & set(fmax))]
    return jobs


def top_misfit(results: list) -> str | None:
    """Why the whole top cannot place on the device (its PE arrays alone need more MULT18X18D
    than it has), from the ``((target, block, netlist), result)`` pairs of ``synth_jobs``; None
    if it fits."""
    pe = next(((b, r) for (t, b, _), r in results if t == FMAX_FLOW and b["kind"] ==
               "pe_array"), None)
    cap = _fmax.CAPACITY.get(_fmax.DEVICE["device"], {}).get("MULT18X18D")
    need = pe[1].get("dsps", 0) * pe[0]["instances"] if pe else 0
    if cap and need > cap:
        return (f"its {pe[0]['instances']} PE arrays alone need {need} "
                f"MULT18X18D > {cap} on LFE5U-{_fmax.DEVICE['device'][:-1]}F")
    return None


def run_fmax(which, top: str, kinds: dict, fdir: Path, netdir: Path,
             jobs: int, reuse: bool, timeout_min: float | None = None,
             skipped: dict | None = None, seeds: int = 1) -> dict:
    """nextpnr on the netlists (``FMAX_FLOW``, per-block run) of the blocks ``which`` names
    (``kinds``: block kind -> module) and on the whole top (``TOP_FLOW``, flattened), unless
    ``skipped`` gives the reason it cannot fit; the same for the accelerator top (``dstar.v``,
    its netlist written by ``dstar.synth.blocks.synth_blocks``). Each netlist is placed and
    routed with the placer seeds ``1 .. seeds`` (``jobs`` runs at a time), its figure the
    median over them (``dstar.synth.fmax.over_seeds``)."""
    from dstar.hw.generate import ACCEL_TOP_NAME
    skipped = skipped or {}
    runs = {k: netdir / f"{kinds[k]}.{FMAX_FLOW}.json" for k in FMAX_KINDS
            if k in which and k in kinds}
    if "top" in which:
        runs["top"] = fdir / f"{top}.{TOP_FLOW}.json"
    if "accelerator" in which:
        runs["accelerator"] = fdir / f"{ACCEL_TOP_NAME}.{TOP_FLOW}.json"
    out = {k: {"status": "does not fit", "fmax_mhz": None, "placed_estimate_mhz": None,
               "reason": why, "device": _fmax.DEVICE} for k, why in skipped.items()}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = {k: [pool.submit(_fmax.place_and_route, net, fdir, seed=s, reuse=reuse,
                                timeout_min=timeout_min) for s in range(1, seeds + 1)]
                for k, net in runs.items() if k not in skipped}
        out.update({k: _fmax.over_seeds([f.result() for f in fs]) for k, fs in futs.items()})
    order = (*FMAX_KINDS, *FMAX_TOPS)
    return {k: out[k] for k in sorted(out, key=order.index)}
