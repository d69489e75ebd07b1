"""The regression's cases and coverage without a simulator (``dstar.sim.regress``,
``dstar.sim.fmdq_regress``, ``dstar.sim.coverage``), for both encodings' tops: a seed gives the
same cases every time and other seeds other cases; every bin a case's data hits is a declared
bin and every refusal it sends is one the top refuses; a case with a wrong expectation
(``inject_mismatch``) no longer matches the golden model; the report counts failed cases and
gives each a command line that reruns it."""

import numpy as np
import pytest

from dstar.config import preset
from dstar.hw.accelerator import Accelerator
from dstar.hw.generate import manifest
from dstar.sim.coverage import FMDQ_REFUSALS, REFUSALS, Coverage, bin_names, refusals
from dstar.sim.regress import format_report, inject_mismatch, make_case, report


@pytest.fixture(scope="module", params=["fmdq", "nibble"])
def setup(request):
    cfg = preset("tiny", encoding=request.param)
    return cfg, manifest(Accelerator(cfg))


def _same(a, b) -> bool:
    """Deep equality of case structures (dicts, lists, tuples, arrays, scalars)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def test_a_seed_gives_the_same_cases(setup):
    cfg, man = setup
    for i in range(3):
        assert _same(make_case(cfg, man, 11, i), make_case(cfg, man, 11, i))
    assert not _same(make_case(cfg, man, 11, 0)["ops"], make_case(cfg, man, 12, 0)["ops"])
    assert not _same(make_case(cfg, man, 11, 0)["ops"], make_case(cfg, man, 11, 1)["ops"])


def test_cases_hit_declared_bins_and_send_every_refusal(setup):
    cfg, man = setup
    cov = Coverage(bin_names(cfg))
    reasons = set()
    for i in range(12):
        for op in make_case(cfg, man, 3, i)["ops"]:
            for name in op.get("bins", []):
                cov.hit(name)                        # a KeyError for an undeclared bin
            if op["kind"] == "refuse":
                reasons.add(op["reason"])
            for r in op.get("refuse_mid", []):
                reasons.add(r[0])
    assert cov.percent > 40 and "lin.key" not in cov.missed()
    assert reasons == set(refusals(cfg))
    # tiny's 4 slots fill the slot field: no command can name slot 4.
    every = FMDQ_REFUSALS if cfg.encoding.value == "fmdq" else REFUSALS
    assert set(every) - set(refusals(cfg)) == {"att_slot"}
    with pytest.raises(KeyError, match="not a coverage bin"):
        cov.hit("lin.nonsense")


def test_an_injected_mismatch_changes_the_expectation(setup):
    cfg, man = setup
    case = make_case(cfg, man, 5, 0)
    clean = make_case(cfg, man, 5, 0)
    inject_mismatch(case)
    diffs = [j for j, (a, b) in enumerate(zip(case["ops"], clean["ops"], strict=True))
             if not _same(a, b)]
    assert len(diffs) == 1


def test_the_report_names_failed_cases_and_how_to_rerun_them(setup):
    cfg, _ = setup
    names = bin_names(cfg)
    res = {"seed": 42, "first": 0, "cases": 10, "failed_cases": [3],
           "failures": ["case 3: op 2 (linear): Y differs in 1 of 64 values"],
           "hits": {names[0]: 5, names[1]: 1}, "seconds": 12.0}
    rep = report(cfg, res, rerun="dstar regress --preset tiny",
                 seconds={"build": 1.0, "simulation": 13.0, "total": 15.0})
    assert rep["mismatches"] == 1 and rep["seed"] == 42 and rep["cases"] == 10
    assert rep["rerun"] == ["dstar regress --preset tiny --seed 42 --case 3"]
    assert rep["coverage"]["hit"] == 2 and rep["coverage"]["bins"] == len(names)
    text = format_report(rep)
    assert "seed 42 case 3: op 2 (linear): Y differs" in text
    assert "rerun: dstar regress --preset tiny --seed 42 --case 3" in text


@pytest.mark.parametrize("argv,msg", [
    ((), "give --cases N, --minutes M or --case I"),
    (("--case", "3"), "--case 3 needs the --seed of the run it comes from"),
    (("--case", "3", "--seed", "1", "--cases", "2"), "--case reruns one case"),
    (("--cases", "1", "--set", "datapath=int8"), "needs datapath=dstar, not int8"),
    (("--cases", "1", "--set", "tau=x"), "tau expects an integer, got 'x'"),
    (("--cases", "1", "--set", "attention=sar"), "drives attention = 'residual' only, not 'sar'"),
    (("--cases", "1", "--set", "fmdq_rule=magnitude"), "needs fmdq_rule = 'lossless', the rule"),
])
def test_bad_regress_arguments_are_one_line(capsys, argv, msg):
    from dstar.cli import main

    assert main(["regress", *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_fmdq_cases_reach_every_width_shift_and_shape():
    """Twenty FMDQ cases' data and shapes: every sub-channel width, every shift, clipped,
    saturated and skipped sub-channels, a window with no group, ragged K, a partial last token
    tile, the widest M's column blocks, a re-key, junk the top must ignore; each step has a
    beat per sub-channel."""
    cfg = preset("tiny")
    man = manifest(Accelerator(cfg))
    cov = Coverage(bin_names(cfg))
    for i in range(20):
        for op in make_case(cfg, man, 9, i)["ops"]:
            for name in op.get("bins", []):
                cov.hit(name)
            if op["kind"] == "linear":
                n_tiles = -(-op["n"] // cfg.token_tile)
                assert len(op["beats"]) == n_tiles * op["k"]
    want = [f"data.width.{b}" for b in (0, 2, 4, 6, 8)]
    want += [f"data.shift.{e}" for e in range(cfg.e_max + 1)]
    want += ["data.clipped", "data.saturated", "data.window_skipped", "data.unit_widths.all",
             "data.simd_group.mixed_widths", "lin.k.ragged_window", "lin.tokens.partial_tile",
             f"lin.n_mt.{-(-cfg.max_m // (cfg.m_tile * cfg.n_arrays))}", "lin.key_junk_state",
             "lin.pad_junk", "lin.rekey"]
    assert [w for w in want if not cov.hits[w]] == []


def test_every_refusal_fits_the_command_word(setup):
    """Refused commands at the edges of their fields (a ``w_base`` or an address past a memory
    of a power-of-two depth) are drawn many times: each one fits the command word."""
    from dstar.sim.regress import _refusal

    cfg, man = setup
    rng = np.random.default_rng(0)
    for reason in refusals(cfg):
        for _ in range(300):
            word, stream = _refusal(rng, man, cfg, reason)
            assert word >= 0 and stream in ("load", "read", "run", "other")


@pytest.mark.parametrize("tau", [0, 2, 7, 8, 40])
def test_fmdq_width_bins_are_the_widths_the_rule_can_give(tau):
    """``fmdq_widths``: every width it lists is given to some sub-channel of random
    differences of every size, and none it leaves out (the dead zone removes the narrow codes
    whose most negative value lies inside it)."""
    from dstar.golden.fmdq import fmdq_encode
    from dstar.sim.coverage import fmdq_widths

    cfg = preset("tiny", tau=tau)
    rng = np.random.default_rng(tau)
    seen = set()
    for mag in (0, 1, 2, 3, 8, 9, 32, 33, 128, 129, 3000, 40000):
        d = rng.integers(-mag, mag + 1, size=(64, 64))
        seen |= set(fmdq_encode(d, cfg.token_tile, cfg.e_max, tau).width.ravel().tolist())
    assert tuple(sorted(seen)) == fmdq_widths(cfg)
