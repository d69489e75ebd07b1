"""``dstar bench efficiency`` (``dstar.synth.efficiency``): the throughput-per-area arithmetic on
real cycle-model figures with stand-in areas, the per-config-hash area cache, and the command's
JSON keys. (The real areas come from Yosys, which ``tests/synth/test_synth.py`` covers.)"""

import json

import pytest

from dstar.cli import main
from dstar.config import Datapath, preset
from dstar.synth import efficiency, flows, fmdq_efficiency
from dstar.synth.report import config_hash

#: Stand-in areas (um^2) per strategy: PE arrays, the whole linear datapath.
FAKE = {"compact": (300.0, 900.0), "lockstep": (200.0, 800.0), "dense": (150.0, 500.0),
        "int8": (100.0, 400.0)}
LAYER = ["blocks.0.attn.proj"]


def fake_area(cfg, fmax, jobs=1, area=None):
    name = next(n for n in efficiency.STRATEGIES
                if efficiency.strategy_config(cfg, n) == cfg)
    pe, dp = FAKE[name]
    out = {"config_hash": config_hash(cfg), "yosys_version": "test", "pe_area_um2": pe,
           "pe_logic_area_um2": pe / 2, "datapath_area_um2": dp,
           "blocks_um2": {"pe_array": pe}}
    if area:     # a standard-cell target: the int8 baseline's PE arrays twice as large
        k = 2.0 if name == "int8" else 1.0
        out["asic"] = {"target": area, "pe_area_um2": k * pe, "pe_logic_area_um2": k * pe / 2,
                       "datapath_area_um2": dp, "blocks_um2": {"pe_array": k * pe}}
    return out


#: Stand-in areas (um^2) of the FMDQ datapath's parts (``fmdq_efficiency.PARTS``).
FAKE_FMDQ = {"pe_logic": 60.0, "weight_window": 10.0, "y_memory": 30.0, "quant_unit": 40.0,
             "group_memory": 20.0, "weight_memories": 120.0, "control": 20.0}


def fake_fmdq_areas(base, area=None):
    out = {"parts_um2": dict(FAKE_FMDQ), "geometry": fmdq_efficiency.geometry(
        fmdq_efficiency.fmdq_config(base)), "quant_unit": {"ffs": 1}}
    if area:     # a standard-cell target: every part twice as large
        out["asic"] = {"target": area, "parts_um2": {k: 2 * v for k, v in FAKE_FMDQ.items()}}
    return out


@pytest.fixture
def fake_synth(monkeypatch):
    monkeypatch.setattr(fmdq_efficiency, "areas", fake_fmdq_areas)
    monkeypatch.setattr(efficiency, "strategy_area", fake_area)
    monkeypatch.setattr(efficiency, "_multiplier_um2", lambda: 250.0)
    monkeypatch.setattr(efficiency, "_part_um2", lambda name, ports, body: FAKE_PARTS[
        name.rstrip("0123456789")])


#: Stand-in areas (um^2) of the ceiling's lone parts, by name without its width suffix.
FAKE_PARTS = {"lane_mul": 1.0, "lane_weights": 0.25, "tree": 8.0, "acc_add": 2.0}


def test_throughput_per_area_against_the_int8_baseline(fake_synth):
    """Cycles of the two DSTAR packings from the cycle model, of the dense datapaths from their
    shape models (the int8 one is the baseline: speedup and throughput per area exactly 1);
    TPA = speedup x baseline area / area at both levels."""
    cfg = preset("tiny")
    rep = efficiency.run(cfg, steps=3, layers=LAYER)
    assert rep["baseline"] == "int8" and rep["preset"] == "tiny"
    ideal = rep["workload"].pop("ideal_vs_dense")
    assert rep["workload"] == {"model": "bundled DiT", "steps": 3, "layers": 1,
                               "layer_steps": 3}
    s = rep["strategies"]
    assert set(s) == {"compact", "lockstep", "dense", "int8", "fmdq"}
    keys = {"cycles", "speedup_vs_dense", "pe_area_um2", "datapath_area_um2",
            "tpa_pe_vs_dense", "tpa_datapath_vs_dense"}
    assert all(keys <= set(row) for row in s.values())
    assert s["int8"]["speedup_vs_dense"] == s["int8"]["tpa_pe_vs_dense"] == 1.0
    base = s["int8"]["cycles"]
    for name, (pe, dp) in FAKE.items():
        sp = base / s[name]["cycles"]
        assert s[name]["speedup_vs_dense"] == round(sp, 4)
        assert s[name]["tpa_pe_vs_dense"] == round(sp * FAKE["int8"][0] / pe, 4)
        assert s[name]["tpa_datapath_vs_dense"] == round(sp * FAKE["int8"][1] / dp, 4)
        # The standard-cell areas beside (sky130 by default), their TPA against their own
        # baseline: here its PE arrays are twice as large, so every other TPA PE doubles.
        asic = s[name]["asic"]
        assert asic["target"] == rep["area"] == "sky130"
        k = 1.0 if name == "int8" else 2.0
        assert asic["tpa_pe_vs_dense"] == round(sp * k * FAKE["int8"][0] / pe, 4)
        assert asic["tpa_datapath_vs_dense"] == s[name]["tpa_datapath_vs_dense"]
    # The DiT's attn.proj has 256 tokens: no load stalls after the first chunk, so both dense
    # datapaths take about the same cycles; DSTAR's compact packing skips work even on these
    # first steps (the key step is mostly HIGH), lockstep hardly.
    assert s["compact"]["cycles"] < min(base, s["lockstep"]["cycles"])
    assert abs(s["dense"]["cycles"] - base) < 0.01 * base
    macs = cfg.n_arrays * cfg.m_tile * cfg.group // 2
    assert rep["int8_mac"]["pe_um2_per_mac"] == round(FAKE["int8"][0] / macs, 1)
    # The ceiling: per lane-column multiplier and weights, per column tree and adder, plus the
    # DSTAR array's accumulator memory (its PE area less its logic), at the ideal and 85 % of it.
    c = rep["ceiling"]
    cols = cfg.n_arrays * cfg.m_tile
    pe = cols * (cfg.group * 1.25 + 10.0) + FAKE["compact"][0] / 2
    assert c["pe_area_um2"] == round(pe, 1) and 1 < ideal < 16
    assert c["tpa_pe_at_ideal"] == round(ideal * FAKE["int8"][0] / pe, 4)
    assert c["tpa_pe_at_85pct"] == round(0.85 * ideal * FAKE["int8"][0] / pe, 4)
    text = efficiency.format_text(rep)
    assert "Bit Fusion" in text and "compact" in text and "ceiling" in text
    # The standard cells' table first (the rows that have them), the estimate's beside.
    cells, _, estimate = text.partition("CMOS transistor estimate at 45 nm")
    assert "sky130 standard cells" in cells and estimate
    assert f"{asic['tpa_pe_vs_dense']:7.3f}" in next(
        ln for ln in cells.splitlines() if ln.startswith(name))
    assert "fmdq" in cells and "fmdq" in estimate
    # FMDQ: FmdqLinear's cycles (each window's encode, then its replay: more than the replay
    # alone), the PE-array level its arrays' three parts, the datapath every part, each
    # against the baseline's, on both targets.
    f = s["fmdq"]
    assert f["replay_cycles"] < f["cycles"] and 0 < f["encode_cycles"] < f["replay_cycles"]
    sp = base / f["cycles"]
    assert f["tpa_pe_vs_dense"] == round(sp * FAKE["int8"][0] / 100.0, 4)
    assert f["tpa_datapath_vs_dense"] == round(sp * FAKE["int8"][1] / 300.0, 4)
    fa = f["asic"]
    assert fa["tpa_pe_vs_dense"] == round(sp * 2 * FAKE["int8"][0] / 200.0, 4)
    assert fa["tpa_datapath_vs_dense"] == round(sp * FAKE["int8"][1] / 600.0, 4)
    assert f["speedup_at_equal_area"] == round(sp * (400.0 - 200.0) / 100.0, 4)
    assert f["geometry"]["equal_peak"] and "fmdq" in text and "replay" in text


def test_areas_are_cached_per_config_hash(monkeypatch, tmp_path):
    """A second call with the same configuration does not synthesize; another one does, and
    one asking for Fmax when the cache has none; ``fmax`` places the blocks of
    ``FMAX_KINDS`` the top has."""
    calls, placed = [], []

    def synth_blocks(cfg, targets, fmax, outdir, jobs, reuse, attention):
        calls.append(cfg)
        assert targets == ("cmos",) and not attention
        area = {"area_um2_45nm": 10.0, "area_um2_45nm_logic": 4.0}
        return "top", None, {"pe_array": {"module": "top.array_0", "part": "linear",
                                          "instances": 2, "targets": {"cmos": area}},
                             "sequencer": {"module": "top", "part": "linear", "instances": 1,
                                           "targets": {"cmos": area}}}

    def run_fmax(which, top, kinds, *args):
        placed.append((which, sorted(kinds)))
        return {k: {"fmax_mhz": 50.0} for k in which if k in kinds}

    monkeypatch.setattr(efficiency, "synth_blocks", synth_blocks)
    monkeypatch.setattr(efficiency, "run_fmax", run_fmax)
    monkeypatch.setattr(efficiency, "build_dir", lambda *p: tmp_path.joinpath(*p))
    cfg = preset("tiny").replace(datapath=Datapath.INT8)
    first = efficiency.strategy_area(cfg, False)
    assert first["pe_area_um2"] == 20.0 and first["datapath_area_um2"] == 30.0
    assert efficiency.strategy_area(cfg, False) == first and len(calls) == 1
    efficiency.strategy_area(cfg.replace(m_tile=2), False)
    assert len(calls) == 2 and not placed
    timed = efficiency.strategy_area(cfg, True)
    assert len(calls) == 3 and timed["fmax_mhz"] == {"pe_array": 50.0}
    assert placed == [(efficiency.FMAX_KINDS, ["pe_array", "sequencer"])]
    assert efficiency.strategy_area(cfg, False) == timed and len(calls) == 3


def test_command_prints_the_json(fake_synth, monkeypatch, capsys):
    monkeypatch.setattr(efficiency, "all_layers", lambda: LAYER)
    assert main(["bench", "efficiency", "--preset", "tiny", "--steps", "2", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {"preset", "workload", "baseline", "strategies"} <= set(rep)
    assert rep["workload"]["steps"] == 2 and rep["preset"] == "tiny"


def test_strategy_selects_rows_beside_the_baseline(fake_synth, monkeypatch, capsys):
    """``--strategy`` keeps the named strategies and the int8 baseline (their figures as in
    the full report); without a DSTAR packing there is no ceiling; an unknown name is one
    line (argparse) or a ValueError (``run``). The command's choices are ``STRATEGIES``."""
    from dstar.cli import EFFICIENCY_STRATEGIES
    assert sorted(EFFICIENCY_STRATEGIES) == sorted(efficiency.STRATEGIES)
    cfg = preset("tiny")
    full = efficiency.run(cfg, steps=2, layers=LAYER, fmdq=False)
    some = efficiency.run(cfg, steps=2, layers=LAYER, fmdq=False, strategies=("compact",))
    assert set(some["strategies"]) == {"compact", "int8"}
    assert some["strategies"] == {k: full["strategies"][k] for k in ("compact", "int8")}
    assert some["ceiling"] == full["ceiling"]
    lean = efficiency.run(cfg, steps=2, layers=LAYER, strategies=("int8",))
    assert set(lean["strategies"]) == {"int8", "fmdq"} and "ceiling" not in lean
    assert "ceiling" not in efficiency.format_text(lean)
    with pytest.raises(ValueError, match="unknown strategy 'bogus'"):
        efficiency.run(cfg, steps=2, layers=LAYER, strategies=("bogus",))
    monkeypatch.setattr(efficiency, "all_layers", lambda: LAYER)
    with pytest.raises(SystemExit):
        main(["bench", "efficiency", "--preset", "tiny", "--strategy", "bogus"])
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


@pytest.mark.skipif(not flows.have_yosys(), reason="YoWASP Yosys is not installed")
def test_ceiling_parts_are_synthesized():
    """The ceiling's lone parts, by the real flow: the lane's 5 x 8 multiplier costs between
    0.4 and 0.75 of the 8 x 8 one, the column tree more than the accumulator's adder."""
    p = efficiency.lane_ceiling(preset("tiny"), 0.0)["parts_um2"]
    mul8 = efficiency._multiplier_um2()
    assert 0.4 * mul8 < p["mul"] < 0.75 * mul8
    assert p["tree"] > p["acc_add"] > p["weights"] > 0


def test_fmdq_estimate_parts():
    """``fmdq_efficiency.estimate``: every memory from ``FmdqGeometry`` at the SRAM cost per bit
    (one copy per read port), the quantization unit cheaper with the odd-even network and with
    fewer register stages, and cheapest with the bucket stage (no network, no registers to
    space)."""
    from dstar.hw.fmdq.geometry import FmdqGeometry
    from dstar.hw.fmdq.quant_unit import DEFAULT_ORDER
    from dstar.hw.fmdq.sorter import SortNetwork
    cfg = fmdq_efficiency.fmdq_config(preset("tiny"))
    geo = FmdqGeometry(cfg)
    a = flows.CMOS_ASSUMPTIONS
    per_bit = a["sram_bitcell_um2"] / a["sram_array_efficiency"]
    parts = fmdq_efficiency.estimate(cfg, control_um2=7.0)
    assert list(parts) == list(fmdq_efficiency.PARTS) and parts["control"] == 7.0
    assert parts["weight_memories"] == pytest.approx(
        cfg.n_arrays * geo.weight_depth * 8 * geo.columns * per_bit, abs=0.2)
    assert parts["weight_window"] == pytest.approx(
        cfg.n_arrays * 4 * 2 * geo.window * 8 * geo.columns * per_bit, abs=0.2)
    qu = {(r, k): fmdq_efficiency.quant_unit_estimate(cfg, r, k)["unit_um2"]
          for r in (1, 3) for k in SortNetwork}
    assert qu[1, DEFAULT_ORDER] == parts["quant_unit"]
    assert qu[3, SortNetwork.ODD_EVEN] < qu[1, SortNetwork.ODD_EVEN] < qu[1, SortNetwork.BITONIC]
    assert qu[1, SortNetwork.BUCKET] == qu[3, SortNetwork.BUCKET] < qu[3, SortNetwork.ODD_EVEN]


def test_int8_estimate_counts_the_targets_memory():
    """``fmdq_efficiency.int8_estimate``: the INT8 datapath's memories from its geometry,
    its INT8 targets' memory (``row_depth`` words of ``k_tile`` INT8) among them."""
    from dstar.config import Datapath
    from dstar.hw.geometry import DenseGeometry
    cfg = preset("tiny")
    g = DenseGeometry(cfg.replace(datapath=Datapath.INT8)).base
    a = flows.CMOS_ASSUMPTIONS
    per_bit = a["sram_bitcell_um2"] / a["sram_array_efficiency"]
    parts = fmdq_efficiency.int8_estimate(cfg, 100.0, 7.0)
    assert parts["pe_logic"] == 100.0 and parts["control"] == 7.0
    assert parts["target_memory"] == pytest.approx(g.row_depth * 8 * cfg.k_tile * per_bit,
                                                   abs=0.2)
    assert parts["weight_memories"] == pytest.approx(
        cfg.n_arrays * g.weight_depth * 8 * cfg.m_tile * per_bit, abs=0.2)
