"""Turn a snapshot's plain data into :class:`~gpuprof.memory.model.MemoryData`, part by part.

:class:`SnapshotParser` takes a snapshot in the order its pickle holds it:
each segment (:meth:`~SnapshotParser.segment`), each device's history entries
in batches (:meth:`~SnapshotParser.entries`), then the rest of the top dict
(:meth:`~SnapshotParser.finish`). :func:`gpuprof.memory.snapshot.parse_snapshot`
drives it over an unpickled object; the streaming loader
(:mod:`gpuprof.memory.snapshot.pickstream`) drives it as the file is read, so neither
the pickle's objects nor the file need be held in whole. Both give the same
:class:`MemoryData`. Every value is checked: a malformed snapshot is one
:class:`~gpuprof.errors.InputError` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence
from typing import Any, Sequence

from gpuprof.errors import InputError
from gpuprof.inputs import MAX_DEVICE_INDEX, SNAPSHOT_ITEMS_PER_BYTE
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
    compact_columns,
)
from gpuprof.memory.replay import align_history_sizes

__all__ = ["SnapshotParser", "check_top", "item_budget"]

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


_FRAMES_SEEN_MAX = 1 << 16

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


def item_budget(nbytes: int) -> int:
    """Items a snapshot of ``nbytes`` may describe (see ``SNAPSHOT_ITEMS_PER_BYTE``), with a floor for tiny files."""
    return max(nbytes, 4096) * SNAPSHOT_ITEMS_PER_BYTE.value()


def check_top(obj: Any, path: str) -> tuple[list[Any], list[Any] | None]:
    """The snapshot's ``segments`` and ``device_traces`` (raises :class:`InputError` if ``obj`` is no snapshot)."""
    if not isinstance(obj, dict):
        raise InputError(path, f"not a PyTorch memory snapshot (the pickle holds a {type(obj).__name__}, not a dict)")
    segs_raw = obj.get("segments")
    traces_raw = obj.get("device_traces")
    if not isinstance(segs_raw, list) or (traces_raw is not None and not isinstance(traces_raw, list)):
        raise InputError(path, "not a PyTorch memory snapshot (no 'segments' list)")
    return segs_raw, traces_raw


class SnapshotParser:
    """Builds :class:`MemoryData` from a snapshot's parts, in file order (segments, entries, the rest).

    ``max_items``: how many segments, blocks, history entries and frames
    lists the snapshot may describe (the loader allows
    ``SNAPSHOT_ITEMS_PER_BYTE`` per byte of the file). A pickle can refer to
    one list many times, so a few KB can describe billions of entries; the
    count refuses that before the work, as it meets each list.
    """

    def __init__(self, path: str, internal_patterns: Any = DEFAULT_INTERNAL_PATTERNS,
                 max_items: int | None = None) -> None:
        self.path = path
        self.budget = _Budget(path, max_items)
        self.sites = SiteTable(internal_patterns)
        self.kinds = KindTable()
        # id(frames list) -> (the list, its site, its kind): one look-up per history entry where the streamed
        # reader shares one list among the entries with equal frames; bounded, for a whole load's list per entry
        self.frames_seen: dict[int, tuple[Any, int, int]] = {}
        self.max_device = MAX_DEVICE_INDEX.value()
        self.devices: list[DeviceMemory] = []
        self.n_segments = 0
        self.seen: list[int] = []  # history entries met so far per device (their index in device_traces[i])
        self.any_time = False
        self.no_time = False

    def device(self, i: int) -> DeviceMemory:
        """Device ``i``, made (with every lower index) when first met; empty ones are dropped at the end."""
        while len(self.devices) <= i:
            n = len(self.devices)
            self.devices.append(compact_columns(DeviceMemory(device=f"cuda:{n}", index=n, segments=[])))
            self.seen.append(0)
        return self.devices[i]

    def check_device_count(self, n_dev: int) -> None:
        if n_dev > self.max_device + 1:
            raise InputError(self.path, "malformed snapshot: " + MAX_DEVICE_INDEX.exceeded(
                f"device_traces lists {n_dev:,} devices"))

    def segment_device(self, s: Any) -> int:
        """The device a segment is on, checked against the device limit."""
        d = s.get("device")
        d = 0 if d is None else _int(d, -1)
        if not 0 <= d <= self.max_device:
            raise InputError(self.path, "malformed snapshot: " + MAX_DEVICE_INDEX.exceeded(
                f"a segment is on device {d if d != -1 else _kind(s.get('device'))}"))
        return d

    def segment(self, s: Any) -> None:
        """One entry of ``segments``: the allocator's region and its blocks at snapshot time."""
        path, budget, sites, kinds = self.path, self.budget, self.sites, self.kinds
        j = self.n_segments
        self.n_segments += 1
        budget.take(1)
        if not isinstance(s, dict):
            raise InputError(path, "malformed snapshot: a segment is not a dict")
        dev = self.device(self.segment_device(s))
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
            Segment(address=addr, total_size=total, stream=_int(s.get("stream")), segment_type=seg_type,
                    is_expandable=bool(s.get("is_expandable", False)), blocks=blocks)
        )

    def entries(self, i: int, entries: Sequence[Any]) -> None:
        """The next ``entries`` of ``device_traces[i]``, in order (one flat loop: a million of them is common)."""
        path = self.path
        self.budget.take(len(entries))
        dev = self.device(i)
        k0 = self.seen[i]
        self.seen[i] = k0 + len(entries)
        t_ = dev.time
        a_ = dev.action
        ad_ = dev.addr
        sz_ = dev.size
        si_ = dev.site
        st_ = dev.stream
        k_ = dev.kind
        kind_of = self.kinds.kind_of
        site_of = self.sites.site_of
        knows = self.sites.knows
        take = self.budget.take
        actions = ACTION_NAMES
        by_list = self.frames_seen
        any_time = no_time = False
        for k, e in enumerate(entries, k0):
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
            known = by_list.get(id(frames)) if type(frames) is list else None
            if known is not None and known[0] is frames:  # this very list, met before: its site and kind
                sid = known[1]
                kid = known[2]
            else:
                if frames and not knows(frames):
                    take(1)
                sid = site_of(frames)
                kid = -1
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
            if kid < 0:
                kid = kind_of(frames)
                if type(frames) is list and len(by_list) < _FRAMES_SEEN_MAX:
                    by_list[id(frames)] = (frames, sid, kid)
            try:
                t_.append(tm)
                a_.append(act)
                ad_.append(addr)
                sz_.append(size)
                si_.append(sid)
                st_.append(stream)
                k_.append(kid)
            except (OverflowError, TypeError):  # a float time or an out-of-range stream: lists keep it exactly
                n = len(k_)  # the events before this one (kind is appended last)
                dev.widen_columns()
                cols: tuple[MutableSequence[Any], ...] = (dev.time, dev.action, dev.addr, dev.size, dev.site, dev.stream, dev.kind)
                for col, value in zip(cols, (tm, act, addr, size, sid, stream, kid)):  # rare: a loop is cheap here
                    del col[n:]
                    col.append(value)
                t_, a_, ad_, sz_, si_, st_, k_ = cols
        self.any_time |= any_time
        self.no_time |= no_time

    def finish(self, obj: dict[str, Any], n_traces: int) -> MemoryData:
        """The rest of the top dict (device facts, the OOM record, owners, settings, annotations) and the notes;
        ``n_traces``: how many device lists ``device_traces`` held."""
        budget, devices, kinds = self.budget, self.devices, self.kinds
        notes: list[str] = []
        no_time, any_time = self.no_time, self.any_time
        for dev in devices:
            dev.has_time = not no_time
        if no_time and any_time:
            notes.append("some history entries lack time_us; the timeline uses event order instead of time")
        elif no_time:
            notes.append("the history has no timestamps (older PyTorch); the timeline uses event order")
        if not n_traces or not any(len(d) for d in devices):
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
        for d in devices:  # the history's sizes are requests; the blocks live at the end count their own size
            align_history_sizes(d)
        return MemoryData(path=self.path, source_type="snapshot", devices=devices, sites=self.sites, notes=notes,
                          settings=dict(settings) if isinstance(settings, dict) else {}, kinds=kinds,
                          annotations=annotations, pinned_host=pinned_host or None)


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
