import json

import numpy as np
import pytest

from dstar.cli import main
from dstar.config import preset
from dstar.golden.trace import Trace, save_trace


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_config_prints_resolved_and_derived(capsys):
    code, out, _ = run(capsys, "config", "--preset", "tiny", "--tau", "3")
    assert code == 0
    d = json.loads(out)
    assert d["config"]["tau"] == 3 and d["derived"]["e_tol"] == 2


@pytest.mark.parametrize("argv,msg", [
    (["config", "--preset", "huge"], "unknown preset 'huge'"),
    (["analyze", "--trace", "/no/such.npz", "--quiet"], "does not exist"),
    (["config", "--config", "/no/such.toml"], "does not exist"),
    (["analyze", "--sweep", "thet=1"], "cannot sweep 'thet'"),
    (["analyze", "--sweep", "theta=1.5"], "theta must be in (0, 1], got 1.5"),
    (["analyze", "--sweep", "refresh_attn=x"], "bad value in 'refresh_attn=x'"),
    (["analyze", "--sweep", "theta"], "expects FIELD=V1,V2"),
    (["analyze", "--sweep", "tau=0", "--sweep", "tau=1"], "'tau' given twice"),
    (["analyze", "--sweep", "linears=int4"], "linears must be one of dstar, w8a8, float"),
])
def test_bad_input_is_one_line(capsys, argv, msg):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("command", ["generate", "lint", "run", "regress", "synth"])
def test_hardware_commands_refuse_the_rule_the_hardware_does_not_implement(capsys, tmp_path,
                                                                           command):
    # The FMDQ top codes by the lossless rule: a magnitude-rule top would be built silently.
    extra = {"regress": ["--cases", "1"], "synth": ["--target", "cmos"],
             "generate": ["-o", str(tmp_path / "gen")]}.get(command, [])
    code, _, err = run(capsys, command, "--preset", "tiny", "--set", "fmdq_rule=magnitude",
                       *extra)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"dstar {command} needs fmdq_rule = 'lossless'" in err and "'magnitude'" in err
    assert not (tmp_path / "gen").exists()


def test_dense_packing_points_to_the_datapath(capsys, tmp_path):
    f = tmp_path / "old.toml"
    f.write_text('preset = "tiny"\npacking = "dense"\n')
    code, _, err = run(capsys, "config", "--config", str(f))
    assert code == 2 and err.count("\n") == 1
    assert 'packing = "dense" is not a packing' in err and 'use datapath = "dense"' in err
    f.write_text('preset = "tiny"\ndatapath = "dense"\n')
    code, out, _ = run(capsys, "config", "--config", str(f))
    assert code == 0 and json.loads(out)["config"]["datapath"] == "dense"


def test_bad_cli_values_are_rejected(capsys):
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--tau", "-2"])
    assert e.value.code == 2
    assert "--tau: expected an integer >= 0, got -2" in capsys.readouterr().err


def test_analyze_trace_json(capsys, tmp_path):
    rng = np.random.default_rng(0)
    tr = Trace(steps=2)
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    tr.linear_x["l.fc1"], tr.linear_w["l.fc1"], tr.linear_b["l.fc1"] = x, x[0, :3], None
    f = tmp_path / "t.npz"
    save_trace(f, tr)
    code, out, _ = run(capsys, "analyze", "--trace", str(f), "--json", "--quiet")
    assert code == 0
    rep = json.loads(out)
    assert rep["steps"] == 2 and rep["tokens"] == 4 and 0 <= rep["dstar"]["zero_fraction"] <= 1
    # group 16 does not divide K = 16? it does; K = 12 would not:
    tr.linear_x["l.fc1"] = x[..., :12]
    tr.linear_w["l.fc1"] = x[0, :3, :12]
    save_trace(f, tr)
    code, _, err = run(capsys, "analyze", "--trace", str(f), "--quiet")
    assert code == 2 and "K=12 is not a multiple of group=16" in err


def test_analyze_trace_refuses_the_bundled_runs_options_and_honours_the_rest(capsys, tmp_path):
    rng = np.random.default_rng(0)
    tr = Trace(steps=2)
    x = rng.normal(size=(2, 4, 16)).astype(np.float32)
    tr.linear_x["l.fc1"], tr.linear_w["l.fc1"], tr.linear_b["l.fc1"] = x, x[0, :3], None
    q = rng.normal(size=(2, 1, 1, 4, 32)).astype(np.float32)
    tr.attn["l.attn"] = (q, q, q)
    f = save_trace(tmp_path / "t.npz", tr)
    for argv in (["--steps", "3"], ["--samples", "2"], ["--set", "seed=4"],
                 ["--workload", "photos"]):
        code, _, err = run(capsys, "analyze", "--trace", str(f), "--quiet", *argv)
        assert code == 2 and "does not apply to --trace" in err and err.count("\n") == 1, argv
    code, out, _ = run(capsys, "analyze", "--trace", str(f), "--quiet", "--json", "--theta",
                       "0.9", "--lattice-bits", "0", "--refresh-attn", "1")
    rep = json.loads(out)
    assert code == 0 and rep["config"]["theta"] == 0.9 and rep["config"]["lattice_bits"] == 0
    assert [p["key"] for p in rep["attention"]["per_step"]] == [True, True]   # refresh 1
    code, out, err = run(capsys, "analyze", "--trace", str(f))
    assert code == 0 and "[linears] 1 layers" in err and "[attention] 1 layers" in err
    assert "teacher-forced" in out and "attention (teacher-forced, 1 layers" in out


def test_analyze_bundled_json_keys(capsys, tmp_path):
    png = tmp_path / "grid.png"
    code, out, _ = run(capsys, "analyze", "--preset", "tiny", "--steps", "3", "--samples", "1",
                       "--json", "--quiet", "--png", str(png))
    assert code == 0
    rep = json.loads(out)
    for key in ("workload", "steps", "tokens", "ops_ratio_vs_w8a8", "lockstep_ops_ratio_vs_w8a8"):
        assert key in rep
    for key in ("low_bit_fraction", "zero_fraction", "mean_passes", "psnr_vs_fp32_db"):
        assert isinstance(rep["dstar"][key], float)
    assert isinstance(rep["w8a8"]["psnr_vs_fp32_db"], float)
    assert 0 < rep["attention"]["blocks_computed_fraction"] <= 1
    assert rep["steps"] == 3 and rep["tokens"] == 256
    assert rep["ops_ratio_vs_w8a8"] == pytest.approx(2.0 / rep["dstar"]["mean_passes"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rep["workload_name"] == "digits" and set(rep["quality"]) == {"fp32", "w8a8", "dstar"}
    assert 0 <= rep["quality"]["fp32"]["class_accuracy"] <= 1
    # FMDQ beside v1, whichever the configured encoding (the other one runs its linears alone).
    f = rep["fmdq"]
    assert rep["encoding"] == preset("tiny").encoding.value
    assert f["token_tile"] == 8 and f["rule"] == "lossless"
    for part in ("all", "key_step", "delta_steps", *(f["per_layer_type"][t] for t in ("qkv",))):
        s = f[part] if isinstance(part, str) else part
        assert s["groups"] + s["dense_groups"] > 0 and 0 <= s["mean_width_bits"] <= 8
        assert s["speedup_vs_int8"] == pytest.approx(s["dense_groups"] / s["groups"], rel=1e-5)
    assert isinstance(f["linears_psnr_vs_fp32_db"], float)
    assert isinstance(rep["nibble_linear_only"]["psnr_vs_fp32_db"], float)


def test_workload_option_selects_the_bundled_dit(capsys, tmp_path):
    """``--workload photos`` runs the natural-image DiT: its weights (16 source-photo classes),
    its quality figures, in analyze, trace and the benches; a bad name is one line."""
    from dstar.golden.dit import load_weights
    code, out, _ = run(capsys, "analyze", "--workload", "photos", "--preset", "tiny", "--steps",
                       "2", "--samples", "1", "--json", "--quiet", "--png", "")
    assert code == 0
    rep = json.loads(out)
    assert rep["workload_name"] == "photos" and "photos" in rep["workload"]
    assert set(rep["quality"]["fp32"]) == {"mean_w1", "std_w1", "spectrum_db"}
    assert rep["config"]["workload"] == "photos"
    code, out, _ = run(capsys, "trace", "--workload", "photos", "--steps", "1", "--samples", "1",
                       "--layers", "blocks.0.mlp.fc1", "--no-attention", "-o", str(tmp_path / "t"))
    assert code == 0
    with np.load(tmp_path / "t.npz") as z:
        w = z["linear/blocks.0.mlp.fc1/weight"]
    assert np.array_equal(w, load_weights(workload="photos")[1]["blocks.0.mlp.fc1.weight"])
    assert not np.array_equal(w, load_weights()[1]["blocks.0.mlp.fc1.weight"])
    code, out, _ = run(capsys, "bench", "cycles", "--workload", "photos", "--steps", "2",
                       "--blocks", "0", "--layers", "mlp.fc1", "--packing", "lockstep", "--json")
    assert code == 0 and json.loads(out)["workload"] == "photos"
    with pytest.raises(SystemExit) as e:
        main(["analyze", "--workload", "cats"])
    assert e.value.code == 2 and "invalid choice: 'cats'" in capsys.readouterr().err


def test_analyze_sweep(capsys):
    code, out, _ = run(capsys, "analyze", "--steps", "3", "--samples", "1", "--json", "--quiet",
                       "--sweep", "theta=0.3,1", "--sweep", "refresh_attn=2")
    assert code == 0
    rep = json.loads(out)
    pts = rep["points"]
    assert [(p["theta"], p["refresh_attn"]) for p in pts] == [(0.3, 2), (1.0, 2)]
    # theta = 1 computes every block; a low theta computes fewer on the reuse step (step 1).
    assert pts[1]["blocks_computed_fraction"] == 1.0
    assert pts[0]["blocks_computed_fraction_reuse_steps"] < 1.0
    for p in pts:
        assert p["psnr_gap_vs_w8a8_db"] == pytest.approx(
            rep["w8a8"]["psnr_vs_fp32_db"] - p["psnr_vs_fp32_db"])
        # The worst sample is at least as far under W8A8 as all samples together are.
        assert p["worst_sample_gap_vs_w8a8_db"] >= p["psnr_gap_vs_w8a8_db"] - 1e-9
        assert p["meets_target"] == (p["psnr_gap_vs_w8a8_db"] <= 0.5
                                     and p["worst_sample_gap_vs_w8a8_db"] <= 2.0
                                     and p["blocks_computed_fraction_reuse_steps"] <= 0.5)


def test_analyze_sweep_modes(capsys):
    """One mechanism at a time: W8A8 linears with float attention is the W8A8 run itself."""
    code, out, _ = run(capsys, "analyze", "--steps", "2", "--samples", "1", "--json", "--quiet",
                       "--sweep", "linears=w8a8,float", "--sweep", "attention=float")
    assert code == 0
    rep = json.loads(out)
    w8a8, flt = rep["points"]
    assert w8a8["psnr_vs_fp32_db"] == rep["w8a8"]["psnr_vs_fp32_db"]
    assert flt["psnr_vs_fp32_db"] is None                 # identical to FP32: infinite PSNR
    assert not w8a8["meets_target"] and w8a8["ops_ratio_vs_w8a8"] is None


def test_analyze_sweep_over_the_encodings(capsys):
    code, out, _ = run(capsys, "analyze", "--steps", "2", "--samples", "1", "--json", "--quiet",
                       "--sweep", "encoding=nibble,fmdq", "--sweep", "attention=float",
                       "--sweep", "token_tile=32")
    assert code == 0
    v1, fmdq = json.loads(out)["points"]
    assert v1["fmdq"] is None and v1["ops_ratio_vs_w8a8"] > 0
    assert fmdq["ops_ratio_vs_w8a8"] is None and fmdq["encoding"] == "fmdq"
    assert fmdq["fmdq"]["all"]["sub_channels"] > 0
    assert fmdq["meets_linear_target"] == (fmdq["psnr_gap_vs_w8a8_db"] <= 0
                                           and fmdq["worst_sample_gap_vs_w8a8_db"] <= 1.0)


@pytest.mark.parametrize("argv,msg", [
    (["config", "--set", "k_tile=x"], "--set: k_tile expects an integer, got 'x'"),
    (["config", "--set", "theta=high"], "--set: theta expects a number, got 'high'"),
    (["config", "--set", "ktile=32"], "--set: no config field 'ktile' (fields: group, "),
    (["config", "--set", "k_tile"], "--set expects FIELD=VALUE, got 'k_tile'"),
    (["config", "--set", "tau=1", "--set", "tau=2"], "--set: 'tau' given twice"),
    (["config", "--tau", "1", "--set", "tau=2"], "--set: 'tau' is also given by --tau"),
    (["config", "--set", "k_tile=33"], "k_tile=33 must be a multiple of group=16"),
    (["config", "--set", "packing=sparse"], "packing must be one of"),
    (["generate", "--packing", "lockstep", "--set", "packing=compact", "-o", "x"],
     "--set: 'packing' is also given by --packing"),
])
def test_set_bad_field_or_value_is_one_line(capsys, argv, msg):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_set_parses_each_field_by_its_type(capsys):
    code, out, _ = run(capsys, "config", "--preset", "tiny", "--set", "k_tile=64",
                       "--set", "theta=0.25", "--set", "weight-store=lane_ram",
                       "--set", "packing=lockstep")
    assert code == 0
    cfg = json.loads(out)["config"]
    assert (cfg["k_tile"], cfg["theta"], cfg["weight_store"], cfg["packing"]) == \
        (64, 0.25, "lane_ram", "lockstep")
    assert cfg["m_tile"] == 4                      # the rest is the preset's


def test_generate_set_and_packing(capsys, tmp_path):
    """``dstar generate --set ... --datapath dense``: the dense baseline top alone (no attention
    engine), with the fields given."""
    out = tmp_path / "rtl"
    code, text, _ = run(capsys, "generate", "--preset", "tiny", "--datapath", "dense",
                        "--set", "max_m=32", "-o", str(out))
    assert code == 0
    man = json.loads((out / "params.json").read_text())
    assert man["config"]["datapath"] == "dense" and man["config"]["max_m"] == 32
    assert "attention" not in man and not (out / "dstar_attention.v").exists()
    assert text == f"wrote {out / 'dstar_linear.v'} and {out / 'params.json'}\n"


def test_build_dir_sets_the_build_root_for_one_command(capsys, tmp_path, monkeypatch):
    """``dstar --build-dir DIR`` puts build output under DIR (here: where ``synth --board
    --reuse`` looks for the last build) and leaves the environment as it was."""
    from dstar.paths import BUILD_DIR_ENV

    monkeypatch.delenv(BUILD_DIR_ENV, raising=False)
    code, _, err = run(capsys, "--build-dir", str(tmp_path), "synth", "--board", "--reuse")
    assert code == 2 and f"no finished board build in {tmp_path / 'synth' / 'board'}" in err
    assert BUILD_DIR_ENV not in __import__("os").environ
    monkeypatch.setenv(BUILD_DIR_ENV, str(tmp_path / "env"))
    code, _, err = run(capsys, "synth", "--board", "--reuse")
    assert code == 2 and str(tmp_path / "env" / "synth" / "board") in err


def _fake_report(cfg, targets, fmax=(), **kw):
    from dstar.synth.report import REPORT_VERSION, config_hash, preset_name
    per = {"cells": 10, "luts": 7, "ffs": 3, "transistors": 100}
    return {"report_version": REPORT_VERSION, "preset": preset_name(cfg),
            "config_hash": config_hash(cfg), "config": cfg.to_dict(), "top": "dstar_linear",
            "yosys_version": "0.0-test", "targets": {t: dict(per) for t in targets},
            "modules": {"pe_array": {"instances": 2, "part": "linear",
                                     "targets": {t: dict(per) for t in targets}}},
            "memories": [], "calls": (tuple(targets), kw)}


def test_synth_targets_and_write_baseline(capsys, tmp_path, monkeypatch):
    """``dstar synth``: a repeated ``--target`` synthesizes those targets, ``--write-baseline``
    stores the report as the preset's baseline (synthesis stubbed; the baseline folder is a
    temporary one), and refuses what would store a useless one."""
    from dstar.synth import baseline, flows
    from dstar.synth import report as synth_report

    calls = []

    def fake_run(cfg, targets, fmax=(), **kw):
        calls.append((tuple(targets), kw["flat_total"], kw["reuse"]))
        return _fake_report(cfg, targets, fmax, **kw)

    monkeypatch.setattr(synth_report, "run", fake_run)
    monkeypatch.setattr(flows, "have_yosys", lambda: True)
    monkeypatch.setattr(baseline, "BASELINES", tmp_path)
    code, out, _ = run(capsys, "synth", "--preset", "tiny", "--target", "cmos", "--target",
                       "ice40", "--write-baseline", "--flat-total", "--reuse")
    assert code == 0 and calls == [(("cmos", "ice40"), True, True)]
    assert out.startswith(f"wrote {tmp_path / 'tiny.json'}\n")
    stored = json.loads((tmp_path / "tiny.json").read_text())["yosys"]["0.0-test"]
    assert set(stored["targets"]) == {"cmos", "ice40"}
    assert stored["modules"]["pe_array"]["targets"]["ice40"]["luts"] == 7
    code, out, err = run(capsys, "synth", "--preset", "tiny", "--target", "all", "--json")
    assert code == 0 and calls[-1][0] == synth_report.ALL_TARGETS and json.loads(out)
    for argv, msg in [
        (["--set", "k_tile=64", "--write-baseline"], "needs a preset's configuration"),
        (["--target", "none", "--fmax", "top", "--write-baseline"], "needs area targets"),
        (["--board", "--write-baseline"], "does not apply to --board"),
        (["--target", "none", "--target", "cmos"], "--target none cannot be combined"),
    ]:
        code, _, err = run(capsys, "synth", "--preset", "tiny", *argv)
        assert code == 2 and msg in err and err.count("\n") == 1, (argv, err)
    assert len(calls) == 2


def test_bench_cycles_short_run(capsys):
    """``dstar bench cycles`` with its own options: one layer of one block, one modelled step."""
    code, out, _ = run(capsys, "bench", "cycles", "--steps", "2", "--every", "2", "--blocks",
                       "0", "--layers", "mlp.fc1", "--packing", "lockstep")
    assert code == 0
    assert out.startswith("blocks.0.mlp.fc1 ")
    assert "== whole run: 1 layer-steps (1 layers x 1 steps of 2), cycle model ==" in out
    assert "lockstep" in out and "compact" not in out
    with pytest.raises(SystemExit) as e:
        main(["bench", "cycles", "--packing", "dense"])
    assert e.value.code == 2 and "invalid choice: 'dense'" in capsys.readouterr().err


def test_bench_attention_and_golden_short_runs(capsys):
    code, out, _ = run(capsys, "bench", "attention", "--steps", "2", "--take", "2",
                       "--layers", "0", "--heads", "0", "--refresh", "2")
    assert code == 0
    assert "layers [0], heads [0], every step of a 2-step run" in out and "refresh_attn=2" in out
    assert "   key     1 " in out and " reuse     1 " in out
    code, _, err = run(capsys, "bench", "attention", "--preset", "tiny", "--steps", "2",
                       "--take", "1", "--layers", "0", "--heads", "0")
    assert code == 2 and "do not fit max_tokens=32" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "bench", "golden", "--preset", "tiny", "--steps", "1",
                       "--samples", "1", "--json")
    assert code == 0
    rep = json.loads(out)
    assert (rep["bench"], rep["steps"], rep["samples"]) == ("golden", 1, 1)
    assert rep["dstar_steps_per_second"] > 0
