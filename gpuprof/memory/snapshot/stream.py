"""Load a snapshot file by streaming it: memory bounded by what the analysis keeps, not by the file.

:func:`stream_snapshot` reads a regular file with
:class:`~gpuprof.memory.snapshot.pickstream.StreamReader`, which hands each segment and
each history entry to a :class:`~gpuprof.memory.snapshot.parse.SnapshotParser`
as soon as the pickle has built it; the parser keeps one row of columns per
entry and interned sites and kinds. Peak memory is then about the columns
(tens of bytes per entry, against the 100-250 bytes each takes in the file)
plus one batch of entries (the pickler writes them 1000 at a time), where ``pickle.load`` needs 10-30x the file.

Anything the stream reader does not take (a pipe, a remote stream, a pickle
laid out otherwise than PyTorch's pickler writes it) is handed back to the
caller, rewound, to be unpickled in whole as before: the result is the same
either way, only the memory differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpuprof.errors import InputError
from gpuprof.inputs import Opened
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS
from gpuprof.memory.model import MemoryData
from gpuprof.memory.snapshot.parse import SnapshotParser, check_top, item_budget
from gpuprof.memory.snapshot.pickops import CorruptPickle, NotStreamable
from gpuprof.memory.snapshot.pickstream import StreamReader
from gpuprof.memory.snapshot.safeload import UnsafePickleError

__all__ = ["stream_snapshot", "BuiltWhole"]

@dataclass
class BuiltWhole:
    """A pickle with no snapshot lists to stream (a bare list, a dict without ``segments``): the stream reader
    built it whole, for :func:`~gpuprof.memory.snapshot.parse_snapshot` (which says what it is not)."""

    obj: Any
    nbytes: int


class _Sink:
    """Hands the streamed parts to the parser as the reader meets them."""

    def __init__(self, parser: SnapshotParser) -> None:
        self.parser = parser

    def segment(self, s: Any) -> None:
        self.parser.segment(s)

    def entries(self, device: int, items: list[Any]) -> None:
        if device > self.parser.max_device:
            self.parser.check_device_count(device + 1)
        self.parser.entries(device, items)


def stream_snapshot(path: str | os.PathLike[str], internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS,
                    opened: Opened | None = None) -> MemoryData | Opened | BuiltWhole:
    """Parse the snapshot at ``path`` (or the ``opened`` input) as it is read.

    Returns the :class:`MemoryData`; or the input (rewound, or as given when nothing of it was read) for
    the caller to unpickle in whole when it cannot be streamed; or, when the pickle holds no snapshot lists,
    the object the stream built (:class:`BuiltWhole`). Errors are one-line :class:`InputError`.
    """
    from gpuprof.inputs import open_input

    name = os.fspath(path)
    if opened is None:
        opened = open_input(name, peek=0)
    size = opened.size
    start = opened.rewound() if size is not None else None
    if start is None or size is None:
        return opened  # a pipe or a stream that cannot seek: read in whole (it is read once anyway)
    opened = start
    parser = SnapshotParser(name, internal_patterns, item_budget(size))
    sink = _Sink(parser)
    reader = StreamReader(opened.stream, size, sink)
    try:
        top = reader.read()
        if not reader.streamed:  # no segments/device_traces lists in a top dict: it was built in whole
            opened.close()
            return BuiltWhole(top, size)
        if reader.segments_list is None or top.get("segments") is not reader.segments_list or (
                reader.traces_list is not None and top.get("device_traces") is not reader.traces_list):
            raise NotStreamable("the streamed lists were replaced")
        check_top(top, name)
        n_traces = reader.n_traces
        parser.check_device_count(n_traces)
        if n_traces:
            parser.device(n_traces - 1)
        opened.close()
        return parser.finish(top, n_traces)
    except NotStreamable:
        again = opened.rewound()
        if again is None:  # cannot happen for a regular file; say so rather than guess
            opened.close()
            raise InputError(name, "could not read the snapshot again from its start") from None
        return again
    except UnsafePickleError as err:
        opened.close()
        raise InputError(name, str(err)) from None
    except CorruptPickle as err:
        opened.close()
        raise InputError(name, f"corrupt or truncated pickle ({err})") from None
    except OSError as err:
        opened.close()
        raise InputError.from_os_error(name, err, "read") from None
    except MemoryError:
        opened.close()
        raise InputError(name, f"the pickle asks for more memory than a {size:,}-byte snapshot can "
                               "describe (or than is free)") from None
    except InputError:
        opened.close()
        raise
