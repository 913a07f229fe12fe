"""Build PyTorch-format memory snapshots without a GPU (a test helper).

:class:`SnapshotBuilder` plays a small model of PyTorch's CUDA caching
allocator and records what the real one would: segments carved into blocks,
and a ``device_traces`` history of ``alloc`` / ``free_requested`` /
``free_completed`` / ``segment_alloc`` / ``segment_free`` / ``oom`` entries
with ``time_us`` and ``frames``. :meth:`SnapshotBuilder.snapshot` returns the
same dict layout as ``torch.cuda.memory._snapshot()`` (see
:mod:`gpuprof.memory.snapshot`), so every part of ``gpuprof memory`` can be
tested on planted situations (a leak, an OOM with fragmentation, blocks held
by ``record_stream``) on a machine without CUDA.

The model follows the allocator's documented behaviour closely enough for
the numbers to be realistic:

* requests are rounded up to 512 bytes;
* requests of at most 1 MiB go to the small pool (2 MiB segments), requests
  under 10 MiB to 20 MiB large segments, larger ones to a segment of their own
  size rounded up to 2 MiB;
* a free block is split for a smaller request (best fit among the stream's
  cached blocks of the pool), and freed neighbours merge again;
* a block freed while other streams still use it (``record_stream``) stays
  ``active_pending_free`` until :meth:`complete_free`.

Example::

    b = SnapshotBuilder()
    user = b.stack(("train.py", 42, "step"))
    x = b.alloc(64 << 20, user)
    b.free(x)
    b.dump("snap.pickle")
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Sequence

from gpuprof.memory.snapshot import dump_snapshot

__all__ = ["SnapshotBuilder", "TORCH_FRAMES", "KiB", "MiB", "GiB"]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_SMALL = 1 * MiB
_SMALL_SEGMENT = 2 * MiB
_MIN_LARGE = 10 * MiB
_LARGE_SEGMENT = 20 * MiB
_ROUND_LARGE = 2 * MiB

# Frames PyTorch itself puts innermost in every stack; the analysis must skip them.
TORCH_FRAMES: tuple[tuple[str, int, str], ...] = (
    ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1736, "_call_impl"),
    ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1747, "_wrapped_call_impl"),
)
_CPP_FRAMES: tuple[tuple[str, int, str], ...] = (
    ("??", 0, "torch::unwind::unwind()"),
    ("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1180, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
)


class _Blk:
    __slots__ = ("addr", "size", "req", "state", "frames", "seg")

    def __init__(self, addr: int, size: int, seg: "_Seg") -> None:
        self.addr = addr
        self.size = size
        self.req = 0
        self.state = "inactive"
        self.frames: list[dict[str, Any]] = []
        self.seg = seg


class _Seg:
    def __init__(self, addr: int, size: int, stream: int, small: bool, frames: list[dict[str, Any]]) -> None:
        self.addr = addr
        self.size = size
        self.stream = stream
        self.small = small
        self.frames = frames
        self.blocks = [_Blk(addr, size, self)]


class SnapshotBuilder:
    """A model caching allocator for one or more devices that records a snapshot.

    ``device_memory``: capacity per device; an allocation that does not fit
    raises :class:`MemoryError` after recording an ``oom`` entry, as PyTorch
    does. ``max_entries``: keep only the newest entries, as the real ring
    buffer does (``_record_memory_history(max_entries=...)``).
    ``start_us``/``tick_us``: clock of the recorded ``time_us``.
    """

    def __init__(
        self,
        devices: int = 1,
        device_memory: int = 16 * GiB,
        max_entries: int | None = None,
        start_us: int = 1_700_000_000_000_000,
        tick_us: int = 10,
        cpp_frames: bool = False,
        requested_sizes: bool = False,
    ) -> None:
        self.device_memory = device_memory
        # PyTorch's history records the size asked for (alloc: the request, free_requested: the block's
        # requested_size), while a block's size is rounded (and may include an unsplit remainder); False keeps
        # the rounded size in the history too
        self.requested_sizes = requested_sizes
        self.max_entries = max_entries
        self.now = start_us
        self.tick = tick_us
        self.cpp_frames = cpp_frames
        self._segs: list[list[_Seg]] = [[] for _ in range(devices)]
        self._traces: list[list[dict[str, Any]]] = [[] for _ in range(devices)]
        self._live: list[dict[int, _Blk]] = [{} for _ in range(devices)]
        self._next_addr = [0x7F0000000000 + (d << 40) for d in range(devices)]
        self._stacks: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self._pending: set[tuple[int, int]] = set()

    # ------------------------------------------------------------------ stacks
    def stack(self, *user_frames: tuple[str, int, str], torch_frames: bool = True) -> list[dict[str, Any]]:
        """A ``frames`` list, innermost first: torch's own frames, then ``user_frames`` (innermost first).

        The same arguments return the same list object, as PyTorch shares
        symbolised stacks between entries.
        """
        key = (user_frames, torch_frames, self.cpp_frames)
        got = self._stacks.get(key)
        if got is None:
            inner: list[tuple[str, int, str]] = []
            if self.cpp_frames:
                inner.extend(_CPP_FRAMES)
            if torch_frames:
                inner.extend(TORCH_FRAMES)
            got = [{"filename": f, "line": ln, "name": n} for f, ln, n in (*inner, *user_frames)]
            self._stacks[key] = got
        return got

    # ------------------------------------------------------------------ allocator model
    def _record(self, device: int, entry: dict[str, Any]) -> None:
        self.now += self.tick
        entry["time_us"] = self.now
        tr = self._traces[device]
        tr.append(entry)
        if self.max_entries is not None and len(tr) > self.max_entries:
            del tr[: len(tr) - self.max_entries]

    def reserved(self, device: int = 0) -> int:
        return sum(s.size for s in self._segs[device])

    def allocated(self, device: int = 0) -> int:
        return sum(b.size for b in self._live[device].values())

    @staticmethod
    def round_size(size: int) -> int:
        return max(512, (size + 511) // 512 * 512)

    def alloc(self, size: int, frames: Sequence[dict[str, Any]] = (), stream: int = 0, device: int = 0) -> int:
        """Allocate ``size`` bytes; returns the block address. Records ``oom`` and raises MemoryError when full."""
        frames = list(frames) if not isinstance(frames, list) else frames
        rsize = self.round_size(size)
        small = rsize <= _SMALL
        blk = self._best_fit(device, rsize, stream, small)
        if blk is None:
            seg_size = _SMALL_SEGMENT if small else (_LARGE_SEGMENT if rsize < _MIN_LARGE else
                                                     (rsize + _ROUND_LARGE - 1) // _ROUND_LARGE * _ROUND_LARGE)
            free = self.device_memory - sum(self.reserved(d) for d in range(len(self._segs)))
            if seg_size > free:
                self._release_cached(device)  # the allocator frees unused cached segments and retries
                free = self.device_memory - sum(self.reserved(d) for d in range(len(self._segs)))
            if seg_size > free:
                self._record(device, {"action": "oom", "device_free": free, "size": rsize, "stream": stream,
                                      "frames": frames})
                raise MemoryError(f"model allocator: cannot allocate {rsize} bytes ({free} free)")
            addr = self._next_addr[device]
            self._next_addr[device] += seg_size + _ROUND_LARGE
            seg = _Seg(addr, seg_size, stream, small, frames)
            self._segs[device].append(seg)
            self._record(device, {"action": "segment_alloc", "addr": addr, "size": seg_size, "stream": stream,
                                  "frames": frames})
            blk = seg.blocks[0]
        seg = blk.seg
        if blk.size > rsize:  # split: the remainder stays cached in the same segment
            rest = _Blk(blk.addr + rsize, blk.size - rsize, seg)
            i = seg.blocks.index(blk)
            seg.blocks.insert(i + 1, rest)
            blk.size = rsize
        blk.state = "active_allocated"
        blk.req = size
        blk.frames = frames
        self._live[device][blk.addr] = blk
        self._record(device, {"action": "alloc", "addr": blk.addr, "size": size if self.requested_sizes else rsize,
                              "stream": stream, "frames": frames})
        return blk.addr

    def _best_fit(self, device: int, rsize: int, stream: int, small: bool) -> _Blk | None:
        best = None
        for seg in self._segs[device]:
            if seg.stream != stream or seg.small != small:
                continue
            for b in seg.blocks:
                if b.state == "inactive" and b.size >= rsize and (best is None or b.size < best.size):
                    best = b
        return best

    def free(self, addr: int, device: int = 0, pending: bool = False) -> None:
        """Free the block at ``addr``; ``pending`` models ``record_stream``: completion waits for :meth:`complete_free`."""
        blk = self._live[device].pop(addr)
        stream = blk.seg.stream
        self._record(device, {"action": "free_requested", "addr": addr,
                              "size": blk.req if self.requested_sizes else blk.size, "stream": stream,
                              "frames": blk.frames})
        if pending:
            blk.state = "active_pending_free"
            self._live[device][addr] = blk  # still occupies memory, but not counted as allocated
            self._pending.add((device, addr))
            return
        self._complete(device, blk)

    def complete_free(self, addr: int, device: int = 0) -> None:
        """The other streams finished with a ``pending`` block: it returns to the cache."""
        blk = self._live[device].pop(addr)
        self._pending.discard((device, addr))
        self._complete(device, blk)

    def _complete(self, device: int, blk: _Blk) -> None:
        self._record(device, {"action": "free_completed", "addr": blk.addr, "size": blk.size,
                              "stream": blk.seg.stream, "frames": blk.frames})
        blk.state = "inactive"
        blk.frames = []
        blk.req = 0
        seg = blk.seg
        merged: list[_Blk] = []
        for b in seg.blocks:  # merge neighbouring free blocks
            if merged and b.state == "inactive" and merged[-1].state == "inactive":
                merged[-1].size += b.size
            else:
                merged.append(b)
        seg.blocks = merged

    def _release_cached(self, device: int) -> None:
        keep = []
        for seg in self._segs[device]:
            if len(seg.blocks) == 1 and seg.blocks[0].state == "inactive":
                self._record(device, {"action": "segment_free", "addr": seg.addr, "size": seg.size,
                                      "stream": seg.stream, "frames": seg.frames})
            else:
                keep.append(seg)
        self._segs[device] = keep

    def empty_cache(self, device: int = 0) -> None:
        """``torch.cuda.empty_cache()``: give fully free segments back to the device."""
        self._release_cached(device)

    # ------------------------------------------------------------------ output
    def snapshot(self, extra: dict[str, Any] | None = None, device_info: bool = True) -> dict[str, Any]:
        """The snapshot dict, in ``torch.cuda.memory._snapshot()`` layout."""
        segments = []
        for d, segs in enumerate(self._segs):
            for seg in segs:
                blocks = [
                    {"address": b.addr, "size": b.size, "requested_size": b.req, "state": b.state,
                     "frames": b.frames}
                    for b in seg.blocks
                ]
                allocated = sum(b.size for b in seg.blocks if b.state == "active_allocated")
                active = sum(b.size for b in seg.blocks if b.state != "inactive")
                segments.append({
                    "device": d, "address": seg.addr, "total_size": seg.size, "allocated_size": allocated,
                    "active_size": active, "requested_size": sum(b.req for b in seg.blocks),
                    "stream": seg.stream, "segment_type": "small" if seg.small else "large",
                    "segment_pool_id": (0, 0), "is_expandable": False, "frames": seg.frames, "blocks": blocks,
                })
        snap: dict[str, Any] = {
            "segments": segments,
            "device_traces": [list(t) for t in self._traces],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0, "expandable_segments": False},
        }
        if device_info:
            snap["gpuprof"] = {"devices": [{"id": d, "name": "model GPU", "total_memory": self.device_memory}
                                           for d in range(len(self._segs))]}
        if extra:
            snap.update(extra)
        return snap

    def dump(self, path: str | os.PathLike[str], **kw: Any) -> str:
        """Write :meth:`snapshot` as gpuprof writes snapshots (pickle protocol 4); returns the path."""
        dump_snapshot(self.snapshot(**kw), path)
        return os.fspath(path)

    def entries(self, device: int = 0) -> Iterable[dict[str, Any]]:
        return iter(self._traces[device])
