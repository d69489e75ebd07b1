"""``dstar run`` with ``attention = "sar"`` (issue 29): block 0 of the bundled DiT over the
first three steps of a real SAR sampling run (refresh 2: a cache step, a reuse step, a cache
step) on the ``tiny`` tiles with memories that hold the bundled block, the masks of the mask
file loaded into the top at each head's cache step, the eight (batch element, head) slots
sharing the top's four (score caches saved and restored). Every operation bit-exact against
the golden model with the top's counters equal to the cycle models', the block's float output
equal to the golden SAR pipeline's.

On Icarus (both encodings) the block's first 2 tokens (one block: every block kept; Icarus
runs this top at about a hundred cycles a second on a loaded machine); on Verilator, through the
command line, its first 17 tokens (2 x 2 blocks: layer 0's masks cut to them, three query blocks
given their largest-mass block, so that the masks decide the blocks computed). Each builds and
simulates the accelerator top for minutes: ``slow`` tier (the host side's golden checks run in
the default tier: ``tests/sim/test_host.py``)."""

import json

import numpy as np
import pytest

from dstar.cli import main
from dstar.config import preset
from dstar.golden.dit import BLOCK_OPS, DiT
from dstar.paths import BUILD_DIR_ENV
from dstar.run import run_block
from dstar.sim.block_run import block_masks
from dstar.sim.simulators import Simulator
from tests.conftest import BUILD
from tests.hw.fixtures import need_iverilog, need_verilator

#: ``tests.hw.test_run_icarus.CFG`` with SAR.
CFG = preset("tiny").replace(max_k=512, max_m=512, head_dim=32, attention="sar",
                             refresh_attn=2)

pytestmark = pytest.mark.slow


def check_sar_report(rep, cfg, ops, tokens):
    """Bit-exact, counters equal to the models', the SAR cadence, the masks computed."""
    assert rep["attention"] == "sar" and rep["encoding"] == str(cfg.encoding)
    assert rep["steps"] == 3 and rep["tokens"] == tokens and rep["batch"] == 2
    assert rep["bit_exact"] and rep["counters_equal"] and rep["outputs_equal"] == [True] * 3
    assert rep["cycles"] == rep["predicted_cycles"] > 0
    assert list(rep["per_op"]) == list(BLOCK_OPS)
    for d in rep["per_op"].values():                 # qkv whole on reuse steps too
        assert d["runs"] == 3 and d["cycles"] == d["predicted_cycles"] > 0
    assert [r["kind"] for r in ops if r["op"] == "attention"] == ["cache", "reuse", "cache"]
    kinds = rep["attention_steps"]
    assert [(k, d["runs"]) for k, d in kinds.items()] == [("cache", 2), ("reuse", 1)]
    kept = block_masks(cfg, DiT.bundled(), 0, tokens).mean()
    for d in kinds.values():                    # PV on the kept blocks only, at every step
        assert d["cycles"] == d["predicted_cycles"] > 0
        assert d["blocks_computed"] == pytest.approx(kept)
    # No QK^T and softmax on the reuse step.
    assert kinds["reuse"]["cycles"] < kinds["cache"]["cycles"] / kinds["cache"]["runs"]
    reuse = next(r for r in ops if r["op"] == "attention" and r["kind"] == "reuse")
    assert reuse["counters"]["attention_qk_tiles"] == 0
    return kept


@pytest.mark.parametrize("encoding", ["nibble", "fmdq"])
def test_dstar_run_sar_on_icarus(encoding):
    need_iverilog()
    cfg = CFG.replace(encoding=encoding)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(BUILD_DIR_ENV, str(BUILD / "dstar-run"))
        mp.delenv("WAVES", raising=False)
        rep = run_block(cfg, sim=Simulator.ICARUS, tokens=2, say=lambda *_: None)
    ops = json.loads((BUILD / "dstar-run" / "run" / rep["folder"].rsplit("/", 1)[-1]
                      / "ops.json").read_text())
    assert rep["sim"] == "icarus"
    assert check_sar_report(rep, cfg, ops, 2) == 1.0


def test_dstar_run_sar_on_verilator(capsys, monkeypatch):
    """The command line end to end (nibble linears), 17 tokens: the masks decide the blocks
    computed; the report names the attention mode and its step kinds; the run's folder holds
    the masks it loaded."""
    need_verilator()
    monkeypatch.setenv(BUILD_DIR_ENV, str(BUILD / "dstar-run"))
    code = main(["run", "--sim", "verilator", "--preset", "tiny", "--set", "max_k=512",
                 "--set", "max_m=512", "--set", "head_dim=32", "--set", "attention=sar",
                 "--set", "refresh_attn=2", "--set", "encoding=nibble", "--tokens", "17",
                 "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    rep = json.loads(out.out)
    cfg = CFG.replace(encoding="nibble")
    folder = BUILD / "dstar-run" / "run" / rep["folder"].rsplit("/", 1)[-1]
    assert rep["sim"] == "verilator"
    kept = check_sar_report(rep, cfg, json.loads((folder / "ops.json").read_text()), 17)
    assert 0 < kept < 1
    with np.load(folder / "inputs.npz") as z:
        assert np.array_equal(z["mask"], block_masks(cfg, DiT.bundled(), 0, 17))
    for s, kind in enumerate(("cache", "reuse", "cache")):
        assert f"step {s} attention ({kind}, 8 heads)" in out.err
