"""The same finding in several traces is one card in every view, labelled with the traces it applies to.

A new user's report over a run's two worker files showed six findings in the terminal and twelve unlabelled
cards on the ``--html`` page. The terminal, markdown and the page now share one grouping
(:mod:`gpuprof.render.groups`); these tests read each view back and compare it with a grouping computed here
from the report's findings alone.
"""

from __future__ import annotations

import re

from gpuprof.analysis import analyze
from gpuprof.htmlpage.page import report_page_data
from gpuprof.render import render
from gpuprof.render.format import fmt_location
from gpuprof_testing.realtraces import v100_samples


def _independent_groups(report) -> dict[tuple[str, str | None], set[str]]:
    """(code, location) -> the trace paths that finding was reported in, from the report's raw findings."""
    out: dict[tuple[str, str | None], set[str]] = {}
    for f in report.findings:
        out.setdefault((f.code, fmt_location(f)), set()).add(f.source or "")
    return out


def _two_trace_report():
    files = [p for p in v100_samples() if "num_workers_0" in str(p)]
    return analyze([str(p) for p in files])


def test_page_shows_each_distinct_finding_once_with_its_traces() -> None:
    report = _two_trace_report()
    assert len(report.traces) == 2
    groups = _independent_groups(report)
    assert len(groups) < len(report.findings)  # the real pair has the same findings in both files
    data = report_page_data(report)
    cards = data["findings"]
    assert data["findings_total"] == len(report.findings)
    assert len(cards) == len(groups)
    labels = {t.path: f"#{i}" for i, t in enumerate(report.traces, 1)}
    for card in cards:
        loc = card["location"]
        key_loc = None
        if loc:
            key_loc = f"{loc['file']}:{loc['line']}" if loc.get("line") else loc["file"]
        paths = next(v for (code, where), v in groups.items() if code == card["code"]
                     and (where == key_loc or (where or "").startswith(key_loc or "\0")))
        # every trace it was found in is named, and no other
        named = set(re.findall(r"#\d+", card["applies_to"]))
        assert named == {labels[p] for p in paths}, (card["code"], card["applies_to"])
        assert card["group_size"] == len(paths)
        if len(paths) > 1:
            assert "the most expensive of" in card["display_cost"]


def test_terminal_markdown_and_page_agree_on_the_groups() -> None:
    report = _two_trace_report()
    n_groups = len(_independent_groups(report))
    term = render(report, "terminal", color=False)
    md = render(report, "markdown")
    assert f"{n_groups} distinct" in term
    assert f"{n_groups} distinct" in md
    assert len(re.findall(r"^### \d+\. ", md, flags=re.M)) == n_groups
    assert md.count("- **Traces:** ") == n_groups
    assert len(report_page_data(report)["findings"]) == n_groups


def test_one_trace_keeps_one_card_per_finding() -> None:
    files = v100_samples()[:1]
    report = analyze([str(p) for p in files])
    data = report_page_data(report)
    assert len(data["findings"]) == len(report.findings)
    assert all("applies_to" not in c for c in data["findings"])
    md = render(report, "markdown")
    assert md.count("- **Traces:** ") == 0 and "distinct" not in md
