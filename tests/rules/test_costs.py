"""Costs across rules: every cost is in its message, labelled, with the share the Cost field shows.

Issue 9 item 4: each number in a finding is labelled, and message and cost agree.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from gpuprof.analysis import analyze
from gpuprof.testing.realtraces import shared_path
from gpuprof.testing.tracegen import TraceBuilder, simple_training
from gpuprof.units import fmt_us

GP102_SAMPLE = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")
REAL = [
    GP102_SAMPLE,
    ("hta", "TraceLens", "tests", "traces", "b200", "eager_trace.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "h100", "facebook_timesformer-base-finetuned-k400__1016002.json.gz"),
    ("hta", "TraceLens", "tests", "traces", "inference", "sglang_prefilldecode", "sglang_Qwen3-8B_prefilldecode.json.gz"),
]


def _check_costs_in_messages(findings):
    checked = 0
    for f in findings:
        if f.origin != "trace" or f.cost_us_per_step is None:
            continue
        assert "; cost: " in f.message, (f.code, f.message)
        # the message ends with the cost, as a time per step and the same share as cost_share
        tail = f.message.rsplit("; cost: ", 1)[1]
        assert tail.endswith(f"{fmt_us(f.cost_us_per_step)} per step ({f.cost_share:.1%} of the mean step)"), (
            f.code, f.message, f.cost_us_per_step, f.cost_share)
        checked += 1
    return checked


@pytest.mark.parametrize("parts", REAL, ids=lambda p: p[-1][:30])
def test_costs_are_labelled_in_messages_on_real_traces(parts):
    report = analyze(shared_path(*parts))
    assert _check_costs_in_messages(report.findings) >= 1


def test_costs_are_labelled_in_messages_on_synthetic_traces(tmp_path):
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.dataloader(ms=30.0, single_process=True)
            tb.copy_h2d(20 << 20, pageable=True, blocking=True)
            for _ in range(50):
                tb.kernel("void at::native::vectorized_elementwise_kernel<4>", us=3.0)
            tb.sync_item(line=("train.py", 9, "train"))
    path = tb.write(tmp_path / "many.json")
    findings = analyze(path).findings
    assert {"GP101", "GP102", "GP201"} <= {f.code for f in findings}
    assert _check_costs_in_messages(findings) >= 3
    good = simple_training(TraceBuilder(), steps=4).write(tmp_path / "good.json")
    _check_costs_in_messages(analyze(good).findings)


def _independent_loading_per_step(path):
    """Data-loading time per step from the raw events: union of enumerate(DataLoader) ranges / steps."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    x = [e for e in events if e.get("ph") == "X"]
    steps = [e for e in x if e["name"].startswith("ProfilerStep#")]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e["name"].startswith("enumerate(DataLoader)"))
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total / len(steps)


def test_gp102_bad_message_labels_loading_and_cost_on_real_trace():
    # Before: "69.3 ms per step (39% of the step) spent building batches" while the Cost said 59.3 ms (33.4%).
    path = shared_path(*GP102_SAMPLE)
    (f,) = [f for f in analyze(path, select=["GP102"]).findings]
    per_step = f.evidence[0].extra["data_loading_us_per_step"]
    assert per_step == pytest.approx(_independent_loading_per_step(path), rel=1e-3)
    loading, cost = f.message.split("; cost: ")
    assert f"{fmt_us(per_step)} per step (" in loading and "of the mean step)" in loading
    share = float(re.search(r"\(([\d.]+)% of the mean step\)", loading).group(1)) / 100
    assert share == pytest.approx(f.evidence[0].value, abs=0.001)  # data-loading share, same denominator
    assert "GPU was idle" in cost
    assert cost.endswith(of_step_text(f))
    assert f.cost_us_per_step < per_step  # kernels queued earlier ran during part of the loading


def of_step_text(f):
    return f"{fmt_us(f.cost_us_per_step)} per step ({f.cost_share:.1%} of the mean step)"
