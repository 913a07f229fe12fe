"""The window report's trace analysis in a child process at lower priority, off the training's GIL.

A thread that analyses the traces holds the GIL for most of its work; the
training thread, which gives the GIL up around every torch operator, then
waits for it each time (measured in bench/bench_window_close.py: the steps
that ran during the analysis took 1.7-5.5x as long). So, for big traces, the
window report's thread hands the analysis to ``python -m gpuprof.capture.end.worker`` (torch
is not imported there; ``nice`` +10) and waits for its answer on a pipe,
which holds no GIL; then it assembles and publishes the report itself.

A child costs its interpreter's start and gpuprof's imports (2-2.5 s of CPU
measured on a loaded 2-core machine), so it is worth it
for big traces only: measured on a small CPU CNN (traces of 20-150 KiB,
analysed in 0.1-0.3 s), the thread slowed 1-3 steps by 1.2-1.9x while a child
slowed the 40 steps it overlapped by 1.5-1.9x on the same loaded machine. The
child is used when the traces to analyse hold at least ``CHILD_MIN_BYTES``
on disk (estimated at a few seconds of analysis: ~80 MB/s of JSON, gzip
about 10x), the thread otherwise.

The child reads the pickled :class:`~gpuprof.capture.run.RunFacts` (the
modules and the schedule left out: the analysis reads neither) on stdin and
writes the pickled :class:`~gpuprof.capture.end.analyse.TraceResults` and the
failures it met on stdout. Should the child not start or not answer, the
thread analyses the traces itself, as before. ``GPUPROF_REPORT_PROCESS=0``
keeps the analysis on the thread, ``=1`` always uses a child.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

from gpuprof.capture.config import Schedule
from gpuprof.capture.end.analyse import TraceResults, trace_results
from gpuprof.capture.guard import DeferredGuard, Guard, safe_text
from gpuprof.capture.run import RunFacts

__all__ = ["CHILD_MIN_BYTES", "CHILD_TIMEOUT_S", "analyse_in_child", "wanted"]

CHILD_MIN_BYTES = 8 << 20  # gzipped trace bytes from which a child is worth its start
CHILD_TIMEOUT_S = 600.0  # the child is killed after this; the thread then analyses the traces itself
NICE = 10
ENV = "GPUPROF_REPORT_PROCESS"

Failure = tuple[str, str, BaseException | str]  # (part, consequence, error) as DeferredGuard keeps them


def wanted(facts: RunFacts) -> bool:
    """Analyse these traces in a child process: ``GPUPROF_REPORT_PROCESS`` 1/0, else by their size."""
    how = os.environ.get(ENV, "").strip().lower()
    if how in ("1", "true", "yes", "on"):
        return True
    if how in ("0", "false", "no", "off"):
        return False
    size = 0
    for t in facts.traces:
        try:
            size += t.path.stat().st_size
        except OSError:
            continue  # gone: the analysis says so
    return size >= CHILD_MIN_BYTES


def analyse_in_child(facts: RunFacts, g: Guard) -> TraceResults | None:
    """The traces' results, computed by the child; None when the child could not do it (analyse here)."""
    slim = dataclasses.replace(facts, config=dataclasses.replace(
        facts.config, models=(), schedule=Schedule(), activities=None))
    try:
        payload = pickle.dumps(slim, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None  # something in the facts does not pickle: the thread analyses them
    root = str(Path(__file__).resolve().parents[3])  # the directory holding this gpuprof
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "gpuprof.capture.end.worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError:
        return None
    try:
        out, _err = proc.communicate(payload, timeout=CHILD_TIMEOUT_S)  # waits in a syscall: no GIL held
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    try:
        res, failures = pickle.loads(out)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    if not isinstance(res, TraceResults):
        return None
    for part, consequence, err in failures:
        g.fail(part, consequence, err)
    return res


def _picklable(err: BaseException | str) -> BaseException | str:
    try:
        pickle.dumps(err)
        return err
    except Exception:  # noqa: BLE001 - any exception that will not pickle travels as its text
        return f"{type(err).__name__}: {safe_text(err, 10_000)}"


def _main() -> int:
    try:
        os.nice(NICE)
    except (OSError, AttributeError):
        pass  # not permitted, or no nice() on this system: the child runs at normal priority
    answer = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the analysis prints must not corrupt the answer
    facts = pickle.loads(sys.stdin.buffer.read())
    g = DeferredGuard(Guard())
    res = trace_results(facts, g)
    res.rule_failures = [(code, err if isinstance(p := _picklable(err), BaseException) else RuntimeError(p))
                         for code, err in res.rule_failures]
    failures: list[Failure] = [(part, consequence, _picklable(err)) for part, consequence, err in g.deferred]
    answer.write(pickle.dumps((res, failures), protocol=pickle.HIGHEST_PROTOCOL))
    answer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
