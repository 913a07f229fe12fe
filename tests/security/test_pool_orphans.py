"""A killed ``gpuprof analyze --jobs`` leaves no process and no POSIX semaphore behind.

The workers are made to sleep for good (their traces are FIFOs no one writes
to: the open waits for a writer), then the parent is killed the way a CI
timeout (SIGTERM) or the OOM killer (SIGKILL) does. A helper process made a
child subreaper (``PR_SET_CHILD_SUBREAPER``) runs it, so the orphans come to
the helper instead of init: it can tell when they exit and reap them.
The semaphores are the ``/dev/shm`` files the parent had mapped (matched by
inode), so other runs on the machine are not counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process and /dev/shm model")

HELPER = r'''
import ctypes, json, os, signal, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of our tree come to us
fifos, sig = sys.argv[1:3], int(sys.argv[3])

def descendants(root):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out

def sem_inodes(pid):
    found = set()
    for line in open(f"/proc/{pid}/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/dev/shm/sem."):
            found.add(int(parts[4]))
    return found

parent = __import__("subprocess").Popen([sys.executable, "-m", "gpuprof", "analyze", *fifos, "--jobs", "2",
                                        "--format", "json"], stdout=open(os.devnull, "w"), stderr=open(os.devnull, "w"))
deadline = time.monotonic() + 60
workers = []
while time.monotonic() < deadline:
    children = set(int(c) for c in open(f"/proc/{parent.pid}/task/{parent.pid}/children").read().split())
    # the workers: processes two levels down (parent -> forkserver -> worker)
    workers = [p for p in descendants(parent.pid) if p not in children]
    if len(workers) >= 2:
        break
    time.sleep(0.2)
time.sleep(0.5)  # the workers are in their open() of the FIFO now
tree = descendants(parent.pid)
inodes = sem_inodes(parent.pid)
sems = [n for n in os.listdir("/dev/shm") if n.startswith("sem.") and os.stat("/dev/shm/" + n).st_ino in inodes]
os.kill(parent.pid, sig)
parent.wait()
alive = set(tree)
deadline = time.monotonic() + 20
while alive and time.monotonic() < deadline:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)  # reap the orphans that came to us
    except ChildProcessError:
        pid = 0
    alive = {p for p in alive if os.path.exists(f"/proc/{p}")}
    time.sleep(0.05)
left = [n for n in sems if os.path.exists("/dev/shm/" + n)]
print(json.dumps({"workers": len(workers), "tree": len(tree), "alive": sorted(alive), "sems": sems, "left": left}))
for p in alive:  # never leave them for the next test, whatever the result
    os.kill(p, signal.SIGKILL)
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_analyze_leaves_no_worker_and_no_semaphore(tmp_path: Path, sig: signal.Signals) -> None:
    fifos = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    for f in fifos:
        os.mkfifo(f)
    out = subprocess.run([sys.executable, "-c", HELPER, *map(str, fifos), str(int(sig))], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["workers"] >= 2 and res["tree"] >= 3  # forkserver, resource tracker and the sleeping workers
    assert res["sems"], "the pool's semaphores were not found: the test would prove nothing"
    assert res["alive"] == [], f"processes left after {sig.name}: {res}"
    assert res["left"] == [], f"semaphores left in /dev/shm after {sig.name}: {res}"


def test_workers_are_joined_when_the_pool_returns(tmp_path: Path) -> None:
    """No worker (nor zombie) of the pool outlives the call; only multiprocessing's forkserver and tracker stay."""
    import time

    from gpuprof.pool import run_pool

    got = run_pool(_pid_of_worker, [1, 2, 3, 4], 2)
    assert len(got) == 4 and os.getpid() not in got
    deadline = time.monotonic() + 5  # joined; the forkserver, their parent, reaps them at once
    while any(Path(f"/proc/{pid}").exists() for pid in got) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in set(got) if Path(f"/proc/{pid}").exists()], "a worker outlived the pool"


def _pid_of_worker(_: int) -> int:
    return os.getpid()


def test_the_pool_is_used_only_where_it_pays(tmp_path: Path) -> None:
    from gpuprof.pool import BYTES_PER_WORKER, POOL_MIN_BYTES, workers_for

    small = []
    for r in range(8):
        p = tmp_path / f"rank{r}.json"
        p.write_bytes(b" " * 200_000)
        small.append(p)
    assert workers_for(small, None) == 1  # 8 small ranks: one by one by default
    assert workers_for(small, 2) == 2  # an explicit --jobs is followed
    assert workers_for(small[:1], 8) == 1
    big = []
    for r in range(4):
        p = tmp_path / f"big{r}.json"
        with open(p, "wb") as fh:
            fh.truncate(POOL_MIN_BYTES // 2)  # sparse: sizes count, contents do not
        big.append(p)
    assert workers_for(big, None) == min(4, _cpus(), 2 * POOL_MIN_BYTES // BYTES_PER_WORKER)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert workers_for([*big, fifo], None) == 1  # an input of unknown size: no guess


def _cpus() -> int:
    return len(os.sched_getaffinity(0))
