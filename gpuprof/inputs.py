"""Open an input file that may be a pipe, and the limits on what reading one may cost.

``gpuprof analyze`` and ``gpuprof memory`` read their input front to back,
once. A regular file can be sized and sniffed by seeking; a pipe (``-`` for
standard input, ``/dev/stdin``, a FIFO, ``<(zcat trace.json.gz)``) cannot,
so :func:`open_input` reads its first bytes and hands them back before the
rest (:class:`Prefixed`), and nothing downstream seeks.

The limits (documented in the README, "Limits") keep a small hostile file
from costing memory or time out of proportion to what it describes. Each can
be raised with an environment variable; :func:`limit` reads it.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gpuprof.errors import InputError
from gpuprof.limits import Limit

__all__ = ["STDIN", "Limit", "MAX_EVENT_BYTES", "MAX_GZIP_RATIO", "GZIP_RATIO_FLOOR", "MAX_DEVICE_INDEX",
           "SNAPSHOT_ITEMS_PER_BYTE", "Opened", "Prefixed", "open_input", "is_stdin", "is_report_file"]

STDIN = "-"  # the name that means standard input


# A real event is at most tens of KB (a long call stack); 64 MiB leaves room for any
# real one and bounds the text held undecoded (and the cost of finding its end).
MAX_EVENT_BYTES = Limit("GPUPROF_MAX_EVENT_BYTES", 64 * 1024 * 1024, "the largest single event (bytes of JSON)")
# Real profiler traces gzip 10-30x; deflate's own maximum is about 1030x (long runs of one byte).
MAX_GZIP_RATIO = Limit("GPUPROF_MAX_GZIP_RATIO", 200, "the largest decompression ratio")
GZIP_RATIO_FLOOR = 64 * 1024 * 1024  # JSON text below which the ratio is not checked (tiny files compress oddly)
# Real machines have at most tens of GPUs; device indices size per-device tables.
MAX_DEVICE_INDEX = Limit("GPUPROF_MAX_DEVICE_INDEX", 1023, "the largest device index")
# Items (segments, blocks, history entries, frames lists) a snapshot may describe per byte of
# its pickle: a tree of dicts needs at least 2 bytes per item, so only shared references
# (one list reached many times) can exceed it.
SNAPSHOT_ITEMS_PER_BYTE = Limit("GPUPROF_MAX_SNAPSHOT_ITEMS_PER_BYTE", 1, "the items a snapshot may describe per byte of the file")


def is_stdin(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path) == STDIN


_REPORT_PEEK = 512


def is_report_file(path: str | os.PathLike[str]) -> bool:
    """True for a JSON report gpuprof wrote (uncompressed, ``schema_version`` near the start), not a trace.

    Here, not with the report reader (:mod:`gpuprof.saved.read`) or the rank summaries
    (:mod:`gpuprof.distributed.reports`): ``gpuprof analyze`` asks it of every single input, and a
    trace needs neither of those modules.
    """
    p = Path(path)
    if not p.name.endswith(".json") or not p.is_file():
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(_REPORT_PEEK)
    except OSError:
        return False
    return b'"schema_version"' in head and b'"traceEvents"' not in head


class Prefixed:
    """A binary reader that returns ``prefix`` first, then the rest of ``raw``; counts bytes returned."""

    def __init__(self, prefix: bytes, raw: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._raw = raw
        self.consumed = 0  # bytes handed out so far (compressed bytes, for a gzip reader)

    def read(self, n: int = -1) -> bytes:
        if self._prefix:
            if n is None or n < 0:
                data = bytes(self._prefix) + self._raw.read()
                self._prefix = memoryview(b"")
            else:
                data = bytes(self._prefix[:n])
                self._prefix = self._prefix[n:]
                if len(data) < n:  # a read is short only at end of input, as for a file
                    data += self._raw.read(n - len(data))
        else:
            data = self._raw.read(n)
        self.consumed += len(data)
        return data

    def readinto(self, view: memoryview | bytearray) -> int:
        if self._prefix:
            n = min(len(view), len(self._prefix))
            view[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
        else:
            n = self._raw.readinto(view) or 0  # type: ignore[attr-defined]
        self.consumed += n
        return n

    def close(self) -> None:
        self._raw.close()


@dataclass
class Opened:
    """An input opened for one front-to-back read.

    ``head``: its first bytes (at most ``peek``; fewer only at end of input),
    which ``stream`` returns again first. ``size``: the file's size, or None
    for a pipe or device (unknown until read).
    """

    name: str
    stream: Prefixed
    head: bytes
    size: int | None

    @property
    def regular(self) -> bool:
        return self.size is not None

    def close(self) -> None:
        self.stream.close()

    def rewound(self) -> "Opened | None":
        """The same open file from its first byte again (a second pass without opening the name again, which
        may by then name another file); None when it cannot seek (a pipe, a remote stream)."""
        raw = self.stream._raw
        try:
            if self.size is None or not raw.seekable():
                return None
            raw.seek(0)
        except (OSError, ValueError, AttributeError):
            return None
        return Opened(self.name, Prefixed(b"", raw), self.head, self.size)


def open_input(path: str | os.PathLike[str], peek: int = 64) -> Opened:
    """Open ``path`` (``-``: standard input; a URL: through fsspec, see :mod:`gpuprof.remote`) and read
    its first ``peek`` bytes; errors are :class:`InputError`."""
    name = os.fspath(path)
    from gpuprof.remote import is_url

    if is_url(name):
        from gpuprof.remote import open_remote

        shown_name, stream, first, length = open_remote(name, peek)
        return Opened(shown_name, Prefixed(first, stream), first, length)
    try:
        if is_stdin(name):
            if sys.stdin is None:
                raise InputError(name, "standard input is closed")
            raw: BinaryIO = os.fdopen(os.dup(sys.stdin.fileno()), "rb")
        else:
            raw = open(name, "rb")
    except OSError as err:
        raise InputError.from_os_error(name, err) from None
    try:
        st = os.fstat(raw.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise InputError(name, "is a directory")
        size = st.st_size if stat.S_ISREG(st.st_mode) else None
        head = b""
        while len(head) < peek:  # a pipe may hand out fewer bytes per read
            more = raw.read(peek - len(head))
            if not more:
                break
            head += more
    except OSError as err:
        raw.close()
        raise InputError.from_os_error(name, err, "read") from None
    except InputError:
        raw.close()
        raise
    return Opened(name, Prefixed(head, raw), head, size)
