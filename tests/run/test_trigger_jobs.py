"""``gpuprof trigger PID`` on running jobs: a CPU job records the next N steps within N+2 steps; on a 2-rank
torchrun (gloo) job, triggering the launcher's PID reaches both ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof.capture.job.trigger import registrations

REPO = Path(__file__).resolve().parents[2]
JOB = Path(__file__).parent / "jobs" / "loop_job.py"


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "OMP_NUM_THREADS": "1", "GPUPROF_RUNTIME_DIR": str(tmp / "reg")}


def _progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _wait(cond: object, proc: subprocess.Popen[str], what: str, limit: float = 180) -> None:
    deadline = time.monotonic() + limit
    while not cond():  # type: ignore[operator]
        assert proc.poll() is None, f"the job ended before {what}: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _cli_trigger(pid: int, steps: int, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", "trigger", str(pid), "--steps", str(steps)], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_gpuprof_trigger_records_the_next_steps_of_a_running_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    pytest.importorskip("torch")
    env = _env(tmp_path)
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", env["GPUPROF_RUNTIME_DIR"])
    progress = tmp_path / "progress"
    proc = subprocess.Popen([sys.executable, str(JOB), str(tmp_path), str(progress)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n = 4
    try:
        _wait(lambda: _progress(progress) >= 20 and any(r.pid == proc.pid for r in registrations(False)), proc,
              "the job's step 20")
        before = _progress(progress)
        res = _cli_trigger(proc.pid, n, env)
        after = _progress(progress)
        assert res.returncode == 0, res.stderr
        assert f"PID {proc.pid} (signalled)" in res.stdout and "asked 1 process" in res.stdout
        _wait(lambda: _progress(progress) >= after + n + 5, proc, "the window's end")
    finally:
        (tmp_path / "progress.stop").touch()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert not (tmp_path / "reg" / f"{proc.pid}.json").exists()  # the registration went with the capture
    doc = json.loads((tmp_path / "job" / "report.json").read_text())
    trig = [w for w in doc["job"]["windows"] if w["reason"] == "trigger"]
    assert len(trig) == 1 and trig[0]["steps"] == n, doc["job"]
    assert before < trig[0]["start_step"] and trig[0]["start_step"] + n - 1 <= after + n + 2
    assert len(doc["traces"]) == 2  # the default window and this one, both analysed


@pytest.mark.slow
def test_trigger_on_the_torchrun_launcher_reaches_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    env = _env(tmp_path)
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", env["GPUPROF_RUNTIME_DIR"])
    progress = tmp_path / "progress"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(JOB),
           str(tmp_path), str(progress)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    n = 3
    try:
        _wait(lambda: _progress(progress) >= 20 and len([r for r in registrations(False) if r.ppid == proc.pid]) == 2,
              proc, "both ranks registered")
        res = _cli_trigger(proc.pid, n, env)  # the launcher: not a capture itself
        assert res.returncode == 0, res.stderr
        assert "asked 2 processes" in res.stdout and "rank 0 PID" in res.stdout and "rank 1 PID" in res.stdout
        after = _progress(progress)
        _wait(lambda: _progress(progress) >= after + n + 10, proc, "the window's end")
    finally:
        (tmp_path / "progress.stop").touch()
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert "cross-rank report" not in err and "gpuprof: " not in err.replace("gpuprof: note", ""), err[-3000:]
    assert (tmp_path / "job" / "report.cross_rank.json").exists()  # the end of the run gathered both ranks
    for rank in (0, 1):
        doc = json.loads((tmp_path / "job" / f"rank{rank}" / "report.json").read_text())
        trig = [w for w in doc["job"]["windows"] if w["reason"] == "trigger"]
        assert len(trig) == 1 and trig[0]["steps"] == n, (rank, doc["job"])
    assert not [r for r in registrations(False) if r.ppid == proc.pid]
