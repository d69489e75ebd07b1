"""The case files the cocotb tests hand to their testbenches: one ``.npz`` of named cases, each
a dict of arrays, stored under ``case/array`` keys (case names contain no ``/``)."""

import json
import os

import numpy as np

__all__ = ["save_cases", "load_cases", "from_env"]


def save_cases(path, cases: dict) -> None:
    """Write ``{case name: {array name: array}}`` to the ``.npz`` file ``path``."""
    np.savez(path, **{f"{c}/{k}": v for c, d in cases.items() for k, v in d.items()})


def load_cases(path) -> list:
    """The cases of ``path`` as ``[(case name, {array name: array})]``, sorted by name."""
    with np.load(path) as z:
        files = {k: z[k] for k in z.files}
    names = sorted({k.split("/")[0] for k in files})
    return [(name, {k.split("/", 1)[1]: v for k, v in files.items()
                    if k.startswith(name + "/")}) for name in names]


def from_env(params_var: str, cases_var: str):
    """In a testbench: ``(params, cases)``, the JSON file named by the environment variable
    ``params_var`` and the cases (``load_cases``) of the file named by ``cases_var``."""
    with open(os.environ[params_var]) as f:
        params = json.load(f)
    return params, load_cases(os.environ[cases_var])
