"""Output files and folders of the ``dstar`` commands: checked before the work that fills them,
written all-or-nothing (a temporary sibling, then a rename), so that an interrupted or failed
command never leaves a half-written result under the final name.

Files and folders get the modes a plain ``open``/``mkdir`` would give them (the umask's), or
keep those of the file or folder they replace."""

import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Collection
from contextlib import contextmanager
from pathlib import Path

__all__ = ["OutputError", "check_output_file", "check_output_dir", "check_work_dir",
           "locked_dir", "write_atomic", "atomic_file", "atomic_dir", "interrupted"]

#: Set when a Ctrl-C arrives (the command line's SIGINT handler). Python drops a
#: ``KeyboardInterrupt`` raised inside a finalizer (``Exception ignored in ...``: Amaranth's
#: ``MustUse.__del__`` during elaboration), and the command would then go on; ``atomic_file``
#: and ``atomic_dir`` check this before putting their output in place, so an interrupted
#: command writes nothing even then.
interrupted = threading.Event()


def _stop_if_interrupted() -> None:
    if interrupted.is_set():
        raise KeyboardInterrupt


class OutputError(Exception):
    """An output path cannot be written (the message names it and says why)."""


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _check_parent(path: Path, what: str, *, create: bool = False) -> None:
    """The folder ``path`` goes into must exist (or, with ``create``, be creatable: its nearest
    existing ancestor a writable folder) and be writable."""
    parent = path.parent
    probe = _nearest_existing(parent.absolute())
    if not path.is_absolute():      # name the folders as the user gave them
        probe = Path(os.path.relpath(probe))
    if not probe.is_dir():
        raise OutputError(f"{what} {str(path)!r}: {str(probe)!r} is a file, not a folder")
    if probe != parent and not create:
        raise OutputError(f"{what} {str(path)!r}: folder {str(parent)!r} does not exist")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {str(path)!r}: folder {str(probe)!r} is not writable")
    # What os.access cannot tell: root on a read-only or special file system.
    _try_create(probe, f"{what} {str(path)!r}: cannot create files in folder {str(probe)!r}")


def _try_create(folder: Path, message: str) -> None:
    """Create and remove a probe file in ``folder``; on failure an ``OutputError`` of
    ``message`` and the system's reason."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".dstar-probe.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise OutputError(f"{message} ({e.strerror or e})") from None


def _in_place(path: Path) -> bool:
    """Whether ``path`` is written in place rather than replaced by a rename: a device, a pipe
    or a link (``/dev/stdout``, a FIFO; a rename would replace the node or the link itself)."""
    return path.is_symlink() or (path.exists() and not path.is_file() and not path.is_dir())


def check_output_file(path, what: str = "output file") -> Path:
    """Refuse, before any work, a file path that cannot be written: a folder, a path under a
    file, a missing or unwritable folder. Returns the path."""
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputError(f"{what}: empty path")
    if path.is_dir():
        raise OutputError(f"{what} {str(path)!r} is a folder")
    if _in_place(path):
        if not os.access(path, os.W_OK):
            raise OutputError(f"{what} {str(path)!r} is not writable")
        return path
    _check_parent(path, what)
    return path


def check_output_dir(path, what: str = "output folder") -> Path:
    """Refuse, before any work, a folder path that cannot be created or replaced: a file, a path
    under a file, the working folder or one above it, an unwritable parent (missing parents
    are fine: ``atomic_dir`` creates them). Returns the path."""
    path = Path(path)
    if str(path) == "":
        raise OutputError(f"{what}: empty path")
    if path.exists() and not path.is_dir():
        raise OutputError(f"{what} {str(path)!r} is a file")
    if path.is_dir() and Path.cwd().resolve().is_relative_to(path.resolve()):
        # Replaced whole by a rename, it would leave the caller's shell in a deleted folder.
        raise OutputError(f"{what} {str(path)!r} is the working folder or holds it; name a "
                          "folder inside it")
    _check_parent(path, what, create=True)
    return path


def check_work_dir(path, what: str = "build folder") -> Path:
    """Refuse, before any work, a folder that files cannot be created in: a file, a path under
    a file, a read-only folder or file system (an existing folder is tried from inside, a new
    one from its nearest existing ancestor). Returns the path."""
    path = Path(path)
    if not path.is_dir():
        return check_output_dir(path, what)
    # os.access cannot tell for root or a read-only file system: try it.
    _try_create(path, f"{what} {str(path)!r}: cannot create files in it")
    return path


@contextmanager
def locked_dir(path, what: str = "build folder"):
    """``path`` checked (``check_work_dir``), created, and held for the block by a lock file
    inside it (``.lock``): a second ``locked_dir`` of the same folder, in this process or
    another, is refused (``OutputError``) instead of sharing it. Yields the path."""
    path = check_work_dir(Path(path).absolute(), what)
    try:
        path.mkdir(parents=True, exist_ok=True)
        lock = open(path / ".lock", "w")    # noqa: SIM115 (held for the block)
    except OSError as e:
        raise OutputError(f"{what} {str(path)!r}: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(f"another dstar command is using the {what} {str(path)!r}; "
                              "wait for it to finish") from None
        yield path
    finally:
        lock.close()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path, default: int) -> int:
    """The mode of the file or folder ``path`` replaces, else ``default`` under the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return default & ~_umask()


def _os_error(path: Path, e: OSError) -> OutputError:
    return OutputError(f"cannot write {str(path)!r}: {e.strerror or e}")


@contextmanager
def atomic_file(path):
    """A binary file object (yielded) whose content appears at ``path`` whole when the block
    ends without error (a temporary file beside it, then a rename); on an error, or after a
    Ctrl-C (``interrupted``), nothing changes at ``path``. A device, pipe or symbolic link is
    written in place instead (it is not a file that a rename could replace). An
    operating-system error becomes an ``OutputError`` naming the path."""
    path = Path(path)
    if _in_place(path):
        try:
            with open(path, "wb") as f:
                yield f
        except OSError as e:
            raise _os_error(path, e) from None
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _os_error(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        _stop_if_interrupted()
        os.chmod(tmp, _mode_for(path, 0o666))
        os.replace(tmp, path)
    except BaseException as e:
        os.unlink(tmp)
        if isinstance(e, OSError):
            raise _os_error(path, e) from None
        raise


def write_atomic(path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` all-or-nothing (``atomic_file``)."""
    path = Path(path)
    with atomic_file(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def _foreign(path: Path, owned: Collection[str]) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name not in owned) if path.is_dir() else []


@contextmanager
def atomic_dir(path, owned: Collection[str] | None = None):
    """Build a folder's contents in a temporary sibling (yielded) and put it in place of
    ``path`` when the block ends without error; on an error, or after a Ctrl-C
    (``interrupted``), the old folder stays as it was.
    The old folder, if any, is replaced whole: nothing of a previous run survives. With
    ``owned`` (the names the command writes), an old folder holding anything else is refused
    (``OutputError``) rather than deleted. A second ``atomic_dir`` of the same path while one
    is open is refused (``OutputError``): a lock file beside the folder is held for the block
    and removed after it. Missing parent folders are created; a symbolic link is followed (the
    link stays)."""
    path = Path(path).absolute()
    if path.is_symlink():       # replace the folder it points to, not the link
        path = path.resolve()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _os_error(path, e) from None
    lock_path = path.parent / f".{path.name}.lock"
    lock = _take_lock(lock_path, path)
    try:
        foreign = _foreign(path, owned) if owned is not None else []
        if foreign:
            raise OutputError(f"output folder {str(path)!r} holds files dstar did not write "
                              f"({', '.join(map(repr, foreign[:3]))}"
                              f"{', ...' if len(foreign) > 3 else ''}); give a new or empty "
                              "folder, or remove them")
        try:
            tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.",
                                        suffix=".tmp"))
        except OSError as e:
            raise _os_error(path, e) from None
        try:
            yield tmp
            _stop_if_interrupted()
            os.chmod(tmp, _mode_for(path, 0o777))
            if path.exists():
                old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.",
                                            suffix=".old"))
                os.replace(path, old / "x")
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(e, OSError):
                raise _os_error(path, e) from None
            raise
    finally:
        lock_path.unlink(missing_ok=True)       # still held: nobody takes it in between
        lock.close()


def _take_lock(lock_path: Path, path: Path):
    """The open lock file ``lock_path``, locked (``flock``), for writing ``path``;
    ``OutputError`` if another command holds it. The holder removes the file when it is done
    (``atomic_dir``), so a lock taken on a file that is no longer at ``lock_path`` (removed
    between this open and this lock) is dropped and the new file's tried."""
    for _ in range(100):
        try:
            lock = open(lock_path, "w")     # noqa: SIM115 (held by the caller)
        except OSError as e:
            raise _os_error(path, e) from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise OutputError(f"another dstar command is writing {str(path)!r}") from None
        try:
            if os.stat(lock_path).st_ino == os.fstat(lock.fileno()).st_ino:
                return lock
        except FileNotFoundError:
            pass
        lock.close()
    raise OutputError(f"cannot lock {str(path)!r}: its lock file {str(lock_path)!r} keeps "
                      "changing")
