"""dstar: an RTL generator for the DSTAR diffusion-transformer accelerator (see README.md).

Importing the package pins OpenBLAS's kernel on x86-64 (``blas_kernel``): NumPy's float32
matrix products round differently under each kernel OpenBLAS picks for the CPU (AVX2 or
AVX-512), and the golden model quantizes their results, so the same workload gave another element
mix, other cycles and other recorded figures on another machine. It must run before NumPy is
first imported (the variable is read as OpenBLAS loads); a value already in the environment is
kept.
"""

import os
import platform
from pathlib import Path

__all__ = ["BLAS_KERNEL", "blas_kernel"]

#: The OpenBLAS kernel of every figure on record: AVX2 and FMA, which every x86-64 CPU since 2013
#: has (Intel Haswell, AMD Zen), and the one its Zen kernel rounds like.
BLAS_KERNEL = "Haswell"


def blas_kernel() -> str | None:
    """The ``OPENBLAS_CORETYPE`` to pin here: ``BLAS_KERNEL`` on an x86-64 Linux CPU with AVX2 and
    FMA, else None (another architecture, or a CPU the kernel would not run on)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return None
    return BLAS_KERNEL if "avx2" in flags and "fma" in flags else None


if blas_kernel() and "OPENBLAS_CORETYPE" not in os.environ:
    os.environ["OPENBLAS_CORETYPE"] = BLAS_KERNEL
