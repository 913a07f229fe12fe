"""B/E duration events (Chrome Trace Event Format) are paired into complete events.

Real traces are rewritten with their X events as B/E pairs; the report
(metrics and findings) must equal the X version's, on the one-process path,
with tiny chunks (pairs split across chunks) and with the loader helper.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import gpuprof.trace.chunks as C
from gpuprof.analysis import analyze
from gpuprof.errors import InputError
from gpuprof.trace.load import load_trace
from gpuprof_testing.realtraces import shared_path

HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")
REAL = [
    HTA + ("critical_path", "alexnet", "benchmark_result_2869224_1695835535_trace.json.gz"),
    HTA + ("amd_trace", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    HTA + ("with_gpu_user_annotation", "step_based_trace_2543932.json.gz"),
]


def _as_begin_end(trace: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(X version, B/E version, pairs written) of a real trace.

    Per thread, X events that nest properly become a B and an E (written in
    time order, each thread's events together, so threads interleave in the
    file as they never do in time); the few that overlap a sibling without
    nesting stay X in both versions. The X version gets ``dur = end - ts`` with
    the same float ``end`` the E carries, so both files hold the same numbers.
    """
    others: list[dict[str, Any]] = []
    threads: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and isinstance(ev.get("ts"), (int, float)) and isinstance(ev.get("dur"), (int, float)):
            threads.setdefault((ev.get("pid"), ev.get("tid")), []).append(ev)
        else:
            others.append(ev)
    x_events: list[dict[str, Any]] = []
    be_events: list[dict[str, Any]] = []
    pairs = 0
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[tuple[float, dict[str, Any]]] = []
        for ev in evs:
            end = ev["ts"] + max(ev["dur"], 0)
            while stack and stack[-1][0] <= ev["ts"]:
                be_events.append(stack.pop()[1])
            if stack and end > stack[-1][0]:  # overlaps its parent's end: not nested, keep it X
                x_events.append(ev)
                be_events.append(ev)
                continue
            fixed = {**ev, "dur": end - ev["ts"]}
            x_events.append(fixed)
            begin = {k: v for k, v in ev.items() if k != "dur"}
            begin["ph"] = "B"
            be_events.append(begin)
            stack.append((end, {"ph": "E", "pid": ev.get("pid"), "tid": ev.get("tid"), "ts": end}))
            pairs += 1
        while stack:
            be_events.append(stack.pop()[1])
    meta = {k: v for k, v in trace.items() if k != "traceEvents"}
    return {**meta, "traceEvents": others + x_events}, {**meta, "traceEvents": others + be_events}, pairs


@pytest.fixture(scope="module", params=REAL, ids=lambda p: p[-1][:30])
def pair_files(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    src = shared_path(*request.param)
    trace = json.loads(gzip.decompress(src.read_bytes()))
    x, be, pairs = _as_begin_end(trace)
    d = tmp_path_factory.mktemp("be")
    px, pbe = d / "x.json", d / "be.json"
    px.write_text(json.dumps(x, indent=1))
    pbe.write_text(json.dumps(be, indent=1))
    return px, pbe, pairs


def _report(path: Path) -> dict[str, Any]:
    """The JSON report with what differs between the two files blanked: paths, event counts, sizes."""
    d = json.loads(json.dumps(analyze(path).to_dict()).replace(json.dumps(str(path))[1:-1], "TRACE"))
    d["inputs"] = []
    for t in d["traces"]:
        t["num_events"] = t["file_bytes"] = None
    return d


def _events(path: Path) -> list[tuple]:
    t = load_trace(path)
    return [(k, e.name, e.ts, e.dur, e.pid, e.tid, e.ext, e.corr, e.device, e.stream, e.nbytes)
            for k, evs in t.lists().items() for e in evs]


def test_begin_end_report_equals_the_complete_events_report(pair_files: tuple[Path, Path, int]) -> None:
    px, pbe, pairs = pair_files
    assert pairs > 100
    text = pbe.read_text()
    assert text.count('"ph": "B"') == pairs == text.count('"ph": "E"')
    x_report = _report(px)
    assert x_report["traces"][0]["top_kernels"] or x_report["traces"][0]["top_ops"]  # something to compare
    be_report = _report(pbe)
    assert be_report == x_report
    t = load_trace(pbe)
    assert t.num_events == load_trace(px).num_events + pairs  # each pair is two events in the file
    assert t.load_notes == []  # every B found its E


@pytest.mark.parametrize("block", [1000, 4096])
def test_pairs_split_across_tiny_chunks(pair_files: tuple[Path, Path, int], block: int,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    px, pbe, _ = pair_files
    ref = _events(px)
    monkeypatch.setattr(C, "BLOCK", block)
    assert _events(pbe) == ref


# --------------------------------------------------------------------------- what cannot be paired


def _write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def _op(ph: str, ts: float, name: str = "aten::mm", tid: int = 1, **kw: Any) -> dict[str, Any]:
    return {"ph": ph, "cat": "cpu_op", "name": name, "pid": 7, "tid": tid, "ts": ts, **kw}


def test_lifo_per_thread_with_args_merged_and_out_of_order_file(tmp_path: Path) -> None:
    events = [
        {"ph": "E", "pid": 7, "tid": 1, "ts": 20.0, "args": {"External id": 11}},  # written before its B
        _op("B", 10.0, "outer", args={"External id": 10}),
        _op("B", 12.0, "inner"),
        _op("B", 13.0, "other-thread", tid=2),
        {"ph": "E", "pid": 7, "tid": 1, "ts": 15.0},  # closes "inner" (LIFO), not "outer"
        {"ph": "E", "pid": 7, "tid": 2, "ts": 30.0},
    ]
    t = load_trace(_write(tmp_path, events))
    got = {(e.name, e.ts, e.dur, e.tid, e.ext) for e in t.ops}
    # outer's own External id wins; the E's args only fill keys the B lacks
    assert got == {("outer", 10.0, 10.0, 1, 10), ("inner", 12.0, 3.0, 1, -1), ("other-thread", 13.0, 17.0, 2, -1)}
    assert t.load_notes == [] and t.num_events == 6


def test_unpaired_events_are_noted_and_never_stretched(tmp_path: Path) -> None:
    events = [
        _op("B", 0.0, "ProfilerStep#1", cat="user_annotation"),
        _op("X", 1.0, "aten::add", dur=2.0),
        {"ph": "E", "pid": 7, "tid": 1, "ts": 5.0},
        {"ph": "E", "pid": 7, "tid": 9, "ts": 6.0},  # nothing open on thread 9
        _op("B", 8.0, "never-ends"),
        _op("B", None, "no-time"),
        _op("X", 9.0, "no-dur"),
    ]
    t = load_trace(_write(tmp_path, events))
    assert [(e.name, e.dur) for e in t.annotations] == [("ProfilerStep#1", 5.0)]
    assert sorted((e.name, e.dur) for e in t.ops) == [("aten::add", 2.0), ("no-dur", 0.0)]  # never-ends is dropped
    notes = " | ".join(t.load_notes)
    assert "1 B (begin) event with no matching E" in notes and "dropped" in notes
    assert "1 E (end) event with no open B" in notes
    assert "1 B/E event without a valid ts" in notes
    assert "1 complete event (ph X) without dur" in notes
    summary = analyze(_write(tmp_path, events, "again.json")).traces[0]
    assert all(n in summary.notes for n in t.load_notes)


@pytest.mark.parametrize("events, found", [
    ([{"ph": "b", "cat": "cpu_op", "name": "async", "id": 1, "pid": 1, "tid": 1, "ts": 1.0},
      {"ph": "e", "cat": "cpu_op", "name": "async", "id": 1, "pid": 1, "tid": 1, "ts": 2.0}], ""),
    ([_op("B", 1.0), _op("B", 2.0)], ""),  # begins only
    ([{"ph": "B", "cat": "my_tool", "name": "a", "pid": 1, "tid": 1, "ts": 1.0},
      {"ph": "E", "pid": 1, "tid": 1, "ts": 2.0}], "1 B/E pairs were found, none of a known category"),
    ([{"ph": "X", "cat": "my_tool", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}], ""),
    ([{"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 1.0}], ""),
], ids=["async-b-e", "unclosed-B", "unknown-category-B-E", "unknown-category-X", "instants"])
def test_a_trace_with_nothing_usable_is_bad_input(tmp_path: Path, events: list[dict[str, Any]], found: str) -> None:
    p = _write(tmp_path, events)
    with pytest.raises(InputError) as ei:
        load_trace(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: no events gpuprof can analyse") and "\n" not in msg
    assert "ph X, or B/E pairs" in msg and found in msg
