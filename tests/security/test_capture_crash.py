"""Issue 8: capture can never crash or alter the training.

Each hostile script below used to end the training process with a segfault
(exit 139) or replace the user's exception. Every one is run several times, in
fresh interpreters (the crashes happened at exit, or only on some runs), and
must print its final line and exit with the expected code. The scripts check
the user's side themselves (their exception is the very same object, their own
torch profiler still exports a valid trace, every call of their function ran)
and print the final line only when those checks hold.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each hostile script in fresh interpreters with torch, 3 runs

pytest.importorskip("torch")

RUNS = 3  # each script, in fresh interpreters: several crashes were intermittent

PRELUDE = '''
import gc, glob, json, os, sys, threading, warnings
import torch
from torch import nn
import gpuprof
from gpuprof.capture import GpuprofWarning, Schedule

torch.set_num_threads(1)
warnings.simplefilter("ignore", UserWarning)  # torch's own chatter
LOG = sys.argv[1]
os.makedirs(LOG, exist_ok=True)  # the user's own files go here too
SCHED = Schedule(wait=1, warmup=1, active=3)
QUIET = dict(print_report=False, tensorboard=False, analyze=False)

def model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

def one(m, opt):
    loss = nn.functional.cross_entropy(m(torch.randn(8, 16)), torch.randint(0, 4, (8,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()

def traces():
    return sorted(glob.glob(os.path.join(LOG, "**", "*.pt.trace.json.gz"), recursive=True))

def reports():
    return sorted(glob.glob(os.path.join(LOG, "**", "report.json"), recursive=True))

def ours(caught):
    return [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]

def profiler_off():
    return not torch.autograd.profiler._is_profiler_enabled and not torch._C._autograd._profiler_enabled()
'''

SCRIPTS: dict[str, str] = {
    # two (here four) threads calling one @profile_step function
    "threads": '''
        calls = []

        @gpuprof.profile_step(LOG, schedule=SCHED, **QUIET)
        def step(m, opt):
            calls.append(threading.get_ident())
            return one(m, opt)

        def worker():
            m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
            for _ in range(20):
                step(m, opt)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            ts = [threading.Thread(target=worker) for _ in range(4)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            report = step.finish()
        assert len(calls) == 80, len(calls)                      # every call of the user's function ran
        said = [w for w in ours(caught) if "other threads" in w]
        assert len(said) == 1, ours(caught)                      # said once
        assert report is not None and len(traces()) == 1         # the driver's steps were recorded
        assert profiler_off()
        print("FINAL threads calls=80")
    ''',
    # gpuprof.profile() inside the user's own torch.profiler.profile
    "inside_user_profiler": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            with torch.profiler.profile() as user:
                with gpuprof.profile(LOG, schedule=SCHED, **QUIET) as prof:
                    for _ in range(8):
                        one(m, opt)
                        prof.step()
        user_trace = os.path.join(LOG, "user_trace.json")
        user.export_chrome_trace(user_trace)                      # used to segfault
        with open(user_trace) as f:
            events = json.load(f)["traceEvents"]
        assert sum(1 for e in events if e.get("name") == "aten::addmm") >= 8   # the user's trace is whole
        assert len(ours(caught)) == 1 and "already running" in ours(caught)[0]
        assert prof.report is None and not traces() and not reports()        # gpuprof recorded nothing
        print("FINAL inside_user_profiler")
    ''',
    # the user's torch profiler starts after gpuprof.profile(), before gpuprof's window opens
    "user_profiler_before_window": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            with gpuprof.profile(LOG, schedule=Schedule(wait=3, warmup=1, active=2), **QUIET) as prof:
                user = torch.profiler.profile()
                for i in range(9):
                    if i == 1:
                        user.start()
                    one(m, opt)
                    if i == 7:
                        user.stop()
                    prof.step()
        user_trace = os.path.join(LOG, "user_trace.json")
        user.export_chrome_trace(user_trace)
        with open(user_trace) as f:
            assert sum(1 for e in json.load(f)["traceEvents"] if e.get("name") == "aten::addmm") >= 6
        assert len(ours(caught)) == 1 and "already running" in ours(caught)[0], ours(caught)
        assert not traces() and prof.report is not None           # no trace; the rest of the report still runs
        assert profiler_off()
        print("FINAL user_profiler_before_window")
    ''',
    # the user's torch profiler starts inside gpuprof's recorded window, on the driving thread
    "user_profiler_in_window": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            with gpuprof.profile(LOG, schedule=Schedule(wait=1, warmup=1, active=4), **QUIET) as prof:
                user = torch.profiler.profile()
                for i in range(10):
                    if i == 3:
                        user.start()                                 # gpuprof is recording steps 2-5
                    one(m, opt)
                    if i == 6:
                        user.stop()
                    prof.step()
        user_trace = os.path.join(LOG, "user_trace.json")
        user.export_chrome_trace(user_trace)                          # used to segfault
        with open(user_trace) as f:
            assert sum(1 for e in json.load(f)["traceEvents"] if e.get("name") == "aten::addmm") >= 8
        said = ours(caught)
        assert len(said) == 1 and "another torch profiler started at step 3" in said[0], said
        assert len(traces()) == 1 and prof.report is not None          # the steps before it are kept
        import gzip
        with gzip.open(traces()[0], "rt") as f:
            steps = sorted({e["name"] for e in json.load(f)["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")})
        assert steps == ["ProfilerStep#2", "ProfilerStep#3"], steps    # 3: up to the start of theirs
        assert profiler_off()
        print("FINAL user_profiler_in_window")
    ''',
    # a monitoring thread starts its own torch profiler while gpuprof records on the training thread
    "user_profiler_other_thread": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        exported = []
        go = threading.Event()

        def theirs():
            go.wait()
            user = torch.profiler.profile()
            user.start()                                              # waits for gpuprof's next step
            torch.randn(64, 64) @ torch.randn(64, 64)
            user.stop()
            path = os.path.join(LOG, "user_trace.json")
            user.export_chrome_trace(path)
            with open(path) as f:
                exported.append(sum(1 for e in json.load(f)["traceEvents"] if e.get("name") == "aten::mm"))

        t = threading.Thread(target=theirs, name="their-thread"); t.start()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            with gpuprof.profile(LOG, schedule=Schedule(wait=1, warmup=1, active=6), **QUIET) as prof:
                for i in range(12):
                    one(m, opt)
                    if i == 3:
                        go.set()
                        import time; time.sleep(0.3)                  # their start is now waiting
                    prof.step()
        t.join()
        assert exported == [1], exported                              # their profiler worked
        said = ours(caught)
        assert len(said) == 1 and "another torch profiler started at step 3" in said[0], said
        assert len(traces()) == 1 and prof.report is not None and profiler_off()   # steps 2-3 kept
        print("FINAL user_profiler_other_thread")
    ''',
    # DataLoader workers forked inside the recorded window (a new epoch's loader)
    "dataloader_fork_in_window": '''
        from torch.utils.data import DataLoader, TensorDataset
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
        with gpuprof.profile(LOG, schedule=Schedule(wait=1, warmup=1, active=6), **QUIET) as prof:
            for epoch in range(3):                                    # epoch 1's workers fork at step 4
                for x, y in DataLoader(ds, batch_size=16, num_workers=2):
                    loss = nn.functional.cross_entropy(m(x), y)
                    opt.zero_grad(); loss.backward(); opt.step()
                    prof.step()
        assert prof.step_num == 12 and len(traces()) == 1 and len(reports()) == 1 and profiler_off()
        print("FINAL dataloader_fork_in_window")
    ''',
    # a capture started on a worker thread that ends without stopping it; then one stopped from main
    "driver_thread_ends": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        first = gpuprof.profile(os.path.join(LOG, "first"), schedule=Schedule(wait=0, warmup=1, active=20), **QUIET)

        def drive(prof):
            prof.start()
            for _ in range(5):
                one(m, opt)
                prof.step()

        t = threading.Thread(target=drive, args=(first,), name="driver"); t.start(); t.join()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            report = first.stop()                                     # from the main thread: used to segfault
        said = ours(caught)
        assert len(said) == 1 and "not on the thread that drives it" in said[0] and "since step 1" in said[0], said
        assert report is not None and not traces() and profiler_off()
        second = gpuprof.profile(os.path.join(LOG, "second"), schedule=Schedule(wait=0, warmup=1, active=20), **QUIET)
        t = threading.Thread(target=drive, args=(second,), name="driver2"); t.start(); t.join()
        print("FINAL driver_thread_ends")                             # second is stopped at exit, from main
    ''',
    # nested gpuprof.profile() contexts, and a @profile_step inside a gpuprof.profile()
    "nested": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)

        @gpuprof.profile_step(os.path.join(LOG, "step"), schedule=SCHED, **QUIET)
        def step():
            return one(m, opt)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GpuprofWarning)
            with gpuprof.profile(os.path.join(LOG, "outer"), schedule=SCHED, **QUIET) as outer:
                with gpuprof.profile(os.path.join(LOG, "inner"), schedule=SCHED, **QUIET) as inner:
                    for _ in range(8):
                        step()
                        inner.step()
                        outer.step()
        stood = step.finish()
        assert stood is not None and stood.inactive and not stood.files and inner.report is None  # both stood aside
        assert inner.result is not None and inner.result.inactive and "gpuprof capture" in inner.result.inactive
        assert outer.report is not None and len(outer.traces) == 1
        assert len(traces()) == 1 and "outer" in traces()[0]
        assert len([w for w in ours(caught) if "another gpuprof capture" in w]) == 2, ours(caught)
        assert profiler_off()
        print("FINAL nested")
    ''',
    # a user exception whose __str__ (and __repr__) raise, from the context manager and the decorator
    "raising_str": '''
        import traceback
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)

        class Hostile(RuntimeError):  # a RuntimeError: the device-mismatch check looks at its text
            def __str__(self):
                raise ValueError("__str__ exploded")
            def __repr__(self):
                raise ValueError("__repr__ exploded")

        err = Hostile()
        try:
            with gpuprof.profile(os.path.join(LOG, "ctx"), schedule=Schedule(wait=1, warmup=1, active=10),
                                 **QUIET) as prof:
                for i in range(8):
                    one(m, opt)
                    if i == 4:
                        raise err
                    prof.step()
        except Hostile as caught:
            assert caught is err and caught.__cause__ is None
            names = [f.name for f in traceback.extract_tb(caught.__traceback__)]
            assert "<module>" in names
        else:
            raise AssertionError("the exception was swallowed")
        assert prof.finished and profiler_off() and len(prof.traces) == 1

        err2 = Hostile()

        @gpuprof.profile_step(os.path.join(LOG, "dec"), schedule=Schedule(wait=0, warmup=1, active=10), **QUIET)
        def step(i):
            one(m, opt)
            if i == 3:
                raise err2

        try:
            for i in range(6):
                step(i)
        except Hostile as caught:
            assert caught is err2
            assert "step" in [f.name for f in traceback.extract_tb(caught.__traceback__)]
        assert step.profiler is None and profiler_off() and len(traces()) == 2
        print("FINAL raising_str")
    ''',
    # KeyboardInterrupt raised inside a decorated step, in the recorded window
    "keyboard_interrupt": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        ki = KeyboardInterrupt()

        @gpuprof.profile_step(LOG, schedule=Schedule(wait=0, warmup=1, active=10), **QUIET)
        def step(i):
            one(m, opt)
            if i == 4:
                raise ki

        try:
            for i in range(8):
                step(i)
        except KeyboardInterrupt as caught:
            assert caught is ki
        assert step.profiler is None and profiler_off() and len(traces()) == 1
        print("FINAL keyboard_interrupt")
    ''',
    # the step function calls sys.exit(3): the exit code is the user's, the trace is written first
    "sys_exit": '''
        import atexit
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        atexit.register(lambda: print("FINAL sys_exit traces=%d off=%s" % (len(traces()), profiler_off())))

        @gpuprof.profile_step(LOG, schedule=Schedule(wait=0, warmup=1, active=10), **QUIET)
        def step(i):
            one(m, opt)
            if i == 4:
                sys.exit(3)

        for i in range(8):
            step(i)
        print("not reached")
    ''',
    # stop() without start(), stop() twice, start() twice; step() before start()
    "stop_twice": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        prof = gpuprof.profile(LOG, schedule=SCHED, **QUIET)
        assert prof.stop() is None
        prof.step()
        prof.start(); prof.start()
        for _ in range(7):
            one(m, opt)
            prof.step()
        first = prof.stop()
        assert first is not None and prof.stop() is first and len(traces()) == 1 and profiler_off()
        with gpuprof.profile(os.path.join(LOG, "again"), schedule=SCHED, **QUIET) as again:
            for _ in range(7):
                one(m, opt)
                again.step()
        assert len(traces()) == 2  # the claim was given back: a later capture records
        print("FINAL stop_twice")
    ''',
    # the decorated function calls itself: one step per outer call
    "recursion": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        calls = []

        @gpuprof.profile_step(LOG, schedule=SCHED, **QUIET)
        def step(depth):
            calls.append(depth)
            if depth:
                return step(depth - 1)
            return one(m, opt)

        for _ in range(7):
            step(3)
        prof = step.profiler
        assert prof is not None and prof.step_num == 7, prof.step_num
        report = step.finish()
        assert len(calls) == 28 and report is not None and len(traces()) == 1 and profiler_off()
        print("FINAL recursion")
    ''',
    # start() with no stop(): the capture is stopped (trace and report written) at interpreter exit
    "never_stopped": '''
        m = model(); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        prof = gpuprof.profile(LOG, schedule=Schedule(wait=1, warmup=1, active=10), **QUIET).start()
        for _ in range(5):
            one(m, opt)
            prof.step()
        print("FINAL never_stopped")  # the test then finds the trace and report written at exit
    ''',
}

EXPECTED: dict[str, tuple[int, str]] = {
    "sys_exit": (3, "FINAL sys_exit traces=1 off=True"),
}

# what each run must have left in its logdir: (traces, reports), where the script cannot see it itself
FILES_AFTER_EXIT: dict[str, tuple[int, int]] = {"never_stopped": (1, 1), "driver_thread_ends": (0, 2)}


def _run_all(script: Path, logdirs: list[Path]) -> list[subprocess.CompletedProcess[str]]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # this checkout's gpuprof, not an installed one
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs = [subprocess.Popen([sys.executable, str(script), str(d)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for d in logdirs]
    out = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_hostile_capture_script_runs_to_its_last_line(name: str, tmp_path: Path) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(SCRIPTS[name]))
    rc, final = EXPECTED.get(name, (0, None))
    logdirs = [tmp_path / f"logs{i}" for i in range(RUNS)]
    for i, res in enumerate(_run_all(script, logdirs)):
        lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
        detail = f"run {i}: exit {res.returncode}\nstdout:\n{res.stdout[-2000:]}\nstderr:\n{res.stderr[-4000:]}"
        assert res.returncode == rc, detail
        assert lines and lines[-1].startswith(final or f"FINAL {name}"), detail
        if final:
            assert lines[-1] == final, detail
        assert "Traceback" not in res.stderr, detail
        if name in FILES_AFTER_EXIT:
            found = (len(glob.glob(str(logdirs[i] / "**" / "*.pt.trace.json.gz"), recursive=True)),
                     len(glob.glob(str(logdirs[i] / "**" / "report.json"), recursive=True)))
            assert found == FILES_AFTER_EXIT[name], (found, detail)


def test_sys_exit_wrote_the_trace_before_exiting(tmp_path: Path) -> None:
    """The sys.exit script's own line says so; here: the file is a finished trace, not a partial one."""
    script = tmp_path / "sys_exit.py"
    script.write_text(PRELUDE + textwrap.dedent(SCRIPTS["sys_exit"]))
    (res,) = _run_all(script, [tmp_path / "logs"])
    assert res.returncode == 3, res.stderr[-2000:]
    found = glob.glob(str(tmp_path / "logs" / "**" / "*.pt.trace.json.gz"), recursive=True)
    assert len(found) == 1 and not glob.glob(str(tmp_path / "logs" / "**" / "*partial*"), recursive=True)
