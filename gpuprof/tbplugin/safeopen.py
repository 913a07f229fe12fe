"""Open a file of the logdir the way a shared folder demands: no link followed, no wait, nothing outside.

The run list is walked at one moment and a file is read at a later one;
anyone who can write to the logdir can swap a listed trace for a symbolic
link (to ``/etc/shadow``, ``~/.ssh/id_rsa``) or a FIFO in between. So a file
is never opened by its path string: :func:`open_in_logdir` opens the logdir,
then each directory of the relative path with ``openat`` (``dir_fd``) and
``O_NOFOLLOW | O_DIRECTORY``, then the file with ``O_NOFOLLOW | O_NONBLOCK``
(a FIFO opens at once instead of waiting for a writer), and checks on the
open descriptor (``fstat``) that it is a regular file. A link anywhere in
the path, a path that climbs out (``..``), a FIFO, socket or device is
refused with a one-line :class:`~gpuprof.errors.InputError`; what is read is
the inode that was checked, whatever the name points at afterwards.

The logdir itself is the one TensorBoard was started with (the operator's
choice): it is opened as given, links included.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuprof.errors import InputError
from gpuprof.inputs import Opened, Prefixed

__all__ = ["open_in_logdir", "read_in_logdir", "open_fd_in_logdir"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _parts(logdir: Path, path: Path) -> list[str]:
    """The components of ``path`` below ``logdir`` (lexically: no ``..``, no absolute escape)."""
    try:
        rel = os.path.relpath(path, logdir)
    except ValueError:
        raise InputError(path, "not inside the logdir") from None
    parts = Path(rel).parts
    if not parts or parts[0] == ".." or Path(rel).is_absolute() or any(p in ("..", ".", "") for p in parts):
        raise InputError(path, "not inside the logdir")
    return list(parts)


def _open_fd(logdir: Path, path: Path) -> int:
    parts = _parts(logdir, path)
    try:
        d = os.open(logdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise InputError.from_os_error(logdir, err) from None
    try:
        for name in parts[:-1]:
            nxt = os.open(name, _DIR_FLAGS, dir_fd=d)
            os.close(d)
            d = nxt
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=d)
    except OSError as err:
        # ELOOP (a link as the last part) and ENOTDIR (a link or file as a directory part) are the swaps
        import errno

        if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise InputError(path, "is a symbolic link or goes through one; gpuprof never follows links "
                                   "in the logdir") from None
        raise InputError.from_os_error(path, err) from None
    finally:
        os.close(d)
    try:
        mode = os.fstat(fd).st_mode
    except OSError as err:
        os.close(fd)
        raise InputError.from_os_error(path, err, "stat") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(path, "not a regular file (a FIFO, socket or device); gpuprof reads only regular "
                               "files in the logdir")
    # a regular file never blocks; reads go back to the plain blocking mode the readers expect
    os.set_blocking(fd, True)
    return fd


def open_fd_in_logdir(logdir: Path, path: Path) -> int:
    """The descriptor of ``path`` under ``logdir``, opened safely (see the module doc); the caller closes it."""
    return _open_fd(logdir, path)


def open_in_logdir(logdir: Path, path: Path, peek: int = 64) -> Opened:
    """``path`` (a file under ``logdir``) opened safely, its first ``peek`` bytes read (see the module doc)."""
    fd = _open_fd(logdir, path)
    raw = os.fdopen(fd, "rb")
    try:
        size = os.fstat(fd).st_size
        head = raw.read(peek)
    except OSError as err:
        raw.close()
        raise InputError.from_os_error(path, err, "read") from None
    return Opened(os.fspath(path), Prefixed(head, raw), head, size)


def read_in_logdir(logdir: Path, path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` under ``logdir`` (the caller refuses a file over ``limit``)."""
    fd = _open_fd(logdir, path)
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read(limit + 1)
        except OSError as err:
            raise InputError.from_os_error(path, err, "read") from None
