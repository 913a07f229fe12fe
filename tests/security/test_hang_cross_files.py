"""The cross-rank hang verdict reads every rank's ``hang.json`` entry from a run directory that may be a shared
logdir, and writes ``report.cross_rank.json``/``.md`` there: a hang.json that is truncated, a symbolic link or a
FIFO, an entry that is not one, planted links at the reports, and hostile names in an entry. Each rank it cannot
read is named as missing with the reason; nothing is followed, nothing blocks, no exception."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gpuprof.capture.job.hangcross import hang_verdict, write_cross_hang
from gpuprof.capturerun import capture_findings

from ..run.test_hang_cross import entry, plant
from .conftest import PWNED


def _missing(run_dir: Path, world: int = 2) -> dict[int, str]:
    got = hang_verdict(run_dir, world)
    assert got is not None
    return {m["rank"]: m["why"] for m in got[0].data["missing"]}


def test_a_truncated_hang_json_names_every_rank_missing(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    raw = (tmp_path / "hang.json").read_bytes()
    (tmp_path / "hang.json").write_bytes(raw[: len(raw) // 2])
    missing = _missing(tmp_path)
    assert sorted(missing) == [0, 1] and all("not valid JSON" in why for why in missing.values())
    path = write_cross_hang(tmp_path, 2)
    assert path is not None
    msg = json.loads(path.read_text())["findings"][0]["message"]
    assert "ranks 0, 1 are missing: hang.json is not valid JSON" in msg and "never reached" not in msg


def test_a_hang_json_that_is_a_link_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, entry(0, 15, "all_reduce"), entry(1, 14, None))
    run = tmp_path / "run"
    run.mkdir()
    (run / "hang.json").symlink_to(elsewhere / "hang.json")
    assert set(_missing(run).values()) == {"hang.json is a symbolic link (not followed)"}
    (run / "hang.json").unlink()
    os.mkfifo(run / "hang.json")  # opened, it would block: it is not opened
    assert set(_missing(run).values()) == {"hang.json is not a regular file"}


@pytest.mark.parametrize("bad", [{"waiting_at": "train.py:14"}, {"threads": None}, {"step": "20"}, {"step": -1}])
def test_an_entry_that_is_not_one_names_its_rank_missing(tmp_path: Path, bad: dict[str, object]) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), {**entry(1, 14, None), **bad}, {**entry(1, 14, None), "rank": True},
          "not an entry")
    got = hang_verdict(tmp_path, 2)
    assert got is not None
    section, found = got
    assert [m["rank"] for m in section.data["missing"]] == [1] and "hang.json entry" in section.data["missing"][0]["why"]
    assert section.data["culprit"] is None and [r["rank"] for r in section.data["ranks"]] == [0]
    assert "rank 1 is missing" in found.message


def test_planted_links_at_the_cross_rank_reports_are_replaced_not_written_through(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    target = tmp_path / "victim.txt"
    target.write_text("keep")
    for name in ("report.cross_rank.json", "report.cross_rank.md"):
        (tmp_path / name).symlink_to(target)
    write_cross_hang(tmp_path, 2)
    assert target.read_text() == "keep"
    assert not (tmp_path / "report.cross_rank.json").is_symlink()
    assert json.loads((tmp_path / "report.cross_rank.json").read_text())["findings"][0]["code"] == "GP651"


def test_analyze_run_does_not_follow_a_linked_cross_rank_report(tmp_path: Path) -> None:
    src = tmp_path / "src"
    plant(src, entry(0, 15, "all_reduce"), entry(1, 14, None))
    write_cross_hang(src, 2)
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.cross_rank.json").symlink_to(src / "report.cross_rank.json")
    assert capture_findings(run).findings == []
    (run / "report.cross_rank.json").unlink()
    (run / "report.cross_rank.json").write_text('{"schema_version": "1.7", "command": "analyze", "findings": [')
    got = capture_findings(run)  # truncated: one note naming it
    assert got.findings == [] and len(got.notes) == 1 and "report.cross_rank.json" in got.notes[0]


def test_hostile_names_in_an_entry_keep_the_markdown_table(tmp_path: Path) -> None:
    name = f"/x/a\n| forged | row |\n<img src=x onerror=\"{PWNED}\">.py"
    e0, e1 = entry(0, 15, "all_reduce"), entry(1, 14, None)
    e1["waiting_at"] = {"file": name, "line": 14, "function": "<module>"}
    plant(tmp_path, e0, e1)
    write_cross_hang(tmp_path, 2)
    md = (tmp_path / "report.cross_rank.md").read_text()
    block = md[md.index("## The job hung"):md.index("## Every rank's steps")]
    rows = [ln for ln in block.splitlines() if ln.startswith("| ")]
    assert len(rows) == 3 and all(ln.count(" | ") == 4 for ln in rows[1:]), rows  # header, then one row a rank
    outside_code = re.sub(r"`[^`\n]*`", "", md)  # markup in a code span is text
    assert "<img" not in outside_code and "\n| forged" not in md


def test_a_deeply_nested_hang_json_or_report_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    """json's RecursionError on a planted, deeply nested file: every reader of the hang's files (the rank's own
    merge into hang.json, the culprit, the cross-rank verdict, the hang into report.json) gives a reason or
    replaces the file; nothing raises it into the watchdog's thread."""
    from gpuprof.capture.job.hang import HangRecord, hang_finding, hang_into_report, write_hang_files
    from gpuprof.capture.job.hangfile import read_entries
    from gpuprof.findings import SourceLocation

    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "hang.json").write_text(deep)
    assert read_entries(tmp_path)[1] is not None and "not valid JSON" in str(read_entries(tmp_path)[1])
    assert set(_missing(tmp_path).values()) == {read_entries(tmp_path)[1]}
    rec = HangRecord("rank0", 0, 7, "host", 20, 4.0, 3.0, 0.0, SourceLocation("/x/t.py", 14, "f"), [])
    write_hang_files(tmp_path, rec)  # the damaged file is replaced by this rank's entry
    assert [r["rank"] for r in read_entries(tmp_path)[0]] == [0]
    (tmp_path / "report.json").write_text(deep)
    with pytest.raises(ValueError, match="report.json is not valid JSON"):  # the watchdog says it, once
        hang_into_report(tmp_path / "report.json", hang_finding(rec, str(tmp_path / "hang.md")))
    assert (tmp_path / "report.json").read_text() == deep  # not overwritten: nothing of the user's lost
