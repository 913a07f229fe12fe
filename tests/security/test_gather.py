"""Rank 0's gather under torchrun keeps what it can: a rank it cannot use is named, the others are compared.

The store is a real ``torch.distributed.HashStore``; the other ranks' keys
are written the way their gather writes them (msgpack of the summary), or
as what another gpuprof version, a hostile process on the job's store or a
torn write would leave.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuprof_testing.realtraces import shared_path

RANK0 = ("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")
RANK1 = ("hta", "HolisticTraceAnalysis", "tests", "data", "trace_filter", "sampled_rank-1.json.gz")


@pytest.fixture(scope="module")
def summaries() -> tuple[Any, Any]:
    from gpuprof.distributed.summary import summarize
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    return tuple(summarize(compute_metrics(load_trace(shared_path(*p)))) for p in (RANK0, RANK1))  # type: ignore[return-value]


def _report(summary: Any) -> Any:
    from gpuprof.distributed.reports import RankSummaries
    from gpuprof.report import Report

    return Report(command="capture", sections=[RankSummaries([summary])])


def _cross(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@pytest.mark.parametrize("junk, words", [
    (b"\x93garbage", "does not decode"),
    (msgspec.msgpack.encode({"version": 2, "path": "x"}), "does not decode"),  # another version's layout
    ("v99", "of version 99"),
    (b"\x91" * 200_000 + b"\xc0", "does not decode"),  # 200,000 nested arrays
    (b"\x81\xa4path" + b"\x81\xa1a" * 200_000 + b"\xc0", "does not decode"),  # 200,000 nested maps
    ("neg", "field 'step_us' holds -"),
    ("short", "field 'inst_dur' has"),
], ids=["garbage", "other-layout", "v99", "deep-arrays", "deep-maps", "negative", "short-list"])
def test_a_rank_that_does_not_decode_is_named_and_the_others_are_compared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summaries: tuple[Any, Any], junk: Any, words: str) -> None:
    torch = pytest.importorskip("torch")
    from gpuprof.capture.end import gather

    s0, s1 = summaries
    if junk == "v99":
        junk = msgspec.msgpack.encode(msgspec.structs.replace(s1, rank=2, version=99))
    elif junk == "neg":
        junk = msgspec.msgpack.encode(msgspec.structs.replace(s1, rank=2, step_us=-5.0))
    elif junk == "short":
        junk = msgspec.msgpack.encode(msgspec.structs.replace(s1, rank=2, inst_dur=s1.inst_dur[:-1]))
    store = torch.distributed.HashStore()
    store.set("gpuprof/run/summary/1", msgspec.msgpack.encode(s1))
    store.set("gpuprof/run/summary/2", junk)
    monkeypatch.setattr(gather, "_store_and_group", lambda: (store, 0, 3))
    path = gather.gather_cross_rank(_report(s0), tmp_path, "run", wait_s=5)
    assert path is not None
    rep = _cross(path)
    sec = next(s for s in rep["sections"] if s["kind"] == "cross_rank")
    assert [r["rank"] for r in sec["ranks"]] == [0, 1]
    assert any(n.startswith("rank 2 left out of the comparison") and words in n for n in rep["notes"]), rep["notes"]
    assert not any("sent no summary" in n for n in rep["notes"])  # it did send one: it is not called missing
    md = (tmp_path / "report.cross_rank.md").read_text()
    assert "rank 2 left out" in md


def _window_then_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summaries: tuple[Any, Any],
                     at_end: Any) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    from gpuprof.capture.end import gather

    s0, s1 = summaries
    store = torch.distributed.HashStore()
    store.set("gpuprof/run/window/summary/1", msgspec.msgpack.encode(s1))
    monkeypatch.setattr(gather, "_store_and_group", lambda: (store, 0, 2))
    path = gather.gather_cross_rank(_report(s0), tmp_path, "run", wait_s=2, window=7)
    assert path is not None and "rewritten with the whole run when it ends" in _cross(path)["notes"][0]
    monkeypatch.setattr(gather, "_store_and_group", at_end)
    return _cross(path)


def test_a_window_report_left_by_a_failed_end_gather_says_it_was_not_rewritten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summaries: tuple[Any, Any]) -> None:
    from gpuprof.capture.end import gather

    _window_then_end(tmp_path, monkeypatch, summaries, lambda: None)  # the group destroyed before the end
    assert gather.gather_cross_rank(_report(summaries[0]), tmp_path, "run", wait_s=1) is None
    notes = _cross(tmp_path / "report.cross_rank.json")["notes"]
    assert notes[0] == ("gathered when the recorded window closed at step 7; not rewritten with the whole run: "
                        "the process group was gone at the end of the run")
    assert "not rewritten" in (tmp_path / "report.cross_rank.md").read_text()


def test_a_store_error_at_the_end_is_said_in_the_window_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summaries: tuple[Any, Any]) -> None:
    from gpuprof.capture.end import gather

    class Broken:
        def set(self, key: str, value: bytes) -> None:
            raise RuntimeError("connection reset by peer")

    _window_then_end(tmp_path, monkeypatch, summaries, lambda: (Broken(), 0, 2))
    with pytest.raises(RuntimeError):  # the caller's guard turns it into one warning
        gather.gather_cross_rank(_report(summaries[0]), tmp_path, "run", wait_s=1)
    notes = _cross(tmp_path / "report.cross_rank.json")["notes"]
    assert "not rewritten with the whole run: the end-of-run gather failed (RuntimeError: connection reset" in notes[0]


def test_a_completed_end_gather_replaces_the_window_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summaries: tuple[Any, Any]) -> None:
    torch = pytest.importorskip("torch")
    from gpuprof.capture.end import gather

    store = torch.distributed.HashStore()
    store.set("gpuprof/run/summary/1", msgspec.msgpack.encode(summaries[1]))
    _window_then_end(tmp_path, monkeypatch, summaries, lambda: (store, 0, 2))
    path = gather.gather_cross_rank(_report(summaries[0]), tmp_path, "run", wait_s=2)
    assert path is not None and _cross(path)["notes"] == []
    assert str(tmp_path) not in gather._WINDOW_REPORTS
