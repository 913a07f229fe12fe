"""The hang watchdog: every thread's stack, the line the driving thread waits at, hang.json/hang.md per rank,
the job left alone and its resumption noted; on a 2-rank gloo job where rank 1 never reaches the barrier,
each rank's line named within the configured time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuprof.capture.job.hang import HANG_MIN_S, HANG_STEP_FACTOR, effective_timeout, hang_markdown
from gpuprof.capture.job.watchdog import Watchdog
from gpuprof.findings import Finding

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).parent / "jobs" / "hang_job.py"


def test_the_default_timeout_is_five_minutes_or_twenty_median_steps() -> None:
    assert effective_timeout(None, []) == HANG_MIN_S
    assert effective_timeout(None, [0.1] * 50) == HANG_MIN_S
    assert effective_timeout(None, [30.0] * 50) == pytest.approx(HANG_STEP_FACTOR * 30.0)
    assert effective_timeout(0, [1.0]) is None  # 0: off
    assert effective_timeout(2.5, [100.0]) == 2.5


class _Job:
    """A driving thread that steps, then waits at WAIT_LINE until released, then steps again."""

    def __init__(self) -> None:
        self.steps = 0
        self.end = time.perf_counter()  # when the last step ended
        self.release = threading.Event()
        self.stalled = threading.Event()
        self.thread = threading.Thread(target=self.run, name="trainer")

    def run(self) -> None:
        for _ in range(5):
            self.steps += 1
            self.end = time.perf_counter()
        self.stalled.set()
        self.wait_here()
        self.steps += 1
        self.end = time.perf_counter()

    def wait_here(self) -> None:
        self.release.wait(30)  # WAIT_LINE


WAIT_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if "# WAIT_LINE" in line)


def test_a_stalled_step_writes_the_stacks_and_the_waiting_line_then_notes_the_resumption(tmp_path: Path) -> None:
    job = _Job()
    found: list[tuple[Finding, Finding | None]] = []
    printed: list[str] = []

    class Stream:
        def write(self, s: str) -> int:
            printed.append(s)
            return len(s)

        def flush(self) -> None:
            return None

    job.thread.start()
    assert job.stalled.wait(10)
    wd = Watchdog(0.5, lambda: job.steps, lambda: job.end, lambda: False, [], job.thread.ident, tmp_path,
                  tmp_path, "rank3", 3,
                  lambda: Stream(),  # type: ignore[arg-type,return-value]
                  lambda new, old: found.append((new, old)))
    t0 = time.monotonic()
    wd.start()
    hang_json = tmp_path / "hang.json"
    while not any("no step finished" in p for p in printed) and time.monotonic() - t0 < 20:  # said last
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    assert hang_json.exists()
    assert elapsed >= 0.5  # never before the timeout
    doc = json.loads(hang_json.read_text())
    (entry,) = doc["ranks"]
    assert entry["rank"] == 3 and entry["worker"] == "rank3" and entry["step"] == 5 and entry["pid"] == os.getpid()
    assert entry["waiting_at"] == {"file": __file__, "line": WAIT_LINE, "function": "wait_here"}
    driver = [t for t in entry["threads"] if t["driver"]]
    assert len(driver) == 1 and driver[0]["name"] == "trainer"
    assert any(f["function"] == "wait_here" for f in driver[0]["frames"])
    assert all(t["name"] != "gpuprof-hang-watchdog" for t in entry["threads"])  # its own stack is not news
    assert "wait_here" in entry["faulthandler"]
    md = (tmp_path / "hang.md").read_text()
    assert f"{__file__}:{WAIT_LINE}" in md and "### thread trainer (drives the capture)" in md
    assert len(found) == 1 and found[0][1] is None
    f = found[0][0]
    assert f.code == "GP651" and f.severity.value == "error" and f.location is not None
    assert (f.location.file, f.location.line) == (__file__, WAIT_LINE)
    assert "rank 3 waits at" in f.message and "resumed" not in f.message
    assert any("no step finished" in p for p in printed)
    assert job.thread.is_alive()  # the job is left alone
    job.release.set()
    job.thread.join(10)
    t1 = time.monotonic()
    while not any("resumed" in p for p in printed) and time.monotonic() - t1 < 10:
        time.sleep(0.05)
    wd.stop()
    assert not wd._thread.is_alive() and wd.failure is None
    entry = json.loads(hang_json.read_text())["ranks"][0]
    assert entry["resumed_at_step"] == 6 and entry["resumed_after_s"] >= 0.5
    assert len(found) == 2 and found[1][1] is f and "resumed" in found[1][0].message
    assert any("resumed" in p for p in printed)


def test_ranks_share_hang_json_each_replacing_its_own_entry(tmp_path: Path) -> None:
    from gpuprof.capture.job.hang import HangRecord, write_hang_files

    for rank in (1, 0, 1):
        write_hang_files(tmp_path, HangRecord(f"rank{rank}", rank, 100 + rank, "host", 7, 4.0, 3.0, 0.0, None, []))
    doc = json.loads((tmp_path / "hang.json").read_text())
    assert [r["worker"] for r in doc["ranks"]] == ["rank0", "rank1"]
    assert "| 0 | rank0 |" in hang_markdown(doc) and "| 1 | rank1 |" in (tmp_path / "hang.md").read_text()


def test_each_ranks_series_up_to_the_hang_is_in_hang_json_and_hang_md(tmp_path: Path) -> None:
    from gpuprof.capture.job.hang import HangRecord, write_hang_files

    fast = {"bucket": 1, "first_step": [0, 1, 2], "step_time_us": [10_000.0, 12_000.0, 11_000.0],
            "data_wait_us": [1000.0, 2000.0, 3000.0], "host_rss_mib": [300.0, 310.0, 320.0], "cuda_allocated_mib": None}
    slow = {"bucket": 2, "first_step": [0, 2], "step_time_us": [40_000.0, 60_000.0], "data_wait_us": None,
            "host_rss_mib": None, "cuda_allocated_mib": [512.0, 513.0]}
    for rank, series in ((1, slow), (0, fast)):
        write_hang_files(tmp_path, HangRecord(f"rank{rank}", rank, 100 + rank, "host", 3, 4.0, 3.0, 0.0, None, [],
                                              series=series))
    doc = json.loads((tmp_path / "hang.json").read_text())
    assert [r["series"] for r in doc["ranks"]] == [fast, slow]  # each rank's own, whichever wrote last
    md = (tmp_path / "hang.md").read_text()
    assert "## Every rank's steps up to the hang" in md
    assert "| 0 | 3 | 11.0 | 10.0, 12.0, 11.0 | 2.0 | 300 → 320 | - |" in md
    assert "| 1 | 4 | 50.0 | 40.0, 60.0 | - | - | 513 |" in md  # 2 points of 2 steps: steps 0-3


def _gp651(report: Path) -> str:
    """The GP651 message in a rank's report.json ("" when none yet)."""
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return ""
    return next((f["message"] for f in doc.get("findings", []) if f.get("code") == "GP651"), "")


def test_the_culprit_in_words_from_the_ranks_stacks() -> None:
    from gpuprof.capture.job.hang import culprit

    def rank(r: int, line: int, frames: list[tuple[str, str]]) -> dict[str, object]:
        return {"rank": r, "waiting_at": {"file": "/x/train.py", "line": line, "function": "<module>"},
                "resumed_at_step": None,
                "threads": [{"driver": True, "frames": [{"file": f, "line": 1, "function": fn} for f, fn in frames]}]}

    user = ("/x/train.py", "<module>")
    waits = rank(0, 15, [user, ("/p/torch/distributed/c10d_logger.py", "wrapper"),
                         ("/p/torch/distributed/distributed_c10d.py", "all_reduce")])
    sleeps = rank(1, 14, [user])
    assert culprit([waits, sleeps]) == ("rank 1 never reached the all_reduce that rank 0 waits in at train.py:15; "
                                        "rank 1 is at train.py:14")
    also_waits = rank(1, 15, [user, ("/p/torch/distributed/distributed_c10d.py", "all_reduce")])
    assert culprit([waits, also_waits]) is None  # both wait in it: no culprit named
    assert culprit([sleeps]) is None and culprit([waits]) is None
    assert culprit([waits, {**sleeps, "resumed_at_step": 30}]) is None  # it came back: not the culprit


def test_write_hang_files_names_the_culprit_it_wrote(tmp_path: Path) -> None:
    # the watchdog names the culprit from what write_hang_files merged under its lock (no second read of hang.json)
    from gpuprof.capture.job.hang import HangRecord, ThreadStack, write_hang_files
    from gpuprof.findings import SourceLocation

    def rec(r: int, line: int, frames: list[tuple[str, int, str]]) -> HangRecord:
        return HangRecord(f"rank{r}", r, 100 + r, "host", 7, 4.0, 3.0, 0.0, SourceLocation("/x/train.py", line, "f"),
                          [ThreadStack("MainThread", 1, False, True, frames)])

    user = ("/x/train.py", 15, "<module>")
    waits = rec(0, 15, [user, ("/p/torch/distributed/distributed_c10d.py", 9, "all_reduce")])
    assert write_hang_files(tmp_path, waits) is None  # one rank alone names no culprit
    said = write_hang_files(tmp_path, rec(1, 14, [("/x/train.py", 14, "<module>")]))
    assert said == "rank 1 never reached the all_reduce that rank 0 waits in at train.py:15; rank 1 is at train.py:14"
    assert json.loads((tmp_path / "hang.json").read_text())["culprit"] == said


def test_the_hang_goes_into_report_json_when_detected(tmp_path: Path) -> None:
    from gpuprof.capture.job.hang import HangRecord, hang_finding, hang_into_report
    from gpuprof.capturerun import capture_findings
    from gpuprof.findings import SourceLocation

    rec = HangRecord("rank1", 1, 7, "host", 20, 4.0, 3.0, 0.0, SourceLocation("/x/t.py", 14, "f"), [])
    f = hang_finding(rec, str(tmp_path / "hang.md"), "rank 1 never reached the barrier that rank 0 waits in at t.py:15")
    hang_into_report(tmp_path / "report.json", f)  # no report yet: one holding the hang
    got = capture_findings(tmp_path)
    assert [x.code for x in got.findings] == ["GP651"] and "never reached the barrier" in got.findings[0].message
    doc = json.loads((tmp_path / "report.json").read_text())
    doc["notes"] = ["the window's"]
    (tmp_path / "report.json").write_text(json.dumps(doc))
    hang_into_report(tmp_path / "report.json", f)  # replaced, not doubled; the window report's notes kept
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [x["code"] for x in doc["findings"]] == ["GP651"] and doc["notes"][0] == "the window's"


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if marker in line)


@pytest.mark.slow
def test_a_rank_that_never_reaches_the_barrier_is_named_with_each_ranks_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    timeout_s = 3.0
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "GPUPROF_RUNTIME_DIR": str(tmp_path / "reg"), "TORCH_FR_BUFFER_SIZE": "200"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(JOB),
           str(tmp_path), str(timeout_s)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    hang_json = tmp_path / "job" / "hang.json"
    try:
        deadline = time.monotonic() + 180
        ranks: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            if hang_json.exists():
                ranks = json.loads(hang_json.read_text())["ranks"]
                if len(ranks) == 2:
                    break
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        assert len(ranks) == 2, ranks
        assert proc.poll() is None  # the job is left running (no kill)
        # rank 0 wrote first: its watchdog reads rank 1's entry on its next check and says the culprit too
        report0 = tmp_path / "job" / "rank0" / "report.json"
        while time.monotonic() < deadline and "never reached" not in _gp651(report0):
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)  # torchrun stops its ranks (each in a session of its own)
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            for r in ranks:  # whatever outlived the launcher
                try:
                    os.kill(int(str(r["pid"])), signal.SIGKILL)
                except OSError:
                    pass
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    by_rank = {r["rank"]: r for r in ranks}
    want = {0: _line_of("# RANK0-WAITS"), 1: _line_of("# RANK1-WAITS")}
    for rank, line in want.items():
        r = by_rank[rank]
        assert r["waiting_at"] == {"file": str(JOB), "line": line, "function": "<module>"}, r["waiting_at"]
        assert r["step"] == 20 and r["resumed_at_step"] is None
        # at the configured time, plus one check (0.3 s) and the scheduling delays of a loaded 2-core machine
        assert timeout_s <= float(r["stalled_s"]) <= timeout_s + 5
        f = r["finding"]
        assert f["code"] == "GP651" and f"rank {rank} waits at {JOB}:{line}" in f["message"]
    # the Flight Recorder (gloo records it too): rank 0's last collective is the barrier it waits in
    fr = by_rank[0]["flight_recorder"]
    assert fr is not None and Path(str(fr)).parent == tmp_path / "job" / "rank0", by_rank[0]["flight_recorder_note"]
    entries = json.loads(Path(str(fr)).read_text())["entries"]
    assert entries and entries[-1]["profiling_name"] == "gloo:barrier" and entries[-1]["state"] != "completed"
    md = (tmp_path / "job" / "hang.md").read_text()
    assert f"`{JOB}:{want[0]}`" in md and f"`{JOB}:{want[1]}`" in md
    # every rank's watch series up to the hang (issue 41.1): the 20 steps each finished, one point a step
    for rank in (0, 1):
        series = by_rank[rank]["series"]
        assert isinstance(series, dict) and series["first_step"] == list(range(20)), series
        assert len(series["step_time_us"]) == 20 and all(t > 0 for t in series["step_time_us"])
        assert len(series["host_rss_mib"]) == 20
        assert any(line.startswith(f"| {rank} | 20 | ") for line in md.splitlines())
    assert "## Every rank's steps up to the hang" in md
    assert "done" not in out  # neither rank got past the barrier: the job's own behaviour
    assert "no step finished" in err  # one line per rank (their stderr interleave under torchrun)
    said = (f"rank 1 never reached the barrier that rank 0 waits in at {JOB.name}:{want[0]}; "
            f"rank 1 is at {JOB.name}:{want[1]}")
    assert json.loads(hang_json.read_text())["culprit"] == said
    assert f"**Culprit:** {said}" in md.replace("\\", "")
    assert said in err  # the rank that wrote second says it on stderr
    # killed by SIGTERM afterwards (no end-of-run report): the hang stays in each rank's report.json...
    for rank in (0, 1):
        assert f"rank {rank} waits at" in _gp651(tmp_path / "job" / f"rank{rank}" / "report.json")
    assert said in _gp651(tmp_path / "job" / "rank0" / "report.json")
    # ...and `gpuprof analyze RUN` shows it
    shown = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(tmp_path / "job"), "--fail-on", "never"],
                           env=env, capture_output=True, text=True, timeout=240)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "GP651" in shown.stdout and "never reached the barrier" in " ".join(shown.stdout.split())


def test_no_hang_is_reported_while_the_driving_thread_is_outside_the_users_code(tmp_path: Path) -> None:
    """A driving thread that ended (or idles between a notebook's cells) runs no loop: nothing is hung."""
    done = threading.Thread(target=lambda: None, name="gone")
    done.start()
    done.join()
    t0 = time.perf_counter()
    wd = Watchdog(0.2, lambda: 3, lambda: t0, lambda: False, [], done.ident, tmp_path, tmp_path, "w", None,
                  lambda: sys.stderr, lambda new, old: None).start()
    time.sleep(1.5)
    wd.stop()
    assert wd.failure is None and wd.record is None and not (tmp_path / "hang.json").exists()


def test_a_capture_reports_a_stalled_step_and_its_resumption_in_report_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(tmp_path / "reg"))
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=1, warmup=1, active=2), tensorboard=False,
                         print_report=False, hang_timeout=0.5, max_auto_windows=0) as prof:
        for i in range(8):
            torch.randn(8, 8).sum()
            if i == 5:
                time.sleep(1.5)  # STALL-LINE
            prof.step()
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# STALL-LINE" in text
                and "next(" not in text)
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    (f,) = [f for f in doc["findings"] if f["code"] == "GP651"]
    assert f["location"]["file"] == __file__ and f["location"]["line"] == line
    assert f"the process waits at {__file__}:{line}" in f["message"] and "resumed" in f["message"]
    assert f["origin"] == "runtime" and f["severity"] == "error"
    hang = json.loads((tmp_path / "r" / "hang.json").read_text())
    # seen at the next check or when the capture stopped: steps done then (6 to 8)
    assert hang["ranks"][0]["step"] == 5 and 6 <= hang["ranks"][0]["resumed_at_step"] <= 8
    assert hang["ranks"][0]["resumed_after_s"] >= 1.5  # the planted sleep, measured between the step ends
    err = capsys.readouterr().err
    assert "no step finished" in err and "resumed" in err


def test_a_shorter_process_group_timeout_makes_the_watchdog_fire_first() -> None:
    from gpuprof.capture.job.hang import watch_timeout

    assert watch_timeout(300.0, 60.0, [0.1] * 50) == (48.0, True)  # 80% of the group's 60 s, before it aborts
    assert watch_timeout(300.0, 1800.0, [0.1] * 50) == (300.0, False)  # the group's is longer: ours stands
    assert watch_timeout(300.0, None, []) == (300.0, False) and watch_timeout(None, 60.0, []) == (None, False)
    assert watch_timeout(300.0, 60.0, [25.0] * 10) == (300.0, False)  # 3 steps outlast the group's: no claim
    assert watch_timeout(300.0, 60.0, [17.0] * 10) == (51.0, True)  # at least 3 median steps


@pytest.mark.slow
def test_the_process_group_timeout_is_read_from_a_real_gloo_group(tmp_path: Path) -> None:
    code = ("import datetime, os; os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=os.environ['PORT'])\n"
            "import torch.distributed as dist\n"
            "from gpuprof.capture.job.hang import process_group_timeout_s\n"
            "assert process_group_timeout_s() is None\n"
            "dist.init_process_group('gloo', rank=0, world_size=1, timeout=datetime.timedelta(seconds=42))\n"
            "print(process_group_timeout_s())\n"
            "dist.destroy_process_group()\n")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PORT": port}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "42.0"


def test_a_series_that_cannot_be_read_is_said_once_and_the_hang_report_goes_on(tmp_path: Path) -> None:
    import io

    def broken() -> dict[str, object] | None:
        raise RuntimeError("the sampler is gone")

    out = io.StringIO()
    wd = Watchdog(0.5, lambda: 3, lambda: 0.0, lambda: False, [], None, tmp_path, tmp_path, "rank0", 0,
                  lambda: out, lambda new, old: None, broken)
    assert wd._series_now() is None
    assert out.getvalue().count("\n") == 1 and "RuntimeError: the sampler is gone" in out.getvalue()
    ok = Watchdog(0.5, lambda: 3, lambda: 0.0, lambda: False, [], None, tmp_path, tmp_path, "rank0", 0,
                  lambda: out, lambda new, old: None, lambda: {"bucket": 1})
    assert ok._series_now() == {"bucket": 1}


def _entry(rank: int, wait_ms: list[float]) -> dict[str, object]:
    n = len(wait_ms)
    return {"rank": rank, "worker": f"rank{rank}", "series": {
        "bucket": 1, "first_step": list(range(n)), "step_time_us": [50_000.0] * n,
        "data_wait_us": [w * 1000 for w in wait_ms], "host_rss_mib": None, "cuda_allocated_mib": None}}


def test_the_series_up_to_the_hang_name_a_straggler_in_hang_md() -> None:
    from gpuprof.capture.job.hangseries import series_lines

    # rank 2 waits 21 ms for its data in 12 of 15 steps, ranks 0 and 1 1-1.5 ms
    slow = [21.0] * 12 + [1.0] * 3
    lines = series_lines([_entry(0, [1.0] * 15), _entry(1, [1.5] * 15), _entry(2, slow)])
    (said,) = [ln for ln in lines if ln.startswith("**Before the hang:**")]
    assert "rank 2 waited for its data longer than every other rank in 12 of the 15 common points" in said
    assert "19.8 ms a step more than the median other rank" in said  # 21 - median(1.0, 1.5)
    # alike ranks, or one rank alone: no straggler named
    assert not [ln for ln in series_lines([_entry(0, [1.0] * 15), _entry(1, [1.2] * 15)]) if "Before the hang" in ln]
    assert not [ln for ln in series_lines([_entry(2, slow)]) if "Before the hang" in ln]
