"""Output files and folders of the ``dstar`` commands: checked before the work that fills them,
written all-or-nothing (a temporary sibling, then a rename), so that an interrupted or failed
command never leaves a half-written result under the final name."""

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

__all__ = ["OutputError", "check_output_file", "check_output_dir", "write_atomic",
           "atomic_dir"]


class OutputError(Exception):
    """An output path cannot be written (the message names it and says why)."""


def _check_parent(path: Path, what: str) -> None:
    parent = path.parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{what} {str(path)!r}: {str(probe)!r} is a file, not a folder")
    if probe != parent:
        raise OutputError(f"{what} {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {str(path)!r}: folder {str(parent)!r} is not writable")


def check_output_file(path, what: str = "output file") -> Path:
    """Refuse, before any work, a file path that cannot be written: a folder, a path under a
    file, a missing or unwritable folder. Returns the path."""
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputError(f"{what}: empty path")
    if path.is_dir():
        raise OutputError(f"{what} {str(path)!r} is a folder")
    _check_parent(path, what)
    return path


def check_output_dir(path, what: str = "output folder") -> Path:
    """Refuse, before any work, a folder path that cannot be created or replaced: a file, a path
    under a file, an unwritable parent. Returns the path."""
    path = Path(path)
    if str(path) == "":
        raise OutputError(f"{what}: empty path")
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {str(path)!r} is a file")
    _check_parent(path.absolute(), what)
    return path


def write_atomic(path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


@contextmanager
def atomic_dir(path):
    """Build a folder's contents in a temporary sibling (yielded) and put it in place of
    ``path`` when the block ends without error; on an error the old folder stays as it was.
    The old folder, if any, is replaced whole: nothing of a previous run survives. A second
    ``atomic_dir`` of the same path while one is open is refused (``OutputError``): a lock file
    beside the folder is held for the block."""
    path = Path(path).absolute()
    lock = open(path.parent / f".{path.name}.lock", "w")     # noqa: SIM115 (held for the block)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise OutputError(f"another dstar command is writing {str(path)!r}") from None
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / "x")
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        lock.close()
