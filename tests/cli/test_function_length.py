"""Files of one idea: no function in ``hw/``, ``golden/`` or ``sim/`` runs over ~150 lines, and
no class is defined inside a function."""

import ast
from importlib.resources import files
from pathlib import Path

MAX_LINES = 160
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _offenders():
    out = []
    for pkg in ("hw", "golden", "sim"):
        root = Path(str(files(f"dstar.{pkg}")))
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not isinstance(node, FUNCS):
                    continue
                where = f"{pkg}/{path.relative_to(root)}:{node.lineno} {node.name}"
                if node.end_lineno - node.lineno + 1 > MAX_LINES:
                    out.append(f"{where}: {node.end_lineno - node.lineno + 1} lines")
                out += [f"{where}: class {sub.name} inside" for sub in ast.walk(node)
                        if isinstance(sub, ast.ClassDef)]
    return out


def test_no_long_functions_and_no_local_classes():
    assert _offenders() == []
