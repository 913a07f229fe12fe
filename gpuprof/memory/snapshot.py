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

import math
import os
import pickle
from typing import Any

from gpuprof.atomic import atomic_path
from gpuprof.errors import InputError
from gpuprof.inputs import MAX_DEVICE_INDEX, SNAPSHOT_ITEMS_PER_BYTE, Opened
from gpuprof.memory.attribution import KindTable
from gpuprof.memory.devices import bf16_support
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
from gpuprof.memory.safeload import load_pickle_input

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
    """Safely unpickle and parse the snapshot at ``path`` (``-``: standard input; or the ``opened`` input)."""
    obj, nbytes = load_pickle_input(path, opened)
    return parse_snapshot(obj, os.fspath(path), internal_patterns, max_items=_item_budget(nbytes))


def _item_budget(nbytes: int) -> int:
    """Items a snapshot of ``nbytes`` may describe (see ``SNAPSHOT_ITEMS_PER_BYTE``), with a floor for tiny files."""
    return max(nbytes, 4096) * SNAPSHOT_ITEMS_PER_BYTE.value()


_U64 = 1 << 64  # sizes, addresses and streams are 64-bit values in PyTorch


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -_U64 < v < _U64 else default
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    return default


def _uint(v: Any) -> int:
    """A size or address: an int (or integral float) in [0, 2**64); None counts as 0; -1 for anything else."""
    if type(v) is int:
        return v if 0 <= v < _U64 else -1
    if v is None:
        return 0
    if isinstance(v, float) and v == v and 0 <= v < _U64:
        return int(v)
    if isinstance(v, bool):
        return int(v)
    return -1


def _time(v: Any) -> float | int | None:
    """A history timestamp (µs): a finite number; None when it is not one."""
    if type(v) is int:
        return v if -_U64 < v < _U64 else None
    if type(v) is float:
        return v if math.isfinite(v) else None
    return None


def _kind(v: Any) -> str:
    """What a bad value is, for a message, without printing it (it may be huge or deeply shared)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "a negative number" if v < 0 else ("NaN" if v != v else "too large" if v >= _U64 else repr(v))
    return f"a {type(v).__name__}"


def _text(v: Any, default: str) -> str | None:
    """A string field (block state, segment type): the string, ``default`` when missing, None when not a string."""
    if v is None:
        return default
    return v if isinstance(v, str) else None


class _Budget:
    """Counts the items a snapshot describes against what its file size allows."""

    def __init__(self, path: str, max_items: int | None) -> None:
        self.path = path
        self.max_items = max_items
        self.left = max_items if max_items is not None else -1

    def take(self, n: int) -> None:
        if self.max_items is None:
            return
        self.left -= n
        if self.left < 0:
            raise InputError(self.path, "malformed snapshot: " + SNAPSHOT_ITEMS_PER_BYTE.exceeded(
                f"it describes more than {self.max_items:,} items (lists shared many times over?)"))


def _block_frames(b: dict[str, Any]) -> Any:
    fr = b.get("frames")
    if fr is None:
        hist = b.get("history")  # PyTorch 2.0: [{"addr", "real_size", "frames"}], newest last
        if isinstance(hist, list) and hist and isinstance(hist[-1], dict):
            fr = hist[-1].get("frames")
    return fr


def parse_snapshot(
    obj: Any, path: str, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS, max_items: int | None = None
) -> MemoryData:
    """Turn an unpickled snapshot into :class:`MemoryData` (raises :class:`InputError` if it is not one).

    ``max_items``: how many segments, blocks, history entries and frames
    lists the snapshot may describe (``load_snapshot`` allows
    ``SNAPSHOT_ITEMS_PER_BYTE`` per byte of the file). A pickle can refer to
    one list many times, so a few KB can describe billions of entries; the
    count refuses that before the work, as it meets each list.
    """
    if isinstance(obj, list):
        obj = {"segments": obj}
    if not isinstance(obj, dict):
        raise InputError(path, f"not a PyTorch memory snapshot (the pickle holds a {type(obj).__name__}, not a dict)")
    segs_raw = obj.get("segments")
    traces_raw = obj.get("device_traces")
    if not isinstance(segs_raw, list) or (traces_raw is not None and not isinstance(traces_raw, list)):
        raise InputError(path, "not a PyTorch memory snapshot (no 'segments' list)")
    budget = _Budget(path, max_items)
    sites = SiteTable(internal_patterns)
    kinds = KindTable()
    notes: list[str] = []
    max_device = MAX_DEVICE_INDEX.value()

    budget.take(len(segs_raw))
    n_dev = len(traces_raw) if traces_raw else 0
    if n_dev > max_device + 1:
        raise InputError(path, "malformed snapshot: " + MAX_DEVICE_INDEX.exceeded(f"device_traces lists {n_dev:,} devices"))
    for s in segs_raw:
        if isinstance(s, dict):
            d = s.get("device")
            d = 0 if d is None else _int(d, -1)
            if not 0 <= d <= max_device:
                raise InputError(path, "malformed snapshot: " + MAX_DEVICE_INDEX.exceeded(
                    f"a segment is on device {d if d != -1 else _kind(s.get('device'))}"))
            n_dev = max(n_dev, d + 1)
    devices = [DeviceMemory(device=f"cuda:{i}", index=i, segments=[]) for i in range(n_dev)]

    for j, s in enumerate(segs_raw):
        if not isinstance(s, dict):
            raise InputError(path, "malformed snapshot: a segment is not a dict")
        dev = devices[_int(s.get("device"))]
        addr = _uint(s.get("address"))
        total = _uint(s.get("total_size"))
        seg_type = _text(s.get("segment_type"), "large")
        if addr < 0 or total < 0 or seg_type is None:
            field, v = ("address", s.get("address")) if addr < 0 else (
                ("total_size", s.get("total_size")) if total < 0 else ("segment_type", s.get("segment_type")))
            raise InputError(path, f"malformed snapshot: segments[{j}].{field} is {_kind(v)}")
        blocks: list[Block] = []
        cursor = addr
        blocks_raw = s.get("blocks") or ()
        if not isinstance(blocks_raw, (list, tuple)):
            raise InputError(path, f"malformed snapshot: segments[{j}].blocks is {_kind(blocks_raw)}, not a list")
        budget.take(len(blocks_raw))
        for k, b in enumerate(blocks_raw):
            if not isinstance(b, dict):
                raise InputError(path, "malformed snapshot: a block is not a dict")
            size = _uint(b.get("size"))
            baddr = _uint(b.get("address", cursor))
            state = _text(b.get("state"), "inactive")
            if size < 0 or baddr < 0 or state is None:
                field = "size" if size < 0 else "address" if baddr < 0 else "state"
                raise InputError(path, f"malformed snapshot: segments[{j}].blocks[{k}].{field} is {_kind(b.get(field))}")
            req = b.get("requested_size")
            if req is None and isinstance(b.get("history"), list) and b["history"]:
                req = b["history"][-1].get("real_size") if isinstance(b["history"][-1], dict) else None
            r = _uint(req) if req is not None else size
            frames = _block_frames(b)
            if isinstance(frames, list) and not sites.knows(frames):
                budget.take(1)
            blocks.append(Block(baddr, size, r if r >= 0 else size, state, sites.site_of(frames), kinds.kind_of(frames)))
            cursor = baddr + size
        assert dev.segments is not None
        dev.segments.append(
            Segment(
                address=addr,
                total_size=total,
                stream=_int(s.get("stream")),
                segment_type=seg_type,
                is_expandable=bool(s.get("is_expandable", False)),
                blocks=blocks,
            )
        )

    any_time = False
    no_time = False
    for i, entries in enumerate(traces_raw or ()):
        if not isinstance(entries, list):
            raise InputError(path, f"malformed snapshot: device_traces[{i}] is not a list")
        budget.take(len(entries))
        dev = devices[i]
        t_ = dev.time
        a_ = dev.action
        ad_ = dev.addr
        sz_ = dev.size
        si_ = dev.site
        st_ = dev.stream
        k_ = dev.kind
        kind_of = kinds.kind_of
        site_of = sites.site_of
        knows = sites.knows
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
                if type(tm) is not int or not -_U64 < tm < _U64:
                    tm = _time(tm)
                    if tm is None:
                        raise InputError(path, f"malformed snapshot: device_traces[{i}][{k}].time_us is {_kind(e.get('time_us'))}")
            size = e.get("size", 0)
            if type(size) is not int or not 0 <= size < _U64:
                size = _uint(size)
                if size < 0:
                    raise InputError(path, f"malformed snapshot: device_traces[{i}][{k}].size is {_kind(e.get('size'))}")
            frames = e.get("frames")
            if frames and not knows(frames):
                budget.take(1)
            sid = site_of(frames)
            stream = e.get("stream", 0)
            if type(stream) is not int:
                stream = _int(stream)
            if act == OOM:
                free = e.get("device_free")
                dev.ooms.append(
                    OomEvent(len(a_), float(tm), size, _int(free) if free is not None else None, stream, sid)
                )
                addr = 0
            else:
                addr = e.get("addr", 0)
                if type(addr) is not int or not 0 <= addr < _U64:
                    addr = _uint(addr)
                    if addr < 0:
                        raise InputError(path, f"malformed snapshot: device_traces[{i}][{k}].addr is {_kind(e.get('addr'))}")
            t_.append(tm)
            a_.append(act)
            ad_.append(addr)
            sz_.append(size)
            si_.append(sid)
            st_.append(stream)
            k_.append(kind_of(frames))
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
        meta_devices = meta.get("devices") or ()
        budget.take(len(meta_devices) if isinstance(meta_devices, (list, tuple)) else 0)
        for d in meta_devices if isinstance(meta_devices, (list, tuple)) else ():
            if isinstance(d, dict):
                idx = _int(d.get("id"), -1)
                total = _uint(d.get("total_memory"))
                if 0 <= idx < len(devices) and total > 0:
                    devices[idx].total_memory = total
                free = _uint(d.get("free_memory"))
                if 0 <= idx < len(devices) and free >= 0 and d.get("free_memory") is not None:
                    devices[idx].free_memory = free
                name = d.get("name")
                if 0 <= idx < len(devices) and isinstance(name, str):
                    devices[idx].name = name[:128]
                    devices[idx].bf16 = bf16_support("", None, name)
    if isinstance(meta, dict) and isinstance(meta.get("oom"), dict):
        # gpuprof's out-of-memory observer records the failed request here, so the dump is an OOM even when no
        # history was recorded (its "oom" entry is then missing)
        o = meta["oom"]
        idx, req, free = _int(o.get("device"), -1), _uint(o.get("requested_bytes")), o.get("device_free_bytes")
        if 0 <= idx < len(devices) and req >= 0 and not devices[idx].ooms:
            dev = devices[idx]
            dev.ooms.append(OomEvent(len(dev.action), float(dev.time[-1]) if dev.time else 0.0, req,
                                     _uint(free) if free is not None and _uint(free) >= 0 else None, 0,
                                     SiteTable.UNKNOWN))
    if isinstance(meta, dict) and isinstance(meta.get("tensors"), list):
        _apply_owners(meta["tensors"], devices, kinds, budget)
    pinned = meta.get("host_pinned") if isinstance(meta, dict) else None
    pinned_host = ({k: _uint(pinned.get(k)) for k in ("allocated_bytes", "active_bytes")
                    if isinstance(pinned.get(k), int) and _uint(pinned.get(k)) >= 0}
                   if isinstance(pinned, dict) else None)
    settings = obj.get("allocator_settings")
    annotations = _annotations(obj.get("external_annotations"), budget)
    # Drop devices with neither state nor history (a multi-GPU box where only one GPU was used).
    devices = [d for d in devices if len(d) or d.segments]
    return MemoryData(
        path=path,
        source_type="snapshot",
        devices=devices,
        sites=sites,
        notes=notes,
        settings=dict(settings) if isinstance(settings, dict) else {},
        kinds=kinds,
        annotations=annotations,
        pinned_host=pinned_host or None,
    )


_OWNER_KIND = {"parameters": ("parameters", "setup"), "gradients": ("gradients", "backward"),
               "optimizer_state": ("optimizer_state", "optimizer")}


def _apply_owners(raw: list[Any], devices: list[DeviceMemory], kinds: KindTable, budget: _Budget) -> None:
    """Name the blocks holding the storages the capture registered (``{"device", "ptr", "bytes", "category"}``:
    parameters, gradients, optimizer state): the run's facts win over what the stack says."""
    from bisect import bisect_right

    from gpuprof.memory.attribution import StackKind

    budget.take(len(raw))
    index: dict[int, tuple[list[int], list[Block]]] = {}
    for dev in devices:
        blocks = sorted((b for seg in dev.segments or () for b in seg.blocks), key=lambda b: b.address)
        index[dev.index] = ([b.address for b in blocks], blocks)
    for t in raw:
        if not isinstance(t, dict) or not isinstance(t.get("category"), str) or t["category"] not in _OWNER_KIND:
            continue
        starts, blocks = index.get(_int(t.get("device"), -1), ([], []))
        ptr = _uint(t.get("ptr"))
        i = bisect_right(starts, ptr) - 1
        if ptr <= 0 or i < 0 or not blocks[i].address <= ptr < blocks[i].address + blocks[i].size:
            continue
        b = blocks[i]
        if b.state != "active_allocated":
            continue
        cat, stage = _OWNER_KIND[t["category"]]
        old = kinds.kinds[b.kind]
        b.kind = kinds.add(StackKind(cat, stage, old.module, "registered by the capture (the run's own tensors)"))


def _annotations(raw: Any, budget: _Budget) -> list[tuple[int, str, float, float]]:
    """``record_function`` ranges from ``external_annotations`` (START/END entries, newer PyTorch), paired per
    device and name; an END without a START, or a START never ended, is dropped. Malformed entries are skipped:
    annotations only refine the stage, they never decide whether the file is readable."""
    if not isinstance(raw, list):
        return []
    budget.take(len(raw))
    open_: dict[tuple[int, str], list[float]] = {}
    out: list[tuple[int, str, float, float]] = []
    for e in raw:
        if not isinstance(e, dict):
            continue
        name, stage, tm = e.get("name"), e.get("stage"), _time(e.get("time_us"))
        if not isinstance(name, str) or tm is None:
            continue
        dev = _int(e.get("device"), 0)
        key = (dev, name[:200])
        if stage == "START":
            open_.setdefault(key, []).append(float(tm))
        elif stage == "END" and open_.get(key):
            out.append((dev, key[1], open_[key].pop(), float(tm)))
    out.sort(key=lambda r: (r[2], -r[3]))
    return out
