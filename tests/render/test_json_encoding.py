"""The report JSON is msgspec's encoding of the report dataclasses: NaN and infinities become null."""

from __future__ import annotations

import dataclasses
import json
import math

from gpuprof.render.jsonout import report_json_bytes
from gpuprof.report import CopyStat, DeviceInfo, KernelStat, OpStat, Report, SyncStat, TraceSummary


def test_undefined_numbers_are_null_and_every_field_is_written() -> None:
    nan, inf = math.nan, math.inf
    t = TraceSummary(
        path="t.json",
        devices=[DeviceInfo(id=0, name="GPU", compute_capability=(8, 0))],
        gpu_utilization=nan,
        breakdown_us={"kernel": inf, "idle": -inf},
        top_kernels=[KernelStat("k", 2, nan, 1.0, 0.5)],
        top_ops=[OpStat("aten::mm", 1, 2.0, 1.0, nan)],
        copies=[CopyStat("HtoD", "pageable", 1, 8, 1.0, nan)],
        syncs=[SyncStat("aten::item", "cudaMemcpyAsync", 1, inf, None)],
    )
    text = report_json_bytes(Report(command="analyze", traces=[t]))
    doc = json.loads(text)  # strict JSON: json.loads would accept NaN, so check the text too
    assert b"NaN" not in text and b"Infinity" not in text
    tr = doc["traces"][0]
    assert list(tr) == [f.name for f in dataclasses.fields(TraceSummary)]
    assert tr["gpu_utilization"] is None and tr["breakdown_us"] == {"kernel": None, "idle": None}
    assert tr["devices"] == [{"id": 0, "name": "GPU", "compute_capability": [8, 0], "total_memory": None,
                              "num_sms": None, "vendor": ""}]
    assert tr["top_kernels"] == [{"name": "k", "count": 2, "total_us": None, "mean_us": 1.0, "share_of_gpu": 0.5}]
    assert tr["top_ops"][0]["gpu_us"] is None and tr["top_ops"][0]["gpu_total_us"] == 0.0
    assert tr["copies"][0]["bandwidth_gbps"] is None and tr["syncs"][0]["total_us"] is None


def test_a_timeline_is_written_compact_and_reads_back_the_same() -> None:
    from .conftest import make_report

    report = make_report()
    report.traces.append(make_report().traces[0])  # two timelines: each in its own place
    text = report_json_bytes(report)
    doc = json.loads(text)
    assert doc == json.loads(json.dumps(report.to_dict()))  # the same document as the indented encoding
    assert b"gpuprof-timeline-" not in text
    line = next(x for x in text.splitlines() if b'"timeline":' in x)
    assert b'"lanes":[{"id":"host:1234:1234"' in line and b"[100.0,350.0,0,0,0,1]" in line  # one line, compact
    assert text.count(b'"timeline":') == 2
