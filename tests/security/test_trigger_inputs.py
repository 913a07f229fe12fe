"""``gpuprof trigger`` and the registry it reads are hostile-input surfaces: bad PIDs and steps are one line
and exit 2; a symlinked, foreign or open registry directory is refused; registrations and requests that are
links, FIFOs, huge or stale are ignored without blocking; a job killed mid-window leaves nothing that a
trigger would act on; hang.json/hang.md never follow a link."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof.capture.job.hang import HangRecord, write_hang_files
from gpuprof.capture.job.trigger import (
    MAX_FILE_BYTES,
    Registration,
    RegistryError,
    TriggerChannel,
    TriggerError,
    private_dir,
    registrations,
    trigger,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def reg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "reg"
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(d))
    return d


def _cli(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    res = CliRunner().invoke(cli, ["trigger", *args])
    return res.exit_code, res.stdout, res.stderr


def _one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    code, out, err = _cli(*args)
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("gpuprof: error: ") and needle in err, err
    assert "Traceback" not in err and out == ""


def test_bad_pids_and_steps_are_one_line_exit_2(reg: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _one_line_exit_2((str(dead.pid),), f"no process with PID {dead.pid}")
    _one_line_exit_2(("-1",), "No such option '-1'")  # click's own usage line, exit 2
    _one_line_exit_2(("--", "-1"), "not a process id")
    _one_line_exit_2(("0",), "not a process id")
    _one_line_exit_2(("abc",), "PID 'abc' is not a whole number")
    _one_line_exit_2(("12; rm -rf /",), "is not a whole number")
    _one_line_exit_2((str(os.getpid()), "--steps", "-3"), "--steps must be between 1 and 1000, got -3")
    _one_line_exit_2((str(os.getpid()), "--steps", "0"), "--steps must be between 1 and 1000")
    _one_line_exit_2((str(os.getpid()), "--steps", "100000"), "--steps must be between 1 and 1000")
    _one_line_exit_2((str(os.getpid()), "--steps", "x"), "--steps 'x' is not a whole number")


def test_a_process_that_is_not_gpuprofs_is_refused(reg: Path) -> None:
    not_python = subprocess.Popen(["sleep", "30"])
    python_plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for p in (not_python, python_plain):
            _one_line_exit_2((str(p.pid),), f"PID {p.pid} is not a gpuprof-watched Python process")
            assert p.poll() is None  # no signal was sent: SIGUSR2 would have killed either
        _one_line_exit_2(("1",), "PID 1 is not a gpuprof-watched Python process")  # init: not ours either
    finally:
        for p in (not_python, python_plain):
            p.kill()
            p.wait()


def test_hostile_registry_directories_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "reg-link"
    link.symlink_to(target)
    with pytest.raises(RegistryError, match="symlink"):
        private_dir(link, create=True)
    opened = tmp_path / "reg-open"
    opened.mkdir()
    opened.chmod(0o777)
    with pytest.raises(RegistryError, match="open to other users"):
        private_dir(opened, create=True)
    afile = tmp_path / "reg-file"
    afile.write_text("x")
    with pytest.raises(RegistryError, match="not a plain directory"):
        private_dir(afile, create=True)
    if os.getuid() == 0:  # as root, a directory of another user can be made
        foreign = tmp_path / "reg-foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(RegistryError, match="another user"):
            private_dir(foreign, create=True)
    # a capture asked to register there refuses (one warning from the session), and writes nothing there
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(link))
    with pytest.raises(RegistryError):
        TriggerChannel(str(tmp_path / "run"), None)
    assert list(target.iterdir()) == []
    # and a trigger does not read it
    with pytest.raises(TriggerError, match="not a gpuprof-watched"):
        trigger(os.getpid(), 3)


def test_a_capture_whose_registry_is_refused_warns_once_and_trains(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import warnings

    import gpuprof
    from gpuprof.capture import GpuprofWarning, Schedule

    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "reg-link").symlink_to(target)
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(tmp_path / "reg-link"))
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(tmp_path / "logs", schedule=Schedule(wait=0, warmup=1, active=1), tensorboard=False,
                             print_report=False, hang_timeout=0) as prof:
            for _ in range(4):
                torch.randn(4, 4).sum()
                prof.step()
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert len([m for m in ours if "trigger" in m]) == 1 and "symlink" in " ".join(ours), ours
    assert prof.step_num == 4 and list(target.iterdir()) == []


def test_hostile_registrations_are_ignored_without_blocking(reg: Path) -> None:
    private_dir(reg, create=True)
    me = os.getpid()
    elsewhere = reg.parent / "planted.json"
    elsewhere.write_text(Registration(me, os.getppid(), None, "/x", None, True).to_json().decode())
    (reg / f"{me}.json").symlink_to(elsewhere)  # a link: not followed
    os.mkfifo(reg / "12345.json")  # a FIFO: would block a plain open()
    (reg / "23456.json").write_bytes(b"{" + b" " * (MAX_FILE_BYTES + 10) + b"}")  # huge
    (reg / "34567.json").write_text(json.dumps({"pid": 99, "ppid": 1, "run_dir": "/x", "signal": True}))  # name lies
    (reg / "45678.json").write_text("not json")
    t0 = time.monotonic()
    assert registrations(clean=False) == []
    assert time.monotonic() - t0 < 5
    with pytest.raises(TriggerError, match="not a gpuprof-watched"):
        trigger(me, 3)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="process start times are read from /proc (Linux)")
def test_a_stale_registration_of_a_reused_pid_is_ignored_and_removed(reg: Path) -> None:
    private_dir(reg, create=True)
    me = os.getpid()
    stale = Registration(me, os.getppid(), 1, str(reg.parent / "run"), None, True)  # started at tick 1: not us
    (reg / f"{me}.json").write_bytes(stale.to_json())
    with pytest.raises(TriggerError, match="not a gpuprof-watched"):
        trigger(me, 3)  # no SIGUSR2 reached this process (it would have killed pytest)
    assert not (reg / f"{me}.json").exists()


def test_hostile_requests_are_ignored(reg: Path, tmp_path: Path) -> None:
    ch = TriggerChannel(str(tmp_path / "run"), None)
    try:
        assert ch.listens is (signal.getsignal(signal.SIGUSR2) == ch._on_signal)
        target = tmp_path / "req"
        target.write_text(json.dumps({"steps": 3}))
        ch.request_path.symlink_to(target)
        assert ch.poll() is None and target.exists()
        ch.request_path.unlink()
        for bad in ({"steps": -1}, {"steps": 10**9}, {"steps": "3; rm"}, [], "x"):
            ch.request_path.write_text(json.dumps(bad))
            assert ch.poll() is None
        ch.request_path.write_text(json.dumps({"steps": 3}))
        assert ch.poll() == 3 and not ch.request_path.exists()  # consumed once
        assert ch.poll() is None
    finally:
        ch.close()
    assert not ch.path.exists()
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # the default given back


def test_a_users_signal_handler_is_never_replaced(reg: Path, tmp_path: Path) -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    old = signal.signal(signal.SIGUSR2, mine)
    try:
        ch = TriggerChannel(str(tmp_path / "run"), None)
        assert ch.listens is False and signal.getsignal(signal.SIGUSR2) is mine
        doc = json.loads(ch.path.read_text())
        assert doc["signal"] is False  # so no trigger sends it: the file channel only
        ch.close()
        assert signal.getsignal(signal.SIGUSR2) is mine
    finally:
        signal.signal(signal.SIGUSR2, old)


@pytest.mark.slow
def test_a_job_killed_mid_window_leaves_nothing_a_trigger_acts_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    pytest.importorskip("torch")
    reg = tmp_path / "reg"
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(reg))
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1", "GPUPROF_RUNTIME_DIR": str(reg)}
    progress = tmp_path / "progress"
    job = REPO / "tests" / "run" / "jobs" / "loop_job.py"
    proc = subprocess.Popen([sys.executable, str(job), str(tmp_path), str(progress)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:  # the default window records steps 7-11
            try:
                if int(progress.read_text() or 0) >= 8:
                    break
            except (OSError, ValueError):
                pass
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        assert (reg / f"{proc.pid}.json").exists()
    finally:
        proc.kill()  # SIGKILL: no atexit, no stop()
        proc.wait()
    _one_line_exit_2((str(proc.pid),), f"no process with PID {proc.pid}")
    assert registrations() == []  # the stale one is ignored, then removed
    assert sorted(p.name for p in reg.iterdir()) == []


def test_hang_files_never_follow_a_link(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / "hang.json").symlink_to(target)
    (run / "hang.md").symlink_to(target)
    write_hang_files(run, HangRecord("rank0", 0, 1, "h", 3, 4.0, 3.0, 0.0, None, []))
    assert target.read_text() == "keep"
    assert not (run / "hang.json").is_symlink() and json.loads((run / "hang.json").read_text())["ranks"]
    (run / ".hang.lock").unlink()
    (run / ".hang.lock").symlink_to(target)
    with pytest.raises(OSError):
        write_hang_files(run, HangRecord("rank1", 1, 1, "h", 3, 4.0, 3.0, 0.0, None, []))
    assert target.read_text() == "keep"
    os.unlink(run / "hang.json")
    os.mkfifo(run / "hang.json")  # a FIFO in its place: read without blocking, refused, left as it was
    (run / ".hang.lock").unlink()
    t0 = time.monotonic()
    with pytest.raises(OSError, match="FIFO"):
        write_hang_files(run, HangRecord("rank1", 1, 1, "h", 3, 4.0, 3.0, 0.0, None, []))
    assert time.monotonic() - t0 < 5 and stat.S_ISFIFO(os.lstat(run / "hang.json").st_mode)
