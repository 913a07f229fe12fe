"""The workers' I/O counters (gpuprof/capture/checks/loader/workerio.py), against a child process whose reads and
wake-ups are known: it reads a file of a known size a known number of times and sleeps a known number of times."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.capture.checks.loader import workerio as W

linux = pytest.mark.skipif(not os.path.isfile("/proc/self/io"), reason="needs Linux /proc/<pid>/io")

# says "ready" once started (its interpreter's start-up reads stay before the interval), waits for a line on stdin, then reads the file READS times and sleeps SLEEPS times, then says "done"
CHILD = """
import sys, time
print("ready", flush=True)
sys.stdin.readline()
for _ in range({reads}):
    with open({path!r}, "rb", buffering=0) as fh:
        fh.read()
for _ in range({sleeps}):
    time.sleep(0.001)
print("done", flush=True)
sys.stdin.readline()
"""


@linux
def test_reads_and_wakeups_of_a_child_are_counted(tmp_path: Path) -> None:
    data = tmp_path / "sample.bin"
    data.write_bytes(b"x" * 256 * 1024)
    reads, sleeps = 8, 30
    kid = subprocess.Popen([sys.executable, "-c", CHILD.format(reads=reads, path=str(data), sleeps=sleeps)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert kid.stdin is not None and kid.stdout is not None
        assert kid.stdout.readline().strip() == "ready"
        io = W.WorkerIo()
        io.prime([kid.pid])  # its start-up (the interpreter reading its own modules) is before the interval
        kid.stdin.write("go\n")
        kid.stdin.flush()
        assert kid.stdout.readline().strip() == "done"
        io.sample([kid.pid])
    finally:
        kid.kill()
        kid.wait()
    snap = io.snapshot()
    assert len(snap.read_kib_s) == 1
    got_kib = snap.read_kib_s[0]  # a rate over the interval: at least what it read, over some time
    assert got_kib is not None and got_kib > 0
    assert snap.wakeups_s[0] is not None and snap.wakeups_s[0] > 0
    assert snap.disk_read_kib_s[0] is not None  # read_bytes is there (0 from the page cache)
    if W.delay_accounting():
        assert snap.io_wait_pct[0] is not None
    else:
        assert snap.io_wait_pct[0] is None  # delay accounting off: blocked time is not measured, never read as 0


@linux
def test_counter_growth_matches_what_the_child_did(tmp_path: Path) -> None:
    """The deltas themselves (no rate): rchar grows by the bytes read, the wake-ups by at least the sleeps."""
    data = tmp_path / "sample.bin"
    data.write_bytes(b"y" * 100_000)
    reads, sleeps = 5, 40
    kid = subprocess.Popen([sys.executable, "-c", CHILD.format(reads=reads, path=str(data), sleeps=sleeps)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert kid.stdin is not None and kid.stdout is not None
        assert kid.stdout.readline().strip() == "ready"
        c0 = W._counters(kid.pid)
        kid.stdin.write("go\n")
        kid.stdin.flush()
        assert kid.stdout.readline().strip() == "done"
        c1 = W._counters(kid.pid)
    finally:
        kid.kill()
        kid.wait()
    assert c0.rchar is not None and c1.rchar is not None
    grew = c1.rchar - c0.rchar
    # the file's bytes (an empty read at EOF adds nothing), plus the "go" line (nothing else is read after
    # "ready": the loop imports nothing)
    assert reads * 100_000 <= grew <= reads * 100_000 + 64 * 1024
    assert c0.wakeups is not None and c1.wakeups is not None
    assert c1.wakeups - c0.wakeups >= sleeps  # each sleep puts the process back on a core at least once
    assert c1.blkio_ticks is not None


def test_without_proc_nothing_is_made_up() -> None:
    io = W.WorkerIo()
    io.sample([2**22 + 12345])  # no such process: every column is None, never 0
    snap = io.snapshot()
    assert snap.read_kib_s == [None] and snap.wakeups_s == [None] and snap.io_wait_pct == [None]
    io.halve()
    assert io.snapshot().read_kib_s == [None]
