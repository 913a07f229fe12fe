"""The job's hang across ranks (issue 41 items 1 and 7): one verdict from every rank's hang.json entry, in the
cross-rank report, ``gpuprof analyze RUN`` and the end card; a rank whose entry is missing is named as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof.capture.job.hangcross import hang_verdict, write_cross_hang
from gpuprof.capturerun import capture_findings

from .conftest import SCRIPTS, gpuprof_run, run_env

TORCH_DIST = "/p/torch/distributed/distributed_c10d.py"


def entry(rank: int, line: int, collective: str | None, step: int = 20, steps_us: float = 4000.0,
          resumed: int | None = None) -> dict[str, Any]:
    """One rank's hang.json entry as the watchdog writes it (capture.job.hang.HangRecord.to_dict)."""
    frames = [{"file": "/x/train.py", "line": line, "function": "<module>"}]
    if collective:
        frames.append({"file": TORCH_DIST, "line": 9, "function": collective})
    return {"worker": f"rank{rank}", "rank": rank, "pid": 100 + rank, "host": "h", "step": step, "stalled_s": 3.1,
            "timeout_s": 3.0, "detected_at": 0.0, "resumed_at_step": resumed, "resumed_after_s": None,
            "waiting_at": {"file": "/x/train.py", "line": line, "function": "<module>"},
            "threads": [{"name": "MainThread", "ident": 1, "daemon": False, "driver": True, "frames": frames}],
            "series": {"bucket": 1, "first_step": list(range(step)), "step_time_us": [steps_us] * step,
                       "data_wait_us": None, "host_rss_mib": [300.0] * step, "cuda_allocated_mib": None}}


def plant(run_dir: Path, *ranks: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "hang.json").write_text(json.dumps({"hang_schema_version": "1.0", "ranks": list(ranks)}))


def test_the_verdict_names_the_rank_that_never_reached_the_collective_and_every_ranks_line(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None, step=19))
    got = hang_verdict(tmp_path, 2)
    assert got is not None
    section, found = got
    said = "rank 1 never reached the all_reduce that rank 0 waits in at train.py:15; rank 1 is at train.py:14"
    assert section.data["culprit"] == said and said in found.message
    assert section.data["last_common_step"] == 19 and section.data["missing"] == []
    assert "rank 0 finished 20, rank 1 finished 19" in found.message
    assert [(r["rank"], r["collective"]) for r in section.data["ranks"]] == [(0, "all_reduce"), (1, None)]
    assert all(len(r["series"]["step_time_us"]) == r["step"] for r in section.data["ranks"])  # every rank's steps
    assert found.code == "GP651" and found.location is not None and found.location.line == 14  # the culprit's line
    assert found.evidence[0].extra["culprit_ranks"] == [1]


def test_no_verdict_without_a_stall_going_on(tmp_path: Path) -> None:
    assert hang_verdict(tmp_path, 2) is None  # no hang.json
    plant(tmp_path, entry(0, 15, "all_reduce", resumed=25), entry(1, 14, None, resumed=25))
    assert hang_verdict(tmp_path, 2) is None  # both came back


def test_a_rank_without_an_entry_is_named_missing_never_placed(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"))
    got = hang_verdict(tmp_path, 2)
    assert got is not None
    section, found = got
    assert section.data["culprit"] is None  # rank 1 may be anywhere: no culprit guessed
    assert [m["rank"] for m in section.data["missing"]] == [1]
    assert "wrote no entry in hang.json" in section.data["missing"][0]["why"]
    assert "rank 0 waits in the all_reduce at train.py:15" in found.message
    assert "rank 1 is missing" in found.message and "is not known" in found.message
    # the ranks present still name a culprit among themselves; the missing one is named beside it
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    section, found = hang_verdict(tmp_path, 3) or pytest.fail("no verdict")
    assert section.data["culprit"] is not None and "rank 2 is missing" in found.message


def test_the_cross_rank_report_gets_the_verdict_and_keeps_what_it_held(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    window = {"schema_version": "1.6", "command": "analyze", "inputs": [], "traces": [],
              "sections": [{"kind": "memory-ranks", "ranks": []}], "findings": [{"code": "GP707", "name": "straggler",
              "severity": "warning", "message": "rank 1 is last", "evidence": []}], "notes": ["the window's"]}
    (tmp_path / "report.cross_rank.json").write_text(json.dumps(window))
    (tmp_path / "report.cross_rank.md").write_text("# gpuprof analyze report\n\nthe window's text\n")
    for _ in range(2):  # the second rank's write replaces the first's verdict, never doubles it
        write_cross_hang(tmp_path, 2)
    doc = json.loads((tmp_path / "report.cross_rank.json").read_text())
    assert [s["kind"] for s in doc["sections"]] == ["hang", "memory-ranks"]
    assert [f["code"] for f in doc["findings"]] == ["GP651", "GP707"] and doc["notes"] == ["the window's"]
    md = (tmp_path / "report.cross_rank.md").read_text()
    assert md.count("## The job hung (across ranks)") == 1 and "the window's text" in md
    assert "rank 1 never reached the all\\_reduce" in md or "rank 1 never reached the all_reduce" in md
    # gpuprof analyze RUN's reader takes it first among the run's runtime findings
    got = capture_findings(tmp_path)
    assert [f.code for f in got.findings] == ["GP651"] and "never reached the all_reduce" in got.findings[0].message
    assert got.findings[0].source == str(tmp_path / "report.cross_rank.json")


def test_the_end_of_run_gather_keeps_the_hang(tmp_path: Path) -> None:
    from gpuprof.capture.end.gather import _write

    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    _write(tmp_path, {}, 2, 1.0)  # rank 0 alone at the end (rank 1 hung): its rewrite keeps the verdict
    doc = json.loads((tmp_path / "report.cross_rank.json").read_text())
    assert [s["kind"] for s in doc["sections"]] == ["hang"] and doc["findings"][0]["code"] == "GP651"
    assert any("sent no summary" in n for n in doc["notes"])


def test_the_end_card_puts_the_hang_across_ranks_first_once(tmp_path: Path) -> None:
    from gpuprof.findings import Finding, Severity
    from gpuprof.report import Report
    from gpuprof.run.card import RunDir, top_findings

    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    _, hang = hang_verdict(tmp_path, 2) or pytest.fail("no verdict")
    own = Finding(code="GP651", name="job-hang", severity=Severity.ERROR, message="rank 0 waits at train.py:15", advice="")
    slow = Finding(code="GP901", name="slow-steps", severity=Severity.WARNING, message="slow steps", advice="",
                   cost_us_per_step=1000.0)
    rd = RunDir(tmp_path, lead=Report(command="capture"), ranks={0: Report(command="capture", findings=[own, slow])},
                cross=Report(command="analyze", findings=[hang]))
    top, _ = top_findings(rd)
    assert [(f.code, where) for f, where in top] == [("GP651", "across ranks"), ("GP901", "rank 0")]


@pytest.mark.slow
def test_gpuprof_run_names_the_rank_that_never_reached_the_all_reduce(tmp_path: Path) -> None:
    """A 2-rank gloo job under torchrun: rank 1 sleeps where rank 0 waits in the all_reduce, until the process
    group's timeout fails rank 0. The verdict is in report.cross_rank.json, the end card and analyze RUN."""
    pytest.importorskip("torch")
    script = SCRIPTS / "hang_loop.py"
    lines = script.read_text().splitlines()
    at0 = next(i for i, s in enumerate(lines, 1) if "# RANK0-WAITS" in s)
    at1 = next(i for i, s in enumerate(lines, 1) if "# RANK1-IS-HERE" in s)
    env = run_env(GPUPROF_GATHER_WAIT_S="2")
    proc = gpuprof_run("--logdir", "logs", "--run-name", "hang", "--hang-timeout", "3", "--", sys.executable, "-m",
                       "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script), "20", "25",
                       cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]  # rank 0's timeout error: torchrun's exit code, unchanged
    said = (f"rank 1 never reached the all_reduce that rank 0 waits in at {script.name}:{at0}; "
            f"rank 1 is at {script.name}:{at1}")
    run_dir = tmp_path / "logs" / "hang"
    doc = json.loads((run_dir / "report.cross_rank.json").read_text())
    hang = next(s for s in doc["sections"] if s["kind"] == "hang")
    assert hang["culprit"] == said and hang["missing"] == [] and hang["world_size"] == 2
    assert {r["rank"]: r["waiting_at"]["line"] for r in hang["ranks"]} == {0: at0, 1: at1}
    for r in hang["ranks"]:  # each rank's series up to the hang, one point a finished step
        assert len(r["series"]["step_time_us"]) == r["step"] == hang["last_common_step"] > 0
    assert doc["findings"][0]["code"] == "GP651" and said in doc["findings"][0]["message"]
    card = " ".join(proc.stderr[proc.stderr.index("end of run:"):].split())
    first = card.index("GP651")
    assert said in card and card.count("GP651") == 1 and "(across ranks)" in card[first:]
    shown = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(run_dir), "--fail-on", "never"],
                           env=env, capture_output=True, text=True, timeout=240)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert said in " ".join(shown.stdout.replace("│", " ").split())
    # a damaged cross-rank report afterwards: one note, the ranks' own GP651 still shown, no traceback
    raw = (run_dir / "report.cross_rank.json").read_bytes()
    (run_dir / "report.cross_rank.json").write_bytes(raw[: len(raw) // 2])
    shown = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(run_dir), "--fail-on", "never"],
                           env=env, capture_output=True, text=True, timeout=240)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr + shown.stdout, shown.stderr[-3000:]
    assert "report.cross_rank.json" in shown.stdout and "rank 1 waits at" in " ".join(shown.stdout.split())
    assert os.path.exists(run_dir / "hang.md")


def test_a_verdict_is_taken_out_when_every_rank_resumed(tmp_path: Path) -> None:
    plant(tmp_path, entry(0, 15, "all_reduce"), entry(1, 14, None))
    write_cross_hang(tmp_path, 2)
    plant(tmp_path, entry(0, 15, "all_reduce", resumed=21), entry(1, 14, None, resumed=21))
    assert write_cross_hang(tmp_path, 2) is None
    doc = json.loads((tmp_path / "report.cross_rank.json").read_text())
    assert doc["sections"] == [] and doc["findings"] == []
    assert "The job hung" not in (tmp_path / "report.cross_rank.md").read_text()
