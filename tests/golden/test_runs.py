"""The main job's runs in worker processes give the figures of one process, bit for bit."""

import numpy as np

from dstar.config import preset
from dstar.golden.dit import DiT
from dstar.golden.runs import PATHS, run_paths


def test_workers_give_the_results_of_one_process():
    cfg = preset("default").replace(steps=2, samples=1)
    model = DiT.bundled()
    seen = []
    one = run_paths(cfg, model, workers=1)
    two = run_paths(cfg, model, progress=lambda tag, i, n: seen.append((tag, i, n)), workers=2)
    assert set(one) == set(two) == set(PATHS)
    for tag in PATHS:
        assert np.array_equal(one[tag][0], two[tag][0]), tag
        assert two[tag][1] > 0
    assert one["dstar"][2].counts.keys() == two["dstar"][2].counts.keys()
    for step, counts in one["dstar"][2].counts.items():
        assert np.array_equal(counts, two["dstar"][2].counts[step])
    a, b = one["attention"][2], two["attention"][2]
    assert a["blocks_computed_fraction"] == b["blocks_computed_fraction"]
    assert sorted(seen) == sorted((tag, i, 2) for tag in PATHS for i in range(2))
