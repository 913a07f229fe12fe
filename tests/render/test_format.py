"""The shared number formatting: exact strings for known inputs (this is the spec of the format)."""

from __future__ import annotations

import math

import pytest

from gpuprof import units as U
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.render import format as F
from gpuprof.render.safe import shorten
from gpuprof.report import DeviceInfo, Report
from gpuprof.trace import breakdown
from gpuprof.trace.breakdown import BREAKDOWN_KEYS


@pytest.mark.parametrize(
    "us, text",
    [(0, "0 µs"), (3.25, "3.2 µs"), (850, "850 µs"), (1_234.5, "1.23 ms"), (12_345, "12.3 ms"), (1_500_000, "1.50 s"), (None, "n/a"), (math.nan, "n/a")],
)
def test_fmt_us(us, text):
    assert U.fmt_us(us) == text


def test_fmt_ms_pct_share():
    assert U.fmt_ms(84_312.5) == "84.31"
    assert U.fmt_pct(0.4567) == "45.7%"
    assert U.fmt_pct(None) == "n/a"
    assert U.fmt_share_of(25.0, 100.0) == "25.0%"
    assert U.fmt_share_of(25.0, 0.0) == "n/a"  # no step time: no share


@pytest.mark.parametrize("n, text", [(0, "0 B"), (400, "400 B"), (1536, "1.5 KiB"), (3 * 1024**3, "3.0 GiB"), (-2048, "-2.0 KiB")])
def test_fmt_bytes(n, text):
    assert U.fmt_bytes(n) == text


def test_fmt_value_uses_unit():
    assert F.fmt_value(3_480.25, "us") == "3.48 ms"
    assert F.fmt_value(0.25, "fraction") == "25.0%"
    assert F.fmt_value(2048, "bytes") == "2.0 KiB"
    assert F.fmt_value(12, "calls") == "12 calls"
    assert F.fmt_value(0.1234, "") == "0.123"
    assert F.fmt_value("fp32", "") == "fp32"
    assert F.fmt_value(None, "us") == "n/a"


def test_fmt_steps_folds_ranges():
    assert F.fmt_steps([9, 3, 4, 5, 6]) == "3-6, 9"
    assert F.fmt_steps([]) == "none"
    assert F.fmt_steps(range(0, 40, 2), limit=3) == "0, 2, 4, ... (17 more ranges)"


def test_devices_and_rank():
    h100 = DeviceInfo(0, "NVIDIA H100", (9, 0), 80 * 1024**3, 132, "nvidia")
    assert F.fmt_device(h100) == "GPU 0: NVIDIA H100 (sm 9.0, 80.0 GiB, 132 SMs)"
    assert F.fmt_devices([h100, DeviceInfo(1, "NVIDIA H100", (9, 0), 80 * 1024**3, 132)]) == "2 x NVIDIA H100 (sm 9.0, 80.0 GiB, 132 SMs)"
    assert F.fmt_devices([]) == "CPU only (no GPU device in the trace)"
    assert F.fmt_devices([], gpu_activity=True).startswith("not recorded")
    assert F.fmt_device(DeviceInfo(3)) == "GPU 3: unknown GPU"
    assert F.fmt_rank(None, None) == "single process"
    assert F.fmt_rank(2, 8) == "rank 2 of 8"


def test_shorten_keeps_both_ends():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)"
    short = shorten(name, 40)
    assert len(short) == 40
    assert short.startswith("void at::native::vec") and short.endswith("<float> >(int)")
    assert shorten("short", 40) == "short"
    msg = F.short_message("aten::item() blocks the host 10 times per step for 3.48 ms", 30)
    assert len(msg) <= 30 and msg.endswith("…")


def _finding(code: str, sev: Severity, cost: float | None = None) -> Finding:
    return Finding(code, "x", sev, "m", "a", cost_us_per_step=cost, cost_share=None if cost is None else cost / 1e5)


def test_cost_and_evidence_text():
    f = Finding("GP1", "n", Severity.INFO, "m", "a", cost_us_per_step=12_300.0, cost_share=0.185, location=SourceLocation("t.py", 3))
    assert F.fmt_cost(f) == "12.3 ms/step (18.5% of step)"
    assert F.fmt_cost(_finding("GP2", Severity.INFO)) == "not estimated"
    assert F.fmt_location(f) == "t.py:3"
    assert F.fmt_evidence(Evidence("share", 0.3, 0.1, "fraction")) == "share = 30.0% (threshold 10.0%)"


def test_findings_total_counts_each_severity():
    r = Report("analyze", findings=[_finding("A", Severity.ERROR), _finding("B", Severity.WARNING), _finding("C", Severity.WARNING)])
    assert F.findings_total(r) == "3 findings: 1 error, 2 warnings"
    assert F.findings_total(Report("analyze")) == "No findings."
    assert F.findings_total(Report("analyze", findings=[_finding("C", Severity.INFO)])) == "1 finding: 1 info"


def test_every_breakdown_key_has_a_label():
    # keys come from the metrics module; a new key without a label would render as its raw name
    assert set(breakdown.BREAKDOWN_KEYS) <= set(F.BREAKDOWN_LABELS)
    assert set(breakdown.IDLE_KEYS) <= set(F.IDLE_LABELS)
    assert F.ordered_items({"zzz": 1.0, "other": 2.0, "kernel": 3.0}, BREAKDOWN_KEYS) == [("kernel", 3.0), ("other", 2.0), ("zzz", 1.0)]
