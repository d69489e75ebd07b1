"""``dstar run``'s folder: the accelerator top is generated again unless the folder's Verilog is
this configuration's and was made by these sources (a ``dstar.v`` of an earlier dstar with
another address rule would fail every run)."""

import json

from dstar import run
from dstar.config import preset


def test_the_verilog_is_reused_only_for_the_same_config_and_generator(tmp_path, monkeypatch):
    made = []

    def build(cfg):         # the real generator takes a minute; its output is tested elsewhere
        made.append(cfg)
        man = {"accelerator": {"config": cfg.hardware()}}
        return {"dstar.v": f"// {len(made)}\n", "params.json": json.dumps(man)}, man

    monkeypatch.setattr(run, "build_accelerator", build)
    said = []
    cfg = preset("tiny")
    run._generate(cfg, tmp_path, said.append)
    run._generate(cfg, tmp_path, said.append)
    assert len(made) == 1 and said[-1].startswith("reusing")
    stamp = tmp_path / "generator.sha256"
    assert stamp.read_text() == run._generator_digest() + "\n"
    stamp.write_text("0" * 64 + "\n")                   # made by another version
    run._generate(cfg, tmp_path, said.append)
    assert len(made) == 2 and (tmp_path / "dstar.v").read_text() == "// 2\n"
    run._generate(cfg.replace(max_tokens=64), tmp_path, said.append)
    assert len(made) == 3
    stamp.unlink()                                      # a folder from before the stamps
    run._generate(cfg.replace(max_tokens=64), tmp_path, said.append)
    assert len(made) == 4
