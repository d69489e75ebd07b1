"""A digest of the sources generated Verilog comes from (``dstar.hw`` and the configuration
module), so that a cached ``.v`` from an earlier version of dstar is not reused."""

import hashlib
from pathlib import Path

import dstar.config as config_module

__all__ = ["source_digest"]


def source_digest() -> str:
    """SHA-256 (hex) of every ``dstar.hw`` source file and ``dstar.config``, by name and
    contents, in path order."""
    h = hashlib.sha256()
    files = [*sorted(Path(__file__).parent.rglob("*.py")), Path(config_module.__file__)]
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
