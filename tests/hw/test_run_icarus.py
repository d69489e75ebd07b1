"""``dstar run`` on Icarus: block 0 of the bundled DiT over the first three steps of a real
sampling run (a linear and attention key step, a reuse step, an attention key step) on the
``tiny`` tiles with memories that hold the bundled block, its first 2 tokens: every operation
bit-exact against the golden model with the top's counters equal to the cycle models', the
block's float output equal to the golden pipeline's. The same plan on Verilator gives the same
records, outputs and clock cycles (the two simulators agree). A whole-block run on Icarus (about
6 minutes on a quiet machine): ``slow`` tier."""

import json

import numpy as np
import pytest

from dstar.config import preset
from dstar.golden.dit import BLOCK_OPS
from dstar.paths import BUILD_DIR_ENV
from dstar.run import run_block
from dstar.sim.simulators import Simulator
from tests.conftest import BUILD
from tests.hw.fixtures import need_iverilog, need_verilator

#: ``tests.hw.test_run_verilator.SMALL`` as a configuration (the same folder, the same
#: ``dstar.v``).
CFG = preset("tiny").replace(max_k=512, max_m=512, head_dim=32)
TOKENS = 2

pytestmark = pytest.mark.slow


def _run(sim: Simulator) -> tuple[dict, list, dict]:
    """The report, the operation records and the outputs of ``CFG``'s run on ``sim``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(BUILD_DIR_ENV, str(BUILD / "dstar-run"))
        mp.delenv("WAVES", raising=False)
        rep = run_block(CFG, sim=sim, tokens=TOKENS, say=lambda *_: None)
    folder = BUILD / "dstar-run" / "run" / rep["folder"].rsplit("/", 1)[-1]
    ops = json.loads((folder / "ops.json").read_text())
    with np.load(folder / "outputs.npz") as z:
        outs = {k: z[k] for k in z.files}
    return rep, ops, outs


@pytest.fixture(scope="module")
def icarus_run():
    need_iverilog()
    return _run(Simulator.ICARUS)


def test_dstar_run_on_icarus(icarus_run):
    rep, ops, _ = icarus_run
    assert rep["sim"] == "icarus" and rep["steps"] == 3 and rep["tokens"] == TOKENS
    assert rep["bit_exact"] and rep["counters_equal"] and rep["outputs_equal"] == [True] * 3
    assert rep["cycles"] == rep["predicted_cycles"] > 0
    assert list(rep["per_op"]) == list(BLOCK_OPS)
    for d in rep["per_op"].values():
        assert d["runs"] == 3 and d["cycles"] == d["predicted_cycles"] > 0
    assert [r["key"] for r in ops if r["op"] == "attention"] == [True, False, True]
    assert [r["key"] for r in ops if r["op"] == "qkv"] == [True, False, False]


def test_icarus_and_verilator_agree(icarus_run):
    """Every operation's counters, the block's outputs and the steps' clock cycles (the host's
    traffic included) are the same on both simulators."""
    need_verilator()
    rep_i, ops_i, outs_i = icarus_run
    rep_v, ops_v, outs_v = _run(Simulator.VERILATOR)
    assert rep_v["sim"] == "verilator" and rep_v["bit_exact"]
    assert ops_v == ops_i and len(ops_i) == 5 * 3
    assert rep_v["clock_cycles"] == rep_i["clock_cycles"] > rep_i["cycles"]
    assert outs_v.keys() == outs_i.keys() == {"out0", "out1", "out2"}
    for k in outs_i:
        assert outs_v[k].dtype == outs_i[k].dtype and np.array_equal(outs_v[k], outs_i[k])
