"""Scratch of the parallel loader: removed on SIGTERM/SIGINT, and after SIGKILL by the next run."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuprof.trace.loadhelper import _scratch_base, remove_stale

REPO = Path(__file__).resolve().parents[2]
BASE = _scratch_base() or __import__("tempfile").gettempdir()

# A child that loads a small trace through the helper (threshold 0) and stops
# in the middle of the load (in the progress callback) until it is signalled.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    import gpuprof.trace.load as L
    L.PARALLEL_MIN_BYTES = 0
    L.WAIT_FOR_HELPER = True
    path = sys.argv[1]
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1, "pid": 0, "tid": 7,
               "args": {"device": 0, "stream": 7}} for i in range(60000)]
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    calls = []
    def progress(done, total):
        calls.append(done)
        if len(calls) == 3:  # the helper and its scratch exist now
            print("LOADING", flush=True)
            time.sleep(60)
    L.load_trace(path, progress=progress, jobs=2)
    print("DONE", flush=True)
    """
)


def _mine(pid: int) -> list[str]:
    return glob.glob(os.path.join(BASE, f"gpuprof-load-{pid}-*"))


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "t.json")], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "LOADING", line
    assert len(_mine(proc.pid)) == 1  # the scratch exists mid-load
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_load_removes_scratch(tmp_path: Path, sig: int) -> None:
    proc = _start(tmp_path)
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    if sig == signal.SIGTERM:
        assert rc == -signal.SIGTERM  # the usual exit status: the signal is re-delivered
    else:
        assert rc != 0  # KeyboardInterrupt, as without gpuprof's handler
    assert _mine(proc.pid) == []


def test_sigkill_leaves_scratch_that_the_next_run_removes(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    left = _mine(proc.pid)
    try:
        assert len(left) == 1  # nothing could run at SIGKILL
        removed = remove_stale(BASE)
        assert left[0] in removed
        assert _mine(proc.pid) == []
    finally:
        for d in left:
            __import__("shutil").rmtree(d, ignore_errors=True)


def test_stale_sweep_keeps_a_live_owners_scratch(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        remove_stale(BASE)
        assert len(_mine(proc.pid)) == 1  # its lock is held: not stale
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert _mine(proc.pid) == []
