"""Acceptance checks on the real V100 ResNet-50 samples (num_workers 0 vs 4)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli


def _codes(report) -> set[str]:
    return {f.code for f in report.findings}


def _independent_utilization(path: Path) -> float:
    """GPU busy / profiled-step span, computed from the raw JSON with nothing from gpuprof.

    Busy = union of kernel, memcpy and memset intervals; the span runs from the
    first ProfilerStep start to the later of the last ProfilerStep end and the
    end of the GPU work.
    """
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    gpu = sorted(
        (e["ts"], e["ts"] + e.get("dur", 0))
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("Kernel", "Memcpy", "Memset", "kernel", "gpu_memcpy", "gpu_memset")
    )
    gpu = [(s, e) for s, e in gpu if e > lo]
    hi = max(hi, max(e for _, e in gpu))
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in gpu:
        s = max(s, lo)
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    return busy / (hi - lo)


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_num_workers_0_flagged_for_main_process_loading(v100_samples):
    for path in v100_samples:
        report = analyze(path)
        codes = _codes(report)
        share = report.traces[0].breakdown_us["data_loading"] / report.traces[0].step_time_mean_us
        if "num_workers_0" in str(path):
            assert "GP102" in codes, path
            dl = next(f for f in report.findings if f.code == "GP102")
            value = dl.evidence[0].value
            assert 0.15 <= value <= 0.45, (path, value)
            assert 0.15 <= share <= 0.45, (path, share)
        else:
            assert "GP102" not in codes and "GP103" not in codes, (path, codes)
            assert share < 0.05


@pytest.mark.slow
def test_gpu_utilization_matches_independent_computation(v100_samples):
    runner = CliRunner()
    for path in v100_samples:
        result = runner.invoke(cli, ["analyze", str(path), "--format", "json", "--fail-on", "error"])
        assert result.exit_code in (0, 1), result.output
        printed = json.loads(result.stdout)["traces"][0]["gpu_utilization"]
        expected = _independent_utilization(path)
        assert abs(printed - expected) <= 0.03, (path, printed, expected)
        # and the terminal report prints the same number, rounded to a percent
        term = runner.invoke(cli, ["analyze", str(path), "--no-progress"])
        assert f"{printed * 100:.0f}%" in term.stdout or f"{printed * 100:.1f}%" in term.stdout


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_all_four_flagged_for_pageable_blocking_h2d_and_fp32(v100_samples):
    for path in v100_samples:
        report = analyze(path)
        codes = _codes(report)
        assert {"GP201", "GP202", "GP302"} <= codes, (path, codes)
        pageable = next(f for f in report.findings if f.code == "GP201")
        extra = {k: v for e in pageable.evidence for k, v in e.extra.items()}
        assert extra.get("bytes_per_copy") == 19_267_584, extra
        blocking = next(f for f in report.findings if f.code == "GP202")
        assert "19,267,584" in blocking.message or "18.4 MiB" in blocking.message or any(
            e.extra.get("bytes_per_copy") == 19_267_584 for e in blocking.evidence
        )
        precision = next(f for f in report.findings if f.code == "GP302")
        text = json.dumps(precision.to_dict())
        assert "7.0" in text, text
