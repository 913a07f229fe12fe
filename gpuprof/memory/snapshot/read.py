"""Read (and write) PyTorch CUDA memory snapshots.

The format is what ``torch.cuda.memory._snapshot()`` returns and
``torch.cuda.memory._dump_snapshot(path)`` pickles::

    {
      "segments": [                       # the allocator's state now
        {"device", "address", "total_size", "stream", "segment_type",
         "allocated_size", "active_size", "requested_size", "is_expandable",
         "blocks": [{"address", "size", "requested_size",
                     "state": "active_allocated" | "active_pending_free" | "inactive",
                     "frames": [{"filename", "line", "name"}, ...]}]},   # innermost first
      ],
      "device_traces": [                  # one list per device: the recorded history
        [{"action": "alloc" | "free_requested" | "free_completed" | "segment_alloc"
                    | "segment_free" | "segment_map" | "segment_unmap" | "snapshot" | "oom",
          "addr", "size", "stream", "time_us", "frames",
          "device_free"}],                # oom entries carry device_free instead of addr
      ],
      "allocator_settings": {...},        # newer PyTorch
    }

Older PyTorch (2.0) gave blocks a ``history`` list instead of ``frames`` and
trace entries no ``time_us``; both are accepted. A bare list of segments (what
``torch.cuda.memory_snapshot()`` returns) is accepted as a snapshot without
history. gpuprof may add a ``"gpuprof"`` key: ``{"devices": [{"id",
"name", "total_memory"}]}``, so device capacity is known.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from gpuprof.atomic import atomic_path
from gpuprof.errors import InputError
from gpuprof.inputs import Opened
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS
from gpuprof.memory.model import MemoryData
from gpuprof.memory.snapshot.parse import SnapshotParser, check_top, item_budget
from gpuprof.memory.snapshot.safeload import load_pickle_input

__all__ = ["SNAPSHOT_PICKLE_PROTOCOL", "parse_snapshot", "load_snapshot", "dump_snapshot"]

# gpuprof writes its own snapshots with protocol 4: readable by every Python
# gpuprof supports, and by PyTorch's own memory_viz.
SNAPSHOT_PICKLE_PROTOCOL = 4


def dump_snapshot(snapshot: Any, path: str | os.PathLike[str]) -> None:
    """Write ``snapshot`` (plain data only) as a protocol-4 pickle, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        pickle.dump(snapshot, fh, protocol=SNAPSHOT_PICKLE_PROTOCOL)


def load_snapshot(
    path: str | os.PathLike[str], internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS, opened: Opened | None = None
) -> MemoryData:
    """Safely read and parse the snapshot at ``path`` (``-``: standard input; or the ``opened`` input).

    A regular file is streamed (:mod:`gpuprof.memory.snapshot.stream`: memory bounded by what the analysis keeps, not
    by the file); a pipe, or a pickle laid out in a way the stream reader does not take, is unpickled in whole.
    """
    from gpuprof.memory.snapshot.stream import BuiltWhole, stream_snapshot

    data = stream_snapshot(path, internal_patterns, opened)
    if isinstance(data, MemoryData):
        return data
    if isinstance(data, BuiltWhole):  # no lists to stream in it: the stream reader built the object whole
        obj, nbytes = data.obj, data.nbytes
    else:
        obj, nbytes = load_pickle_input(path, data)
    return parse_snapshot(obj, os.fspath(path), internal_patterns, max_items=item_budget(nbytes))


def parse_snapshot(
    obj: Any, path: str, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS, max_items: int | None = None
) -> MemoryData:
    """Turn an unpickled snapshot into :class:`MemoryData` (raises :class:`InputError` if it is not one).

    ``max_items``: how many segments, blocks, history entries and frames lists the snapshot may describe (see
    :class:`~gpuprof.memory.snapshot.parse.SnapshotParser`).
    """
    if isinstance(obj, list):
        obj = {"segments": obj}
    segs_raw, traces_raw = check_top(obj, path)
    parser = SnapshotParser(path, internal_patterns, max_items)
    parser.budget.take(len(segs_raw))
    n_dev = len(traces_raw) if traces_raw else 0
    parser.check_device_count(n_dev)
    for s in segs_raw:  # every segment's device is checked before any work
        if isinstance(s, dict):
            parser.segment_device(s)
    parser.budget.take(-len(segs_raw))  # taken whole above to refuse a shared-list bomb at once; again one by one
    for s in segs_raw:
        parser.segment(s)
    for i, entries in enumerate(traces_raw or ()):
        if not isinstance(entries, list):
            raise InputError(path, f"malformed snapshot: device_traces[{i}] is not a list")
        parser.entries(i, entries)
    if n_dev:
        parser.device(n_dev - 1)
    return parser.finish(obj, n_dev)
