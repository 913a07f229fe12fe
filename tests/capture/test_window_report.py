"""The report is written when the recorded window closes (issue 9 item 5), not only at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning  # noqa: E402
from gpuprof.capture.end import analyse, background, publish  # noqa: E402
from gpuprof.capture.end.text import short_report  # noqa: E402

from .conftest import quick_schedule, report_json, run_dir, tiny_model, train_step  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import glob, os, sys, time
    import torch
    import gpuprof
    from gpuprof.capture import Schedule

    torch.set_num_threads(1)
    logdir = sys.argv[1]
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @gpuprof.profile_step(logdir, schedule=Schedule(wait=1, warmup=1, active=3), tensorboard=False)
    def train_step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(40):
        train_step(torch.randn(8, 16), torch.randint(0, 4, (8,)))
    # the loop is over, the capture is not (it finishes at exit): the report must be there already
    deadline = time.monotonic() + 120
    while not glob.glob(os.path.join(logdir, "*", "report.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    print("ALIVE", train_step.profiler is not None, "REPORT", bool(glob.glob(os.path.join(logdir, "*", "report.json"))))
""")


@pytest.mark.slow
def test_decorated_cpu_loop_has_report_json_before_exit(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "logs")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ALIVE True REPORT True" in out.stdout, (out.stdout, out.stderr[-3000:])
    # the summary came at the window's end, and the exit-time report covers the whole run
    assert "gpuprof: 5 steps" in out.stderr and "gpuprof: 40 steps" in out.stderr
    assert report_json(run_dir(tmp_path / "logs"))["sections"][0]["steps"] == 40


@pytest.mark.parametrize("in_child", [True, False])
def test_window_report_written_in_the_background_and_reused_at_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_child: bool
) -> None:
    from gpuprof.capture.end import worker

    calls: list[str] = []
    real = analyse._load

    def counting(path: Any) -> Any:
        calls.append(__import__("threading").current_thread().name)
        return real(path)

    children: list[bool] = []
    real_child = worker.analyse_in_child

    def child(*a: Any) -> Any:
        res = real_child(*a)
        children.append(res is not None)
        return res

    monkeypatch.setattr(analyse, "_load", counting)
    monkeypatch.setattr(worker, "analyse_in_child", child)
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "1" if in_child else "0")
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # GP656 (host contention) left out: on a loaded machine it joins the findings at the end (then printed again)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), tensorboard=False, ignore=["GP656"]) as prof:
        for i in range(12):
            train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
            prof.step()
            if i == 4:  # the window (steps 2-4) closed at this step(): the report thread runs
                assert prof.report_started
        assert prof.wait_for_report(120)
        assert (run_dir(tmp_path) / "report.json").exists()  # before stop()
        early = report_json(run_dir(tmp_path))
        assert early["sections"][0]["steps"] == 5
        assert any("recorded window closed at step 5" in n for n in early["notes"])
        assert prof.window_report is not None
    # the one trace loaded once (analysis, checks, memory series all read it), off the training thread:
    # in the report's child process (so never in this one), or on the report thread; stop() reused the results
    assert children == ([True] if in_child else [])
    assert calls == ([] if in_child else ["gpuprof-report"])
    final = report_json(run_dir(tmp_path))
    assert final["sections"][0]["steps"] == 12  # the final report: the whole run
    assert not any("recorded window closed" in n for n in final["notes"])
    assert final["traces"] == early["traces"] and final["traces"][0]["num_steps"] == 3  # the child's analysis
    err = capsys.readouterr().err
    assert "gpuprof: 5 steps" in err and "recorded window closed at step 5" in err
    assert "gpuprof: 12 steps" in err and "findings as printed at step 5" in err


def test_window_report_failure_is_one_warning_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*a: Any, **k: Any) -> Any:
        raise OSError("injected: disk full")

    monkeypatch.setattr(publish, "_write_reports", broken)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), tensorboard=False, print_report=False) as prof:
            for i in range(10):
                train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
                prof.step()
                done += 1
                if i == 4:
                    assert prof.wait_for_report(120)
                    time.sleep(0)
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert done == 10
    assert [m for m in ours if "report writer" in m] == [
        "gpuprof: report writer failed (OSError: injected: disk full); no report.json/report.md. Training continues."
    ]
    # said on the training thread (at the step after the thread finished), pointing at the user's line
    assert [w.filename for w in caught if "report writer" in str(w.message)] == [__file__]
    assert prof.report is not None and "report writer" in prof.report.sections[0].failures


def test_steps_never_marked_warns_once(tmp_path: Path) -> None:
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 16),
                                                                        torch.randint(0, 4, (40,))), batch_size=4)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), tensorboard=False, print_report=False) as prof:
            for _ in range(2):
                for x, y in loader:
                    train_step(model, opt, x, y)  # prof.step() forgotten
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert len([m for m in ours if "no step was marked" in m]) == 1, ours
    assert "saw 20 batches" in ours[0] and "prof.step()" in ours[0]
    assert prof.report is not None and any("no step was marked" in n for n in prof.report.notes)


def test_summary_lists_every_finding_whole_with_its_fix() -> None:
    from types import SimpleNamespace

    from gpuprof.findings import Finding, Severity
    from gpuprof.report import Report

    long = "x" * 300 + " end-of-message"
    findings = [Finding(code=f"GP{100 + i}", name="n", severity=Severity.WARNING, message=f"problem {i} {long}",
                        advice=f"do thing {i} " + "y" * 200 + " end-of-fix") for i in range(8)]
    report = Report(command="capture", findings=findings)
    text = short_report(report, SimpleNamespace(steps=3, report_md=None))
    for i in range(8):
        assert f"GP{100 + i} problem {i} {long}" in text
        assert f"Fix: do thing {i} " + "y" * 200 + " end-of-fix" in text
    assert "more in the report" not in text


@pytest.mark.parametrize("repeat, early", [(1, True), (0, False)])
def test_torch_schedule_callable_window_report_only_when_no_cycle_follows(
    tmp_path: Path, repeat: int, early: bool
) -> None:
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=repeat)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, schedule=sched, tensorboard=False, print_report=False) as prof:
        for _ in range(6):  # one cycle is steps 0-3; with repeat=0 the next one records from step 5
            train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
            prof.step()
        assert prof.report_started is early
    assert prof.report is not None and report_json(run_dir(tmp_path))["sections"][0]["steps"] == 6


def test_stuck_window_report_does_not_hold_the_end_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report thread that never returns (a blocked stderr) costs stop() at most REPORT_WAIT_S, said once."""
    import threading

    release = threading.Event()
    unblocked: list[bool] = []

    real = publish._write_reports

    def blocked(*a: Any, **k: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():  # only the window report's thread
            release.wait(30)  # the test lets it go in the end, so no thread outlives the test for long
            unblocked.append(True)
        return real(*a, **k)

    monkeypatch.setattr(publish, "_write_reports", blocked)
    monkeypatch.setattr(background, "REPORT_WAIT_S", 0.5)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gpuprof.profile(tmp_path, schedule=quick_schedule(), tensorboard=False, print_report=False) as prof:
                for _ in range(10):
                    train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
                    prof.step()
            held_at_exit = not unblocked  # stop() returned while the report thread was still blocked
    finally:
        release.set()
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert len([m for m in ours if "still being written after 0.5 s" in m]) == 1, ours
    assert held_at_exit and prof.finished


def test_summary_states_a_cost_once() -> None:
    """GP601's message holds its cost ("... (1992.80 ms/step)"): the line does not repeat it."""
    from types import SimpleNamespace

    from gpuprof.findings import Finding, Severity
    from gpuprof.report import Report

    said = Finding(code="GP601", name="dataloader-main-process", severity=Severity.WARNING,
                   message="55% of step time over the run's 20 steps is spent waiting for data (1992.80 ms/step)", advice="workers",
                   cost_us_per_step=1_992_800.0, cost_share=0.55)
    unsaid = Finding(code="GP203", name="host-sync", severity=Severity.WARNING, message="host waits",
                     advice="fewer syncs", cost_us_per_step=12_300.0, cost_share=0.18)
    text = short_report(Report(command="capture", findings=[said, unsaid]),
                                SimpleNamespace(steps=3, report_md=None))
    assert text.count("1992.80 ms/step") == 1
    from gpuprof.render.format import fmt_cost

    assert f"host waits cost {fmt_cost(unsaid)}" in text


def test_child_process_only_for_big_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's analysis goes to a child process from CHILD_MIN_BYTES of traces; the variable overrides."""
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.end import worker
    from gpuprof.capture.run import CaptureSection, RunFacts, TraceFile

    trace = tmp_path / "w.1.pt.trace.json.gz"
    trace.write_bytes(b"x" * 1000)
    facts = RunFacts(steps=1, traces=(TraceFile(trace, 0, 0),), runtime=(), section=CaptureSection(), notes=(),
                     config=CaptureConfig(logdir=str(tmp_path)))
    monkeypatch.delenv(worker.ENV, raising=False)
    assert worker.CHILD_MIN_BYTES > 1000 and not worker.wanted(facts)
    monkeypatch.setattr(worker, "CHILD_MIN_BYTES", 1000)
    assert worker.wanted(facts)
    monkeypatch.setenv(worker.ENV, "0")
    assert not worker.wanted(facts)
    monkeypatch.setattr(worker, "CHILD_MIN_BYTES", 10**12)
    monkeypatch.setenv(worker.ENV, "1")
    assert worker.wanted(facts)


def test_summary_fits_80_columns_without_cutting_a_word() -> None:
    """The capture summary wraps between words at the width it is given; every word of the finding, its
    cost and its fix is there whole; without a width each finding is one line (logs read by grep)."""
    from types import SimpleNamespace

    from gpuprof.findings import Finding, Severity, SourceLocation
    from gpuprof.report import Report

    f = Finding(code="GP601", name="dataloader-main-process", severity=Severity.WARNING,
                message="the DataLoader runs in the main process: 55% of each step waits for the next batch "
                        "while the GPU idles (num_workers=0)",
                advice="DataLoader(..., num_workers=4, pin_memory=True, persistent_workers=True); see "
                       "docs/capture.md for how many workers a machine with few cores can take",
                cost_us_per_step=12_300.0, cost_share=0.18,
                location=SourceLocation("/very/long/path/to/the/users/project/train_with_a_long_name.py", 123, "main"))
    report = Report(command="capture", findings=[f])
    facts = SimpleNamespace(steps=3, report_md=None)
    wrapped = short_report(report, facts, 80)
    assert all(len(line) <= 80 for line in wrapped.splitlines()), wrapped
    words = " ".join(short_report(report, facts).split()).split()
    assert " ".join(wrapped.split()).split() == words  # the same words, none cut
    from gpuprof.render.format import fmt_cost

    assert fmt_cost(f) in " ".join(wrapped.split()) and "[train_with_a_long_name.py:123]" in wrapped
    assert len(short_report(report, facts).splitlines()) == 4  # head, count, finding, fix: one line each


@pytest.mark.slow
def test_a_windows_trace_is_gzipped_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    # gpuprof compresses torch's plain JSON itself (torch's own .gz export copies it line by line at level 9)
    import gzip
    import json

    from torch.profiler import ProfilerActivity, profile

    from gpuprof.capture.window import export_gzipped

    model = torch.nn.Linear(8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as tp:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
    out = tmp_path / "w.pt.trace.json.gz"
    export_gzipped(tp, out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"aten::linear", "aten::sum"} <= names  # the operators run, in a trace any reader opens
    assert os.listdir(tmp_path) == ["w.pt.trace.json.gz"]  # the plain JSON beside it is gone


DEFERRED_START = textwrap.dedent("""
    import sys
    import torch
    import gpuprof
    from gpuprof.capture.config import Schedule

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(logdir=sys.argv[1], run="r", schedule=Schedule(wait=3, warmup=1, active=2),
                         print_report=True, tensorboard=False) as prof:
        for i in range(4):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            prof.step()
            if i == 0:
                print("after the start:", "gpuprof.analysis" in sys.modules)
    print("at the end:", "gpuprof.analysis" in sys.modules)
    print("not needed:", [m for m in ("gpuprof.render.terminal", "gpuprof.diff.compare") if m in sys.modules])
""")


@pytest.mark.slow  # an interpreter of its own that imports torch
@pytest.mark.parametrize("how", ["end", "window"])
def test_a_report_deferred_to_the_end_is_not_prepared_at_the_start(tmp_path: Path, how: str) -> None:
    """When a window's report waits for the end of the run (gpuprof run's default, ``GPUPROF_WINDOW_REPORT=end``),
    no thread imports the analysis during the run: the capture's start leaves it to the end, which imports what it
    uses (issue 41: the first step's CPU) and no more; a report at the window's end still has it ready at the start."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
           "GPUPROF_WINDOW_REPORT": how}
    out = subprocess.run([sys.executable, "-c", DEFERRED_START, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=300, check=True).stdout
    assert f"after the start: {how == 'window'}" in out, out
    assert "at the end: True" in out, out  # the report was still analysed and written
    assert "not needed: []" in out, out  # the summary's width without rich; no window to compare without diff
    assert (tmp_path / "r" / "report.json").is_file()
