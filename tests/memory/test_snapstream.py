"""Streaming a snapshot gives what unpickling it in whole gives, in a fraction of the memory."""

from __future__ import annotations

import io
import json
import os
import pickle
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
from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.html import build_page_data, render_html
from gpuprof.memory.model import MemoryData
from gpuprof.memory.snapshot import load_snapshot, parse_snapshot
from gpuprof.memory.snapshot.parse import item_budget
from gpuprof.memory.snapshot.pickstream import StreamReader
from gpuprof.memory.snapshot.safeload import UnsafePickleError, load_pickle_file, safe_loads
from gpuprof.memory.snapshot.stream import BuiltWhole, stream_snapshot
from gpuprof_testing.realtraces import shared_snapshot
from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder
from gpuprof_testing.synthpickle import write_snapshot

REAL = ["cs336_magma_memory_snapshot.pickle", "cs336_silmont_fwd_bf16_128.pickle", "cs336kk_2p7b_compiled_fwd.pickle",
        "cs336kk_ctx128_fwd_fp32.pickle", "cs336kk_ctx128_fwd_mixed.pickle", "eor_nn_snapshot.pickle",
        "ftcourse_memory_snapshot.pickle"]


def whole(path: Path) -> MemoryData:
    """The snapshot as gpuprof read it before streaming: unpickled in whole, then parsed."""
    return parse_snapshot(load_pickle_file(path), str(path), max_items=item_budget(path.stat().st_size))


def streamed(path: Path) -> MemoryData:
    got = stream_snapshot(path)
    assert isinstance(got, MemoryData), "the file was not streamed (read in whole instead)"
    return got


def columns(d: MemoryData) -> Any:
    """Everything the analysis reads from loaded data, as plain values."""
    return ([(x.device, x.index, list(x.time), list(x.action), list(x.addr), list(x.size), list(x.site),
              list(x.stream), list(x.kind), x.has_time, x.total_memory, x.free_memory, x.name, x.ooms,
              [(s.address, s.total_size, s.stream, s.segment_type, s.is_expandable,
                [(b.address, b.size, b.requested_size, b.state, b.site, b.kind) for b in s.blocks])
               for s in x.segments or ()]) for x in d.devices],
            d.sites.sites, [s.stack for s in d.sites.sites], d.kinds.kinds, d.notes, d.settings, d.annotations,
            d.pinned_host)


def analysis(d: MemoryData) -> Any:
    section, findings, analyses = analyze_memory(d)
    return (json.dumps(section.to_dict(), sort_keys=True, default=str), [f.to_dict() for f in findings],
            json.dumps(build_page_data(d, analyses, findings), sort_keys=True, default=str))


def assert_same(path: Path) -> None:
    a, b = streamed(path), whole(path)
    assert columns(a) == columns(b)
    assert analysis(a) == analysis(b)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@pytest.mark.parametrize("name", REAL)
def test_real_snapshots_stream_to_the_same_analysis(name: str) -> None:
    assert_same(shared_snapshot(name))


def _every_feature(devices: int = 2) -> SnapshotBuilder:
    """History with frames (C++ and Python), small and large segments, a block pending free on another stream,
    two devices, and an out-of-memory event at the end."""
    b = SnapshotBuilder(devices=devices, device_memory=1 * GiB, cpp_frames=True)
    w = b.stack(("/home/u/proj/model.py", 12, "__init__"))
    act = b.stack(("/home/u/proj/model.py", 30, "forward"), ("/home/u/proj/train.py", 55, "main"))
    keep = [b.alloc(64 * MiB, w, device=d) for d in range(devices) for _ in range(3)]
    for step in range(6):
        xs = [b.alloc((1 + i) * 3 * MiB, act, device=step % devices) for i in range(5)]
        small = b.alloc(4096, act, stream=7, device=step % devices)
        for x in xs:
            b.free(x, device=step % devices)
        b.free(small, device=step % devices, pending=True)
        b.complete_free(small, device=step % devices)
    held = b.alloc(8 * MiB, act, stream=7)
    b.free(held, pending=True)  # still pending at the dump
    with pytest.raises(MemoryError):
        b.alloc(4 * GiB, act)
    assert keep
    return b


def test_synthetic_snapshot_with_every_feature(tmp_path: Path) -> None:
    b = _every_feature()
    extra = {"external_annotations": [{"device": 0, "name": "forward", "stage": "START", "time_us": 1},
                                      {"device": 0, "name": "forward", "stage": "END", "time_us": 10 ** 18}],
             "gpuprof": {"devices": [{"id": 0, "name": "NVIDIA H100", "total_memory": 1 * GiB, "free_memory": 5},
                                     {"id": 1, "name": "model GPU", "total_memory": 1 * GiB}],
                         "oom": {"device": 1, "requested_bytes": 123, "device_free_bytes": 4},
                         "host_pinned": {"allocated_bytes": 4096, "active_bytes": 512},
                         "tensors": [{"device": 0, "ptr": 0x7F0000000000, "bytes": 64 * MiB,
                                      "category": "parameters"}]}}
    p = Path(b.dump(tmp_path / "every.pickle", extra=extra))
    d = streamed(p)
    assert len(d.devices) == 2 and any(dm.ooms for dm in d.devices) and d.annotations and d.pinned_host
    assert any(blk.state == "active_pending_free" for s in d.devices[0].segments or () for blk in s.blocks)
    assert_same(p)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_binary_protocol_streams(tmp_path: Path, protocol: int) -> None:
    # protocols 2 and 3 memoize with BINPUT/LONG_BINPUT instead of MEMOIZE, 5 is what Python 3.8+ may write
    p = tmp_path / f"p{protocol}.pickle"
    p.write_bytes(pickle.dumps(_every_feature(1).snapshot(), protocol=protocol))
    assert_same(p)


def test_pytorch_layout_written_entry_by_entry(tmp_path: Path) -> None:
    p = tmp_path / "synth.pickle"
    n = write_snapshot(p, 5000)
    assert n >= 5000
    obj = pickle.loads(p.read_bytes())  # the writer's pickle is one pickle.load reads as PyTorch's layout
    assert len(obj["device_traces"][0]) == n and obj["segments"][0]["blocks"]
    entry = obj["device_traces"][0][0]
    assert set(entry) == {"action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"}
    assert_same(p)


def test_the_page_stays_small_whatever_the_history(tmp_path: Path) -> None:
    # 20,000 events: the timeline is decimated to at most 1500 buckets (docs/memory.md), tables capped at --top
    p = tmp_path / "synth.pickle"
    n = write_snapshot(p, 20_000)
    d = streamed(p)
    section, findings, analyses = analyze_memory(d)
    page = build_page_data(d, analyses, findings)
    dev = page["devices"][0]
    assert dev["events"] == n > 1500
    assert 1000 < len(dev["t"]) <= 1500 and len(dev["series"]) == len(dev["allocated"]) == len(dev["t"])
    assert len(dev["top"]) <= 10 and len(dev["slots"]) <= 12 + 2
    # the bucket maxima keep the peak: the highest point drawn is the peak the analysis reports
    assert max(dev["allocated"]) == dev["peak_allocated"]
    assert len(render_html(page)) < 400_000


def test_old_format_and_missing_times(tmp_path: Path) -> None:
    # PyTorch 2.0: blocks carry history instead of frames; entries without time_us; a float time widens columns
    fr = [{"filename": "/home/u/train.py", "line": 3, "name": "main"}]
    snap = {"segments": [{"device": 0, "address": 4096, "total_size": 8192, "stream": 2 ** 63,
                          "blocks": [{"size": 4096, "state": "active_allocated",
                                      "history": [{"addr": 4096, "real_size": 4000, "frames": fr}]},
                                     {"size": 4096, "state": "inactive"}]}],
            "device_traces": [[{"action": "alloc", "addr": 4096, "size": 4096, "frames": fr},
                               {"action": "snapshot", "addr": 0, "size": 0},
                               {"action": "free_requested", "addr": 4096, "size": 4096, "time_us": 2.5,
                                "stream": 2 ** 63, "frames": fr}]]}
    p = tmp_path / "old.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    d = streamed(p)
    assert list(d.devices[0].time) == [0, 2.5] and list(d.devices[0].stream) == [0, 2 ** 63]
    assert_same(p)


@pytest.mark.parametrize("layout", ["shared_entry", "traces_first", "text_protocol", "bare_list"])
def test_layouts_the_stream_does_not_take_are_read_in_whole(tmp_path: Path, layout: str) -> None:
    snap = _every_feature(1).snapshot()
    if layout == "shared_entry":  # one entry dict twice: the second is a reference back to one handed on
        snap["device_traces"][0].append(snap["device_traces"][0][0])
    elif layout == "traces_first":
        snap = {"device_traces": snap["device_traces"], **snap}
    p = tmp_path / f"{layout}.pickle"
    data: Any = snap["segments"] if layout == "bare_list" else snap
    p.write_bytes(pickle.dumps(data, protocol=0 if layout == "text_protocol" else 4))
    got = stream_snapshot(p)
    if layout == "bare_list":  # no lists to stream: built whole by the stream reader, parsed as before
        assert isinstance(got, BuiltWhole) and got.obj == snap["segments"]
    else:
        assert isinstance(got, Opened)  # handed back, rewound, for the whole-file loader
        got.close()
    assert columns(load_snapshot(p)) == columns(whole(p))


def test_a_pipe_is_read_in_whole_with_the_same_result(tmp_path: Path) -> None:
    p = Path(_every_feature(1).dump(tmp_path / "s.pickle"))
    code = ("import json,sys; from gpuprof.memory.analysis import memory_report; "
            "print(json.dumps(memory_report(sys.argv[1]).sections[0].to_dict(), sort_keys=True, default=str))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(p, "rb") as fh:
        piped = subprocess.run([sys.executable, "-c", code, "-"], stdin=fh, capture_output=True, text=True, env=env)
    assert piped.returncode == 0, piped.stderr
    section = json.loads(piped.stdout)
    mine = json.loads(json.dumps(analyze_memory(streamed(p))[0].to_dict(), sort_keys=True, default=str))
    mine["source"] = section["source"]
    assert section == mine


def _peak_of(fn: Any) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_streaming_memory_is_a_fraction_of_the_file(tmp_path: Path) -> None:
    # The Python allocations made while loading and analysing an 8 MB snapshot (tracemalloc: no time measured).
    p = tmp_path / "big.pickle"
    write_snapshot(p, 0, min_bytes=8 << 20)
    size = p.stat().st_size
    peak_stream = _peak_of(lambda: analyze_memory(load_snapshot(p)))
    peak_whole = _peak_of(lambda: whole(p))
    # the columns (41 bytes an event, the file takes about 160), the memo's slots (8 bytes each), one batch of
    # entries and the read buffer: 0.58x measured here, most of it fixed costs that shrink as files grow
    assert peak_stream <= 0.75 * size, (peak_stream, size)
    assert peak_whole >= 3 * size  # the bound above is far from what unpickling in whole takes


_plain = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 80), max_value=2 ** 80)
    | st.floats(allow_nan=False) | st.text(max_size=300) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=8), inner,
                                                                                              max_size=5)
    | st.frozensets(st.integers(), max_size=3) | st.sets(st.text(max_size=4), max_size=3),
    max_leaves=30)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
@settings(max_examples=150, deadline=None)
@given(obj=_plain, protocol=st.integers(min_value=2, max_value=5))
def test_the_stream_reader_builds_what_pickle_builds(obj: Any, protocol: int) -> None:
    # any plain data, shared references included (the same object thrice), in every binary protocol: what the
    # restricted unpickler builds, or the same refusal
    shared = [obj, obj, {"k": obj}]
    data = pickle.dumps(shared, protocol=protocol)

    class _NoSink:
        def segment(self, s: Any) -> None:
            raise AssertionError("nothing is streamed outside a snapshot's lists")

        def entries(self, device: int, items: list[Any]) -> None:
            raise AssertionError("nothing is streamed outside a snapshot's lists")

    try:
        want = safe_loads(data)
    except UnsafePickleError:  # protocols 2-3 write sets and bytes by calling a global: refused by both
        with pytest.raises(UnsafePickleError, match="refusing to load: the pickle tries to import"):
            StreamReader(io.BytesIO(data), len(data), _NoSink()).read()
        return
    got = StreamReader(io.BytesIO(data), len(data), _NoSink()).read()
    assert got == want
    assert repr(got) == repr(want)  # the same types (tuple vs list, bytes vs str, set vs frozenset)


@settings(max_examples=60, deadline=None)
@given(entries=st.lists(st.fixed_dictionaries({"action": st.sampled_from(["alloc", "free_requested", "oom", "x"])},
                                              optional={"addr": st.integers(-5, 2 ** 65), "size": _plain,
                                                        "time_us": st.integers(0, 2 ** 70) | st.floats(),
                                                        "stream": _plain, "frames": _plain}), max_size=20),
       protocol=st.integers(min_value=2, max_value=5))
@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_streamed_and_whole_agree_on_odd_entries(tmp_path_factory: pytest.TempPathFactory, entries: list[Any],
                                                 protocol: int) -> None:
    p = tmp_path_factory.mktemp("odd") / "s.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries, entries[:3]]}, protocol=protocol))
    outcomes = []
    for load in (lambda: stream_snapshot(p), lambda: whole(p)):
        try:
            got = load()
            if isinstance(got, Opened):
                got.close()
            outcomes.append(columns(got) if isinstance(got, MemoryData) else "whole")
        except InputError as err:
            outcomes.append(("error", str(err).split(":")[0]))
    if outcomes[0] != "whole":  # read in whole: the whole-file loader's answer is the answer
        assert outcomes[0] == outcomes[1]


def test_history_entries_of_every_shape_stream_as_pickle_load_reads_them(tmp_path: Path) -> None:
    """The stream reader reads an entry of the common shape whole at once and hands any other back to its
    opcode-by-opcode loop: each shape here (LONG1 of 1-9 bytes, negative and wide ints, floats, booleans,
    None, an int key, a nested dict, an empty, a shared and a repeated frames list, memo references on
    both sides of slot 256) must read as pickle.load reads it."""
    frames = [{"filename": "/work/train.py", "line": 10 + i, "name": f"f{i}"} for i in range(4)]
    shared = [frames[0], frames[2]]
    entries: list[dict[Any, Any]] = []
    for i in range(600):
        e: dict[Any, Any] = {"action": "alloc", "addr": 0x7F0000000000 + i * 4096, "size": 512 + i, "stream": 0,
                             "time_us": 1_700_000_000_000_000 + 10 * i, "frames": [frames[i % 4], frames[(i + 1) % 4]],
                             "compile_context": "N/A"}
        shape = i % 9
        if shape == 1:
            e["frames"] = shared  # one list object for many entries: a memo reference to a list
        elif shape == 2:
            e["user_metadata"] = {"step": i}
        elif shape == 3:
            e.update(ratio=1.5 * i, flag=i % 2 == 0, note=None, time_us=1.7e15 + 10.25 * i)  # BINFLOAT read
        elif shape == 4:
            e.update(size=(1 << 40) + i, addr=(1 << 63) + i, stream=-(1 << 31))  # LONG1 of 6 and 9 bytes
        elif shape == 5:
            e.update(size=70_000 + i, stream=-1, extra=300 + i, tiny=-(1 << 20))  # BININT, BININT2
        elif shape == 6:
            e["frames"] = []
        elif shape == 7:
            e[5] = "an int key"
        elif shape == 8:
            e["time_us"] = -(1 << 55) + i  # a negative LONG1 of 7 bytes
        entries.append(e)
        if i % 3 == 0:
            entries.append({"action": "free_requested", "addr": e["addr"], "size": e["size"], "stream": 0,
                            "time_us": 1_700_000_000_000_000 + 10 * i + 5, "frames": [frames[3]]})
    snap = {"segments": [{"device": 0, "address": 0x7F0000000000, "total_size": 1 << 30, "stream": 0,
                          "segment_type": "large", "allocated_size": 0, "active_size": 0, "requested_size": 0,
                          "is_expandable": False, "blocks": []}],
            "device_traces": [entries]}
    for protocol in (4, 5):
        path = tmp_path / f"shapes{protocol}.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=protocol))
        assert_same(path)
        got = streamed(path)
        assert len(got.devices[0]) == len(entries)
        assert sorted(set(got.devices[0].size))[-1] == (1 << 40) + 598
