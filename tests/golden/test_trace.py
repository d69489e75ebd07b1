import re

import numpy as np
import pytest

from dstar.analyze import export_trace, run_trace
from dstar.golden.trace import FORMAT, Stacked, Trace, TraceError, load_trace, save_trace


def small_trace(rng, steps=3, n=8, k=32, m=16):
    tr = Trace(steps=steps, timesteps=np.arange(steps)[::-1].copy())
    x = rng.normal(size=(n, k))
    xs = [x + 0.01 * s * rng.normal(size=x.shape) for s in range(steps)]
    tr.linear_x["blocks.0.mlp.fc1"] = np.stack(xs).astype(np.float32)
    tr.linear_w["blocks.0.mlp.fc1"] = rng.normal(size=(m, k)).astype(np.float32)
    tr.linear_b["blocks.0.mlp.fc1"] = rng.normal(size=m).astype(np.float32)
    tr.linear_x["blocks.0.attn.proj"] = np.stack(xs).astype(np.float32)
    tr.linear_w["blocks.0.attn.proj"] = rng.normal(size=(m, k)).astype(np.float32)
    tr.linear_b["blocks.0.attn.proj"] = None
    q = rng.normal(size=(steps, 1, 2, n, 4)).astype(np.float32)
    tr.attn["blocks.0.attn"] = (q, q + 1, q - 1)
    return tr


def test_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    tr = small_trace(rng)
    f = tmp_path / "t.npz"
    save_trace(f, tr)
    back = load_trace(f)
    assert back.steps == tr.steps and np.array_equal(back.timesteps, tr.timesteps)
    for name in tr.linear_x:
        assert np.array_equal(back.linear_x[name], tr.linear_x[name])
        assert np.array_equal(back.linear_w[name], tr.linear_w[name])
        assert (back.linear_b[name] is None) == (tr.linear_b[name] is None)
    for a, b in zip(back.attn["blocks.0.attn"], tr.attn["blocks.0.attn"], strict=True):
        assert np.array_equal(a, b)


def _saved_small_trace(tmp_path):
    """``small_trace`` of seed 1 and the file it was saved to."""
    tr = small_trace(np.random.default_rng(1))
    f = tmp_path / "t.npz"
    save_trace(f, tr)
    return tr, f


def test_analysis_of_a_trace_is_the_golden_model(tmp_path):
    """run_trace on a saved trace gives the same counts as DiffLinear on the arrays directly."""
    from dstar.config import preset
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.stats import FIELDS, count_encoded
    tr, f = _saved_small_trace(tmp_path)
    cfg = preset("default", encoding="nibble")
    rep = run_trace(cfg, load_trace(f))
    assert rep["encoding"] == "nibble" and "fmdq" not in rep
    want = np.zeros(len(FIELDS), np.int64)
    sig = err = 0.0
    for name, xs in tr.linear_x.items():
        layer = DiffLinear(tr.linear_w[name], tr.linear_b[name], cfg)
        for s in range(tr.steps):
            want += count_encoded(layer(xs[s], s).enc)
            x = xs[s].astype(np.float64)
            sig += (x ** 2).sum()
            err += ((layer.xs * layer.d[:, None] - x) ** 2).sum()
    want = dict(zip(FIELDS, want, strict=True))
    assert rep["dstar"]["mean_passes"] == pytest.approx((want["low"] + 2 * want["high"])
                                                        / want["elements"])
    assert rep["layers"] == 2 and rep["steps"] == 3
    assert set(rep["per_layer_type"]) == {"fc1", "proj"}
    d, w = rep["dstar"], rep["w8a8"]
    assert d["linear_output_sqnr_db"] > 25 and w["linear_output_sqnr_db"] > 25
    # The activation SQNR is the reconstruction's (the dequantized state) against the input.
    assert d["activation_sqnr_db"] == pytest.approx(10 * np.log10(sig / err), rel=1e-12)
    assert d["activation_sqnr_db"] > w["activation_sqnr_db"]
    # The recorded attention ran DSTAR's reuse, teacher-forced, as the hook does directly.
    from dstar.golden.attention import AttentionReuse
    hook = AttentionReuse(cfg, measure=True)
    q, k, v = tr.attn["blocks.0.attn"]
    for s in range(tr.steps):
        hook("blocks.0.attn", q[s].astype(np.float64), k[s].astype(np.float64),
             v[s].astype(np.float64), s)
    a = rep["attention"]
    assert a["layers"] == 1
    assert a["blocks_computed_fraction"] == hook.stats()["blocks_computed_fraction"]
    assert a["output_rel_err_vs_float"] == hook.stats()["err_vs_float"]
    # What the configured hardware could not run is said, per layer.
    assert rep["hardware_fit"] == ["blocks.0.attn: Dh=4 != head_dim=32"]
    small = run_trace(cfg.replace(max_k=16, max_tokens=4), load_trace(f))["hardware_fit"]
    assert "blocks.0.mlp.fc1: K=32 > max_k=16" in small
    assert "blocks.0.mlp.fc1: tokens=8 > max_tokens=4" in small



def test_an_fmdq_trace_analysis_is_the_golden_model(tmp_path):
    """With ``encoding = "fmdq"`` the trace's linears run FMDQ: its counts are DiffLinear's on
    the arrays directly, its errors FMDQ's reconstruction, and v1's element mix stays beside."""
    from dstar.config import preset
    from dstar.golden.difflinear import DiffLinear
    from dstar.golden.fmdq_stats import FmdqStats
    from dstar.golden.stats import FIELDS, count_encoded
    tr, f = _saved_small_trace(tmp_path)
    cfg = preset("default", encoding="fmdq")
    rep = run_trace(cfg, load_trace(f))
    want = np.zeros(len(FmdqStats.FIELDS), np.int64)
    v1 = np.zeros(len(FIELDS), np.int64)
    sig = err = 0.0
    for name, xs in tr.linear_x.items():
        layer = DiffLinear(tr.linear_w[name], tr.linear_b[name], cfg)
        nib = DiffLinear(tr.linear_w[name], tr.linear_b[name], cfg.replace(encoding="nibble"))
        for s in range(tr.steps):
            want += layer(xs[s], s).counts
            v1 += count_encoded(nib(xs[s], s).enc)
            x = xs[s].astype(np.float64)
            sig += (x ** 2).sum()
            err += ((layer.xs * layer.d[:, None] - x) ** 2).sum()
    assert rep["encoding"] == "fmdq" and rep["fmdq"]["token_tile"] == cfg.token_tile
    assert {k: rep["fmdq"]["all"][k] for k in FmdqStats.FIELDS} \
        == dict(zip(FmdqStats.FIELDS, want.tolist(), strict=True))
    v1 = dict(zip(FIELDS, v1, strict=True))
    assert rep["dstar"]["mean_passes"] == pytest.approx((v1["low"] + 2 * v1["high"])
                                                        / v1["elements"])
    assert rep["dstar"]["activation_sqnr_db"] == pytest.approx(10 * np.log10(sig / err),
                                                               rel=1e-12)

def test_export_from_the_numpy_model_round_trips(tmp_path, tiny_cfg):
    f = tmp_path / "bundled.npz"
    cfg = tiny_cfg.replace(steps=2, samples=1)
    written = export_trace(cfg, tmp_path / "bundled", layers=["blocks.0.mlp.fc1",
                                                              "blocks.5.mlp.fc2"])
    assert written == f
    tr = load_trace(f)
    assert tr.steps == 2 and tr.timesteps.tolist() == [999, 0]
    assert tr.linear_x["blocks.0.mlp.fc1"].shape == (2, 2 * 256, 128)   # CFG doubles rows
    assert tr.linear_x["blocks.5.mlp.fc2"].shape == (2, 2 * 256, 512)
    assert set(tr.attn) == {f"blocks.{i}.attn" for i in range(6)}
    assert tr.attn["blocks.0.attn"][0].shape == (2, 2, 4, 256, 32)
    assert tr.linear_tokens == {"blocks.0.mlp.fc1": 256, "blocks.5.mlp.fc2": 256}
    assert tr.cfg_halves
    rep = run_trace(cfg, tr)
    assert (rep["rows_per_linear"], rep["batch"], rep["tokens"]) == (512, 2, 256)


def _write(path, **entries):
    np.savez(path, **entries)
    return path


@pytest.mark.parametrize("entries,msg", [
    ({}, "no 'format' entry"),
    ({"format": np.array("other/9"), "steps": np.array(1)}, "format is 'other/9'"),
    ({"format": np.array(FORMAT)}, "no 'steps' entry"),
    ({"format": np.array(FORMAT), "steps": np.array(2)}, "holds no linear layers"),
    ({"format": np.array(FORMAT), "steps": np.array(2), "linear/a/x": np.zeros((3, 4, 16))},
     r"linear/a/x must be \(steps=2, N, K\)"),
    ({"format": np.array(FORMAT), "steps": np.array(1), "linear/a/x": np.zeros((1, 4, 16))},
     "linear/a/weight is missing"),
    ({"format": np.array(FORMAT), "steps": np.array(1), "linear/a/x": np.zeros((1, 4, 16)),
      "linear/a/weight": np.zeros((8, 15))}, "weight has K=15 but linear/a/x has K=16"),
    ({"format": np.array(FORMAT), "steps": np.array(1), "linear/a/x": np.full((1, 4, 16), np.nan),
      "linear/a/weight": np.zeros((8, 16))}, "non-finite"),
    ({"format": np.array(FORMAT), "steps": np.array(1), "linear/a/x": np.zeros((1, 4, 16), int),
      "linear/a/weight": np.zeros((8, 16))}, "floating point"),
    ({"format": np.array(FORMAT), "steps": np.array(1), "bogus": np.zeros(2)},
     "unknown entry 'bogus'"),
])
def test_bad_traces_are_named(tmp_path, entries, msg):
    f = _write(tmp_path / "bad.npz", **entries)
    with pytest.raises(TraceError, match=msg):
        load_trace(f)


def test_unreadable_and_missing_files(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "none.npz")
    f = tmp_path / "text.npz"
    f.write_text("hello")
    with pytest.raises(TraceError, match="not an .npz archive"):
        load_trace(f)


def test_save_names_the_file_it_writes_and_leaves_no_temporary(tmp_path):
    tr = small_trace(np.random.default_rng(4))
    written = save_trace(tmp_path / "t1", tr)
    assert written == tmp_path / "t1.npz" and written.is_file()
    assert save_trace(tmp_path / "t2.npz", tr) == tmp_path / "t2.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t1.npz", "t2.npz"]
    assert load_trace(written).steps == tr.steps


def test_an_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    tr = small_trace(np.random.default_rng(5))
    f = save_trace(tmp_path / "t.npz", tr)
    before = f.read_bytes()

    def chunks(x):
        yield x[:1]
        raise KeyboardInterrupt          # Ctrl-C in the middle of a member's data

    new = small_trace(np.random.default_rng(6))
    name, x = next(iter(new.linear_x.items()))
    new.linear_x[name] = Stacked(x.shape, x.dtype, lambda: chunks(x))
    with pytest.raises(KeyboardInterrupt):
        save_trace(f, new)
    assert f.read_bytes() == before and sorted(tmp_path.iterdir()) == [f]


def test_stacked_arrays_stream_into_the_file_and_float16_inputs_load(tmp_path):
    tr = small_trace(np.random.default_rng(7))
    name, x = next(iter(tr.linear_x.items()))
    tr.linear_x[name] = Stacked(x.shape, np.float16, lambda: (x[s][None] for s in range(len(x))))
    tr.linear_tokens[name] = x.shape[1]
    tr.cfg_halves = True
    got = load_trace(save_trace(tmp_path / "s", tr))
    assert got.linear_x[name].dtype == np.float16
    assert np.array_equal(got.linear_x[name], x.astype(np.float16))
    assert got.linear_tokens == {name: x.shape[1]} and got.cfg_halves
    short = small_trace(np.random.default_rng(7))
    short.linear_x[name] = Stacked(x.shape, x.dtype, lambda: [x[:1]])
    with pytest.raises(ValueError, match="chunks hold"):
        save_trace(tmp_path / "short", short)
    assert not (tmp_path / "short.npz").exists()


def _damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        # Cut inside the first member's data but keep a valid zip directory: rebuild the
        # archive with that member's bytes truncated.
        import zipfile
        members = {}
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                members[info.filename] = z.read(info.filename)
        name = next(n for n in members if n.startswith("linear/"))
        with zipfile.ZipFile(path, "w") as z:
            for n, b in members.items():
                z.writestr(n, b[: len(b) // 2] if n == name else b)
        return
    # Flip a byte in the middle of the compressed data: the CRC (or inflate) fails on reading.
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "bad-crc"])
def test_damaged_files_are_one_trace_error(tmp_path, how):
    f = save_trace(tmp_path / "t.npz", small_trace(np.random.default_rng(7)))
    _damage(f, how)
    with pytest.raises(TraceError) as e:
        load_trace(f)
    assert str(e.value).startswith(f"trace {str(f)!r}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize("steps", [np.array([3, 3]), np.array(3.0), np.array("3")])
def test_steps_must_be_one_integer(tmp_path, steps):
    tr = small_trace(np.random.default_rng(8))
    f = save_trace(tmp_path / "t.npz", tr)
    with np.load(f) as z:
        entries = {k: z[k] for k in z.files}
    entries["steps"] = steps
    np.savez(f, **entries)
    with pytest.raises(TraceError, match="steps must be one integer"):
        load_trace(f)


@pytest.mark.parametrize("n,k,m", [(0, 32, 16), (8, 0, 16), (8, 32, 0)])
def test_empty_layers_are_refused(tmp_path, n, k, m):
    f = save_trace(tmp_path / "t.npz", small_trace(np.random.default_rng(9), n=n, k=k, m=m))
    with pytest.raises(TraceError, match=r"must be \((steps=3, N, K|M, K|steps=3, B, H, N, "
                                         r"Dh)\) with .* >= 1, got"):
        load_trace(f)


def test_a_folder_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError, match="is a folder, not a file"):
        load_trace(tmp_path)


def test_timesteps_must_be_integers(tmp_path):
    tr = small_trace(np.random.default_rng(10))
    f = save_trace(tmp_path / "t.npz", tr)
    with np.load(f) as z:
        entries = {k: z[k] for k in z.files}
    entries["timesteps"] = entries["timesteps"].astype(np.float64)
    np.savez(f, **entries)
    with pytest.raises(TraceError, match="timesteps must be integers, got float64"):
        load_trace(f)


def test_a_trace_of_huge_values_is_undefined_without_warnings(recwarn):
    """Energies that overflow float64 make the SQNRs undefined (NaN), quietly."""
    from dstar.config import preset
    tr = Trace(steps=2)
    rng = np.random.default_rng(0)
    tr.linear_x["l.fc1"] = rng.normal(size=(2, 4, 16)) * 1e200
    tr.linear_w["l.fc1"], tr.linear_b["l.fc1"] = np.ones((3, 16), np.float32), None
    rep = run_trace(preset("default"), tr)
    assert np.isnan(rep["dstar"]["linear_output_sqnr_db"])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("shape", [(1, 1, 2, 0, 4), (1, 1, 2, 8, 0), (1, 0, 2, 8, 4)])
def test_an_empty_attention_axis_is_refused(tmp_path, shape):
    a = np.zeros(shape, np.float32)
    f = _write(tmp_path / "a.npz", format=np.array(FORMAT), steps=np.array(1),
               **{"linear/a/x": np.zeros((1, 4, 16)), "linear/a/weight": np.zeros((8, 16))},
               **{f"attn/blk/{c}": a for c in "qkv"})
    with pytest.raises(TraceError, match=r"attn/blk/\w must be .* >= 1, got " + re.escape(
            str(shape))):
        load_trace(f)


@pytest.mark.parametrize("member", ["steps", "linear/a/x"])
def test_a_member_that_is_not_npy_is_named(tmp_path, member):
    import io
    import zipfile

    def npy(a):
        b = io.BytesIO()
        np.save(b, a)
        return b.getvalue()

    members = {"format": npy(np.array(FORMAT)), "steps": npy(np.array(1)),
               "linear/a/x": npy(np.zeros((1, 4, 16))), "linear/a/weight": npy(np.zeros((8, 16)))}
    members[member] = b"garbage"
    with zipfile.ZipFile(tmp_path / "n.npz", "w") as z:
        for k, data in members.items():
            z.writestr(k + ".npy", data)
    with pytest.raises(TraceError, match=f"entry '{member}' is not a NumPy array"):
        load_trace(tmp_path / "n.npz")
