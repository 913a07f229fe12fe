"""The timeline's data (gpuprof.views.timeline): lanes, nesting, decimation and its cap, markers, the critical overlay.

Every figure is checked against the raw events of the trace file (the JSON the builder wrote), not against
gpuprof's own loader.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.findings import EventRef, Evidence, Finding, Severity
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof.trace.timelinerows import EVENT_KINDS, MAX_EVENTS, MAX_NAME, Timeline
from gpuprof.views.decimate import decimate, decimate_to
from gpuprof.views.timeline import build_timeline
from gpuprof_testing.realtraces import v100_samples
from gpuprof_testing.tracegen import DEFAULT_STREAM, NCCL_STREAM, TraceBuilder

PID, SIDE = 4242, 4300


def _load(tb: TraceBuilder, path: Path) -> tuple[TraceMetrics, dict[str, Any]]:
    tb.write(path)
    m = compute_metrics(load_trace(path))
    return m, json.loads(path.read_text(encoding="utf-8"))


def _raw_steps(doc: dict[str, Any]) -> tuple[float, float]:
    steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    return min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)


def _lane(tl: Timeline, lane_id: str) -> Any:
    return next(ln for ln in tl.lanes if ln.id == lane_id)


def _names(tl: Timeline, lane_id: str) -> list[str]:
    return [tl.names[r[2]] for r in _lane(tl, lane_id).events]


def _busy_trace() -> TraceBuilder:
    tb = TraceBuilder(rank=1, world_size=2)
    for _ in range(3):
        with tb.step():
            with tb.op("aten::outer"):
                with tb.op("aten::inner"):
                    tb.kernel("gemm_main", us=300)
            with tb.stream(9):
                tb.kernel("side_stream_kernel", us=50)
            with tb.thread(SIDE, join=True):
                with tb.op("autograd::engine::evaluate_function: MmBackward0"):
                    tb.kernel("gemm_backward", us=200)
            tb.nccl(us=400)
            tb.sync_item()
    return tb


def test_lanes_hold_every_event_of_the_steps_on_its_thread_or_stream(tmp_path: Path) -> None:
    m, doc = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None
    ids = [ln.id for ln in tl.lanes]
    assert ids[0] == f"host:{PID}:{PID}" and tl.lanes[0].label.startswith("main thread")  # the main thread first
    assert f"host:{PID}:{SIDE}" in ids
    assert {f"gpu:0:{DEFAULT_STREAM}", "gpu:0:9", f"gpu:0:{NCCL_STREAM}", "collective:1"} <= set(ids)
    assert ids.index(f"gpu:0:{DEFAULT_STREAM}") < ids.index("gpu:0:9") < ids.index("collective:1")
    lo, hi = _raw_steps(doc)
    # independent count from the file: events of the recorded span per lane (not decimated: the trace is small)
    want: dict[str, int] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or not (e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo):
            continue
        cat, a = e.get("cat"), e.get("args", {})
        if cat in ("cpu_op", "user_annotation", "cuda_runtime") and not e["name"].startswith("ProfilerStep#"):
            key = f"host:{e['pid']}:{e['tid']}"
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"):
            key = f"gpu:{a['device']}:{a['stream']}"
        else:
            continue
        want[key] = want.get(key, 0) + 1
        if cat == "kernel" and e["name"].startswith("ncclKernel"):
            want["collective:1"] = want.get("collective:1", 0) + 1
    assert {ln.id: ln.total for ln in tl.lanes} == want
    assert all(sum(r[5] for r in ln.events) == ln.total for ln in tl.lanes)  # every event in a row
    assert tl.events_total == sum(want.values())
    assert _names(tl, "gpu:0:9") == ["side_stream_kernel"] * 3
    nccl = _lane(tl, f"gpu:0:{NCCL_STREAM}").events
    assert {EVENT_KINDS[r[3]] for r in nccl} == {"collective"}
    assert [ln.label for ln in tl.lanes if ln.id == "collective:1"] == ["collectives, rank 1"]
    assert [(s.id, s.start_us, s.end_us) for s in tl.steps][0] == (0, 0.0, pytest.approx(tl.steps[0].end_us))
    assert tl.origin_us == pytest.approx(lo)


def test_host_events_sit_at_their_nesting_depth(tmp_path: Path) -> None:
    m, _ = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None
    main = _lane(tl, f"host:{PID}:{PID}")
    depth = {tl.names[r[2]]: r[4] for r in main.events}
    assert depth["aten::outer"] == 0 and depth["aten::inner"] == 1
    # the side stream's launch is at the top; the gemm's inside aten::inner; the NCCL kernel's under three ranges
    assert {r[4] for r in main.events if tl.names[r[2]] == "cudaLaunchKernel"} == {0, 2, 3}
    assert depth["nccl:all_reduce"] == 0
    assert main.depth == 1 + max(depth.values())
    assert not any(n.startswith("ProfilerStep#") for n in tl.names)  # steps are boundaries, not events


def test_decimate_keeps_long_events_and_merges_short_ones_per_bucket() -> None:
    row = np.array([0, 0, 0, 0, 1])
    start = np.array([0.0, 0.2, 0.5, 3.0, 0.1])
    dur = np.array([1.5, 0.1, 0.3, 0.2, 0.4])
    got = decimate(row, start, dur, 1.0)
    rows = list(zip(got.row.tolist(), got.start.tolist(), got.dur.tolist(), got.rep.tolist(), got.n.tolist()))
    # row 0: the long event as it is, the two short ones of bucket 0 as one block named after the longer,
    # the lone short event of bucket 3 as it is; row 1 untouched
    assert rows == [(0, 0.0, 1.5, 0, 1), (0, 0.2, pytest.approx(0.6), 2, 2), (0, 3.0, pytest.approx(0.2), 3, 1), (1, 0.1, 0.4, 4, 1)]


def test_decimate_to_holds_the_cap_on_a_hostile_row() -> None:
    rng = np.random.default_rng(1)
    n = 200_000  # overlapping long events on one row: no bucket width below the span could thin them
    start = np.sort(rng.uniform(0, 1e6, n))
    dur = rng.uniform(1e3, 5e5, n)
    got, res = decimate_to(np.zeros(n, np.int64), start, dur, 1e6 / 4096, 1000)
    assert len(got.start) <= 1000 and int(got.n.sum()) == n
    assert res > 1e6 / 4096


def test_decimation_keeps_the_longest_kernels_and_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuprof.views.timeline.MAX_EVENTS", 600)  # a cap the trace is well over: the width doubles
    tb = TraceBuilder(launch_us=1.0, gap_us=0.2)  # the GPU keeps up: every kernel runs inside its step
    long_us = [5000.0, 7000.0, 6000.0]
    for i in range(3):
        with tb.step():
            tb.kernels("tiny_kernel", 2000, us=0.5)
            tb.kernel(f"long_kernel_{i}", us=long_us[i])
    m, doc = _load(tb, tmp_path / "big.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None
    assert tl.events_kept <= 600 < tl.events_total
    assert tl.resolution_us >= 2 * tl.span_us / 4096  # doubled at least once
    step = tl.steps[tl.critical_step or 0]  # the critical step: its own, finer buckets, with up to half the rows
    assert tl.step_resolution_us < tl.resolution_us
    inside = [r for ln in tl.lanes for r in ln.events if step.start_us <= r[0] < step.end_us]
    assert len(inside) <= 300 and sum(r[5] for r in inside) > 2000
    gpu = _lane(tl, f"gpu:0:{DEFAULT_STREAM}")
    assert sum(r[5] for r in gpu.events) == gpu.total == 6003
    raw = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("long_")}
    kept = {tl.names[r[2]]: r for r in gpu.events if r[5] == 1 and tl.names[r[2]].startswith("long_")}
    assert set(kept) == set(raw)  # every long kernel is a row of its own, where and as long as it ran
    for name, r in kept.items():
        assert r[0] == pytest.approx(raw[name]["ts"] - tl.origin_us, abs=0.06)
        assert r[1] == pytest.approx(raw[name]["dur"], abs=0.06)
    blocks = [r for r in gpu.events if r[5] > 1]
    assert blocks and all(tl.names[r[2]] == "tiny_kernel" for r in blocks)


def _finding(code: str, events: tuple[EventRef, ...] = ()) -> Finding:
    return Finding(code, "x", Severity.WARNING, "msg", "fix", evidence=(Evidence("m", 1.0, events=events),))


def test_markers_sit_on_the_lane_and_time_of_their_evidence_events(tmp_path: Path) -> None:
    m, doc = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    raw = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    kernel = next(e for e in raw if e["name"] == "side_stream_kernel")
    op = next(e for e in raw if e["name"].startswith("autograd::engine"))
    findings = [
        _finding("GP901", (EventRef(kernel["name"], kernel["ts"], kernel["dur"], kernel["pid"], kernel["tid"]),)),
        _finding("GP902", (EventRef(op["name"], op["ts"], op["dur"], op["pid"], op["tid"]),)),
        _finding("GP903"),  # no event: the critical (median) step, on the main thread
    ]
    tl = build_timeline(m, findings)
    assert tl is not None
    got = {x.code: x for x in tl.markers}
    assert got["GP901"].lane == "gpu:0:9" and got["GP901"].where == "event"
    assert got["GP901"].start_us == pytest.approx(kernel["ts"] - tl.origin_us, abs=0.06)
    assert got["GP901"].end_us == pytest.approx(kernel["ts"] + kernel["dur"] - tl.origin_us, abs=0.06)
    assert got["GP902"].lane == f"host:{PID}:{SIDE}"
    step = tl.steps[tl.critical_step or 0]
    durs = sorted(s.end_us - s.start_us for s in tl.steps)
    assert step.end_us - step.start_us == pytest.approx(durs[(len(durs) - 1) // 2], abs=0.2)
    assert (got["GP903"].lane, got["GP903"].start_us, got["GP903"].end_us, got["GP903"].where) == (
        f"host:{PID}:{PID}", step.start_us, step.end_us, "step")


def test_critical_segments_are_taken_relative_and_an_unknown_lane_is_added(tmp_path: Path) -> None:
    m, _ = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    o = m.steps[0].start
    segs = [(f"host:{PID}:{PID}", o + 10.0, o + 30.0, "operator", "aten::outer"),
            (f"gpu:0:{DEFAULT_STREAM}", o + 30.0, o + 330.0, "kernel", "gemm_main"),
            ("gpu:3:99", o + 330.0, o + 340.0, "kernel", "elsewhere")]
    tl = build_timeline(m, critical=segs)
    assert tl is not None
    assert tl.critical == [(f"host:{PID}:{PID}", 10.0, 30.0, "operator", "aten::outer", 1),
                           (f"gpu:0:{DEFAULT_STREAM}", 30.0, 330.0, "kernel", "gemm_main", 1),
                           ("gpu:3:99", 330.0, 340.0, "kernel", "elsewhere", 1)]
    assert _lane(tl, "gpu:3:99").events == [] and _lane(tl, "gpu:3:99").kind == "gpu"


def test_a_long_critical_path_is_merged_into_runs_never_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuprof.views.timeline.MAX_CRITICAL", 100)
    m, _ = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    o = m.steps[0].start
    lane = f"gpu:0:{DEFAULT_STREAM}"
    # 1,000 segments of 1 µs every 3 µs, then one of 50 µs after a 500 µs hole, on one lane
    segs = [(lane, o + 3.0 * i, o + 3.0 * i + 1.0, "kernel", f"k{i}") for i in range(1000)]
    segs.append((lane, o + 3500.0, o + 3550.0, "kernel", "long_one"))
    tl = build_timeline(m, critical=segs)
    assert tl is not None and len(tl.critical) <= 100
    assert sum(r[5] for r in tl.critical) == len(segs)  # every segment in a run
    assert tl.critical[0][1] == 0.0 and tl.critical[-1][1:3] == (3500.0, 3550.0)  # from the first to the last
    assert tl.critical[-1][4:] == ("long_one", 1)  # the hole keeps the long one a run of its own
    covered = sum(r[2] - r[1] for r in tl.critical)
    assert covered >= 1000 * 1.0 + 50.0  # the runs cover at least the segments' own time


def test_long_names_are_clipped(tmp_path: Path) -> None:
    tb = TraceBuilder()
    with tb.step():
        tb.kernel("k" * 50_000, us=100)
    m, _ = _load(tb, tmp_path / "n.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None and max(map(len, tl.names)) == MAX_NAME + 1


def test_report_markers_follow_the_report_findings(tmp_path: Path) -> None:
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.dataloader(ms=30, single_process=True)
            tb.kernel("k", us=2000)
            tb.sync_item()
    path = tb.write(tmp_path / "dl.pt.trace.json")
    report = analyze(path)
    tl = report.traces[0].timeline
    assert tl is not None and tl.markers
    assert {x.code for x in tl.markers} <= {f.code for f in report.findings}
    dropped = analyze(path, ignore=["GP102"])
    tl2 = dropped.traces[0].timeline
    assert tl2 is not None and "GP102" not in {x.code for x in tl2.markers}
    d = json.loads(json.dumps(report.to_dict()))["traces"][0]["timeline"]
    assert d["kinds"] == list(EVENT_KINDS) and isinstance(d["lanes"][0]["events"][0], list)


def test_real_v100_trace() -> None:
    path = v100_samples()[0]
    report = analyze(path)
    tl = report.traces[0].timeline
    assert tl is not None
    assert 0 < tl.events_kept <= MAX_EVENTS and tl.events_total == sum(ln.total for ln in tl.lanes)
    assert all(sum(r[5] for r in ln.events) == ln.total for ln in tl.lanes)
    assert [ln.kind for ln in tl.lanes][0] == "host" and any(ln.kind == "gpu" for ln in tl.lanes)
    assert len(tl.steps) == report.traces[0].num_steps
    assert tl.markers and {x.code for x in tl.markers} <= {f.code for f in report.findings}
    assert all(0 <= r[0] <= tl.span_us + 1e3 or r[0] + r[1] >= 0 for ln in tl.lanes for r in ln.events)
    # the critical path of the median step (gpuprof.trace.critpath), on lanes that hold the step's events
    from gpuprof.trace.critpath.path import critical_segments

    segs = critical_segments(compute_metrics(load_trace(path)))
    assert tl.critical and sum(r[5] for r in tl.critical) == len(segs)
    step = tl.steps[tl.critical_step or 0]
    assert all(step.start_us - 1 <= r[1] <= r[2] <= step.end_us + 1 for r in tl.critical)
    assert {r[0] for r in tl.critical} <= {ln.id for ln in tl.lanes if ln.events}


SHIM = Path(__file__).parents[1] / "security" / "page_shim.js"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
def test_the_page_draws_each_rank_and_their_collectives_one_above_the_other(tmp_path: Path) -> None:
    paths = []
    for rank in (0, 1):
        tb = TraceBuilder(rank=rank, world_size=2)
        for _ in range(2):
            with tb.step():
                tb.kernel("gemm", us=300 + 200 * rank)
                tb.nccl(us=500)
        paths.append(str(tb.write(tmp_path / f"rank{rank}.pt.trace.json")))
    page = tmp_path / "ranks.html"
    r = CliRunner().invoke(cli, ["analyze", *paths, "--html", str(page), "--fail-on", "never"])
    assert r.exit_code == 0, r.output[-2000:]
    run = subprocess.run(["node", str(SHIM), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["lanes"][-2:] == ["collectives, rank 0", "collectives, rank 1"]  # the combined timeline, last
    assert any(h.startswith("Collectives per rank") for h in got["h2"])
    assert len(got["canvas"]) == 3 and got["canvas"][2] >= 4  # each rank's, then both ranks' collectives


def test_lanes_are_capped_keeping_the_main_thread_and_the_busiest(tmp_path: Path) -> None:
    from gpuprof.trace.timelinerows import MAX_LANES

    tb = TraceBuilder()
    with tb.step():
        tb.cpu(us=5, name="aten::tiny_main")  # the main thread is nearly idle: kept all the same, first
        for i in range(MAX_LANES + 12):
            with tb.thread(5000 + i):
                tb.cpu(us=100 + 10 * i, name=f"aten::work_{i}")  # thread i is busier than thread i - 1
    m, _ = _load(tb, tmp_path / "threads.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None and len(tl.lanes) == MAX_LANES and tl.left_out["lanes"] == 13
    assert tl.lanes[0].id == f"host:{PID}:{PID}"
    kept = {int(ln.id.rsplit(":", 1)[1]) - 5000 for ln in tl.lanes[1:]}
    assert kept == set(range(13, MAX_LANES + 12))  # the 47 busiest side threads


def test_the_critical_step_is_the_lower_median_and_the_earlier_of_equal_steps(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from gpuprof.trace.steps import Step
    from gpuprof.views.timeline import critical_step

    tb = TraceBuilder()
    for ms in (9.0, 5.0, 6.0, 4.0, 7.0, 1.0):  # by time: 1, 4, 5, 6, 7, 9: the lower middle is the 5 ms step
        with tb.step():
            tb.cpu(us=ms * 1000)
    m, _ = _load(tb, tmp_path / "steps.pt.trace.json")
    assert critical_step(m) == 1
    # equal times: by (time, index), the lower middle of 1, 5, 5, 5, 7, 9 is the second 5 (index 2)
    steps = [Step(i, i, 100.0 * i, 100.0 * i + d, 100.0 * i + d) for i, d in enumerate((9.0, 5.0, 5.0, 5.0, 7.0, 1.0))]
    assert critical_step(SimpleNamespace(steps=steps)) == 2  # type: ignore[arg-type]


def test_a_chain_of_touching_segments_of_one_kind_is_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuprof.views.timeline.MAX_CRITICAL", 100)
    m, _ = _load(_busy_trace(), tmp_path / "t.pt.trace.json")
    o = m.steps[0].start
    gpu, host = f"gpu:0:{DEFAULT_STREAM}", f"host:{PID}:{PID}"
    segs = [(gpu, o + 2.0 * i, o + 2.0 * i + 2.0, "kernel", f"k{i}") for i in range(150)]  # a chain of kernels
    segs += [(host, o + 300.0 + 2.0 * i, o + 302.0 + 2.0 * i, "operator" if i % 2 else "idle", "x") for i in range(20)]
    tl = build_timeline(m, critical=segs)
    assert tl is not None
    runs = [r for r in tl.critical if r[0] == gpu]
    assert [(r[1], r[2], r[3], r[5]) for r in runs] == [(0.0, 300.0, "kernel", 150)]
    assert len([r for r in tl.critical if r[0] == host]) == 20  # kinds alternate: each its own run


def test_a_thread_with_nothing_in_the_steps_gets_no_lane(tmp_path: Path) -> None:
    tb = TraceBuilder()
    with tb.thread(7777):
        tb.cpu(us=50, name="aten::before_the_steps")  # before the first step: outside the recorded span
    tb.idle(us=100)
    for _ in range(2):
        with tb.step():
            tb.cpu(us=20, name="aten::in_the_step")  # operators in the steps too: the list is not left out whole
            tb.kernel("k", us=100)
    m, _ = _load(tb, tmp_path / "t.pt.trace.json")
    tl = build_timeline(m)
    assert tl is not None
    assert f"host:{PID}:7777" not in {ln.id for ln in tl.lanes} and all(ln.total > 0 for ln in tl.lanes)


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the page's script")
@pytest.mark.parametrize("select", ["GP101", None], ids=["no-markers", "markers"])
def test_the_page_shows_no_stray_null_under_the_timeline(tmp_path: Path, select: str | None) -> None:
    """A timeline without finding markers once put the text `null` under it (an absent row appended as text)."""
    tb = _busy_trace()
    path = tb.write(tmp_path / "t.pt.trace.json")
    page = tmp_path / "p.html"
    r = CliRunner().invoke(cli, ["analyze", str(path), "--html", str(page), "--fail-on", "never",
                                 *(["--select", select] if select else [])])
    assert r.exit_code == 0, r.output[-2000:]
    run = subprocess.run(["node", str(SHIM), str(page)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert "Timeline" in got["h2"] and got["canvas"]
    assert bool(got["marks"]) == (select is None)
    assert got["strays"] == []
