"""One ``manifest(top)`` for every top: each describes itself from its own geometry and
layouts, and the accelerator states its parts' rules as its parts do (no elaboration)."""

import pytest

from dstar.config import preset
from dstar.hw.accelerator import Accelerator, Mem
from dstar.hw.attention import AttentionEngine
from dstar.hw.generate import (
    ACCEL_TOP_NAME,
    ATTN_TOP_NAME,
    SCHEMA_VERSION,
    TOP_NAME,
    manifest,
    top_of,
)

CONFIGS = {"nibble": dict(encoding="nibble"), "fmdq": dict(encoding="fmdq"),
           "sar": dict(encoding="nibble", attention="sar", head_dim=16)}


def _silenced(top):
    top._MustUse__silence = True        # built for its description only, never elaborated
    return top


@pytest.fixture(scope="module", params=list(CONFIGS))
def tops(request):
    cfg = preset("tiny").replace(**CONFIGS[request.param])
    return cfg, {name: _silenced(make(cfg)) for name, make in
                 ((TOP_NAME, top_of), (ATTN_TOP_NAME, AttentionEngine),
                  (ACCEL_TOP_NAME, Accelerator))}


def test_every_top_describes_itself(tops):
    cfg, by_name = tops
    for name, top in by_name.items():
        man = manifest(top)
        assert (man["top"], man["verilog"]) == (name, f"{name}.v")
        assert man["schema_version"] == SCHEMA_VERSION
        assert man["config"] == cfg.hardware() and man["derived"] == cfg.derived()
        assert man["geometry"] == top.geometry.to_dict()
        assert set(man["layouts"]) == set(top.layouts())
        assert man["ports"] and all(p["width"] > 0 for p in man["ports"].values())


def test_the_accelerator_states_its_parts_as_they_do(tops):
    """Its parts take their geometry from the accelerator's; its attention memories' address
    rules are the engine's (one statement); its geometry is its linear datapath's."""
    _, by_name = tops
    acc, att = by_name[ACCEL_TOP_NAME], by_name[ATTN_TOP_NAME]
    geo = acc.geometry
    assert acc.linear_geometry == geo.linear and acc.attention_geometry == geo.attention
    man, att_man = manifest(acc), manifest(att)
    assert man["geometry"] == geo.linear.to_dict()
    assert man["attention_geometry"] == geo.attention.to_dict()
    engine_rules = {Mem[k.upper()].name: rule for k, rule in att_man["addresses"].items()}
    mems = man["memories"]
    assert engine_rules and set(engine_rules) <= set(mems)
    for name, rule in engine_rules.items():
        assert mems[name]["address"] == rule, name
    assert set(mems) == set(geo.depths)
    assert set(man["layouts"]) == {"command", *geo.depths}
