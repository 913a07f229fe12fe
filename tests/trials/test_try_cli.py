"""``gpuprof try``'s usage errors (exit 2, one line, nothing started, nothing written) and the trial runner's
stops (a trial past --max-time, a job that fails), on commands that never import torch: fast."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof.run.launch import Command
from gpuprof.run.options import TrialSettings
from gpuprof.trials.runner import run_trial

REPO = Path(__file__).resolve().parents[2]


def _try(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUPROF_RUN_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "gpuprof", "try", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "said"), [
    (["no_such.py"], "no such script: no_such.py"),
    ([], "no command to run"),
    (["--", "no-such-program-xyz"], "cannot run no-such-program-xyz"),
    (["sh", "-c", "true"], "put -- before a command"),
    (["--set", "workers=2", "t.py"], "unknown setting 'workers'"),
    (["--set", "num_workers=-2", "t.py"], "num_workers"),
    (["--variants", "turbo", "t.py"], "unknown variant 'turbo'"),
    (["--variants", "none", "t.py"], "no variant to try"),
    (["--run-name", "../up", "t.py"], "--run-name '../up'"),
    (["--steps", "1", "t.py"], "--steps"),
    (["--baseline-runs", "1", "t.py"], "--baseline-runs"),
    (["--max-time", "0", "t.py"], "--max-time"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], said: str) -> None:
    (tmp_path / "t.py").write_text("raise SystemExit('never run')\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = _try("--logdir", "L", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "never run" not in proc.stderr + proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, no try directory


def test_an_existing_try_directory_is_not_reused(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("pass\n")
    (tmp_path / "L" / "mine").mkdir(parents=True)
    (tmp_path / "L" / "mine" / "keep.txt").write_text("x")
    proc = _try("--logdir", "L", "--run-name", "mine", "t.py", cwd=tmp_path)
    assert proc.returncode == 2 and "exists already" in proc.stderr
    assert [p.name for p in (tmp_path / "L" / "mine").iterdir()] == ["keep.txt"]


def test_a_trial_past_max_time_is_stopped_with_its_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    cmd = Command(("sh", "-c", f"sleep 60 & echo $! > {marker}; wait"), "sh")
    t0 = time.monotonic()
    out = run_trial(cmd, tmp_path / "trial", TrialSettings(), 1, 3, max_time=1.0)
    assert time.monotonic() - t0 < 30
    assert out.error == "timed out after 1 s (--max-time)"
    assert out.result is None
    pid = int(marker.read_text())
    for _ in range(50):  # the group got SIGKILL: the grandchild is gone (or a zombie being reaped)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the trial's background process survived")


def test_a_failing_job_is_reported_with_its_last_line(tmp_path: Path) -> None:
    cmd = Command(("sh", "-c", "echo starting; echo 'ValueError: planted' >&2; exit 3"), "sh")
    out = run_trial(cmd, tmp_path / "trial", TrialSettings(), 1, 3, max_time=60)
    assert out.status == 3
    assert out.error == "the job failed (exit code 3): ValueError: planted"
    assert (tmp_path / "trial" / "output.log").read_text().startswith("starting")


def test_a_job_that_ends_without_a_step_gives_no_result(tmp_path: Path) -> None:
    out = run_trial(Command(("sh", "-c", "true"), "sh"), tmp_path / "trial", TrialSettings(), 1, 3, max_time=60)
    assert out.status == 0 and out.result is None
    assert out.error is not None and "without an optimizer step" in out.error
