"""The commands' outputs are all-or-nothing and their paths are checked before the work:
``dstar generate -o``, ``dstar analyze --output/--png``, ``dstar trace -o``, and a closed pipe on
stdout ends quietly."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dstar import analyze
from dstar.cli import main
from dstar.golden.trace import Trace, save_trace
from dstar.outputs import atomic_dir


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(err, msg):
    return msg in err and err.count("\n") == 1 and "Traceback" not in err


def listing(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_generate_refuses_bad_output_folders_in_one_line(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    cases = {tmp_path / "f": "is a file", tmp_path / "f" / "sub": "is a file, not a folder"}
    for path, why in cases.items():
        code, out, err = run(capsys, "generate", "--preset", "tiny", "-o", str(path))
        assert code == 2 and out == "" and one_line(err, why), err


def test_generate_refuses_an_unwritable_parent(capsys, tmp_path, monkeypatch):
    # os.access stands in for a read-only folder: the tests may run as root, who writes anywhere.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    code, _, err = run(capsys, "generate", "--preset", "tiny", "-o", str(tmp_path / "out"))
    assert code == 2 and one_line(err, f"folder {str(tmp_path)!r} is not writable")


@pytest.mark.parametrize("bad,msg", [
    ("block_k=1024", "block_k=1024 must be <= k_tile=32"),
    ("max_k=65536", "limit 1048576; the largest: weights"),
    ("attn_slots=4096 max_tokens=128", "limit 1048576; the largest: attention residual cache"),
])
def test_config_and_generate_refuse_the_same_unbuildable_config(capsys, tmp_path, bad, msg):
    """One buildability check: ``dstar config`` refuses what ``dstar generate`` would, with the
    same line; generate refuses it before writing anything, and leaves an earlier run alone."""
    sets = [a for s in bad.split() for a in ("--set", s)]
    code, out, err_config = run(capsys, "config", "--preset", "tiny", *sets)
    assert code == 2 and out == "" and one_line(err_config, msg), err_config
    out_dir = tmp_path / "rtl"
    out_dir.mkdir()
    (out_dir / "params.json").write_text("earlier run")
    (out_dir / "dstar_linear.v").write_text("earlier run")
    before = listing(out_dir)
    code, out, err = run(capsys, "generate", "--preset", "tiny", *sets, "-o", str(out_dir))
    assert code == 2 and out == "" and err == err_config
    assert listing(out_dir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rtl"]     # no temporary left
    code, _, _ = run(capsys, "generate", "--preset", "tiny", *sets, "-o", str(tmp_path / "new"))
    assert code == 2 and not (tmp_path / "new").exists()


def test_config_shows_the_generated_size():
    from dstar.config import preset
    from dstar.hw.generate import MAX_MEMORY_WORDS, check_buildable

    # Per encoding: v1's linear top and FMDQ's (two banks of groups, weights, accumulators and
    # weight windows of its own), each beside the same attention engine.
    for encoding, tiny, default in (("nibble", 5192, 61504), ("fmdq", 5340, 59744)):
        size = check_buildable(preset("tiny", encoding=encoding))
        assert size == {"memory_words": tiny, "memory_words_limit": MAX_MEMORY_WORDS,
                        "largest_memory": ["weights (max_k x max_m / block_cols, per array)",
                                           2048]}, encoding
        assert check_buildable(preset("default", encoding=encoding))["memory_words"] == default
        # Without the attention engine (the dense baseline) the estimate is the linear top's.
        dense = preset("tiny", encoding=encoding).replace(datapath="dense")
        assert check_buildable(dense)["memory_words"] == 2816


def test_generate_refuses_lattice_refinement(capsys, tmp_path):
    """Lattice refinement is in the golden model only: generating it is refused in one line,
    and nothing is written."""
    code, _, err = run(capsys, "generate", "--preset", "tiny", "--set", "refine_max=2", "-o",
                       str(tmp_path / "rtl"))
    assert code != 0 and not (tmp_path / "rtl").exists()
    assert "refine_max=2: lattice refinement is in the golden model only" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_generate_refuses_the_accelerator_top_without_the_dstar_datapath(capsys, tmp_path):
    code, _, err = run(capsys, "generate", "--preset", "tiny", "--datapath", "int8",
                       "--accelerator", "-o", str(tmp_path / "rtl"))
    assert code != 0 and not (tmp_path / "rtl").exists()
    assert err == "dstar: error: --accelerator needs datapath=dstar, not int8\n"


def test_generate_writes_the_accelerator_top_and_its_manifest(capsys, tmp_path):
    out_dir = tmp_path / "rtl"
    code, text, _ = run(capsys, "generate", "--preset", "tiny", "--accelerator", "-o",
                        str(out_dir))
    assert code == 0 and f"{out_dir / 'dstar.v'}" in text
    assert sorted(p.name for p in out_dir.iterdir()) == ["dstar.v", "dstar_attention.v",
                                                         "dstar_linear.v", "params.json"]
    man = json.loads((out_dir / "params.json").read_text())["accelerator"]
    verilog = (out_dir / "dstar.v").read_text()
    assert "module dstar(" in verilog
    for name in man["ports"]:                      # every port of the manifest is in the top
        assert f" {name}" in verilog, name
    assert man["ports"]["cmd__payload"]["width"] == man["layouts"]["command"]["width"]
    assert man["ports"]["din__payload"]["width"] == man["data_bits"]
    assert man["reset"] == {"port": "rst", "synchronous": True, "active": "high"}
    assert set(man["memories"]) == set(man["layouts"]) - {"command"}
    assert man["opcodes"]["LOAD"] == 1 and man["counters"][0] == "commands"


def test_generate_replaces_the_folder_whole(capsys, tmp_path):
    """A dense run into a folder of an earlier DSTAR run leaves no stale ``dstar_attention.v``;
    the files get the umask's modes, and no temporary or lock is left, inside the folder or beside
    it."""
    out_dir = tmp_path / "rtl"
    out_dir.mkdir()
    for name in ("dstar_linear.v", "dstar_attention.v", "params.json"):
        (out_dir / name).write_text("earlier run")
    code, text, _ = run(capsys, "generate", "--preset", "tiny", "--datapath", "dense", "-o",
                        str(out_dir))
    assert code == 0
    assert text == f"wrote {out_dir / 'dstar_linear.v'} and {out_dir / 'params.json'}\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["dstar_linear.v", "params.json"]
    assert json.loads((out_dir / "params.json").read_text())["config"]["datapath"] == "dense"
    umask = os.umask(0)
    os.umask(umask)
    assert (out_dir / "params.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rtl"]     # no lock left (G16)


def test_an_interrupted_generate_leaves_the_earlier_run(capsys, tmp_path, monkeypatch):
    from dstar.hw import generate

    out_dir = tmp_path / "rtl"
    out_dir.mkdir()
    (out_dir / "params.json").write_text("earlier run")

    def interrupted(cfg, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate, "build", interrupted)
    code, out, err = run(capsys, "generate", "--preset", "tiny", "-o", str(out_dir))
    assert code == 130 and out == "" and err == "dstar: interrupted\n"
    assert listing(out_dir) == {"params.json": b"earlier run"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rtl"]     # no lock left (G16)


def test_generate_does_not_wipe_files_it_did_not_write(capsys, tmp_path):
    out_dir = tmp_path / "rtl"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("mine")
    (out_dir / "params.json").write_text("earlier run")
    code, out, err = run(capsys, "generate", "--preset", "tiny", "-o", str(out_dir))
    assert code == 2 and out == ""
    assert one_line(err, "holds files dstar did not write ('notes.txt')")
    assert listing(out_dir) == {"notes.txt": b"mine", "params.json": b"earlier run"}


def test_a_concurrent_generate_into_the_same_folder_is_refused(capsys, tmp_path):
    out_dir = tmp_path / "rtl"
    with atomic_dir(out_dir):              # another command is writing it
        code, out, err = run(capsys, "generate", "--preset", "tiny", "-o", str(out_dir))
    assert code == 2 and out == "" and one_line(err, "another dstar command is writing")


def small_trace(x=None):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4, 16)).astype(np.float32) if x is None else x
    tr = Trace(steps=2)
    w = rng.normal(size=(3, 16)).astype(np.float32)
    tr.linear_x["l.fc1"], tr.linear_w["l.fc1"], tr.linear_b["l.fc1"] = x, w, None
    return tr


@pytest.fixture
def trace_file(tmp_path):
    return save_trace(tmp_path / "t.npz", small_trace())


def _no_run(*a, **k):
    raise AssertionError("the run started before the output paths were checked")


@pytest.mark.parametrize("where,why", [("dir", "is a folder"), ("nope/r.json", "does not exist"),
                                       ("file/r.json", "is a file, not a folder")])
def test_analyze_checks_its_outputs_before_the_run(capsys, tmp_path, monkeypatch, trace_file,
                                                   where, why):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(analyze, "run_trace", _no_run)
    monkeypatch.setattr(analyze, "run_bundled", _no_run)
    bad = str(tmp_path / where)
    code, out, err = run(capsys, "analyze", "--trace", str(trace_file), "--output", bad)
    assert code == 2 and out == "" and one_line(err, f"--output {bad!r}") and why in err
    code, out, err = run(capsys, "analyze", "--preset", "tiny", "--quiet", "--png", bad)
    assert code == 2 and out == "" and one_line(err, f"--png {bad!r}") and why in err


def test_analyze_prints_before_it_writes(capsys, tmp_path, monkeypatch, trace_file):
    """The report reaches stdout before the files are written, so a failed write loses no
    result; a good run writes the JSON whole."""
    from dstar import outputs

    out_json = tmp_path / "r.json"
    code, text, _ = run(capsys, "analyze", "--trace", str(trace_file), "--json", "--output",
                        str(out_json))
    assert code == 0 and json.loads(out_json.read_text()) == json.loads(text)

    def full_disk(path, data):
        raise outputs.OutputError(f"cannot write {str(path)!r}: No space left on device")

    monkeypatch.setattr(outputs, "write_atomic", full_disk)
    code, text, err = run(capsys, "analyze", "--trace", str(trace_file), "--quiet", "--output",
                          str(tmp_path / "s.json"))
    assert code == 2 and "nibble passes vs dense W8A8" in text
    assert one_line(err, "No space left on device")


def test_trace_checks_its_output_before_the_run(capsys, tmp_path, monkeypatch):
    (tmp_path / "t1.npz").mkdir()
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(analyze, "export_trace", _no_run)
    for bad, why in ((tmp_path / "t1", "'" + str(tmp_path / "t1.npz") + "' is a folder"),
                     (tmp_path / "file" / "x.npz", "is a file, not a folder"),
                     (tmp_path / "nope" / "x.npz", "does not exist")):
        code, out, err = run(capsys, "trace", "--preset", "tiny", "-o", str(bad))
        assert code == 2 and out == "" and one_line(err, why), err
    code, out, err = run(capsys, "trace", "--preset", "tiny", "--layers", "blocks.0.mlp.fc9",
                         "-o", str(tmp_path / "t2"))
    assert code == 2 and one_line(err, "no linear layer 'blocks.0.mlp.fc9'")


def _closed_pipe_run(*argv):
    """Run ``dstar`` with stdout a pipe whose reader has already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "dstar.cli", *argv], stdout=w,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    return p


def test_a_closed_pipe_ends_quietly(trace_file):
    p = _closed_pipe_run("config", "--preset", "tiny")
    assert p.returncode in (0, 141) and p.stderr == ""
    p = _closed_pipe_run("analyze", "--trace", str(trace_file), "--json", "--quiet")
    assert p.returncode in (0, 141) and p.stderr == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_under_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "dstar.cli", "config", "--preset", "tiny"],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr == "dstar: error: cannot write the standard output: No space left on device\n"


def test_only_the_projects_errors_are_one_line(capsys, monkeypatch, trace_file):
    """A ``ValueError`` from inside a command is a bug: it keeps its traceback."""
    def bug(*a, **k):
        raise ValueError("operands could not be broadcast together")

    monkeypatch.setattr(analyze, "run_trace", bug)
    with pytest.raises(ValueError, match="broadcast"):
        main(["analyze", "--trace", str(trace_file)])


def test_a_trace_config_mismatch_is_a_trace_error(capsys, tmp_path):
    tr = small_trace()
    tr.linear_x["l.fc1"] = tr.linear_x["l.fc1"][..., :12]
    tr.linear_w["l.fc1"] = tr.linear_w["l.fc1"][:, :12]
    f = save_trace(tmp_path / "k12.npz", tr)
    code, _, err = run(capsys, "analyze", "--trace", str(f))
    assert code == 2 and one_line(err, "K=12 is not a multiple of group=16")


def test_meaningless_figures_are_not_printed_as_results(capsys, tmp_path):
    """All-zero activations: DSTAR does no work (no ratio over it) and there is no signal to
    measure an SQNR against."""
    f = save_trace(tmp_path / "zero.npz", small_trace(np.zeros((2, 4, 16), np.float32)))
    code, text, _ = run(capsys, "analyze", "--trace", str(f))
    assert code == 0
    assert "element-level no work, lockstep no work" in text
    assert "(weight quantization included) W8A8 undefined  DSTAR undefined" in text
    assert "activations W8A8 undefined  DSTAR undefined" in text
    code, text, _ = run(capsys, "analyze", "--trace", str(f), "--json")
    rep = json.loads(text)
    assert rep["ops_ratio_vs_w8a8"] is None and rep["dstar"]["linear_output_sqnr_db"] is None
    assert rep["dstar"]["activation_sqnr_db"] is None


@pytest.mark.parametrize("argv,msg", [
    (["bench", "cycles", "--blocks", "99"], "the bundled DiT has blocks 0 .. 5, got block 99"),
    (["bench", "cycles", "--layers", "mlp.fc9"], "have layers attn.proj, attn.qkv, mlp.fc1, "
                                                 "mlp.fc2, got 'mlp.fc9'"),
    (["bench", "cycles", "--rtl-layer", "fc1"], "no linear layer 'fc1'"),
    (["bench", "attention", "--layers", "6"], "got block 6"),
    (["bench", "attention", "--heads", "4"], "the bundled DiT has heads 0 .. 3, got head 4"),
])
def test_benchmarks_refuse_what_the_dit_does_not_have(capsys, argv, msg):
    code, out, err = run(capsys, *argv, "--preset", "tiny")
    assert code == 2 and out == "" and one_line(err, msg), err
