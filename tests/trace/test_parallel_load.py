"""The two-process loader (gpuprof.trace.loadhelper) builds the same Trace as one process.

The chunk size and the size threshold are shrunk so that small real traces
take the parallel path with many chunks; a spy on ``Helper.submit`` makes
sure the helper really decoded some of them.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import tempfile

import pytest

import gpuprof.trace.load as L
import gpuprof.trace.loadhelper as H
from gpuprof.errors import InputError
from gpuprof.testing import TraceBuilder, simple_training
from gpuprof.testing.realtraces import shared_path
from gpuprof.trace.model import Trace

REAL = [
    ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz"),
    ("tbplugin", "historical_2020-12_list_format", "resnet50_num_workers_0", "worker0.pt.trace.json.gz"),
    ("tbplugin", "historical_2021-01", "resnet50_profiler_api_num_workers_0", "worker0.pt.trace.json.gz"),
    ("hta", "HolisticTraceAnalysis", "tests", "data", "amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "h100", "facebook_timesformer-base-finetuned-k400__1016002.json.gz"),
]


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 16 KiB and a helper for any input, counting what the helper got."""
    monkeypatch.setattr(L, "BLOCK", 16 * 1024)
    monkeypatch.setattr(L, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(L, "WAIT_FOR_HELPER", True)
    monkeypatch.setattr(H, "HELPER_COST", 0.0)  # hand chunks over up to the very end, however few
    sent = []
    real_submit = H.Helper.submit

    def submit(self, chunk):
        sent.append(len(chunk))
        return real_submit(self, chunk)

    monkeypatch.setattr(H.Helper, "submit", submit)
    return sent


@pytest.fixture
def fallbacks(monkeypatch):
    """The ``jobs`` of every load that gave up on the helper and was redone in one process."""
    seen = []
    real_load = L._load

    def spy(p, progress, jobs):
        try:
            return real_load(p, progress, jobs)
        except H.Fallback:
            seen.append(jobs)
            raise

    monkeypatch.setattr(L, "_load", spy)
    return seen


def _training(path, steps: int = 40):
    return simple_training(TraceBuilder(), steps=steps, layers=12).write(path)


def _same(a: Trace, b: Trace) -> None:
    assert a.num_events == b.num_events and a.json_bytes == b.json_bytes
    for (kind, xs), ys in zip(a.lists().items(), b.lists().values()):
        assert len(xs) == len(ys), kind
        # Event is a msgspec Struct: == compares every field; CopyKind objects by their fields
        assert [x if x.extra is None or type(x.extra) in (int, tuple) else (x.kind, x.name, x.ts) for x in xs] == [
            y if y.extra is None or type(y.extra) in (int, tuple) else (y.kind, y.name, y.ts) for y in ys
        ], kind
    assert a.process_labels == b.process_labels and a.thread_names == b.thread_names
    assert a.devices == b.devices and a.rank == b.rank and a.with_stack == b.with_stack


@pytest.mark.parametrize("parts", REAL, ids=[p[-1][:40] for p in REAL])
def test_parallel_load_equals_single_process_on_real_traces(parts, small_chunks):
    path = shared_path(*parts)
    one = L.load_trace(path, jobs=1)
    assert not small_chunks
    two = L.load_trace(path, jobs=2)
    assert len(small_chunks) >= 2, "the helper decoded no chunk: the test did not exercise it"
    _same(one, two)
    assert [m.extra.direction for m in one.memcpys] == [m.extra.direction for m in two.memcpys]


def test_plain_json_and_no_scratch_left(tmp_path, small_chunks):
    path = tmp_path / "t.json"
    _training(path)
    before = set(glob.glob(os.path.join("/dev/shm", "gpuprof-load-*")) + glob.glob(os.path.join(tempfile.gettempdir(), "gpuprof-load-*")))
    _same(L.load_trace(path, jobs=1), L.load_trace(path, jobs=2))
    assert small_chunks
    after = set(glob.glob(os.path.join("/dev/shm", "gpuprof-load-*")) + glob.glob(os.path.join(tempfile.gettempdir(), "gpuprof-load-*")))
    assert after == before, "the helper's scratch directory was left behind"


def test_a_cut_inside_a_string_falls_back_to_the_exact_reader(tmp_path, small_chunks, fallbacks):
    # Names full of "}, {" put fake boundaries everywhere: the helper's optimistic
    # cut lands inside a string, the chunk does not decode, and the load is redone alone.
    trace = simple_training(TraceBuilder(), steps=30, layers=12).to_dict()
    for ev in trace["traceEvents"]:
        if ev.get("cat") == "cpu_op":
            ev["name"] = 'aten::weird}, {"x": 1}, {' * 200
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(trace))
    got = L.load_trace(path, jobs=2)
    assert fallbacks == [2]
    _same(L.load_trace(path, jobs=1), got)


def test_a_helper_that_dies_changes_nothing(tmp_path, monkeypatch, small_chunks, fallbacks):
    path = tmp_path / "t.json.gz"
    _training(path)
    real_start = H.Helper.start

    def start_then_kill(wait=False):
        h = real_start(wait)
        assert h is not None
        h.proc.kill()
        return h

    monkeypatch.setattr(H.Helper, "start", staticmethod(start_then_kill))
    _same(L.load_trace(path, jobs=1), L.load_trace(path, jobs=2))
    assert fallbacks == [2]


def test_bad_input_gives_the_single_process_message(tmp_path, small_chunks):
    good = tmp_path / "t.json"
    _training(good)
    text = good.read_bytes()
    for name, data in {
        "truncated.json": text[: len(text) * 2 // 3],
        "wrong_type.json": text[: len(text) // 2] + text[len(text) // 2 :].replace(b'"ts": ', b'"ts": "later", "_": ', 1),
        "garbage.json.gz": gzip.compress(text)[:-2000],
    }.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError) as one:
            L.load_trace(p, jobs=1)
        with pytest.raises(InputError) as two:
            L.load_trace(p, jobs=2)
        assert str(two.value) == str(one.value), name


def test_default_jobs_reads_the_environment(monkeypatch):
    monkeypatch.setenv("GPUPROF_JOBS", "1")
    assert L.default_jobs() == 1
    monkeypatch.setenv("GPUPROF_JOBS", "8")
    assert L.default_jobs() == 2  # one helper at most
    monkeypatch.setenv("GPUPROF_JOBS", "many")
    assert L.default_jobs() == 1
    monkeypatch.delenv("GPUPROF_JOBS")
    assert L.default_jobs() == min(len(os.sched_getaffinity(0)), 2)


def test_helper_queue_stays_short_near_the_end():
    h = H.Helper.__new__(H.Helper)  # the queueing rule alone, without a process
    h._ready, h._in_helper, h._lines = True, 0, None
    cost = H.HELPER_COST
    assert h.ready(chunks_left=cost * 1 + 1)
    assert not h.ready(chunks_left=cost * 1 - 0.1)  # this process would wait for the helper at the end
    h._in_helper = 2
    assert h.ready(chunks_left=cost * 3) and not h.ready(chunks_left=cost * 3 - 0.1)
    h._in_helper = H.MAX_IN_HELPER
    assert not h.ready(chunks_left=1e9)  # its queue is full
