"""The end-of-run card of ``gpuprof run`` (gpuprof.run.card), from run directories written here (fast: no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.capture.run import CaptureSection
from gpuprof.findings import Finding, Severity
from gpuprof.render.jsonout import render_json
from gpuprof.report import Report
from gpuprof.run.card import end_card, read_run_dir, top_findings
from gpuprof.run.launch import logdir_state
from gpuprof.run.runlog import RunLog


def _finding(code: str, cost_us: float | None, msg: str = "") -> Finding:
    return Finding(code=code, name=code.lower(), severity=Severity.WARNING, message=msg or f"{code} happened",
                   advice=f"fix {code}", cost_us_per_step=cost_us)


def _report(path: Path, findings: list[Finding], steps: int = 40, rank: int | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    sec = CaptureSection(run_dir=str(path), out_dir=str(path), rank=rank, steps=steps, step_time_median_ms=12.5)
    rep = Report(command="capture", sections=[sec], findings=findings)
    (path / "report.json").write_text(render_json(rep))
    (path / "report.md").write_text("# report\n")


def test_the_card_names_the_costliest_findings_across_ranks_and_the_files(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    before = logdir_state(str(logdir))
    run = logdir / "job"
    _report(run / "rank0", [_finding("GP601", 1000.0)], rank=0)
    _report(run / "rank1", [_finding("GP601", 3000.0, "GP601 on rank 1"), _finding("GP301", 50.0)], rank=1)
    cross = Report(command="analyze", findings=[_finding("GP701", 20000.0, "rank 1 is last in 95% of steps")])
    (run / "report.cross_rank.json").write_text(render_json(cross))
    (run / "report.cross_rank.md").write_text("# cross\n")
    card = end_card(str(logdir), before, logdir_state(str(logdir)))
    assert card is not None
    lines = card.splitlines()
    assert lines[0].startswith("gpuprof: ─── end of run:") and "job" in lines[0]
    assert "40 steps, median 12.50 ms/step (rank 0 of 2 ranks reporting)" in card
    order = [code for code in ("GP701", "GP601", "GP301") if code in card]
    assert order == ["GP701", "GP601", "GP301"]
    assert card.index("GP701") < card.index("GP601") < card.index("GP301")  # costliest first
    assert "GP601 on rank 1" in card and "(rank 1; 2 ranks)" in card  # the costliest rank's, and how many had it
    assert "(across ranks)" in card
    assert f"cross-rank   {run / 'report.cross_rank.md'}" in card
    assert f"report       {run / 'rank0' / 'report.md'}" in card
    assert (run / "report.html").is_file() and f"HTML         {run / 'report.html'}" in card
    html = (run / "report.html").read_text()
    assert "GP701" in html  # the page holds the cross-rank verdict beside rank 0's findings


def test_the_card_keeps_to_the_top_findings_and_says_how_many(tmp_path: Path) -> None:
    _report(tmp_path / "logs" / "one", [_finding(f"GP{100 + i}", float(i)) for i in range(8)])
    rd = read_run_dir(tmp_path / "logs" / "one")
    top, total = top_findings(rd)
    assert total == 8 and [f.code for f, _ in top] == ["GP107", "GP106", "GP105", "GP104", "GP103"]
    card = end_card(str(tmp_path / "logs"), {}, logdir_state(str(tmp_path / "logs")), html=False)
    assert card is not None and "top 5 of 8 findings" in card
    assert "HTML" not in card and not (tmp_path / "logs" / "one" / "report.html").exists()


def test_an_unreadable_report_is_one_line_naming_it(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "bad"
    run.mkdir(parents=True)
    (run / "report.json").write_text("{not json")
    card = end_card(str(tmp_path / "logs"), {}, logdir_state(str(tmp_path / "logs")))
    assert card is not None and "report.json" in card and "not a valid JSON report" in card
    assert "Traceback" not in card


def test_nothing_written_no_card(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    state = logdir_state(str(tmp_path / "logs"))
    assert end_card(str(tmp_path / "logs"), state, state) is None


def test_the_run_log_takes_the_messages_and_shows_only_alarms(tmp_path: Path, capsys: object) -> None:
    import pytest

    assert isinstance(capsys, pytest.CaptureFixture)
    log = RunLog(lambda: tmp_path)
    print("gpuprof: 12 steps, median 3 ms/step", file=log, flush=True)
    print("gpuprof: no step finished for 3.0 s after step 4 (hang timeout 2 s)", file=log, flush=True)
    print("gpuprof: rank 1 resumed: a step finished 4.0 s after the last one (now at step 5).", file=log, flush=True)
    log.close()
    text = (tmp_path / "gpuprof.log").read_text()
    assert "12 steps" in text and "no step finished" in text
    err = capsys.readouterr().err
    assert "12 steps" not in err
    assert "no step finished" in err and "rank 1 resumed" in err


_CARD_IMPORTS = """\
import sys
from gpuprof.cli.run import _print_card, _say_unsupported
from gpuprof.run.launch import logdir_state
_say_unsupported({"watch": True, "trigger": True})  # run's defaults, as the launcher checks them
_print_card(sys.argv[1], {}, logdir_state(sys.argv[1]), html=True)
heavy = sorted(m for m in ("numpy", "rich.console", "rich.text", "torch", "gpuprof.capture.config") if m in sys.modules)
print("loaded:", ",".join(heavy) or "none")
"""


@pytest.mark.slow  # an interpreter of its own (what the parent process has loaded must be seen from a fresh one)
def test_the_card_loads_neither_numpy_nor_the_terminal_renderer(tmp_path: Path) -> None:
    """The card is ``gpuprof run``'s own work after the job (issue 41, its cost): reading the reports back and
    writing the page needs neither numpy (~0.08 s of CPU to import) nor rich's console."""
    import os
    import subprocess
    import sys

    run = tmp_path / "logs" / "job"
    _report(run, [_finding("GP601", 1000.0)])
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", _CARD_IMPORTS, str(tmp_path / "logs")], capture_output=True,
                         text=True, env=env, timeout=120, check=True)
    assert "GP601" in out.stderr and (run / "report.html").is_file()  # the card was drawn, the page written
    assert out.stdout.strip() == "loaded: none", out.stdout
