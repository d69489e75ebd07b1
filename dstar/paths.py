"""Where dstar writes build output and where its bundled data lives.

Build output (generated Verilog of tests and benchmarks, synthesis runs, board builds, trace
caches) goes under one root: ``$DSTAR_BUILD_DIR`` if set (``dstar --build-dir`` sets it), else
``./build`` of the current working directory. Never inside the installed package, so that a
wheel install behaves like an editable one. Bundled data (weights, synthesis baselines) is
package data, found through ``importlib.resources``.
"""

import os
from importlib import resources
from pathlib import Path

__all__ = ["BUILD_DIR_ENV", "build_root", "build_dir", "package_data"]

#: Environment variable that overrides the build root.
BUILD_DIR_ENV = "DSTAR_BUILD_DIR"


def build_root() -> Path:
    """The build root: ``$DSTAR_BUILD_DIR``, else ``./build`` (absolute)."""
    return Path(os.environ.get(BUILD_DIR_ENV) or Path.cwd() / "build").absolute()


def build_dir(*parts: str) -> Path:
    """A folder under the build root (not created)."""
    return build_root().joinpath(*parts)


def package_data(package: str, *parts: str) -> Path:
    """A file or folder shipped inside ``package`` (for example ``dstar.golden``, ``data``)."""
    return Path(str(resources.files(package).joinpath(*parts)))
