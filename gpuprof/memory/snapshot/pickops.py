"""The pickle opcodes the streaming snapshot reader knows, and what it refuses (:mod:`gpuprof.memory.snapshot.pickstream`).

Only plain data is ever built. Every opcode that names a global, calls,
builds an object, uses a persistent id, an extension code or an out-of-band
buffer is refused before anything is built from it, with the same one-line
:class:`~gpuprof.memory.snapshot.safeload.UnsafePickleError` the whole-file loader
gives. Protocol 0/1 text opcodes are valid plain data the stream reader does
not take: the file is then read in whole (:class:`NotStreamable`).
"""

from __future__ import annotations

import re
import struct
from typing import Any, Protocol

__all__ = ["NotStreamable", "CorruptPickle", "Sink", "Readable", "CONSUMED", "UNSAFE", "TEXT", "FRAMES_RUN",
           "I4", "U4", "U8", "F8", "unsafe_message", "refs"]


class NotStreamable(Exception):
    """The pickle is valid for ``pickle.load`` in a way the streaming reader does not reproduce."""


class CorruptPickle(Exception):
    """The pickle is malformed or truncated (the message says how)."""


class Sink(Protocol):
    """Receives the streamed parts of a snapshot, in file order."""

    def segment(self, s: Any) -> None: ...

    def entries(self, device: int, items: list[Any]) -> None: ...


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Consumed:
    """The memo marker of an object handed on (a reference to it cannot be honoured: read in whole)."""


CONSUMED = _Consumed()

# A frames list of references only: EMPTY_LIST, its memo write, MARK, 1-1000 BINGET/LONG_BINGET, APPENDS, and
# no further APPEND(S) for this list (then the next opcode would be MARK or APPEND).
FRAMES_RUN = re.compile(rb"(\x94|q.|r....)\(((?:h.|j....){1,1000})e(?![(a])", re.S)

I4 = struct.Struct("<i")
U4 = struct.Struct("<I")
U8 = struct.Struct("<Q")
F8 = struct.Struct(">d")

# GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE, BUILD, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, NEXT_BUFFER,
# READONLY_BUFFER: each names, calls or builds something beyond plain data.
UNSAFE = frozenset(b"c\x93ioRb\x81\x92\x82\x83\x84PQ\x97\x98")
# INT, LONG, FLOAT, STRING, UNICODE, BINSTRING, SHORT_BINSTRING, GET, PUT: protocol 0/1 text forms (read in whole)
TEXT = frozenset(b"ILFSVTUgp")

_UNSAFE_GLOBAL = ("refusing to load: the pickle tries to import {}, "
                  "and a memory snapshot holds only plain data (dicts, lists, strings, numbers)")


def unsafe_message(op: int, buf: bytes, pos: int, stack: list[Any]) -> str:
    """The one-line refusal for opcode ``op`` (its argument at ``buf[pos:]``), naming what it tried to import."""
    if op in (0x63, 0x69):  # GLOBAL, INST: "module\nname\n" follows
        parts = buf[pos:pos + 512].split(b"\n", 2)
        if len(parts) >= 2:
            name = f"{parts[0].decode('ascii', 'replace')}.{parts[1].decode('ascii', 'replace')}"
            return _UNSAFE_GLOBAL.format(name[:200])
    if op == 0x93 and len(stack) >= 2 and isinstance(stack[-2], str) and isinstance(stack[-1], str):
        return _UNSAFE_GLOBAL.format(f"{stack[-2]}.{stack[-1]}"[:200])
    if op in (0x50, 0x51):
        return ("refusing to load: the pickle uses a persistent id (torch.save format?), "
                "and a memory snapshot holds only plain data")
    return (f"refusing to load: the pickle uses opcode {bytes([op])!r}, which builds or calls objects, "
            "and a memory snapshot holds only plain data")


def refs(run: bytes, memo: list[Any], writing: int = -1) -> list[Any]:
    """The memo objects a run of BINGET/LONG_BINGET opcodes refers to; NotStreamable for a reference to the
    slot ``writing`` (the list these references fill: a list that contains itself)."""
    out = []
    i = 0
    while i < len(run):
        if run[i] == 0x68:
            k = run[i + 1]
            i += 2
        else:
            k = U4.unpack_from(run, i + 1)[0]
            i += 5
        if k == writing:
            raise NotStreamable("a list that contains itself")
        o = memo[k]
        if o is CONSUMED:
            raise NotStreamable("a reference back to a history entry or segment")
        out.append(o)
    return out
