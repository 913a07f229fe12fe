"""Hostile snapshots through the streaming reader: nothing runs, every failure is one line, memory stays bounded.

The streaming reader (gpuprof.memory.snapshot.pickstream) walks a snapshot's pickle opcodes itself. These files aim at
what such a reader can get wrong: opcodes that import or call (refused before anything is built from them),
files cut anywhere, nesting far deeper than any snapshot, lengths declared far beyond the file, references to
memo slots never written, and references back to the entries already handed on (read in whole instead, with
the whole-file loader's limits).
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.errors import InputError
from gpuprof.inputs import Opened
from gpuprof.memory.model import MemoryData
from gpuprof.memory.snapshot import load_snapshot, parse_snapshot
from gpuprof.memory.snapshot.parse import item_budget
from gpuprof.memory.snapshot.pickops import UNSAFE
from gpuprof.memory.snapshot.safeload import load_pickle_file
from gpuprof.memory.snapshot.stream import BuiltWhole, stream_snapshot
from gpuprof_testing.snapshots import MiB, SnapshotBuilder

# A valid start: PROTO 4, the top dict, "segments": [] and "device_traces": [[ ... the entries follow
_HEAD = (b"\x80\x04}\x94(\x8c\x08segments\x94]\x94\x8c\x0ddevice_traces\x94]\x94]\x94("
         b"}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x00\x8c\x04size\x94M\x00\x02u")


def _stream(tmp_path: Path, data: bytes, name: str = "x.pickle") -> Any:
    p = tmp_path / name
    p.write_bytes(data)
    return p, stream_snapshot(p)


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def test_a_command_inside_a_streamed_entry_is_refused_by_the_stream(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    entries = [{"action": "alloc", "addr": 0, "size": 512, "time_us": i} for i in range(3000)]
    entries[2500]["frames"] = [_RunsCommand(marker)]  # after two full batches were handed on
    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries]}, protocol=4))
    with pytest.raises(InputError, match=r"refusing to load: the pickle tries to import posix\.system"):
        stream_snapshot(p)  # the stream itself refuses (not the whole-file loader after it)
    assert not marker.exists()
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "memory", str(p)], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "refusing to load" in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("op", sorted(UNSAFE))
def test_every_opcode_that_imports_or_calls_is_refused(tmp_path: Path, op: int) -> None:
    # each such opcode placed where an entry's value goes, with what it would take on the stack before it
    arg = {0x63: b"os\nsystem\n", 0x69: b"os\nsystem\n", 0x82: b"\x01", 0x83: b"\x01\x00",
           0x84: b"\x01\x00\x00\x00"}.get(op, b"")
    before = b"\x8c\x02os\x8c\x06system" if op == 0x93 else b"(N" if op in (0x6F, 0x69) else b"NN"
    data = _HEAD + b"(" + b"\x8c\x01x" + before + bytes([op]) + arg + b"ue" + b"a" + b"u."
    with pytest.raises(InputError, match="refusing to load"):
        _stream(tmp_path, data)


def test_files_cut_anywhere_are_one_line_errors(tmp_path: Path) -> None:
    b = SnapshotBuilder(cpp_frames=True)
    st = b.stack(("/home/u/train.py", 3, "main"))
    for _ in range(40):
        b.free(b.alloc(3 * MiB, st))
    full = pickle.dumps(b.snapshot(), protocol=4)
    p = tmp_path / "cut.pickle"
    for cut in range(1, len(full), max(1, len(full) // 300)):
        p.write_bytes(full[:cut])
        with pytest.raises(InputError, match="corrupt or truncated|not a PyTorch memory snapshot") as err:
            load_snapshot(p)
        assert "\n" not in str(err.value)


def test_lengths_declared_beyond_the_file_allocate_nothing(tmp_path: Path) -> None:
    cases = [b"\x8d" + struct.pack("<Q", 1 << 62),  # BINUNICODE8
             b"\x8e" + struct.pack("<Q", 1 << 62),  # BINBYTES8
             b"\x96" + struct.pack("<Q", 1 << 40),  # BYTEARRAY8
             b"X" + struct.pack("<I", 0xFFFFFFFF),  # BINUNICODE
             b"\x8b" + struct.pack("<i", 0x7FFFFFFF)]  # LONG4
    for i, case in enumerate(cases):
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match="runs past the end"):
                _stream(tmp_path, _HEAD[:40] + case + b"abc", f"len{i}.pickle")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 * MiB, (case, peak)


@pytest.mark.parametrize("data, problem", [
    (_HEAD + b"h\xf0.", "corrupt or truncated"),  # a memo slot never written
    (_HEAD + b"j\xff\xff\xff\x00.", "corrupt or truncated"),
    (_HEAD + b"\xff", "invalid load key"),
    (_HEAD + b"u.", "corrupt or truncated"),  # SETITEMS without a MARK
    (b"\x80\x09.", "unsupported pickle protocol"),
    (_HEAD[:-1] + b"\x8c\x02\xff\xfeu", "not UTF-8"),
])
def test_malformed_opcodes_are_one_line_errors(tmp_path: Path, data: bytes, problem: str) -> None:
    p = tmp_path / "bad.pickle"
    p.write_bytes(data)
    with pytest.raises(InputError, match=problem) as err:
        load_snapshot(p)
    assert "\n" not in str(err.value)


def test_nesting_deeper_than_the_stream_goes_is_read_in_whole(tmp_path: Path) -> None:
    # 200,000 open MARKs: the stream stops at its depth limit and hands the file to the whole-file loader,
    # which refuses it in one line (the marks never close)
    p, got = _stream(tmp_path, _HEAD + b"(" * 200_000 + b".", "marks.pickle")
    assert not isinstance(got, MemoryData)
    got.close()
    with pytest.raises(InputError, match="corrupt or truncated|not a PyTorch memory snapshot"):
        load_snapshot(p)


def test_deeply_nested_frames_are_plain_data(tmp_path: Path) -> None:
    # frames: a list nested 100,000 deep (built without MARKs: EMPTY_LIST ... APPEND): no recursion anywhere
    depth = 100_000
    nested = b"]" * depth + b"a" * (depth - 1)
    data = _HEAD[:-1] + b"\x8c\x06frames" + nested + b"ue" + b"a" + b"u."
    p, got = _stream(tmp_path, data, "deep.pickle")
    assert isinstance(got, MemoryData) and len(got.devices[0]) == 1
    assert got.sites.sites[got.devices[0].site[0]].label == "<no stack recorded>"


def test_a_reference_back_to_an_entry_handed_on_is_read_in_whole(tmp_path: Path) -> None:
    # an entry dict changed after it was handed on (a GET of its memo slot, then SETITEM): the stream cannot
    # honour it, the whole-file loader can; the result is the whole-file loader's
    # memo slots: 0 the top dict, 1 "segments", 2 its list, 3 "device_traces", 4 its list, 5 device 0's, 6 the entry
    data = _HEAD + b"ea" + b"h\x06\x8c\x04size\x94M\x00\x04s0" + b"u."
    p, got = _stream(tmp_path, data, "back.pickle")
    assert not isinstance(got, MemoryData)
    got.close()
    d = load_snapshot(p)
    assert list(d.devices[0].size) == [1024]  # the size set after the entry was listed, as pickle.load sees it


def test_memo_slots_written_out_of_order_are_read_in_whole(tmp_path: Path) -> None:
    # LONG_BINPUT to slot 2**32-1: the stream refuses to grow a memo that far; the whole-file loader runs
    # under its address-space cap and refuses in one line or reads it
    data = _HEAD + b"Nr\xff\xff\xff\xff0" + b"ea" + b"u."
    p, got = _stream(tmp_path, data, "memo.pickle")
    assert not isinstance(got, MemoryData)
    got.close()
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "memory", str(p)], capture_output=True, text=True)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr


def _small_snapshot() -> bytes:
    b = SnapshotBuilder()
    st_ = b.stack(("/home/u/train.py", 3, "main"))
    for _ in range(4):
        b.free(b.alloc(3 * MiB, st_))
    return pickle.dumps(b.snapshot(), protocol=4)


_SMALL = _small_snapshot()


@settings(max_examples=300, deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, len(_SMALL) - 1), st.integers(0, 255)), min_size=1, max_size=4))
def test_bytes_changed_anywhere_stream_to_what_pickle_load_gives_or_one_line(
        tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, int]]) -> None:
    data = bytearray(_SMALL)
    for at, byte in edits:
        data[at] = byte
    p = tmp_path_factory.mktemp("fuzz") / "s.pickle"
    p.write_bytes(bytes(data))
    try:
        got = stream_snapshot(p)
    except InputError as err:
        assert "\n" not in str(err)
        return
    if isinstance(got, Opened):  # read in whole: the whole-file loader's answer
        got.close()
        return
    if isinstance(got, BuiltWhole):  # no snapshot lists in it: parse_snapshot says what it is not
        return
    # the stream accepted it: pickle.load (restricted) builds the same snapshot
    want = parse_snapshot(load_pickle_file(p), str(p), max_items=item_budget(len(data)))
    assert [(list(d.time), list(d.addr), list(d.size), list(d.site)) for d in got.devices] == \
        [(list(d.time), list(d.addr), list(d.size), list(d.site)) for d in want.devices]
    assert [s.label for s in got.sites.sites] == [s.label for s in want.sites.sites]


def _shared_frames_snapshot(n: int) -> dict[str, Any]:
    """A snapshot as PyTorch writes one: a frames list per entry, the frame dicts shared between entries."""
    b = SnapshotBuilder()
    stacks = [b.stack(("/home/u/train.py", 3, "main")), b.stack(("/home/u/model.py", 7, "forward"),
                                                                 ("/home/u/train.py", 4, "main"))]
    for i in range(n):
        b.free(b.alloc((i + 1) * MiB, stacks[i % 2]))
    snap = b.snapshot()
    for e in snap["device_traces"][0]:
        if isinstance(e.get("frames"), list):
            e["frames"] = list(e["frames"])
    return snap


def _same(got: MemoryData, want: MemoryData) -> None:
    assert [(list(d.time), list(d.addr), list(d.size), list(d.site)) for d in got.devices] == \
        [(list(d.time), list(d.addr), list(d.size), list(d.site)) for d in want.devices]
    assert [s.label for s in got.sites.sites] == [s.label for s in want.sites.sites]


def _streamed_and_whole(p: Path) -> tuple[MemoryData, MemoryData]:
    """What `gpuprof memory` reads (streamed, or in whole where the stream cannot), and pickle.load's own."""
    got = load_snapshot(p)
    want = parse_snapshot(load_pickle_file(p), str(p), max_items=item_budget(p.stat().st_size))
    return got, want


def test_a_frames_list_that_contains_itself_is_read_as_pickle_load_reads_it(tmp_path: Path) -> None:
    """The reproduction: an entry's frames list (references to frame dicts already written) holds itself. The
    stream refused it as "corrupt or truncated" (its reference is to the slot being written); it is valid, and
    is now read in whole, as pickle.load reads it."""
    snap = _shared_frames_snapshot(4)
    frames = snap["device_traces"][0][3]["frames"]
    frames.append(frames)
    p = tmp_path / "self.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    data = p.read_bytes()
    assert b"]\x94(h" in data  # the fast path's shape: a new list, MEMOIZE, then references only
    streamed = stream_snapshot(p)
    assert isinstance(streamed, Opened)  # handed back to be read in whole, not refused
    streamed.close()
    got, want = _streamed_and_whole(p)
    _same(got, want)
    assert len(got.devices[0]) >= 8  # the 4 allocations and frees, as pickle.load reads them


_TARGETS = ("self", "frames", "frame", "entry", "top", "segments")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 6), refs=st.lists(st.tuples(st.integers(0, 11), st.sampled_from(_TARGETS),
                                                  st.integers(0, 11), st.booleans()), min_size=1, max_size=4))
def test_self_and_cross_references_read_the_same_streamed_and_whole(
        tmp_path_factory: pytest.TempPathFactory, n: int, refs: list[tuple[int, str, int, bool]]) -> None:
    """Frames lists that hold themselves, another entry's frames list, another entry's frame dict, an entry, the
    top dict or the segments list (memo references backwards, to the slot being written, and to containers
    still open): `gpuprof memory`'s reader (streamed, falling back to the whole read) gives exactly what
    pickle.load gives, and the stream never calls a valid pickle corrupt."""
    snap = _shared_frames_snapshot(n)
    entries = snap["device_traces"][0]
    for at, kind, other, first in refs:
        frames = entries[at % len(entries)]["frames"]
        o = entries[other % len(entries)]
        target = {"self": frames, "frames": o["frames"], "frame": (o["frames"] or [None])[0], "entry": o,
                  "top": snap, "segments": snap["segments"]}[kind]
        if first:
            frames.insert(0, target)
        else:
            frames.append(target)
    p = tmp_path_factory.mktemp("refs") / "s.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    streamed = stream_snapshot(p)  # never an InputError: the pickle is valid
    if isinstance(streamed, Opened):
        streamed.close()
    got, want = _streamed_and_whole(p)
    _same(got, want)
