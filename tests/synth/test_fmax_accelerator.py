"""``dstar synth --fmax accelerator``: the accelerator top (``dstar.v``) synthesized whole for
nextpnr and placed, like the linear top (Yosys and nextpnr stubbed: the selection only)."""

from pathlib import Path

import pytest

from dstar.config import preset

pytest.importorskip("dstar.synth.flows")
from dstar.synth.fmax_runs import FMAX_CHOICES, TOP_FLOW, fmax_selection  # noqa: E402
from dstar.synth.report import run  # noqa: E402


def _stub(monkeypatch, dsps: int):
    """Yosys and nextpnr replaced by recorders; the PE array needs ``dsps`` MULT18X18D."""
    from dstar.synth import blocks
    from dstar.synth import fmax as synth_fmax
    synths, routes = [], []

    def fake_synth(verilog, module, target, builddir, blackbox=(), netlist=False, reuse=False):
        synths.append((Path(verilog).name, module, target, netlist, Path(builddir).name))
        return {"cells": 1, "dsps": dsps}

    def fake_route(net, fdir, **kw):
        routes.append(Path(net).name)
        return {"status": "routed", "fmax_mhz": 50.0, "device": {}}

    monkeypatch.setattr(blocks, "synth_module", fake_synth)
    monkeypatch.setattr(synth_fmax, "place_and_route", fake_route)
    monkeypatch.setattr(synth_fmax, "nextpnr_version", lambda: "stub")
    return synths, routes


@pytest.mark.slow
def test_fmax_accelerator_places_the_accelerator_top(tmp_path, monkeypatch):
    """(Generating the tiny FMDQ accelerator's Verilog: 191 s at load 12.)"""
    assert "accelerator" in FMAX_CHOICES
    assert fmax_selection("accelerator") == ("accelerator",)
    assert "accelerator" not in fmax_selection("all")
    synths, routes = _stub(monkeypatch, dsps=0)
    rep = run(preset("tiny", encoding="fmdq"), (), fmax_selection("accelerator"),
              outdir=tmp_path, dense=False)
    assert list(rep["fmax"]) == ["accelerator"]
    assert routes == [f"dstar.{TOP_FLOW}.json"]
    # Its netlist where the place and route reads it (beside the linear top's).
    assert ("dstar.v", "dstar", TOP_FLOW, True, "fmax") in synths
    # The linear top is not synthesized for nextpnr; a PE array is, for the fit check.
    assert not [s for s in synths if s[2] == TOP_FLOW and s[1] != "dstar"]
    assert any(s[2] == "ecp5_dsp" and ".array" in s[1] for s in synths)


@pytest.mark.slow
def test_fmax_accelerator_that_cannot_fit_is_not_placed(tmp_path, monkeypatch):
    """(153 s at load 12.)"""
    _, routes = _stub(monkeypatch, dsps=200)
    rep = run(preset("tiny", encoding="fmdq"), (), ("accelerator",), outdir=tmp_path,
              dense=False)
    assert routes == []
    assert rep["fmax"]["accelerator"]["status"] == "does not fit"
    assert "MULT18X18D" in rep["fmax"]["accelerator"]["reason"]
