"""Links read back from a stranger's report.json (a capture run directory, the TensorBoard tab) are data:
hostile or malformed ones are refused with a note or shown as written, never a crash, never drawn as markup."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.capturerun import capture_findings
from gpuprof.findings import Finding, Link, Severity
from gpuprof.render import render
from gpuprof.report import Report

_BASE = {"code": "GP601", "name": "dataloader-main-process", "severity": "warning", "message": "m", "advice": "a",
         "evidence": [], "cost_us_per_step": 1.0, "cost_share": 0.1, "location": None, "origin": "runtime",
         "source": None}


@pytest.mark.parametrize("links", [
    [{"kind": "explained_by\x1b[31m", "code": "GP101"}],    # unknown kind, with an escape
    [{"kind": "supersedes", "code": 7}],                   # code of the wrong type
    [{"kind": "supersedes", "code": "GP102", "count": True}],
    [{"kind": "supersedes"}],                              # no code
    "not a list",
    [["kind", "supersedes"]],
])
def test_hostile_links_in_a_capture_report_are_refused_with_a_note(tmp_path: Path, links: Any) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"schema_version": "1.6", "command": "capture", "findings": [dict(_BASE, links=links)]}))
    found = capture_findings(tmp_path)
    assert found.findings == [] and len(found.notes) == 1 and "malformed" in found.notes[0]


def test_a_well_formed_reports_links_are_dropped_and_made_again(tmp_path: Path) -> None:
    good = dict(_BASE, links=[{"kind": "supersedes", "code": "GP102", "part": None, "count": 1}])
    (tmp_path / "report.json").write_text(json.dumps({"schema_version": "1.6", "command": "capture", "findings": [good]}))
    (f,) = capture_findings(tmp_path).findings
    assert f.links == ()  # made again where the report is finished, among its findings


def test_a_link_part_with_markup_or_escapes_is_drawn_inert() -> None:
    part = "operator <script>alert(1)</script>\x1b[2J *x*"
    f = Finding("GP101", "low-gpu-utilization", Severity.WARNING, f"idle parts: {part} 3 ms", "fix",
                links=(Link("explained_by", "GP203", part=part),))
    r = Report(command="analyze", findings=[f])
    md = render(r, "markdown")
    term = render(r, "terminal", color=False)
    assert "<script>" not in md and "\x1b" not in md and "\x1b[2J" not in term
    assert "(see GP203)" in md and "(see GP203)" in term
