"""What gpuprof sends to a tracker (gpuprof.trackers.payload): the findings table and the figures per step
window, checked on a real trace against figures computed here from its raw events, and on made-up reports."""

from __future__ import annotations

import gzip
import json
import os
import re
import statistics
from pathlib import Path

import msgspec
import pytest

from gpuprof.codes import get_spec
from gpuprof.saved import ReportProblem, SavedTrace, saved_report
from gpuprof.trackers.payload import (
    FINDING_COLUMNS,
    Artefact,
    finding_rows,
    publication,
    trace_mfu,
    windows,
)
from gpuprof_testing.realtraces import shared_path

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")  # old traces spell them Kernel, Memcpy
NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def _doc(path: str) -> dict:
    from gpuprof.analysis import analyze
    from gpuprof.render.jsonout import render_json

    return json.loads(render_json(analyze(path)))


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    total, cur = 0.0, None
    for a, b in sorted(intervals):
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        if cur is None or a > cur[1]:
            total += 0.0 if cur is None else cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + (0.0 if cur is None else cur[1] - cur[0])


@pytest.fixture(scope="module")
def nw0() -> tuple[dict, list[dict]]:
    path = str(shared_path(*NW0))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    return _doc(path), events


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_window_figures_match_the_raw_events(nw0: tuple[dict, list[dict]]) -> None:
    doc, events = nw0
    steps = [e for e in events if re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
    assert len(steps) >= 3
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    (w,) = windows(doc)
    # the window is logged at its last step: the highest ProfilerStep#N of the trace
    assert w.step == max(int(e["name"].split("#")[1]) for e in steps)
    assert w.metrics["step_time_ms"] == pytest.approx(statistics.median(e["dur"] for e in steps) / 1000, rel=0.01)
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e.get("cat", "")).lower() in GPU_CATS]
    assert w.metrics["gpu_utilization"] == pytest.approx(_union(gpu, lo, hi) / (hi - lo), abs=0.02)
    loading = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("enumerate(DataLoader)")]
    assert w.metrics["data_loading_share"] == pytest.approx(_union(loading, lo, hi) / (hi - lo), abs=0.02)
    assert 0.15 < w.metrics["data_loading_share"] < 0.5  # num_workers=0: a large share, as the sample shows
    assert w.metrics["data_loading_share"] != pytest.approx(  # loading during GPU work counts too, unlike the breakdown's
        doc["traces"][0]["breakdown_us"]["data_loading"] / doc["traces"][0]["step_time_mean_us"], abs=0.02)
    # a few GEMMs with known FLOPs in a convolutional network: no MFU rather than a near-zero one
    assert "mfu" not in w.metrics
    # the run's figures ride on the last window: how many findings, how many at warning or above
    assert w.metrics["findings"] == len(doc["findings"]) > 0
    assert w.metrics["findings_at_warning"] == sum(f["severity"] != "info" for f in doc["findings"]) > 0


def test_findings_table_rows_follow_the_report(nw0: tuple[dict, list[dict]]) -> None:
    doc, _ = nw0
    rows = finding_rows(saved_report(doc))
    assert [r.code for r in rows] == [f["code"] for f in doc["findings"]]
    for row, f in zip(rows, doc["findings"]):
        spec = get_spec(f["code"])
        assert spec is not None and row.title == spec.title and row.severity == f["severity"]
        assert row.message == f["message"]
        if f["cost_us_per_step"] is None:
            assert row.cost_ms_per_step is None
        else:
            assert row.cost_ms_per_step == pytest.approx(f["cost_us_per_step"] / 1000, abs=1e-4)
        assert len(row.cells()) == len(FINDING_COLUMNS)
    table = publication(doc, "nw0").table()
    assert list(table) == list(FINDING_COLUMNS) and table["code"] == [r.code for r in rows]


def test_location_is_file_colon_line_and_unknown_codes_keep_their_name() -> None:
    doc = {"schema_version": "1.6", "findings": [
        {"code": "GP101", "name": "gpu-idle", "severity": "warning", "message": "m", "cost_us_per_step": 2500.0,
         "cost_share": 0.25, "location": {"file": "train.py", "line": 42, "function": "main"}},
        {"code": "GP999", "name": "from-a-newer-gpuprof", "severity": "info", "message": "n",
         "location": {"file": "model.py", "line": None}},
    ]}
    a, b = finding_rows(saved_report(doc))
    assert (a.location, a.cost_ms_per_step, a.cost_share) == ("train.py:42", 2.5, 0.25)
    assert (b.location, b.title, b.cost_ms_per_step) == ("model.py", "from-a-newer-gpuprof", None)


def _trace(step_ids: list[int], **extra: object) -> dict:
    return {"path": "t.json", "step_ids": step_ids, "num_steps": len(step_ids), "step_time_us": 10_000.0,
            "step_time_mean_us": 12_000.0, "gpu_busy_us": 0.0, "gpu_utilization": None, "data_loading_share": 0.25,
            "breakdown_us": {}, "idle_breakdown_us": {}, **extra}


def test_one_window_per_trace_in_step_order_and_unknown_figures_left_out() -> None:
    doc = {"schema_version": "1.6", "traces": [_trace([40, 41]), _trace([7, 8, 9], step_time_us=0.0)],
           "sections": [{"kind": "memory", "devices": [{"allocated": {"peak": 3 * 2**20}},
                                                       {"allocated": {"peak": 5 * 2**20}}]}],
           "findings": [{"code": "GP101", "severity": "warning", "cost_us_per_step": 1500.0},
                        {"code": "GP640", "severity": "info", "cost_us_per_step": None}]}
    first, last = windows(doc)
    assert (first.step, last.step) == (9, 41)
    assert "step_time_ms" not in first.metrics and "gpu_utilization" not in first.metrics  # 0, None: not sent
    assert first.metrics["data_loading_share"] == pytest.approx(0.25)
    assert "findings" not in first.metrics  # the run's figures only once, at the last window
    assert last.metrics == pytest.approx({"step_time_ms": 10.0, "data_loading_share": 0.25, "memory_peak_mib": 5.0,
                                          "findings": 2.0, "findings_at_warning": 1.0})


def test_the_ranks_of_one_window_are_one_window_with_the_runs_figures() -> None:
    doc = {"schema_version": "1.6", "traces": [
        _trace([7, 8], rank=0, gpu_busy_us=9_000.0, gpu_utilization=0.75),
        _trace([5, 6, 7, 8], rank=1, step_time_us=14_000.0, step_time_mean_us=15_000.0, data_loading_share=0.75,
               gpu_busy_us=3_000.0, gpu_utilization=0.2)]}
    (w,) = windows(doc)
    assert w.step == 8  # the ranks' windows end at the same step: one window
    # the median of the ranks' steps pooled (each rank's median standing for its steps: no step times listed)
    assert w.metrics["step_time_ms"] == pytest.approx(statistics.median([10.0] * 2 + [14.0] * 4))
    # waiting and busy time over step time, summed over the ranks (2 steps of 12 ms, 4 of 15 ms)
    time = 2 * 12_000.0 + 4 * 15_000.0
    assert w.metrics["data_loading_share"] == pytest.approx((0.25 * 2 * 12_000.0 + 0.75 * 4 * 15_000.0) / time)
    assert w.metrics["gpu_utilization"] == pytest.approx((9_000.0 * 2 + 3_000.0 * 4) / time)


def test_a_report_with_a_value_no_measurement_has_is_not_sent() -> None:
    doc = {"schema_version": "1.6", "traces": [_trace([7, 8], step_time_us=float("nan"))]}
    with pytest.raises(ReportProblem, match=r"traces\[0\]\.step_time_us"):
        windows(doc)
    from gpuprof.trackers.send import send

    (sent,) = send(doc, ["mlflow"], "run")
    assert not sent.ok and "traces[0].step_time_us is NaN" in sent.line and "\n" not in sent.line


def test_a_capture_without_traces_gives_one_window_from_its_section() -> None:
    doc = {"schema_version": "1.6", "traces": [], "sections": [{"kind": "capture", "steps": 30, "step_time_median_ms": 4.5,
                                       "data_loading_share": 0.1}], "findings": []}
    (w,) = windows(doc)
    assert w.step == 30 and w.metrics == {"step_time_ms": 4.5, "data_loading_share": 0.1, "findings": 0.0,
                                          "findings_at_warning": 0.0}


def test_mfu_is_the_kernels_time_at_peak_over_the_steps_time() -> None:
    views = {"kernel_total_us": 1000.0, "kernels": [
        {"total_us": 600.0, "mfu": 0.5}, {"total_us": 300.0, "mfu": 0.2}, {"total_us": 100.0, "mfu": None}]}
    for k in views["kernels"]:
        k["name"] = "k"
    t = _trace([1, 2], step_time_mean_us=1000.0, views=views)
    # 600 us at 50 % of peak and 300 us at 20 %: 360 us of work at peak, over 2 steps of 1 ms
    assert trace_mfu(msgspec.convert(t, SavedTrace)) == pytest.approx(360.0 / 2000.0)
    views["kernels"][0]["mfu"] = None  # known FLOPs for 30 % of the kernel time only: not known
    assert trace_mfu(msgspec.convert(t, SavedTrace)) is None
    assert trace_mfu(msgspec.convert(_trace([], step_time_mean_us=1.0, views=views), SavedTrace)) is None


def test_artefacts_that_are_not_regular_files_or_too_big_are_left_out_with_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "report.md"
    good.write_text("# report", encoding="utf-8")
    big = tmp_path / "big.pt.trace.json"
    big.write_bytes(b"x" * (2 * 2**20))
    link = tmp_path / "link.md"
    link.symlink_to(good)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setenv("GPUPROF_TRACKER_MAX_MB", "1")
    pub = publication({"schema_version": "1.6"}, "r", [Artefact(str(good), "report"), Artefact(str(big), "trace"),
                                Artefact(str(link), "report"), Artefact(str(fifo), "trace"),
                                Artefact(str(tmp_path / "gone"), "report")])
    assert [a.path for a in pub.artefacts] == [str(good)]
    assert len(pub.notes) == 4 and "over the 1 MiB bound" in pub.notes[0]
    assert sum("not a regular file" in n for n in pub.notes) == 2
