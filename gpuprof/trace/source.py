"""Reading a trace's bytes: which files a path names, and their JSON text as a stream of blocks.

A trace is read front to back, once, never seeked (see :mod:`gpuprof.inputs`),
plain or gzip (told apart by its first bytes, not its name), so a pipe or
standard input streams like a file. :mod:`gpuprof.trace.chunks` cuts the text
into events; nothing here knows JSON.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import zlib
from pathlib import Path
from typing import Any, Iterator, Union, cast

from gpuprof.errors import InputError
from gpuprof.inputs import GZIP_RATIO_FLOOR, MAX_GZIP_RATIO, STDIN, Opened, is_stdin, open_input
from gpuprof.remote import TraceFile, Url, find_remote, local_or_url

__all__ = ["TRACE_SUFFIXES", "Source", "find_traces", "is_trace_name"]

TRACE_SUFFIXES = (".json", ".json.gz")
_RATIO_CHECK_EVERY = 1024 * 1024  # bytes of text between two gzip-ratio checks


# the out-of-memory verdicts a capture writes beside its report (oom.json, oom.2.json...): gpuprof's, not traces
_OOM_VERDICT = re.compile(r"oom(\.\d+)?\.json")


def is_trace_name(name: str) -> bool:
    """A file name a directory's traces are listed by: ``*.json``/``*.json.gz``, not hidden, and not a
    report gpuprof wrote itself (``report.*``, ``*.gpuprof.json[.gz]``). Local folders and URL prefixes alike."""
    return (name.endswith(TRACE_SUFFIXES) and not name.startswith((".", "report."))
            and not _OOM_VERDICT.fullmatch(name)
            and not name.endswith((".gpuprof.json", ".gpuprof.json.gz")))


def find_traces(path: Union[str, os.PathLike[str]]) -> list[TraceFile]:
    """The trace files named by ``path``: the file itself, or every
    ``*.json``/``*.json.gz`` under a directory (the ``tensorboard_trace_handler``
    layout ``<logdir>/<run>/<worker>[.<span>].pt.trace.json[.gz]``), sorted.
    A URL (:mod:`gpuprof.remote`) may also be a glob."""
    if is_stdin(path):
        return [Path(STDIN)]  # standard input: read as a stream (see gpuprof.inputs)
    where = local_or_url(path)
    if isinstance(where, Url):
        return list(find_remote(where, is_trace_name))
    p = where
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if p.is_dir():
        found: list[TraceFile] = sorted(f for f in p.rglob("*") if f.is_file() and is_trace_name(f.name))
        if not found:
            raise InputError(p, "directory holds no trace files (*.json or *.json.gz)")
        return found
    return [p]


class Source:
    """Blocks of JSON text from a plain or gzip file or pipe, with byte progress.

    The input is read front to back, once, never seeked (see
    :mod:`gpuprof.inputs`), so a pipe or standard input streams like a file.
    Reading refuses a gzip stream that decompresses more than
    ``MAX_GZIP_RATIO`` times the compressed bytes read so far (beyond
    ``GZIP_RATIO_FLOOR`` of text): a few MB of gzip must not become GBs of
    text to wade through.
    """

    def __init__(self, path: TraceFile, opened: Opened | None = None) -> None:
        self.path = path
        if opened is None:
            opened = open_input(path, peek=2)
        self.raw = opened.stream
        self.regular = opened.regular
        self.size = opened.size if opened.size is not None else 0
        self.gzipped = opened.head[:2] == b"\x1f\x8b"
        # cast: typeshed wants a seekable fileobj; reading forward only, GzipFile never seeks it
        self.stream: Any = gzip.GzipFile(fileobj=cast(Any, self.raw), mode="rb") if self.gzipped else self.raw
        self.text_bytes = 0
        self._max_ratio = MAX_GZIP_RATIO.value()
        self._check_ratio_at = GZIP_RATIO_FLOOR if self.gzipped else -1

    def read(self, n: int) -> bytes:
        with self._errors():
            data: bytes = self.stream.read(n)
        self.text_bytes += len(data)
        if 0 <= self._check_ratio_at <= self.text_bytes:
            self._check_ratio()
        return data

    def read_into(self, view: memoryview) -> int:
        """Read into ``view`` (straight from the file or the decompressor); returns how many bytes."""
        with self._errors():
            got = self.stream.readinto(view) or 0
        self.text_bytes += got
        if 0 <= self._check_ratio_at <= self.text_bytes:
            self._check_ratio()
        return got

    def _check_ratio(self) -> None:
        # Checked once per ~1 MiB of text, not per read: cheap at any block size.
        self._check_ratio_at = self.text_bytes + _RATIO_CHECK_EVERY
        if self.text_bytes > self._max_ratio * max(self.raw.consumed, 1):
            ratio = self.text_bytes // max(self.raw.consumed, 1)
            raise InputError(
                self.path,
                "gzip bomb? " + MAX_GZIP_RATIO.exceeded(
                    f"{self.raw.consumed:,} bytes of gzip decompress to over {self.text_bytes:,} bytes ({ratio}x)"),
            )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (gzip.BadGzipFile, zlib.error) as err:
            raise InputError(self.path, f"corrupt gzip data ({err})") from None
        except EOFError:
            raise InputError(self.path, "truncated gzip file (ends before the end-of-stream marker)") from None
        except OSError as err:
            raise InputError(self.path, f"read error: {err.strerror or err}") from None

    @property
    def position(self) -> int:
        """Bytes of the input read so far (compressed bytes for gzip)."""
        return self.raw.consumed

    def close(self) -> None:
        if self.stream is not self.raw:
            self.stream.close()
        self.raw.close()
