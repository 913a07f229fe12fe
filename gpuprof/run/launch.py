"""The parent side of ``gpuprof run``: start the user's command with gpuprof's bootstrap in every Python process.

The command runs as a child process with this package's ``site/`` directory
first on ``PYTHONPATH`` (its ``sitecustomize`` loads :mod:`gpuprof.run.bootstrap`
in every Python process, launchers' children included) and the options in
``GPUPROF_RUN_CONFIG``. The directory ships with gpuprof: nothing is written
to start the job, so nothing can be left behind however it ends.

The child inherits stdin, stdout and stderr (no pipes: its output, colours,
progress bars and prompts are its own), and its exit status becomes ours: an
exit code is returned as is; a child killed by signal N makes this process
die of the same signal (re-raised on itself, core dumps off), so a shell sees
``128+N`` and a parent process ``-N`` exactly as without gpuprof; where that
cannot happen the exit code is ``128+N``.

Signals (docs/run.md, "Launchers"): at an interactive terminal, where this
process is in the terminal's foreground process group, the child shares that
group, so Ctrl-C (SIGINT) and Ctrl-\\ reach it (and torchrun's workers)
straight from the terminal, once, as without gpuprof; a SIGTERM sent to this
process alone is forwarded to the child. Elsewhere (CI, batch jobs, ``kill``
from a script) the child gets its own process group: a SIGINT sent to this
process (or its group) is forwarded to the child's whole group, as Ctrl-C
would be, and SIGTERM, SIGHUP and SIGQUIT to the child. SIGUSR1 and SIGUSR2
sent to this process go to the child in both cases (a trigger meant for the
job reaches it, and never kills this process). On Linux the child
gets SIGTERM when this process dies first (``PR_SET_PDEATHSIG``), even by
SIGKILL, so the job is never left running on its own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Callable, Literal, Mapping

from gpuprof.errors import GpuprofError
from gpuprof.render.safe import visible
from gpuprof.run.options import ENV, RunOptions

__all__ = ["Command", "resolve", "child_env", "launch", "exit_like", "SITE_DIR", "RunUsageError"]

SITE_DIR = Path(__file__).resolve().parent / "site"
#: torch's Flight Recorder buffer size, by its current and its former name (torch reads one or the other)
FLIGHT_RECORDER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FLIGHT_RECORDER_ENTRIES = "2000"  # the last collectives kept per process group
Kind = Literal["script", "module", "command"]


class RunUsageError(GpuprofError):
    """A command ``gpuprof run`` cannot start (exit code 2, one line)."""


@dataclass(frozen=True)
class Command:
    """What to start, and how to name it in a message."""

    argv: tuple[str, ...]
    label: str


def resolve(kind: Kind, args: tuple[str, ...]) -> Command:
    """The child's argv for ``gpuprof run [-m MODULE | -- COMMAND | SCRIPT] ARGS``; RunUsageError when it is unusable."""
    if kind == "module":
        if not args or not args[0].strip():
            raise RunUsageError("-m needs a module name (gpuprof run [OPTIONS] -m MODULE [ARGS])")
        return Command((sys.executable, "-m", *args), f"-m {visible(args[0])}")
    if not args or not args[0]:
        raise RunUsageError("no command to run (gpuprof run [OPTIONS] SCRIPT.py [ARGS], "
                            "-m MODULE [ARGS] or -- COMMAND [ARGS])")
    first = args[0]
    if kind == "command":
        if os.sep in first or (os.altsep and os.altsep in first):
            ok = os.path.isfile(first) and os.access(first, os.X_OK)
        else:
            ok = shutil.which(first) is not None
        if not ok:
            raise RunUsageError(f"cannot run {visible(first)!s}: no such program (or not executable)")
        return Command(tuple(args), visible(first))
    path = Path(first)
    if path.exists() and not path.is_dir() and not path.is_file():
        raise RunUsageError(f"{visible(first)}: not a regular file")
    if path.is_file() or (path.is_dir() and (path / "__main__.py").is_file()):
        return Command((sys.executable, *args), visible(first))
    if path.is_dir():
        raise RunUsageError(f"{visible(first)}: a directory without __main__.py, not a Python script")
    if not first.endswith((".py", ".pyw")) and "/" not in first and shutil.which(first) is not None:
        raise RunUsageError(f"{visible(first)} is a program, not a Python script: put -- before "
                            f"a command (gpuprof run [OPTIONS] -- {visible(first)} ...)")
    raise RunUsageError(f"no such script: {visible(first)}")


def child_env(opts: RunOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (ours), the bootstrap first on PYTHONPATH, the options in ENV."""
    env = dict(os.environ if base is None else base)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *parts])
    env[ENV] = opts.to_env()
    if not any(env.get(name, "").strip() for name in FLIGHT_RECORDER_VARS):
        # the Flight Recorder on, so a hang's report holds the process group's last collectives (docs/run.md);
        # only where the user set neither variable: a value of theirs (0 included) is kept
        for name in FLIGHT_RECORDER_VARS:
            env[name] = FLIGHT_RECORDER_ENTRIES
    return env


def _interactive() -> bool:
    """This process is in the foreground process group of its terminal (Ctrl-C reaches the whole group)."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except (AttributeError, OSError, ValueError):
            continue
    return False


_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
#: sent to gpuprof run's pid, meant for the job (an on-demand trigger): passed to the child as they came
_PASS_ON = tuple(s for s in (getattr(signal, "SIGUSR1", None), getattr(signal, "SIGUSR2", None)) if s is not None)


class _Forwarder:
    """Our signal handlers while the child runs (see the module docstring)."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        for name in _FORWARDED:
            sig = getattr(signal, name, None)
            if sig is not None:
                self.previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what signal.signal returned

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        for sig in self.pending:
            self._forward(sig)
        self.pending.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.child is None:
            self.pending.append(signum)
        else:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        child = self.child
        if child is None or child.returncode is not None:
            return
        if signum in _PASS_ON:
            _kill(child.pid, signum)
            return
        if self.interactive:
            if signum == signal.SIGTERM:  # the terminal's signals reached the child already
                _kill(child.pid, signum)
            return
        if signum == signal.SIGINT:
            try:
                os.killpg(child.pid, signum)  # like Ctrl-C: the child and what it started (torchrun's workers)
            except OSError:
                _kill(child.pid, signum)
        else:
            _kill(child.pid, signum)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except OSError:  # already gone
        pass


def launch(command: Command, opts: RunOptions) -> int:
    """Run ``command`` to its end; its exit status (negative: killed by that signal, as ``Popen`` says)."""
    interactive = _interactive()
    fwd = _Forwarder(interactive)
    fwd.install()
    try:
        try:
            child = subprocess.Popen(list(command.argv), env=child_env(opts),
                                     preexec_fn=_in_child(own_group=not interactive, parent=os.getpid()))
        except OSError as err:
            raise RunUsageError(f"cannot run {command.label}: {err.strerror or err}") from None
        fwd.started(child)
        while True:
            try:
                return int(child.wait())
            except KeyboardInterrupt:  # a handler we did not install (another thread's): keep waiting
                continue
    finally:
        fwd.restore()


def _in_child(own_group: bool, parent: int) -> Callable[[], None]:
    """What the child does between fork and exec: its own process group (when not at a terminal), and on
    Linux a SIGTERM when ``gpuprof run`` dies first (``kill -9`` of gpuprof run, or of its process group,
    must not leave the job running unwatched: SIGTERM lets torchrun's agent stop its workers)."""
    prctl = _prctl()

    def in_child() -> None:
        if own_group:
            os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() != parent:  # gpuprof run died before the line above: the same ending
                os.kill(os.getpid(), signal.SIGTERM)

    return in_child


_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux), looked up before the fork: nothing may be loaded between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return fn
    except (OSError, AttributeError):
        return None


def exit_like(status: int) -> int:
    """End this process the way the child ended: die of its signal, else return the code to exit with."""
    if status >= 0:
        return status
    signum = -status
    try:
        core = {getattr(signal, n, None) for n in ("SIGSEGV", "SIGABRT", "SIGQUIT", "SIGBUS", "SIGFPE", "SIGILL")}
        if signum in core:
            import resource  # no second core dump, of gpuprof's process

            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        if signum != signal.SIGKILL:  # SIGKILL has no handler to reset (and always kills)
            signal.signal(signum, signal.SIG_DFL)
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signum)
    except (OSError, ValueError, ImportError):
        pass
    return 128 + signum


def logdir_state(logdir: str) -> dict[str, int]:
    """Name -> modification time of each entry of ``logdir`` (empty when it does not exist); links not followed."""
    state: dict[str, int] = {}
    try:
        with os.scandir(logdir) as it:
            for entry in it:
                try:
                    state[entry.name] = entry.stat(follow_symlinks=False).st_mtime_ns
                except OSError:
                    continue
    except OSError:
        pass
    return state


def wrote_something(before: Mapping[str, int], after: Mapping[str, int]) -> bool:
    """Did a capture of this job write under the logdir (a directory new or changed)?

    Any entry counts, not only ``--run-name``'s: a script's own gpuprof capture
    (``profile_step``, a callback it adds) names its run itself, and the clock
    of ``gpuprof run`` then stands down in its favour."""
    return any(before.get(name) != mtime for name, mtime in after.items())


def no_step_note(opts: RunOptions, argv: tuple[str, ...] = (), status: int = 0) -> str:
    """What to say when no process of the job made a step gpuprof could see (``status``: the command's exit
    code): a command that failed before training says so first; a Python started with a flag that skips the
    bootstrap is named; else what to do about the step clock."""
    if status > 0:
        return (f"gpuprof run: the command failed (exit code {status}) before training: nothing was profiled "
                "(its own output above says why)")
    flag = bootstrap_skipping_flag(argv)
    if flag is not None:
        why = "does not import site" if flag == "-S" else "ignores PYTHONPATH"
        return (f"gpuprof run: nothing was profiled: the command's Python was started with {flag}, which {why}, "
                "so gpuprof's bootstrap never loaded (docs/run.md, \"Other launchers\")")
    if opts.step_function is not None:
        return (f"gpuprof run: nothing was profiled: no process of the job called --step-function "
                f"{opts.step_function} (is it a function of that module or script, called once per step?)")
    return ("gpuprof run: nothing was profiled: gpuprof run saw no optimizer step: use --step-function "
            "module:function to name the function that runs one step (docs/run.md, \"The step clock\")")


#: interpreter options whose value is the next word
_PYTHON_OPTS_WITH_VALUE = frozenset("WX")


def bootstrap_skipping_flag(argv: tuple[str, ...]) -> str | None:
    """``-I``, ``-E`` or ``-S`` when ``argv`` starts a Python interpreter with it (through ``env NAME=VALUE``
    too): such a process never loads ``sitecustomize`` from PYTHONPATH. None for anything else."""
    args = list(argv)
    if args and os.path.basename(args[0]) == "env":
        args = args[1:]
        while args and "=" in args[0] and not args[0].startswith("-"):
            args = args[1:]
    if not args or not re.fullmatch(r"python[0-9.]*", os.path.basename(args[0])):
        return None
    i = 1
    while i < len(args):
        a = args[i]
        if a == "-" or not a.startswith("-") or a == "--" or a.startswith("--"):
            return None
        letters = a[1:]
        for j, letter in enumerate(letters):
            if letter in "IES":
                return f"-{letter}"
            if letter in "cm":
                return None  # the rest is the command or module and its arguments
            if letter in _PYTHON_OPTS_WITH_VALUE:
                if j == len(letters) - 1:
                    i += 1  # its value is the next word
                break
        i += 1
    return None
