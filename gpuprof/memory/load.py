"""Open a ``gpuprof memory`` input: a snapshot pickle or a profiler trace, told apart by content."""

from __future__ import annotations

import os
from typing import Any

from gpuprof.errors import InputError
from gpuprof.inputs import Opened, is_stdin, open_input
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS
from gpuprof.memory.model import MemoryData
from gpuprof.remote import is_url

__all__ = ["sniff", "sniff_head", "load_memory"]


def sniff(path: str | os.PathLike[str]) -> str:
    """``"snapshot"`` or ``"trace"`` from the file's first bytes (not its name)."""
    opened = _open(path)
    opened.close()
    return sniff_head(opened.head)


def sniff_head(head: bytes) -> str:
    """``"snapshot"`` or ``"trace"`` from an input's first bytes.

    Pickles of protocol 2+ start with 0x80; traces are JSON (``{``/``[``) or
    gzip (0x1f 0x8b). Anything else is tried as an old-protocol pickle.
    """
    if head[:1] == b"\x80":
        return "snapshot"
    if head[:2] == b"\x1f\x8b":
        return "trace"
    if head.lstrip()[:1] in (b"{", b"["):
        return "trace"
    return "snapshot"


def _open(path: str | os.PathLike[str]) -> Opened:
    p = os.fspath(path)
    if not is_stdin(p) and not is_url(p):  # a URL is checked by the reader (gpuprof.remote)
        if not os.path.exists(p):
            raise InputError(p, "no such file")
        if os.path.isdir(p):
            raise InputError(p, "is a directory (give one snapshot or trace file)")
    opened = open_input(p, peek=64)
    if not opened.head:
        opened.close()
        raise InputError(p, "empty file")
    return opened


def load_memory(path: str | os.PathLike[str], internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS,
                opened: Opened | None = None) -> MemoryData:
    """Load ``path`` (snapshot or trace; ``-`` or a pipe is read once, as a stream) into :class:`MemoryData`.

    ``opened``: the input already opened (by the TensorBoard plugin, which opens files without following links).
    """
    if opened is None:
        opened = _open(path)
    elif not opened.head:
        opened.close()
        raise InputError(path, "empty file")
    kind = sniff_head(opened.head)
    if kind == "snapshot":
        from gpuprof.memory.snapshot import load_snapshot

        return load_snapshot(path, internal_patterns, opened=opened)
    from gpuprof.memory.tracemem import memory_from_trace
    from gpuprof.trace.load import load_trace

    # the input already being read (a pipe, or a file after sniffing): one read, streamed as by analyze
    return memory_from_trace(load_trace(os.fspath(path), opened=opened), internal_patterns)
