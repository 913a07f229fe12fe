"""TensorBoard's Text tab: findings as list items (no table TensorBoard squeezes to ``war ning``,
``GP 601``), paths relative to the run, rendered by TensorBoard's own markdown converter."""

from __future__ import annotations

import re

import pytest

from gpuprof.capture.summary import CaptureSection
from gpuprof.render.tbtext import findings_text, relative_to
from gpuprof.report import Report

from .conftest import make_findings, make_trace_summary


def _report() -> Report:
    run = "/home/me/gpuprof_logs/myrun"
    trace = make_trace_summary(path=f"{run}/host_1.1.pt.trace.json.gz")
    sec = CaptureSection(logdir="/home/me/gpuprof_logs", run_dir=run, traces=[trace.path], recorded_steps=[[3, 7]],
                         memory_snapshots=[f"{run}/memory/host_1.pickle"], tensorboard_dir="/home/me/gpuprof_logs",
                         steps=10, step_time_median_ms=12.5)
    return Report("capture", traces=[trace], sections=[sec], findings=make_findings(), notes=["num_workers>0 helps"])


def test_findings_are_list_items_with_relative_paths() -> None:
    report = _report()
    md = findings_text(report)
    assert "/home/me" not in md  # every path relative to the run
    assert "**Capture** (run `myrun`; paths below are in it)" in md
    assert "`host_1.1.pt.trace.json.gz`" in md and "`gpuprof memory memory/host_1.pickle`" in md
    assert "num_workers>0 helps" in md  # no "&gt;"
    assert not re.search(r"^\|", md, re.M)  # no table at all
    for f in report.findings:
        assert f"**{f.severity.value}** `{f.code}`" in md


def test_tensorboard_renders_each_finding_as_a_list_item() -> None:
    plugin_util = pytest.importorskip("tensorboard.plugin_util")
    report = _report()
    html = plugin_util.markdown_to_safe_html(findings_text(report))
    assert "<table>" not in html
    items = re.findall(r"<li>(.*?)</li>", html, re.S)
    for f in report.findings:
        item = next(i for i in items if f"<code>{f.code}</code>" in i)
        assert f"<strong>{f.severity.value}</strong>" in item
        assert f.advice.split()[0] in item  # the fix inside the same item (4-space continuation)


def test_relative_to() -> None:
    assert relative_to("/a/b/c.json", "/a") == "b/c.json"
    assert relative_to("/x/c.json", "/a") == "/x/c.json"  # outside the run: as given
    assert relative_to("c.json", None) == "c.json"
