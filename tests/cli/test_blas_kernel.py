"""The OpenBLAS kernel is pinned wherever the golden model runs (``dstar.blas_kernel``): in this
test process and in a fresh interpreter that imports the package first, as ``dstar`` does, so
the float32 products the golden model quantizes round alike on every x86-64 machine."""

import json
import os
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info

import dstar

pytestmark = pytest.mark.skipif(dstar.blas_kernel() is None,
                                reason="no AVX2 x86-64 CPU: OpenBLAS keeps its own kernel")

_PROBE = ("import dstar, json, numpy; from threadpoolctl import threadpool_info; "
          "print(json.dumps([i.get('architecture') for i in threadpool_info() "
          "if i['internal_api'] == 'openblas']))")


def _kernels(info) -> list:
    return [i.get("architecture") for i in info if i["internal_api"] == "openblas"]


def test_the_suite_runs_on_the_pinned_kernel():
    import numpy  # noqa: F401  (loads OpenBLAS if nothing has yet)

    if os.environ.get("OPENBLAS_CORETYPE", dstar.BLAS_KERNEL) != dstar.BLAS_KERNEL:
        pytest.skip("OPENBLAS_CORETYPE is set to another kernel outside the suite")
    assert _kernels(threadpool_info()) == [dstar.BLAS_KERNEL]


def test_a_fresh_interpreter_importing_dstar_is_pinned():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == [dstar.BLAS_KERNEL]
    # Without the package first, OpenBLAS picks by CPU (on an AVX-512 CPU, another kernel): the
    # pin is what makes the two agree.
    out = subprocess.run([sys.executable, "-c", _PROBE.replace("import dstar, ", "import ")],
                         env=env, check=True, capture_output=True, text=True).stdout
    assert len(json.loads(out)) == 1
