"""docs/report-schema.md lists exactly the keys that the JSON report holds (so the doc cannot drift)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuprof.render import render
from gpuprof.report import SCHEMA_VERSION

from .conftest import DemoSection, make_report

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"
_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|")


def documented_paths() -> tuple[set[str], set[str]]:
    """(closed paths, open-map prefixes) from the first column of the doc's field tables."""
    closed: set[str] = set()
    open_maps: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        path = m.group(1)
        if path.endswith(".*"):
            open_maps.add(path[:-2])
        else:
            closed.add(path)
    return closed, open_maps


def json_paths(obj: Any, prefix: str = "") -> set[str]:
    """Every key path in ``obj``: ``a.b`` for objects, ``a[].b`` inside lists."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            out |= json_paths(v, p)
    elif isinstance(obj, list):
        for v in obj:
            out |= json_paths(v, prefix + "[]")
    return out


def _under_open_map(path: str, open_maps: set[str]) -> bool:
    return any(path.startswith(m + ".") or path.startswith(m + "[") for m in open_maps)


def _check(doc_out: dict[str, Any], require_all: bool) -> None:
    closed, open_maps = documented_paths()
    found = json_paths(doc_out)
    undocumented = {p for p in found if p not in closed and not _under_open_map(p, open_maps)}
    assert not undocumented, f"keys in the JSON report missing from {DOC.name}: {sorted(undocumented)}"
    if require_all:
        missing = closed - found
        assert not missing, f"keys documented in {DOC.name} but absent from the JSON report: {sorted(missing)}"


def test_doc_exists_and_names_the_version():
    text = DOC.read_text(encoding="utf-8")
    assert f"schema version {SCHEMA_VERSION}" in text.lower()
    closed, open_maps = documented_paths()
    assert len(closed) > 50 and "sections[]" in open_maps


def test_representative_report_matches_doc_both_ways():
    report = make_report()
    report.sections = [DemoSection("render-test-demo", [{"a": 1}])]
    out = json.loads(render(report, "json"))
    assert out["schema_version"] == SCHEMA_VERSION
    # every optional object is filled in the fixture, so every documented key must show up
    _check(out, require_all=True)


def test_doc_paths_are_unique():
    seen: list[str] = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            seen.append(m.group(1))
    assert len(seen) == len(set(seen)), [p for p in seen if seen.count(p) > 1]


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_real_analysis_output_is_documented(v100_samples):
    # the analysis may leave lists empty, but every key it writes must be in the doc
    from gpuprof.analysis import analyze

    report = analyze(v100_samples[0].parent)
    out = json.loads(render(report, "json"))
    _check(out, require_all=False)
    assert out["traces"] and out["findings"]
