"""Open a ``gpuprof memory`` input: a snapshot pickle or a profiler trace, told apart by content."""

from __future__ import annotations

import os
from typing import Any

from gpuprof.errors import InputError
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS
from gpuprof.memory.model import MemoryData

__all__ = ["sniff", "load_memory"]


def sniff(path: str | os.PathLike[str]) -> str:
    """``"snapshot"`` or ``"trace"`` from the file's first bytes (not its name).

    Pickles of protocol 2+ start with 0x80; traces are JSON (``{``/``[``) or
    gzip (0x1f 0x8b). Anything else is tried as an old-protocol pickle.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise InputError(p, "no such file")
    if os.path.isdir(p):
        raise InputError(p, "is a directory (give one snapshot or trace file)")
    try:
        with open(p, "rb") as fh:
            head = fh.read(64)
    except OSError as err:
        raise InputError.from_os_error(p, err, "read") from None
    if not head:
        raise InputError(p, "empty file")
    if head[:1] == b"\x80":
        return "snapshot"
    if head[:2] == b"\x1f\x8b":
        return "trace"
    if head.lstrip()[:1] in (b"{", b"["):
        return "trace"
    return "snapshot"


def load_memory(path: str | os.PathLike[str], internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS) -> MemoryData:
    """Load ``path`` (snapshot or trace) into :class:`MemoryData`."""
    kind = sniff(path)
    if kind == "snapshot":
        from gpuprof.memory.snapshot import load_snapshot

        return load_snapshot(path, internal_patterns)
    from gpuprof.memory.tracemem import load_trace_memory

    return load_trace_memory(os.fspath(path), internal_patterns)
