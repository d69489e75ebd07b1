"""Dependencies point one way: configuration and golden model at the bottom (no Amaranth), then
``dstar.hw``, ``dstar.sim``, ``dstar.synth``, and the command line and analysis on top. Every
import statement of the project (module level or inside a function) is checked."""

import ast
from importlib.resources import files
from pathlib import Path

#: Layer of each part; a module may import only from its own layer or below.
LAYERS = {"config": 0, "paths": 0, "outputs": 0, "golden": 1, "hw": 2, "sim": 3, "synth": 4}
TOP = 5                      # every other dstar module: cli, analyze, results, train, ...
#: Parts that must not import Amaranth (NumPy-only layers, and the hardware's Amaranth-free
#: geometry module that the cycle models use).
NO_AMARANTH = {"config", "paths", "outputs", "golden", "hw.geometry"}


def _part(module: str) -> str:
    """``hw.pe_array`` -> ``hw``; ``config`` -> ``config`` (names without ``dstar.``)."""
    return module.split(".")[0]


def _modules():
    root = Path(str(files("dstar")))
    for pkg in ("", "golden", "hw", "sim", "synth"):
        base = Path(str(files(f"dstar.{pkg}"))) if pkg else root
        pattern = "**/*.py" if pkg else "*.py"
        for path in sorted(base.glob(pattern)):
            rel = path.relative_to(base).with_suffix("")
            name = ".".join(["dstar", *([pkg] if pkg else []), *rel.parts])
            yield name.removesuffix(".__init__"), path


def _imports(name: str, path: Path):
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            else:
                yield node.module


def test_no_module_imports_from_a_layer_above_it():
    bad = []
    for name, path in _modules():
        here = LAYERS.get(_part(name.removeprefix("dstar.")), TOP)
        for imp in _imports(name, path):
            if imp.split(".")[0] != "dstar" or imp == "dstar":
                continue
            there = LAYERS.get(_part(imp.removeprefix("dstar.")), TOP)
            if there > here:
                bad.append(f"{name} imports {imp}")
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_the_bottom_layers_import_no_amaranth():
    bad = []
    for name, path in _modules():
        short = name.removeprefix("dstar.")
        if not any(short == p or short.startswith(p + ".") for p in NO_AMARANTH):
            continue
        bad += [f"{name} imports {imp}" for imp in _imports(name, path)
                if imp.split(".")[0] == "amaranth"]
    assert not bad, "\n".join(bad)
