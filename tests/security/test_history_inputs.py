"""Hostile log directories for ``gpuprof history``: no symlink followed, no FIFO opened, names made visible,
the output never replaces a report it read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli

GOOD = {"schema_version": "1.2", "inputs": [], "sections": [], "notes": [], "findings": [],
        "traces": [{"path": "t", "num_steps": 5, "step_time_us": 100.0, "step_time_mean_us": 100.0, "gpu_busy_us": 50.0,
                    "gpu_utilization": 0.5, "breakdown_us": {}, "idle_breakdown_us": {}}]}


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _run_dir(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "report.json").write_text(json.dumps(GOOD))
    return d


def test_symlinked_reports_and_directories_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _run_dir(outside, "secret")
    logs = tmp_path / "logs"
    _run_dir(logs, "real")
    (logs / "linkdir").symlink_to(outside / "secret")
    (logs / "linkfile").mkdir()
    (logs / "linkfile" / "report.json").symlink_to(outside / "secret" / "report.json")
    res = run("history", str(logs), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["name"] for r in doc["runs"]] == ["real"]
    assert any("linkfile" in n and "not a regular file" in n for n in doc["notes"])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_report_is_skipped_without_blocking(tmp_path: Path) -> None:
    _run_dir(tmp_path, "real")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "report.json")  # opening it for reading would hang
    res = run("history", str(tmp_path), "--format", "json")
    assert res.exit_code == 0 and [r["name"] for r in json.loads(res.stdout)["runs"]] == ["real"]


def test_control_characters_in_run_names_are_made_visible(tmp_path: Path) -> None:
    _run_dir(tmp_path, "run\x1b[2Jevil")
    res = run("history", str(tmp_path))
    assert res.exit_code == 0 and "\x1b" not in res.output and "evil" in res.output


def test_output_never_replaces_a_report_it_read(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, "a")
    res = run("history", str(tmp_path), "--format", "json", "-o", str(d / "report.json"))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert json.loads((d / "report.json").read_text()) == GOOD


def test_a_file_instead_of_a_directory_is_one_line(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, "a")
    res = run("history", str(d / "report.json"))
    assert res.exit_code == 2 and "not a directory" in res.output and len(res.output.strip().splitlines()) == 1


def test_html_page_is_inert_whatever_the_run_names(tmp_path: Path) -> None:
    evil = '<script>alert(1)<script>"><img src=x onerror=alert(2)>'  # no "/": a directory name
    for i in range(3):
        d = tmp_path / f"{evil}{i}"
        d.mkdir()
        (d / "report.json").write_text(json.dumps(GOOD))
    page = tmp_path / "h.html"
    res = run("history", str(tmp_path), "--html", str(page), "--format", "json")
    assert res.exit_code == 0, res.output
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;script&gt;&quot;&gt;&lt;img" in text
    assert "script-src 'none'" in text and "default-src 'none'" in text
    # step time and GPU utilisation of three runs; these 1.2 reports give no data-loading figure (an empty
    # breakdown is not a measured 0 since RunFigures, issue 45.2) and no memory
    assert text.count("<circle") == 3 * 2
