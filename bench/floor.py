"""The parse floor: the least a trace analysis must pay, to measure gpuprof against (issue: speed).

One ``msgspec`` decode of the whole file into typed structs that hold only
the fields an analysis needs (phase, category, name, pid, tid, ts, dur and
the few ``args`` keys that link events: External id, correlation, device,
stream, Sequence number), with no Python object per unknown field and no
second pass. Nothing a real analysis could skip is done, and nothing it must
do beyond decoding is: any analysis that reads every event pays at least
this. A ``.gz`` file is decompressed in memory first (as a reader must).

Usage: ``python bench/floor.py TRACE`` (prints the event count and the
seconds of CPU time this process used).
"""

from __future__ import annotations

import gzip
import resource
import sys
from typing import Union

import msgspec

Id = Union[int, str, float]


class Args(msgspec.Struct):
    external_id: Union[int, None] = msgspec.field(default=None, name="External id")
    correlation: Union[int, None] = None
    device: Union[int, None] = None
    stream: Union[int, None] = None
    seq: Union[int, None] = msgspec.field(default=None, name="Sequence number")


class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Id = 0
    tid: Id = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Union[Args, None] = None


class Doc(msgspec.Struct):
    traceEvents: list[Event] = []


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def floor(path: str) -> int:
    """Decode ``path`` into the floor's structs; the number of events."""
    data = read(path)
    if data.lstrip()[:1] == b"[":  # the 2020 top-level list format
        return len(msgspec.json.decode(data, type=list[Event]))
    return len(msgspec.json.decode(data, type=Doc).traceEvents)


if __name__ == "__main__":
    n = floor(sys.argv[1])
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{n} events, {ru.ru_utime + ru.ru_stime:.3f} s CPU")
