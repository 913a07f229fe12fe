"""``gpuprof analyze`` builds each trace's timeline only where a view draws it (issue 44).

Without ``--timeline``, ``--html`` or ``--to`` the JSON report's ``traces[].timeline`` is ``null`` and every other
field is what the full analysis gives; with ``--timeline`` the timeline is the one the library's ``analyze``
builds, and ``--html`` draws it. The step graph (the critical path's) is dropped from the metrics once the
summary, the what-if and the timeline have read it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze, analyze_trace
from gpuprof.trace.critpath.graph import build_graph
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample_trace"
NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")


def _cli_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", *args, "--format", "json", "-o", str(out)],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return doc


def _without_timeline(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "traces": [{k: v for k, v in t.items() if k != "timeline"} for t in doc["traces"]]}


def _check(tmp_path: Path, trace: Path) -> None:
    plain = _cli_json(tmp_path, str(trace))
    full = _cli_json(tmp_path, str(trace), "--timeline")
    assert [t["timeline"] for t in plain["traces"]] == [None] * len(plain["traces"])
    assert all(t["timeline"]["lanes"] for t in full["traces"])
    assert _without_timeline(plain) == _without_timeline(full)  # nothing else changes
    lib = json.loads(json.dumps(analyze(str(trace)).to_dict()))  # the library builds it by default
    assert [t["timeline"] for t in full["traces"]] == [t["timeline"] for t in lib["traces"]]
    assert full["findings"] == lib["findings"]


def test_the_timeline_is_built_on_request_and_nothing_else_changes(tmp_path: Path) -> None:
    _check(tmp_path, SAMPLE)


@pytest.mark.slow  # a real trace analysed whole, four times
def test_the_timeline_is_built_on_request_real(tmp_path: Path) -> None:
    _check(tmp_path, shared_path(*NW0))


def test_html_draws_the_timeline_without_the_flag(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    doc = _cli_json(tmp_path, str(SAMPLE), "--html", str(page))
    assert doc["traces"][0]["timeline"]["lanes"]  # built for the page, so the JSON beside it carries it too
    assert '"timeline":{"version":1' in page.read_text()  # the page's data holds the lanes it draws


def test_the_step_graph_is_dropped_after_use() -> None:
    trace = load_trace(next(SAMPLE.glob("*.pt.trace.json.gz")))
    for timeline in (False, True):
        metrics = compute_metrics(trace)
        summary, _ = analyze_trace(trace, metrics=metrics, timeline=timeline)
        assert summary.critical_path is not None  # the graph was built and read
        assert (summary.timeline is not None) is timeline
        assert (build_graph,) not in metrics._memo  # and not kept
