"""``Report.to_dict`` / ``Finding.to_dict`` are encoded by msgspec: the JSON must be the documented one.

The reference below spells out docs/report-schema.md's top level and finding
layout key by key (what the hand-written ``to_dict`` methods wrote before);
the msgspec form must equal it field by field, in the same key order, on a
real trace's findings and on hostile values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from gpuprof import __version__
from gpuprof.analysis import analyze
from gpuprof.findings import EventRef, Evidence, Finding, Severity, SourceLocation
from gpuprof.report import SCHEMA_VERSION, Report
from gpuprof_testing.realtraces import shared_path


def _ref_location(loc: SourceLocation | None) -> dict[str, Any] | None:
    return None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function}


def _ref_finding(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "name": f.name,
        "severity": f.severity.value,
        "message": f.message,
        "advice": f.advice,
        "evidence": [
            {
                "metric": e.metric,
                "value": e.value,
                "threshold": e.threshold,
                "unit": e.unit,
                "events": [{"name": r.name, "ts": r.ts, "dur": r.dur, "pid": r.pid, "tid": r.tid} for r in e.events],
                "extra": dict(e.extra),
            }
            for e in f.evidence
        ],
        "cost_us_per_step": f.cost_us_per_step,
        "cost_share": f.cost_share,
        "location": _ref_location(f.location),
        "origin": f.origin,
        "source": f.source,
        "links": [{"kind": k.kind, "code": k.code, "part": k.part, "count": k.count} for k in f.links],
        "what_if_saving_us": f.what_if_saving_us,
        "what_if_note": f.what_if_note,
    }


def _ref_report(r: Report) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpuprof", "version": __version__},
        "command": r.command,
        "inputs": list(r.inputs),
        "traces": [t.to_dict() for t in r.traces],
        "sections": [{"kind": s.kind, **s.to_dict()} for s in r.sections],
        "findings": [_ref_finding(f) for f in r.sorted_findings()],
        "notes": list(r.notes),
        "failed_rules": list(r.failed_rules),
        "failed_ranks": list(r.failed_ranks),
        "job": _ref_job(r.job),
    }


def _ref_job(j: Any) -> dict[str, Any] | None:
    """docs/report-schema.md's job layout, key by key."""
    if j is None:
        return None
    s, m = j.series, j.samples
    return {
        "steps": j.steps,
        "phases": [{"kind": p.kind, "start_step": p.start_step, "end_step": p.end_step,
                    "step_time_median_us": p.step_time_median_us, "steps": p.steps,
                    "step_time_min_us": p.step_time_min_us, "step_time_p90_us": p.step_time_p90_us,
                    "step_time_max_us": p.step_time_max_us, "data_wait_share": p.data_wait_share,
                    "core_wait_share": p.core_wait_share} for p in j.phases],
        "series": {"bucket": s.bucket, "first_step": s.first_step, "step_time_us": s.step_time_us,
                   "step_time_min_us": s.step_time_min_us, "step_time_max_us": s.step_time_max_us,
                   "data_wait_us": s.data_wait_us, "cuda_allocated_mib": s.cuda_allocated_mib,
                   "cuda_reserved_mib": s.cuda_reserved_mib, "cuda_peak_mib": s.cuda_peak_mib,
                   "host_rss_mib": s.host_rss_mib},
        "samples": None if m is None else {
            "interval_s": m.interval_s, "step": m.step, "process_cpu_pct": m.process_cpu_pct,
            "workers_cpu_pct": m.workers_cpu_pct, "workers_demand_pct": m.workers_demand_pct, "workers": m.workers,
            "thread_cpu_pct": m.thread_cpu_pct, "thread_wait_pct": m.thread_wait_pct,
            "gpu_util_pct": m.gpu_util_pct, "gpu_memory_used_mib": m.gpu_memory_used_mib,
            "gpu_sm_clock_mhz": m.gpu_sm_clock_mhz, "gpu_power_w": m.gpu_power_w,
            "gpu_throttle_reasons": m.gpu_throttle_reasons},
        "cores": j.cores,
        "h2d_copy_us": j.h2d_copy_us,
        "windows": [{"start_step": w.start_step, "steps": w.steps, "reason": w.reason} for w in j.windows],
    }


def _keys(obj: Any) -> Any:
    """The key order of every object in ``obj`` (dict equality ignores order; the JSON does not)."""
    if isinstance(obj, dict):
        return [(k, _keys(v)) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [_keys(v) for v in obj]
    return None


def _same(got: Any, want: Any) -> None:
    assert _keys(got) == _keys(want)
    assert msgspec.json.encode(got) == msgspec.json.encode(want)


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_real_trace_report_is_the_documented_json() -> None:
    report = analyze(str(shared_path("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")))
    assert report.findings, "the V100 num_workers=0 sample has findings (GP102 at least)"
    assert any(e.events for f in report.findings for e in f.evidence)  # event refs are exercised
    for f in report.findings:
        _same(f.to_dict(), _ref_finding(f))
    _same(report.to_dict(), _ref_report(report))


@dataclass
class _Section:
    kind: str = "demo"

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [(1, "a")], "by_id": {3: "x"}}


def test_hostile_values_encode_as_before() -> None:
    ev = Evidence(
        metric="m\u202e<script>",
        value=math.nan,
        threshold=math.inf,
        unit="µs",
        events=(EventRef(name="k\x00", ts=1.5, dur=2.0, pid="12", tid=7), EventRef(name="", ts=0.0)),
        extra={"nested": {"t": (1, 2)}, "n": None, "big": 2**70},
    )
    f = Finding(
        code="GP999", name="demo", severity=Severity.WARNING, message="m", advice="a", evidence=(ev,),
        cost_us_per_step=1.0, cost_share=None, location=SourceLocation("t\u00e9.py", 3, "f"), origin="runtime", source="s",
    )
    bare = Finding(code="GP998", name="b", severity=Severity.INFO, message="", advice="")
    report = Report(command="capture", inputs=["a"], findings=[bare, f], sections=[_Section()], notes=["n"], failed_rules=["GP1"])
    for one in (f, bare):
        _same(one.to_dict(), _ref_finding(one))
    _same(report.to_dict(), _ref_report(report))
    got = report.to_dict()
    assert got["findings"][0]["code"] == "GP999"  # most expensive first
    assert got["findings"][0]["evidence"][0]["events"][0]["pid"] == "12"
    assert msgspec.json.decode(msgspec.json.encode(got["sections"][0])) == {"kind": "demo", "rows": [[1, "a"]], "by_id": {"3": "x"}}
    assert got["findings"][0]["evidence"][0]["value"] is not None and msgspec.json.encode(got).count(b"null") >= 2  # NaN/inf -> null


def test_job_encodes_as_documented() -> None:
    """A capture's job (phases, compact series, the sampler's columns, NaN figures) in the documented layout."""
    from gpuprof.report import JobPhase, JobSamples, JobSeries, JobSummary, JobWindow

    job = JobSummary(steps=3, phases=[JobPhase("steady", 0, 1, math.nan, 2, 1.0, 2.0, 3.0, None),
                                      JobPhase("contention", 2, 2, 9.0, 1, 9.0, 9.0, 9.0, None, 0.61)],
                     series=JobSeries(bucket=1, first_step=[0, 1, 2], step_time_us=[1.0, 2.0, 3.0],
                                      step_time_min_us=[1.0, 2.0, 3.0], step_time_max_us=[1.0, 2.0, 3.0]),
                     samples=JobSamples(step=[1], process_cpu_pct=[99.5], workers_cpu_pct=[None],
                                        workers_demand_pct=[None], workers=[None], thread_cpu_pct=[40.0],
                                        thread_wait_pct=[55.5]),
                     cores=4, windows=[JobWindow(7, 5, "default"), JobWindow(150, 5, "anomaly")])
    report = Report(command="capture", job=job)
    _same(report.to_dict(), _ref_report(report))
    out = msgspec.json.decode(render_json_bytes(report))
    assert out["job"]["phases"][0]["step_time_median_us"] is None  # NaN -> null, as every number
    assert out["job"]["samples"]["gpu_util_pct"] is None and out["job"]["h2d_copy_us"] is None


def render_json_bytes(report: Report) -> bytes:
    from gpuprof.render.jsonout import render_json

    return render_json(report).encode()


def test_a_saved_report_drawn_again_keeps_every_top_level_field(tmp_path: Any) -> None:
    """``gpuprof analyze report.json`` rebuilds the report from the one typed read: the ranks whose traces failed
    (and the notes, failed rules, inputs) survive the round trip into ``--format json``."""
    from gpuprof.saved.read import read_report

    rep = Report(command="analyze", inputs=["rank0.json", "rank1.json"], notes=["rank 1 unreadable"],
                 failed_rules=["GP999"], failed_ranks=["rank1.json"])
    path = tmp_path / "report.json"
    path.write_text(msgspec.json.encode(rep.to_dict()).decode())
    again = read_report(path).to_dict()
    for key in ("command", "inputs", "notes", "failed_rules", "failed_ranks"):
        assert again[key] == rep.to_dict()[key], key
