"""The one bounded reader of a file gpuprof did not name itself: a regular file only, no link followed,
nothing blocked on, nothing over a bound read.

Paths in a run directory, the trigger registry or a trace (the source files a stack names) may be anything
by the time they are read: a symbolic link to a secret, a FIFO that blocks a plain ``open`` until a writer
comes, a device, a directory, a file far larger than any gpuprof wrote. :func:`read_regular` looks first
(``lstat``: a link, anything but a regular file or a file over the bound is refused unopened), then opens
with ``O_NOFOLLOW | O_NONBLOCK`` and checks the open descriptor again (``fstat``: the name may have been
swapped since), and reads at most one byte over the bound (a file that grew past it is refused too).
"""

from __future__ import annotations

import os
import stat

__all__ = ["TooLarge", "Unreadable", "read_regular", "read_regular_stat"]

_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class Unreadable(OSError):
    """A file that exists but is not read, with why (an OSError: the callers' handlers for a planted link or
    FIFO already catch it); ``strerror``: the system's reason when the open or read failed, else None."""


class TooLarge(Unreadable):
    """A regular file over the bound (by its size, or by the bytes read)."""


def _failed(name: str, err: OSError) -> Unreadable:
    out = Unreadable(f"{name} cannot be read ({err.strerror or err})")
    out.strerror = err.strerror
    return out


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` (None when there is none); :class:`Unreadable` naming why when
    it is a link, not a regular file, larger than ``limit`` bytes or cannot be opened or read."""
    got = read_regular_stat(path, limit)
    return None if got is None else got[1]


def read_regular_stat(path: str | os.PathLike[str], limit: int) -> tuple[os.stat_result, bytes] | None:
    """:func:`read_regular`, with the open file's ``fstat`` (its size and modification time as read)."""
    name = os.path.basename(os.fspath(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise _failed(name, err) from None
    if stat.S_ISLNK(st.st_mode):
        raise Unreadable(f"{name} is a symbolic link (not followed)")
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(f"{name} is not a regular file")
    if st.st_size > limit:
        raise TooLarge(f"{name} is larger than {limit:,} bytes")
    try:
        fd = os.open(path, _FLAGS)
    except OSError as err:
        raise _failed(name, err) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the lstat
            raise Unreadable(f"{name} is not a regular file")
        chunks, got = [], 0
        while got <= limit:
            block = os.read(fd, min(limit + 1 - got, 1 << 20))
            if not block:
                break
            chunks.append(block)
            got += len(block)
    except Unreadable:
        raise
    except OSError as err:
        raise _failed(name, err) from None
    finally:
        os.close(fd)
    if got > limit:
        raise TooLarge(f"{name} is larger than {limit:,} bytes")
    return st, b"".join(chunks)
