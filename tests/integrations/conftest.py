"""Shared pieces of the framework-integration tests: a dataset whose loading shows in the step time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _small_threads() -> Any:
    torch = pytest.importorskip("torch")
    prev = torch.get_num_threads()
    torch.set_num_threads(1)  # 2-core CI machine: keep runs predictable
    yield
    torch.set_num_threads(prev)


SAMPLE_SLEEP_S = 0.001  # per sample: 8 ms per batch of 8, well above the 2% share GP601 needs


def slow_sample(i: int) -> None:
    """The planted loading cost of one sample (sleeping: stable on a loaded machine, no core taken)."""
    time.sleep(SAMPLE_SLEEP_S)


def report_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def codes(report: dict[str, Any]) -> set[str]:
    return {f["code"] for f in report["findings"]}


def finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["code"] == code]
    assert found, (code, codes(report))
    return found[0]


def line_of(path: Path, text: str) -> int:
    """1-based line of the first line of ``path`` holding ``text`` (a marker comment)."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")
