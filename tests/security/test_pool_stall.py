"""A stopped (SIGSTOP) or blocked ``--jobs`` worker does not hang ``gpuprof analyze``.

Past ``GPUPROF_WORKER_STALL_S`` seconds (1-2 s here) with no trace finished
and no worker using CPU, the pool gives up: one line naming the stopped
worker and the traces still waited for, exit 2, and the workers are gone
(a stopped one is sent SIGCONT after its SIGTERM, so it can act on it). No
test asserts a time: a hang is caught by the subprocess guard.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc process model")

REPO = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 10  # a guard, not a measured time
    while [p for p in pids if not _gone(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def _stop_self_on_two(item: tuple[int, str]) -> int:
    x, folder = item
    Path(folder, f"{x}-{os.getpid()}").touch()
    if x == 2:
        os.kill(os.getpid(), signal.SIGSTOP)
    return x


def test_a_stopped_worker_is_one_error_naming_it_and_the_pool_is_joined(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.pool import WorkerStalled, run_pool

    monkeypatch.setenv("GPUPROF_WORKER_STALL_S", "1")
    with pytest.raises(WorkerStalled) as err:
        run_pool(_stop_self_on_two, [(x, str(tmp_path)) for x in range(1, 5)], 2)
    stopped = next(int(f.name.split("-")[1]) for f in tmp_path.iterdir() if f.name.startswith("2-"))
    text = str(err.value)
    assert f"worker process {stopped} is stopped" in text and "(2, " in text, text
    assert "GPUPROF_WORKER_STALL_S" in text and "\n" not in text
    pids = sorted({int(f.name.split("-")[1]) for f in tmp_path.iterdir()})
    assert _wait_gone(pids) == [], "a worker outlived the stalled pool"


def _busy(x: int) -> int:
    end = time.process_time() + 0.5  # CPU, not sleep: a worker at work uses CPU throughout
    while time.process_time() < end:
        pass
    return x


def test_workers_that_use_cpu_are_never_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each task takes longer than the stall limit, but in CPU: the pool waits for all of them.

    Whatever the machine's load: a worker at work is running (its CPU time moves) or runnable, waiting for a
    core (state R), and neither is a stall (the next test holds the runnable case without depending on load).
    """
    from gpuprof.pool import run_pool

    monkeypatch.setenv("GPUPROF_WORKER_STALL_S", "0.2")
    assert run_pool(_busy, [1, 2, 3], 2) == [1, 2, 3]


def _wait_for_file(item: tuple[int, str]) -> int:
    x, flag = item
    while not Path(flag).exists():  # sleeps: no CPU time, as a worker that waits for a core on a loaded machine
        time.sleep(0.01)
    return x


def test_a_runnable_worker_waiting_for_a_core_is_no_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a worker at work may get no core for longer than the limit: its CPU time stands still
    but its state is R (runnable). That is no stall. /proc is read as such a worker shows it (CPU time
    frozen, state R) while the workers wait, well past the limit, for a flag the test sets only once the pool
    has watched them for several limits; the former judgement (CPU time alone) gave up on them."""
    import gpuprof.pool as pool

    flag = tmp_path / "go"
    polls: list[int] = []

    def frozen_ticks(pid: int) -> int:
        polls.append(pid)
        if len(polls) >= 40:  # the pool has polled ~20 times (limit 0.2 s, a poll each 0.05 s): let them finish
            flag.touch()
        return 7

    monkeypatch.setenv("GPUPROF_WORKER_STALL_S", "0.2")
    monkeypatch.setattr(pool, "_cpu_ticks", frozen_ticks)
    monkeypatch.setattr(pool, "_state", lambda pid: "R")
    assert pool.run_pool(_wait_for_file, [(1, str(flag)), (2, str(flag))], 2) == [1, 2]
    assert len(polls) >= 40


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
def test_a_bad_stall_setting_is_one_line(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.errors import InputError
    from gpuprof.pool import stall_timeout

    monkeypatch.setenv("GPUPROF_WORKER_STALL_S", value)
    with pytest.raises(InputError, match="GPUPROF_WORKER_STALL_S: must be a positive number"):
        stall_timeout()


def _children(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
            except (OSError, IndexError, ValueError):
                continue
    return out


@pytest.mark.slow
def test_analyze_with_a_stopped_worker_ends_with_one_line_exit_2(tmp_path: Path) -> None:
    """The command line: its workers wait on FIFOs no one writes to; the test stops one with SIGSTOP."""
    fifos = []
    for i in range(2):
        f = tmp_path / f"rank{i}.pt.trace.json"
        os.mkfifo(f)
        fifos.append(str(f))
    env = {**os.environ, "PYTHONPATH": str(REPO), "GPUPROF_WORKER_STALL_S": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuprof", "analyze", *fifos, "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) == 2, "the pool's workers did not start"
        os.kill(workers[0], signal.SIGSTOP)
        out, err = proc.communicate(timeout=120)  # a hang guard only
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuprof: error: --jobs: "), err
    assert f"worker process {workers[0]} is stopped" in lines[0] and "rank0.pt.trace.json" in lines[0]
    assert out == ""
    assert _wait_gone(workers) == [], "a worker outlived gpuprof analyze"
