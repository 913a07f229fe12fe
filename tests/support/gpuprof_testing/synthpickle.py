"""Write PyTorch-layout snapshot pickles of any size, entry by entry (benchmarks and memory tests).

``pickle.dump`` needs the whole snapshot as Python objects first (10-30x the
file), so a multi-GB test file cannot be made that way. :func:`write_snapshot`
emits the opcodes PyTorch's own ``_dump_snapshot`` produces (pickle protocol
4, 64 KiB frames, every dict and list memoized, the keys, action names and
frame dicts written once and referred to afterwards, a new frames list of
references per entry, a fresh ``compile_context`` string per entry), so the
file reads the same through ``pickle.load``, through PyTorch's
``_memory_viz`` and through gpuprof, at the cost of a few bytes of memory.

The history is a training loop: ``stacks`` distinct allocation stacks (module
forwards under ``nn.Module.__call__``), activations allocated and freed each
step, and one 4 KiB block leaked per step (the live blocks of the final
``segments``), so every part of the analysis has work to do.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

__all__ = ["write_snapshot"]

_FRAME = 64 * 1024
_BASE = 0x7F0000000000
_SEG = 2 << 30
_T0 = 1_700_000_000_000_000


class _Writer:
    """Pickle opcodes for plain data, with the memo kept as the pickler keeps it (MEMOIZE: the next index)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.frame = bytearray()
        self.memo = 0
        self.strings: dict[str, bytes] = {}

    def op(self, data: bytes) -> None:
        self.frame += data
        if len(self.frame) >= _FRAME:
            self.commit()

    def commit(self) -> None:
        if self.frame:
            self.fh.write(b"\x95" + struct.pack("<Q", len(self.frame)) + bytes(self.frame))
            self.frame = bytearray()

    def put(self) -> bytes:
        """MEMOIZE, and the opcode that gets the object back later."""
        idx = self.memo
        self.memo += 1
        self.op(b"\x94")
        return b"h" + bytes([idx]) if idx < 256 else b"j" + struct.pack("<I", idx)

    def string(self, s: str) -> bytes:
        """Write ``s`` once; afterwards its reference. Returns the reference."""
        ref = self.strings.get(s)
        if ref is not None:
            self.op(ref)
            return ref
        raw = s.encode()
        self.op((b"\x8c" + bytes([len(raw)]) if len(raw) < 256 else b"X" + struct.pack("<I", len(raw))) + raw)
        ref = self.strings[s] = self.put()
        return ref

    @staticmethod
    def int_(v: int) -> bytes:
        if 0 <= v < 256:
            return b"K" + bytes([v])
        if -(1 << 31) <= v < (1 << 31):
            return b"J" + struct.pack("<i", v)
        n = (v.bit_length() + 8) // 8
        return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


_MODULE = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py"


def _frames(k: int) -> list[tuple[str, int, str]]:
    """A stack as PyTorch records one (innermost first): the allocator, a layer's forward, four levels of nested
    modules (each ``_call_impl``, ``_wrapped_call_impl``, the parent's forward), the step, main: 17 frames."""
    nested = []
    for level in range(4):
        nested += [(_MODULE, 1747, "_call_impl"), (_MODULE, 1736, "_wrapped_call_impl"),
                   (f"/home/u/proj/block_{level}.py", 20 + (k + level) % 9, "forward")]
    return [("/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1180,
             "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
            (f"/home/u/proj/model_{k % 20}.py", 10 + k, "forward"), *nested,
            ("/home/u/proj/train.py", 50 + k % 7, "train_step"), ("/home/u/proj/train.py", 90, "main")]


def write_snapshot(path: str | os.PathLike[str], entries: int, stacks: int = 200, min_bytes: int = 0) -> int:
    """Write a snapshot with ``entries`` history entries (or, with ``min_bytes``, as many as make the file at
    least that big) to ``path``. Returns the number of entries written."""
    with open(path, "wb") as fh:
        fh.write(b"\x80\x04")
        w = _Writer(fh)
        w.op(b"}")
        w.put()
        w.op(b"(")
        w.string("segments")
        w.op(b"]")
        w.put()
        # One segment: its live blocks are the 4 KiB blocks leaked one per step, sized by the steps to come
        # (about 201 entries of about 150 bytes each per step).
        steps = max(1, (entries if not min_bytes else min_bytes // 150) // 201)
        frame_refs: dict[tuple[str, int, str], bytes] = {}

        def frame_ref(f: tuple[str, int, str]) -> bytes:
            ref = frame_refs.get(f)
            if ref is None:
                w.op(b"}")
                ref = w.put()
                w.op(b"(")
                w.string("filename")
                w.string(f[0])
                w.string("line")
                w.op(w.int_(f[1]))
                w.string("name")
                w.string(f[2])
                w.op(b"u")
                frame_refs[f] = ref
            else:
                w.op(ref)
            return ref

        def frames_list(k: int) -> None:
            w.op(b"]")
            w.put()
            w.op(b"(")
            for f in _frames(k):
                frame_ref(f)
            w.op(b"e")

        leak = ("/home/u/proj/train.py", 61, "main")
        w.op(b"(")
        w.op(b"}")
        w.put()
        w.op(b"(")
        for key, val in (("device", 0), ("address", _BASE), ("total_size", _SEG), ("allocated_size", 4096 * steps),
                         ("active_size", 4096 * steps), ("requested_size", 4096 * steps), ("stream", 0)):
            w.string(key)
            w.op(w.int_(val))
        w.string("segment_type")
        w.string("large")
        w.string("blocks")
        w.op(b"]")
        w.put()
        for i0 in range(0, steps, 1000):
            w.op(b"(")
            for i in range(i0, min(steps, i0 + 1000)):
                w.op(b"}")
                w.put()
                w.op(b"(")
                for key, val in (("address", _BASE + 4096 * i), ("size", 4096), ("requested_size", 4096)):
                    w.string(key)
                    w.op(w.int_(val))
                w.string("state")
                w.string("active_allocated")
                w.string("frames")
                w.op(b"]")
                w.put()
                frame_ref(leak)
                w.op(b"a")
                w.op(b"u")
            w.op(b"e")
        w.op(b"}")  # the rest of the segment: one free block
        w.put()
        w.op(b"(")
        for key, val in (("address", _BASE + 4096 * steps), ("size", _SEG - 4096 * steps), ("requested_size", 0)):
            w.string(key)
            w.op(w.int_(val))
        w.string("state")
        w.string("inactive")
        w.op(b"ua")
        w.op(b"u")  # the segment's items
        w.op(b"e")  # the segments list's items
        w.string("device_traces")
        w.op(b"]")
        w.put()
        w.op(b"]")
        w.put()
        # The history: per step 100 allocations, their frees (requested, completed), one leaked block.
        n = 0
        t = _T0
        step = 0
        batch = 0
        w.op(b"(")

        def entry(action: str, addr: int, size: int, k: int) -> None:
            nonlocal n, batch
            if batch == 1000:
                w.op(b"e(")
                batch = 0
            w.op(b"}")
            w.put()
            w.op(b"(")
            w.string("action")
            w.string(action)
            for key, val in (("addr", addr), ("size", size), ("stream", 0), ("time_us", t)):
                w.string(key)
                w.op(w.int_(val))
            w.string("compile_context")
            w.op(b"\x8c\x03N/A")
            w.put()  # a fresh string per entry, as PyTorch writes it
            w.string("user_metadata")
            w.string("")
            w.string("frames")
            if k < 0:
                w.op(b"]")
                w.put()
                frame_ref(leak)
                w.op(b"a")
            else:
                frames_list(k)
            w.op(b"u")
            n += 1
            batch += 1

        while (n < entries) if not min_bytes else (fh.tell() < min_bytes):
            step += 1
            live = []
            nxt = _BASE + 4096 * steps
            for k in range(100):
                t += 3
                size = (1 + (k * 7919) % 16) << 18
                entry("alloc", nxt, size, (k + step) % stacks)
                live.append((nxt, size, (k + step) % stacks))
                nxt += size
            for a, size, k in reversed(live):
                t += 2
                entry("free_requested", a, size, k)
                entry("free_completed", a, size, k)
            t += 1
            entry("alloc", _BASE + 4096 * ((step - 1) % steps), 4096, -1)
        w.op(b"e")  # the device's entries
        w.op(b"a")  # the one device list into device_traces
        w.string("allocator_settings")
        w.op(b"}")
        w.put()
        w.op(b"u.")  # the top dict's items; STOP
        w.commit()
    return n
