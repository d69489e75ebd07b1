"""Output paths are checked before the work and written all-or-nothing."""

import os

import pytest

from dstar.outputs import OutputError, atomic_dir, check_output_dir, check_output_file, write_atomic


def test_bad_output_files_are_refused_with_the_reason(tmp_path):
    (tmp_path / "f").write_text("x")
    cases = {tmp_path: "is a folder", tmp_path / "f" / "out.json": "is a file, not a folder",
             tmp_path / "nope" / "out.json": "does not exist", "": "empty path"}
    for path, why in cases.items():
        with pytest.raises(OutputError, match=why):
            check_output_file(path)
    assert check_output_file(tmp_path / "ok.json") == tmp_path / "ok.json"


def test_bad_output_folders_are_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(OutputError, match="is a file"):
        check_output_dir(tmp_path / "f")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        check_output_dir(tmp_path / "f" / "sub")
    assert check_output_dir(tmp_path / "new") == tmp_path / "new"


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path):
    f = tmp_path / "a.txt"
    write_atomic(f, "one")
    write_atomic(f, b"two")
    assert f.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_dir_replaces_the_old_folder_only_on_success(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as d:
        (d / "a.v").write_text("1")
        (d / "stale.v").write_text("1")
    assert sorted(p.name for p in out.iterdir()) == ["a.v", "stale.v"]
    with pytest.raises(KeyboardInterrupt), atomic_dir(out) as d:
        (d / "a.v").write_text("2")
        raise KeyboardInterrupt
    assert (out / "a.v").read_text() == "1" and (out / "stale.v").exists()
    with atomic_dir(out) as d:
        (d / "a.v").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["a.v"] and (out / "a.v").read_text() == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]      # no lock file left


def test_a_second_writer_of_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out):
        with pytest.raises(OutputError, match="another dstar command"), atomic_dir(out):
            pass
    with atomic_dir(out) as d:          # released: a later run goes through
        (d / "x").write_text("1")
    assert (out / "x").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]     # the lock file removed (G16)


def test_a_lock_file_removed_by_its_holder_is_not_taken(tmp_path, monkeypatch):
    """A writer that opened the lock file just before its holder removed it locks the new
    one, not the removed one (else a third writer could lock the new one as well)."""
    from dstar import outputs
    out, lock_path = tmp_path / "out", tmp_path / ".out.lock"
    lock_path.write_text("")
    real_flock, calls = outputs.fcntl.flock, []

    def flock(f, op):                   # the holder finishes between our open and our lock
        if not calls:
            lock_path.unlink()
        calls.append(f.fileno())
        return real_flock(f, op)

    monkeypatch.setattr(outputs.fcntl, "flock", flock)
    lock = outputs._take_lock(lock_path, out)
    try:
        assert len(calls) == 2 and lock_path.stat().st_ino == os.fstat(lock.fileno()).st_ino
    finally:
        lock.close()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_written_files_and_folders_get_the_umask_modes_or_keep_theirs(tmp_path):
    f = write_atomic(tmp_path / "a.txt", "one")
    assert f.stat().st_mode & 0o777 == 0o666 & ~_umask()
    f.chmod(0o640)
    write_atomic(f, "two")
    assert f.stat().st_mode & 0o777 == 0o640
    with atomic_dir(tmp_path / "out"):
        pass
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o777 & ~_umask()


def test_atomic_dir_refuses_to_replace_files_it_does_not_own(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.v").write_text("old")
    with atomic_dir(out, owned=("a.v", "b.v")) as d:     # only owned files: replaced
        (d / "b.v").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["b.v"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"holds files dstar did not write \('notes.txt'\)"):
        with atomic_dir(out, owned=("a.v", "b.v")):
            raise AssertionError("not reached")
    assert sorted(p.name for p in out.iterdir()) == ["b.v", "notes.txt"]


def test_output_folders_may_have_missing_parents(tmp_path):
    assert check_output_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    with atomic_dir(tmp_path / "a" / "b") as d:
        (d / "x").write_text("1")
    assert (tmp_path / "a" / "b" / "x").exists()


def test_an_os_error_while_writing_is_one_output_error(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OutputError, match=r"cannot write '.*a.txt': No space left on device"):
        write_atomic(tmp_path / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_links_and_pipes_are_written_in_place_not_replaced(tmp_path):
    """A rename would replace the link (``/dev/stdout``) or the device node itself."""
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert check_output_file(link) == link
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomic(check_output_file(fifo), b"through the pipe")
        assert os.read(r, 100) == b"through the pipe"
    finally:
        os.close(r)
    assert not fifo.is_file() and sorted(p.name for p in tmp_path.iterdir()) == \
        ["fifo", "link.json", "real.json"]


def test_a_folder_where_no_file_can_be_created_is_refused(tmp_path, monkeypatch):
    import tempfile

    def refuse(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputError, match=r"cannot create files in folder .*Read-only file system"):
        check_output_file(tmp_path / "r.json")


def test_atomic_dir_follows_a_link_to_a_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    with atomic_dir(tmp_path / "out") as d:
        (d / "x").write_text("1")
    assert (tmp_path / "out").is_symlink() and (tmp_path / "real" / "x").read_text() == "1"
