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
from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS, SiteTable
from gpuprof.memory.model import (
    ACTION_NAMES,
    OOM,
    Block,
    DeviceMemory,
    MemoryData,
    OomEvent,
    Segment,
)
from gpuprof.memory.safeload import load_pickle_file

__all__ = ["SNAPSHOT_PICKLE_PROTOCOL", "parse_snapshot", "load_snapshot", "dump_snapshot"]

# gpuprof writes its own snapshots with protocol 4: readable by every Python
# gpuprof supports, and by PyTorch's own memory_viz.
SNAPSHOT_PICKLE_PROTOCOL = 4


def dump_snapshot(snapshot: Any, path: str | os.PathLike[str]) -> None:
    """Write ``snapshot`` (plain data only) as a protocol-4 pickle, atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        pickle.dump(snapshot, fh, protocol=SNAPSHOT_PICKLE_PROTOCOL)


def load_snapshot(path: str | os.PathLike[str], internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS) -> MemoryData:
    """Safely unpickle and parse the snapshot at ``path``."""
    return parse_snapshot(load_pickle_file(path), os.fspath(path), internal_patterns)


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v == v:
        return int(v)
    return default


def _block_frames(b: dict[str, Any]) -> Any:
    fr = b.get("frames")
    if fr is None:
        hist = b.get("history")  # PyTorch 2.0: [{"addr", "real_size", "frames"}], newest last
        if isinstance(hist, list) and hist and isinstance(hist[-1], dict):
            fr = hist[-1].get("frames")
    return fr


def parse_snapshot(obj: Any, path: str, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS) -> MemoryData:
    """Turn an unpickled snapshot into :class:`MemoryData` (raises :class:`InputError` if it is not one)."""
    if isinstance(obj, list):
        obj = {"segments": obj}
    if not isinstance(obj, dict):
        raise InputError(path, f"not a PyTorch memory snapshot (the pickle holds a {type(obj).__name__}, not a dict)")
    segs_raw = obj.get("segments")
    traces_raw = obj.get("device_traces")
    if not isinstance(segs_raw, list) or (traces_raw is not None and not isinstance(traces_raw, list)):
        raise InputError(path, "not a PyTorch memory snapshot (no 'segments' list)")
    sites = SiteTable(internal_patterns)
    notes: list[str] = []

    n_dev = len(traces_raw) if traces_raw else 0
    for s in segs_raw:
        if isinstance(s, dict):
            n_dev = max(n_dev, _int(s.get("device")) + 1)
    devices = [DeviceMemory(device=f"cuda:{i}", index=i, segments=[]) for i in range(n_dev)]

    for s in segs_raw:
        if not isinstance(s, dict):
            raise InputError(path, "malformed snapshot: a segment is not a dict")
        dev = devices[_int(s.get("device"))]
        addr = _int(s.get("address"))
        blocks: list[Block] = []
        cursor = addr
        for b in s.get("blocks") or ():
            if not isinstance(b, dict):
                raise InputError(path, "malformed snapshot: a block is not a dict")
            size = _int(b.get("size"))
            baddr = _int(b.get("address"), cursor)
            req = b.get("requested_size")
            if req is None and isinstance(b.get("history"), list) and b["history"]:
                req = b["history"][-1].get("real_size") if isinstance(b["history"][-1], dict) else None
            blocks.append(
                Block(baddr, size, _int(req, size), str(b.get("state", "inactive")), sites.site_of(_block_frames(b)))
            )
            cursor = baddr + size
        assert dev.segments is not None
        dev.segments.append(
            Segment(
                address=addr,
                total_size=_int(s.get("total_size")),
                stream=_int(s.get("stream")),
                segment_type=str(s.get("segment_type", "large")),
                is_expandable=bool(s.get("is_expandable", False)),
                blocks=blocks,
            )
        )

    any_time = False
    no_time = False
    for i, entries in enumerate(traces_raw or ()):
        if not isinstance(entries, list):
            raise InputError(path, f"malformed snapshot: device_traces[{i}] is not a list")
        dev = devices[i]
        t_ = dev.time
        a_ = dev.action
        ad_ = dev.addr
        sz_ = dev.size
        si_ = dev.site
        st_ = dev.stream
        site_of = sites.site_of
        actions = ACTION_NAMES
        for k, e in enumerate(entries):
            try:
                act = actions.get(e["action"])
            except (TypeError, KeyError):
                raise InputError(path, f"malformed snapshot: device_traces[{i}][{k}] has no 'action'") from None
            if act is None:
                continue  # "snapshot" markers and actions newer than this gpuprof
            tm = e.get("time_us")
            if tm is None:
                no_time = True
                tm = k
            else:
                any_time = True
            size = e.get("size", 0)
            sid = site_of(e.get("frames"))
            if act == OOM:
                free = e.get("device_free")
                dev.ooms.append(
                    OomEvent(len(a_), float(tm), _int(size), _int(free) if free is not None else None,
                             _int(e.get("stream")), sid)
                )
                addr = 0
            else:
                addr = e.get("addr", 0)
            t_.append(tm)
            a_.append(act)
            ad_.append(addr)
            sz_.append(size)
            si_.append(sid)
            st_.append(e.get("stream", 0))
    for dev in devices:
        dev.has_time = not no_time
    if no_time and any_time:
        notes.append("some history entries lack time_us; the timeline uses event order instead of time")
    elif no_time:
        notes.append("the history has no timestamps (older PyTorch); the timeline uses event order")
    if not traces_raw or not any(len(d) for d in devices):
        notes.append(
            "the snapshot has no allocation history (record it with "
            "torch.cuda.memory._record_memory_history()); figures are the state at snapshot time"
        )

    meta = obj.get("gpuprof")
    if isinstance(meta, dict):
        for d in meta.get("devices") or ():
            if isinstance(d, dict):
                idx = _int(d.get("id"), -1)
                if 0 <= idx < len(devices) and d.get("total_memory"):
                    devices[idx].total_memory = _int(d.get("total_memory"))
    settings = obj.get("allocator_settings")
    # Drop devices with neither state nor history (a multi-GPU box where only one GPU was used).
    devices = [d for d in devices if len(d) or d.segments]
    return MemoryData(
        path=path,
        source_type="snapshot",
        devices=devices,
        sites=sites,
        notes=notes,
        settings=dict(settings) if isinstance(settings, dict) else {},
    )
