"""The speed figures in README.md, docs/performance.md and bench/README.md are the budget's latest row
(bench/results.md, written by bench/budget.py), and that row measured the code as it is: its commit is no
older than the last change to ``gpuprof/trace/``, ``gpuprof/rules/`` or ``gpuprof/views/`` (issue 44).

A doc names the budget's run as ``bench/budget.py`` ... commit `` `SHA` `` on one line. The commit check
asks git; outside a git checkout (a source archive), or in a shallow clone that lacks the commits, it is
skipped with the reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results.md"
DOCS = ("README.md", "docs/performance.md", "bench/README.md")
MEASURED = ("gpuprof/trace", "gpuprof/rules", "gpuprof/views")  # the code whose change makes the figures stale
ROW = re.compile(r"^\| (\d{4}-\d{2}-\d{2} \d{2}:\d{2}) \| `([0-9a-f]{7,40})(\+dirty)?` \|", re.M)
NAMED = re.compile(r"bench/budget\.py[^\n]*?commit `([0-9a-f]{7,40})`")


def latest_row(text: str) -> tuple[str, str, bool]:
    """(date, commit, measured on uncommitted code) of the newest row of bench/results.md's tables."""
    rows = ROW.findall(text)
    assert rows, "bench/results.md holds no budget row (run python bench/budget.py)"
    date, sha, dirty = max(enumerate(rows), key=lambda r: (r[1][0], r[0]))[1]  # the newest; the last of a tie
    return date, sha, bool(dirty)


def test_the_docs_figures_are_the_budgets_latest_row() -> None:
    date, sha, dirty = latest_row(RESULTS.read_text(encoding="utf-8"))
    assert not dirty, f"the latest budget row ({date}) measured uncommitted code: rerun bench/budget.py on a commit"
    for doc in DOCS:
        named = NAMED.findall((REPO / doc).read_text(encoding="utf-8"))
        assert named, f"{doc} names no budget run (a line with bench/budget.py and its commit)"
        assert {n[:7] for n in named} == {sha[:7]}, f"{doc} quotes budget commits {sorted(set(named))}, the latest row is {sha}"


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=60)


def test_the_budget_measured_the_code_as_it_is() -> None:
    if shutil.which("git") is None or _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout: the age of the budget's commit cannot be read")
    _, sha, _ = latest_row(RESULTS.read_text(encoding="utf-8"))
    if _git("cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
        if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            pytest.skip(f"a shallow clone: the budget's commit {sha} is not in it")
        pytest.fail(f"bench/results.md's latest row names {sha}, which is not a commit of this repository")
    last = _git("log", "-1", "--format=%H", "--", *MEASURED).stdout.strip()
    assert last, "git log found no commit of gpuprof/trace, gpuprof/rules or gpuprof/views"
    newer = _git("merge-base", "--is-ancestor", last, sha).returncode == 0
    changed = _git("log", "--oneline", f"{sha}..HEAD", "--", *MEASURED).stdout.strip().splitlines()
    assert newer and not changed, (
        f"the budget's latest row measured {sha}, older than the last change to {', '.join(MEASURED)} "
        f"({last[:9]}; since then: {changed[:3]}): rerun python bench/budget.py and update the docs' figures")
