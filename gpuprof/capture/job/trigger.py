"""On-demand windows: ``gpuprof trigger PID [--steps N]`` and the signal that reaches a running capture.

Each capture registers itself in a private per-user directory (the *registry*:
``$GPUPROF_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/gpuprof``, else
``/tmp/gpuprof-<uid>``; made with mode 0700 and refused unless it is a real
directory owned by this user and closed to others) as ``<pid>.json``: its run
directory, rank and whether it listens to ``SIGUSR2``. ``gpuprof trigger``
writes ``<pid>.request.json`` beside it and, when the capture listens, sends
``SIGUSR2``; the capture reads the request at its next step (with the signal)
or within ``POLL_S`` (without: the handler is installed only where
``SIGUSR2`` has its default action, so a user's own handler is never replaced).
A bare ``kill -USR2 PID`` asks for the default number of steps.

A PID that is a rank of a ``torchrun`` job, or the launcher (the ranks' parent),
reaches every rank registered with the same run directory. A registration is
removed when the capture stops or the interpreter exits; one left by a killed
process is ignored (its PID is dead, or now belongs to a process started at
another time) and removed by the next trigger or registration.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gpuprof.capture.job.windows import DEFAULT_WINDOW_STEPS, MAX_WINDOW_STEPS
from gpuprof.errors import GpuprofError
from gpuprof.safefile import read_regular

__all__ = ["POLL_S", "TRIGGER_SIGNAL", "Registration", "RegistryError", "TriggerChannel", "TriggerError",
           "registry_dirs", "trigger"]

POLL_S = 0.25  # how often a step looks for a request file when no signal came
TRIGGER_SIGNAL = getattr(signal, "SIGUSR2", None)  # None on Windows: the file channel only
MAX_FILE_BYTES = 64 * 1024  # a registration or request larger than this is not ours
BARE_SIGNAL_QUIET_S = 1.0  # a signal this soon after a request was read is that request's own


class RegistryError(Exception):
    """The registry directory is unusable or hostile (a symlink, another user's, open to others)."""


class TriggerError(GpuprofError):
    """``gpuprof trigger`` cannot reach the process: one line for the user, exit code 2."""


@dataclass(frozen=True)
class Registration:
    """One running capture, as ``<pid>.json`` says."""

    pid: int
    ppid: int
    started: int | None  # the process's start time (clock ticks since boot, Linux): a reused PID differs
    run_dir: str
    rank: int | None
    listens: bool  # SIGUSR2 reaches gpuprof's handler

    def to_json(self) -> bytes:
        return json.dumps({"pid": self.pid, "ppid": self.ppid, "started": self.started, "run_dir": self.run_dir,
                           "rank": self.rank, "signal": self.listens}).encode()

    @classmethod
    def parse(cls, raw: bytes) -> "Registration | None":
        try:
            d = json.loads(raw)
            reg = cls(int(d["pid"]), int(d["ppid"]), None if d.get("started") is None else int(d["started"]),
                      str(d["run_dir"]), None if d.get("rank") is None else int(d["rank"]), d.get("signal") is True)
        except (ValueError, KeyError, TypeError):
            return None
        return reg


# ----------------------------------------------------------------------------- the directory
def registry_dirs() -> list[Path]:
    """Where registrations are looked for, the first being where this process registers."""
    explicit = os.environ.get("GPUPROF_RUNTIME_DIR", "").strip()
    if explicit:
        return [Path(explicit)]
    out = []
    xdg = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if xdg and os.path.isabs(xdg):
        out.append(Path(xdg) / "gpuprof")
    out.append(Path("/tmp" if os.name == "posix" else tempfile.gettempdir()) / f"gpuprof-{_uid()}")
    return out


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


def private_dir(path: Path, create: bool) -> Path | None:
    """``path`` when it is a real directory of this user closed to others (made so when ``create``);
    None when it does not exist and ``create`` is False. RegistryError when it is anything else."""
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise RegistryError(f"{path}: cannot create the gpuprof registry directory: {err.strerror or err}") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise RegistryError(f"{path}: cannot read the gpuprof registry directory: {err.strerror or err}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise RegistryError(f"{path}: the gpuprof registry is not a plain directory (a symlink or a file); refused")
    if hasattr(os, "getuid") and st.st_uid != _uid():
        raise RegistryError(f"{path}: the gpuprof registry belongs to another user (uid {st.st_uid}); refused")
    if os.name == "posix" and st.st_mode & 0o077:
        raise RegistryError(f"{path}: the gpuprof registry is open to other users (mode "
                            f"{stat.S_IMODE(st.st_mode):o}); refused")
    return path


def _read_small(path: Path) -> bytes | None:
    """A small regular file's bytes, never following a link nor blocking on a FIFO (None: not such a file)."""
    try:
        return read_regular(path, MAX_FILE_BYTES)
    except OSError:
        return None


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a fresh 0600 file renamed over it; no link followed)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        return


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22); None elsewhere."""
    raw = _read_small(Path(f"/proc/{pid}/stat"))
    if raw is None:
        return None
    try:
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def _alive(pid: int) -> bool | None:
    """True: running; False: no such process; None: running but another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return None
    except OSError:
        return False
    return True


def _current(reg: Registration) -> bool:
    """The registration's process still runs (the same process: its start time matches where known)."""
    if _alive(reg.pid) is not True:
        return False
    now = _start_time(reg.pid)
    return reg.started is None or now is None or now == reg.started


def registrations(clean: bool = True) -> list[Registration]:
    """Every current registration in the registry directories; stale ones removed when ``clean``.

    A hostile directory (symlink, another user's, open to others) is skipped, as is any entry that is not a
    small regular file holding a registration of the PID its name says.
    """
    out: list[Registration] = []
    for d in registry_dirs():
        try:
            if private_dir(d, create=False) is None:
                continue
        except RegistryError:
            continue
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            stem = name[:-5] if name.endswith(".json") else ""
            if not stem.isdigit():
                continue
            raw = _read_small(d / name)
            reg = Registration.parse(raw) if raw is not None else None
            if reg is None or reg.pid != int(stem):
                continue
            if _current(reg):
                out.append(reg)
            elif clean:
                _unlink(d / name)
                _unlink(d / f"{stem}.request.json")
    return out


# ----------------------------------------------------------------------------- the client: gpuprof trigger
def trigger(pid: int, steps: int = DEFAULT_WINDOW_STEPS) -> list[Registration]:
    """Ask the capture of ``pid`` (every rank of its job, or of the job ``pid`` launched) to record the next
    ``steps`` steps. Returns the registrations reached; TriggerError (one line) when none can be."""
    if not 1 <= steps <= MAX_WINDOW_STEPS:
        raise TriggerError(f"--steps must be between 1 and {MAX_WINDOW_STEPS}, got {steps}")
    if pid <= 0:
        raise TriggerError(f"PID {pid} is not a process id (a positive number)")
    alive = _alive(pid)
    if alive is False:
        raise TriggerError(f"no process with PID {pid}")
    regs = registrations()
    mine = [r for r in regs if r.pid == pid]
    if mine:
        targets = _with_ranks(mine, regs)
    else:
        targets = _with_ranks([r for r in regs if r.ppid == pid], regs)
    if not targets:
        raise TriggerError(f"PID {pid} is not a gpuprof-watched Python process (no capture of yours registered it "
                           f"in {' or '.join(str(d) for d in registry_dirs())})")
    reached = []
    request = json.dumps({"steps": steps, "requested_at": time.time(), "by": os.getpid()}).encode()
    for reg in targets:
        d = _dir_of(reg)
        if d is None:
            continue
        try:
            _write_private(d / f"{reg.pid}.request.json", request)
        except OSError:
            continue
        if reg.listens and TRIGGER_SIGNAL is not None:
            try:
                os.kill(reg.pid, TRIGGER_SIGNAL)
            except OSError:  # gone since: the request file is removed with its registration
                continue
        reached.append(reg)
    if not reached:
        raise TriggerError(f"PID {pid}: the request could not be written to the gpuprof registry")
    return reached


def _with_ranks(found: list[Registration], regs: list[Registration]) -> list[Registration]:
    """``found`` plus the other ranks of their jobs (the same run directory; ranks only)."""
    runs = {r.run_dir for r in found if r.rank is not None}
    out = {r.pid: r for r in found}
    for r in regs:
        if r.rank is not None and r.run_dir in runs:
            out.setdefault(r.pid, r)
    return sorted(out.values(), key=lambda r: (r.rank if r.rank is not None else -1, r.pid))


def _dir_of(reg: Registration) -> Path | None:
    for d in registry_dirs():
        if os.path.lexists(d / f"{reg.pid}.json"):
            try:
                return private_dir(d, create=False)
            except RegistryError:
                return None
    return None


# ----------------------------------------------------------------------------- the capture's end
class TriggerChannel:
    """The running capture's end: its registration, the signal handler and the request file.

    ``signalled`` is set by the handler (on the main thread, between two
    bytecodes: nothing else happens there); the driving thread reads the
    request at its next step (:meth:`poll`).
    """

    def __init__(self, run_dir: str, rank: int | None) -> None:
        self.signalled = False
        self.pid = os.getpid()
        d: Path | None = None
        last = RegistryError("no gpuprof registry directory")
        for cand in registry_dirs():
            try:
                d = private_dir(cand, create=True)
                break
            except RegistryError as err:
                last = err
        if d is None:
            raise last
        self.dir = d
        self.listens = self._install()
        self._reg = Registration(self.pid, os.getppid(), _start_time(self.pid), run_dir, rank, self.listens)
        self.path = d / f"{self.pid}.json"
        self.request_path = d / f"{self.pid}.request.json"
        registrations(clean=True)  # stale entries of killed processes go now
        _unlink(self.request_path)  # a request for a former process of this PID is not ours
        _write_private(self.path, self._reg.to_json())
        self._closed = False
        self._last_request = -BARE_SIGNAL_QUIET_S  # monotonic time of the last request read
        atexit.register(self.close)

    def _install(self) -> bool:
        sig = TRIGGER_SIGNAL
        if sig is None or threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(sig) is not signal.SIG_DFL:  # the user's (or another tool's): never replaced
            return False
        signal.signal(sig, self._on_signal)
        return True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = True

    def poll(self) -> int | None:
        """The steps a pending request asks for (None: no request); the request is consumed.

        A bare ``SIGUSR2`` (``kill -USR2 PID``: no request file) asks for the default steps, unless a request
        was just read (``gpuprof trigger`` writes its file, then signals: the file may be read first).
        """
        bare, self.signalled = self.signalled, False
        if self._closed or os.getpid() != self.pid:  # a fork child's copy answers nothing
            return None
        if self.listens and TRIGGER_SIGNAL is not None and signal.getsignal(TRIGGER_SIGNAL) != self._on_signal:
            # the user installed their own handler since: say so, so no trigger sends the signal any more
            self.listens = False
            self._reg = Registration(self._reg.pid, self._reg.ppid, self._reg.started, self._reg.run_dir,
                                     self._reg.rank, False)
            _write_private(self.path, self._reg.to_json())
        raw = _read_small(self.request_path)
        now = time.monotonic()
        if raw is None:
            if bare and now - self._last_request > BARE_SIGNAL_QUIET_S:
                self._last_request = now
                return DEFAULT_WINDOW_STEPS
            return None
        self._last_request = now
        _unlink(self.request_path)
        try:
            steps = int(json.loads(raw)["steps"])
        except (ValueError, KeyError, TypeError):
            return None
        return steps if 1 <= steps <= MAX_WINDOW_STEPS else None

    def close(self) -> None:
        """Remove the registration and the request; give SIGUSR2 its default back if the handler is still ours."""
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True
        _unlink(self.path)
        _unlink(self.request_path)
        if self.listens and TRIGGER_SIGNAL is not None and threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(TRIGGER_SIGNAL) == self._on_signal:
                    signal.signal(TRIGGER_SIGNAL, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        atexit.unregister(self.close)


def describe(reg: Registration) -> str:
    """One line for the trigger's output."""
    who = f"rank {reg.rank}" if reg.rank is not None else "process"
    how = "signalled" if reg.listens else f"request file (read within {POLL_S:g} s)"
    from gpuprof.render.safe import clip

    return f"{who} PID {reg.pid} ({how}); run directory {clip(reg.run_dir)}"  # the run's name, inert

