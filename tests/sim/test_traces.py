"""The trace cache of ``bench cycles`` / ``bench attention`` (``build/traces/``) is written
whole or not at all, a damaged file is computed again, and a cache folder no file can be
written in is refused before the sampling run."""

import numpy as np
import pytest

from dstar.outputs import OutputError
from dstar.sim import traces

LAYER = "blocks.0.mlp.fc1"


def test_a_cache_folder_under_a_file_is_refused_before_sampling(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("DSTAR_BUILD_DIR", str(tmp_path / "f"))

    def sample(*a, **k):
        raise AssertionError("sampled before the cache folder was checked")

    monkeypatch.setattr(traces, "sample_first_steps", sample)
    with pytest.raises(OutputError, match="trace cache folder .*/f' is a file"):
        traces.linear_inputs(LAYER, steps=2, take=1)


def test_a_damaged_cache_is_computed_again_and_an_interrupted_write_leaves_none(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DSTAR_BUILD_DIR", str(tmp_path))

    def sample(shape, weights, steps, take, label, seed, linear):   # one step, small rows
        w = weights[f"{LAYER}.weight"]
        x = np.arange(4 * w.shape[1], dtype=float).reshape(1, 4, w.shape[1])
        linear(LAYER, x, w, weights[f"{LAYER}.bias"], 0)

    monkeypatch.setattr(traces, "sample_first_steps", sample)
    xs, _, _ = traces.linear_inputs(LAYER, steps=2, take=1)
    assert xs.shape[0] == 1
    cache = next((tmp_path / "traces").glob(f"*{LAYER}_*.npz"))
    cache.write_bytes(cache.read_bytes()[:1000])               # truncated, as by Ctrl-C
    again, _, _ = traces.linear_inputs(LAYER, steps=2, take=1)
    np.testing.assert_array_equal(again, xs)
    with np.load(cache) as z:                                  # and written whole this time
        np.testing.assert_array_equal(z["xs"], xs)
    for f in (tmp_path / "traces").iterdir():
        f.unlink()

    def interrupted(f, **arrays):
        f.write(b"PK\x03\x04 part of a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(traces.np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        traces.linear_inputs(LAYER, steps=2, take=1)
    assert list((tmp_path / "traces").iterdir()) == []
