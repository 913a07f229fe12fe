"""Writing files safely: atomically, privately, never through a symlink, never over the input.

Every file gpuprof writes (reports, annotated traces, HTML pages, captured
traces, snapshots, stats) goes through :func:`atomic_path` or
:func:`atomic_write`:

* the data goes to a new temporary file in the target's directory, created
  exclusively (``O_EXCL``) under an unpredictable name by
  :func:`tempfile.mkstemp`, so nobody sharing the directory (a shared logdir)
  can plant a file or a symlink there for gpuprof to write through;
* it is flushed to disk, then :func:`os.replace` moves it over the target in
  one step. A symlink at the target is replaced itself; the file it points to
  is never written;
* on any failure (a full disk, an exception in the writer) the temporary
  file is removed and the previous file at the target is left untouched.

:func:`refuse_input_as_output` keeps a command from replacing the very file
it reads (``-o trace.json``), whatever path, symlink or hard link names it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from gpuprof.errors import InputError

__all__ = ["atomic_path", "atomic_write", "write_output", "same_file", "refuse_input_as_output"]

PathLike = str | os.PathLike[str]


@contextlib.contextmanager
def atomic_path(path: PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield the path of a new, empty, private file beside ``path``; on success it replaces ``path``.

    ``suffix`` ends the temporary name, for writers that pick the format from
    it (torch gzips a trace named ``*.gz``). The name starts with a dot, so
    the trace loader and shell globs skip a file still being written. On any
    error in the block (or while moving the file into place) the temporary
    file is removed and the error propagates; ``path`` is unchanged.
    """
    final = Path(path)
    # a short prefix from the target's name keeps the temporary name under NAME_MAX
    fd, name = tempfile.mkstemp(suffix=suffix, prefix=f".{final.name[:64]}.", dir=final.parent)
    scratch = Path(name)
    try:
        try:
            # mkstemp makes it 0600; a report should get the mode a plain open() would give it
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        yield scratch
        _fsync_file(scratch)
        os.replace(scratch, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # already gone: nothing to clean
            scratch.unlink()
        raise
    _fsync_dir(final.parent)


def atomic_write(path: PathLike, data: str | bytes, suffix: str = "") -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; raises ``OSError`` with ``path`` unchanged."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path, suffix) as tmp, open(tmp, "wb") as fh:
        fh.write(payload)


def write_output(path: PathLike, data: str | bytes, what: str) -> None:
    """:func:`atomic_write` for a command's output: a failure is one :class:`InputError` naming ``path``.

    ``what`` names the output in the message (``"the report"``).
    """
    try:
        atomic_write(path, data)
    except IsADirectoryError:
        raise InputError(path, f"cannot write {what}: is a directory") from None
    except OSError as err:
        kept = " (the previous file is unchanged)" if os.path.lexists(path) else ""
        raise InputError(path, f"cannot write {what}: {err.strerror or err}{kept}") from None


def same_file(a: PathLike, b: PathLike) -> bool:
    """True when ``a`` and ``b`` are one file (same device and inode, through symlinks and hard links)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one does not exist (yet), or a name Python cannot pass to the OS
        return False


def refuse_input_as_output(output: PathLike, inputs: Iterable[PathLike], what: str = "output") -> None:
    """Raise :class:`InputError` naming ``output`` when it is the same file as one of ``inputs``.

    Writing there would replace the trace or snapshot being analysed with
    the report about it.
    """
    for src in inputs:
        if same_file(output, src):
            raise InputError(output, f"is the input {os.fspath(src)}; choose another {what} file")


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (other threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    # elsewhere: set a strict mask for an instant, so a file another thread creates meanwhile is only more private
    old = os.umask(0o077)
    os.umask(old)
    return old


def _fsync_file(path: Path) -> None:
    # reopened by name (the writer may have been torch, with its own handle), never through a link
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; some filesystems refuse to fsync a directory, and then it is only less durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        return  # the file is in place; only durability across a power cut is weaker here
    finally:
        os.close(fd)
