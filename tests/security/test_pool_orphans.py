"""A killed ``gpuprof analyze`` on several rank traces leaves no process and no POSIX semaphore behind.

The parent is killed the way a CI timeout (SIGTERM) or the OOM killer
(SIGKILL) does, while its workers either sleep for good (their traces are
FIFOs no one writes to: the open waits for a writer) or analyse real rank
traces (mid-run). Two pools are covered: the command line's (``fork``
workers, children of ``gpuprof analyze`` itself) and a threaded library
caller's (``forkserver``: parent -> forkserver -> workers, and
multiprocessing's resource tracker, the semaphores' owner).

What counts as left behind, checked two independent ways:

* the process tree: a helper process made a child subreaper
  (``PR_SET_CHILD_SUBREAPER``) runs the parent, so orphans come to the helper
  instead of init and it can reap them and tell when they are gone;
* a marker: the parent gets a unique environment variable, which every
  process it starts inherits; afterwards no process on the machine may carry
  it, whoever its parent is now.

The semaphores are the ``/dev/shm/sem.*`` files any process of the tree had
mapped (read from ``/proc/PID/maps``), so other runs on the machine are not
counted: none may exist afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process and /dev/shm model")

# A library caller with a thread of its own besides the main one: the pool must use a forkserver there.
THREADED = r'''
import sys, threading, time
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
from gpuprof.analysis import analyze
analyze(sys.argv[1:], jobs=2)
'''

HELPER = r'''
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of our tree come to us
mode, sig, marker, files = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def kids_of():
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    return kids

def descendants(root):
    kids, out, todo = kids_of(), [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out

def sem_names(pids):
    found = set()
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/maps"):
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/dev/shm/sem."):
                    found.add(parts[5].split()[0])
        except OSError:
            continue
    return sorted(found)

def carrying(token):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if token.encode() in open(f"/proc/{p}/environ", "rb").read().split(b"\0"):
                    out.append(int(p))
            except OSError:
                continue
    return out

if mode == "cli":
    cmd = [sys.executable, "-m", "gpuprof", "analyze", *files, "--jobs", "2", "--format", "json", "--no-progress"]
else:
    cmd = [sys.executable, "-c", os.environ["THREADED_DRIVER"], *files]
env = dict(os.environ, GPUPROF_TEST_MARKER=marker)
env.pop("THREADED_DRIVER", None)
parent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 60
workers = []
while time.monotonic() < deadline and parent.poll() is None:
    children = set(kids_of().get(parent.pid, []))
    # the workers: the parent's children (fork), or one level further down (parent -> forkserver -> worker)
    workers = sorted(children) if mode == "cli" else [p for p in descendants(parent.pid) if p not in children]
    if len(workers) >= 2:
        break
    time.sleep(0.05)
seen = set(descendants(parent.pid))  # what ran when the workers were found (a loaded host may end some later)
time.sleep(0.5)  # the workers are in their open() of the FIFO, or half a second into their analysis, now
tree = sorted(seen | set(descendants(parent.pid)))  # every process of the run seen: each must be gone after
sems = sem_names([parent.pid, *tree])
sems_existed = [n for n in sems if os.path.exists(n)]
running = parent.poll() is None
os.kill(parent.pid, sig)
parent.wait()
alive = set(tree)
deadline = time.monotonic() + 20
while alive and time.monotonic() < deadline:
    try:
        os.waitpid(-1, os.WNOHANG)  # reap the orphans that came to us
    except ChildProcessError:
        pass
    alive = {p for p in alive if os.path.exists(f"/proc/{p}") and
             open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"}
    time.sleep(0.05)
while True:  # and the zombies, so the marker scan sees only the living
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            break
    except ChildProcessError:
        break
marked = carrying("GPUPROF_TEST_MARKER=" + marker)
left = [n for n in sems if os.path.exists(n)]
print(json.dumps({"running": running, "workers": len(workers), "tree": len(tree), "alive": sorted(alive),
                  "marked": marked, "sems": sems, "sems_existed": sems_existed, "left": left}))
for p in set(alive) | set(marked):  # never leave them for the next test, whatever the result
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
'''


def _kill_run(mode: str, sig: signal.Signals, files: list[Path]) -> dict[str, object]:
    marker = os.urandom(8).hex()
    env = dict(os.environ, PYTHONPATH=str(REPO), THREADED_DRIVER=THREADED)
    out = subprocess.run([sys.executable, "-c", HELPER, mode, str(int(sig)), marker, *map(str, files)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    res: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["running"], f"the analysis ended before it was killed: the test proves nothing ({res})"
    assert isinstance(res["workers"], int) and res["workers"] >= 2, res
    assert res["alive"] == [], f"processes left after {sig.name}: {res}"
    assert res["marked"] == [], f"processes of the killed run still alive after {sig.name}: {res}"
    assert res["left"] == [], f"semaphores left in /dev/shm after {sig.name}: {res}"
    return res


def _fifos(tmp_path: Path, n: int) -> list[Path]:
    fifos = [tmp_path / f"rank{r}.json" for r in range(n)]
    for f in fifos:
        os.mkfifo(f)
    return fifos


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_analyze_leaves_no_worker_and_no_semaphore(tmp_path: Path, sig: signal.Signals) -> None:
    """The command line's pool: fork workers; their semaphores are unlinked from the start."""
    res = _kill_run("cli", sig, _fifos(tmp_path, 4))
    assert res["tree"] == res["workers"]  # fork: no forkserver, no resource tracker
    assert res["sems_existed"] == []  # nothing in /dev/shm to leak in the first place


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_a_threaded_caller_leaves_no_forkserver_and_no_semaphore(tmp_path: Path, sig: signal.Signals) -> None:
    """A caller with threads: a forkserver, a resource tracker and named semaphores, all gone after the kill."""
    res = _kill_run("threaded", sig, _fifos(tmp_path, 4))
    assert isinstance(res["tree"], int) and res["tree"] >= 4  # forkserver, resource tracker, two workers
    assert res["sems_existed"], "the pool's semaphores were not found: the test would prove nothing"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_analyze_mid_run_on_real_rank_traces(tmp_path: Path, sig: signal.Signals) -> None:
    """Workers busy analysing real rank traces (not asleep on a FIFO) notice the kill too."""
    from gpuprof_testing.realtraces import shared_path

    src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "df_index_resolver", "df_index_resolver.json.gz")
    files = []
    for r in range(4):  # 4 ranks of 54 MB of JSON each: seconds of work, killed half a second in
        files.append(tmp_path / f"rank{r}.json.gz")
        shutil.copyfile(src, files[-1])
    _kill_run("cli", sig, files)


def test_workers_are_joined_when_the_pool_returns(tmp_path: Path) -> None:
    """No worker (nor zombie) of the pool outlives the call."""
    from gpuprof.pool import run_pool

    got = run_pool(_pid_of_worker, [1, 2, 3, 4], 2)
    assert len(got) == 4 and os.getpid() not in got
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{pid}").exists() for pid in got) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in set(got) if Path(f"/proc/{pid}").exists()], "a worker outlived the pool"


def _pid_of_worker(_: int) -> int:
    return os.getpid()


def test_a_worker_error_stops_the_pool_and_joins_it(tmp_path: Path) -> None:
    """A worker that raises: the error reaches the caller, the other workers are stopped and joined."""
    from gpuprof.pool import run_pool

    with pytest.raises(ValueError, match="rank 2"):
        run_pool(_fail_on_two, [(x, str(tmp_path)) for x in range(1, 7)], 2)
    pids = {int(f.name) for f in tmp_path.iterdir()}
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 5  # fork workers are reaped by the join; forkserver ones by the forkserver
    while [p for p in pids if _running(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if _running(p)] == [], "workers left after an error"


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _fail_on_two(item: tuple[int, str]) -> int:
    x, folder = item
    Path(folder, str(os.getpid())).touch()
    if x == 2:
        raise ValueError("rank 2 is unreadable")
    time.sleep(0.2)
    return x


def test_the_pool_is_used_only_where_it_pays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.pool as pool
    from gpuprof.pool import BYTES_PER_WORKER, FORKSERVER_MIN_BYTES, POOL_MIN_BYTES, workers_for

    monkeypatch.setattr(pool, "_single_threaded", lambda: True)  # the command line: fork workers

    small = []
    for r in range(8):
        p = tmp_path / f"rank{r}.json"
        p.write_bytes(b" " * 200_000)
        small.append(p)
    assert workers_for(small, None, free=8) == 1  # 8 small ranks: one by one by default
    assert workers_for(small, 2) == 2  # an explicit --jobs is followed
    assert workers_for(small[:1], 8) == 1
    big = []
    for r in range(4):
        p = tmp_path / f"big{r}.json"
        with open(p, "wb") as fh:
            fh.truncate(POOL_MIN_BYTES // 2)  # sparse: sizes count, contents do not
        big.append(p)
    assert workers_for(big, None, free=8) == min(4, 2 * POOL_MIN_BYTES // BYTES_PER_WORKER)
    assert workers_for(big, None, free=1) == 1  # a busy machine: no second process
    assert workers_for(big, None, free=2) == 2
    # the default reads the free CPUs itself (the machine's load: it moves between two readings, so the bound
    # is the usable CPUs, which the load never raises; the reading itself is pinned just below)
    assert 1 <= workers_for(big, None) <= pool._cpus()
    monkeypatch.setattr(pool, "free_cpus", lambda: 1)
    assert workers_for(big, None) == 1  # the default is free_cpus()'s reading: a busy machine, one process
    gz = [tmp_path / f"rank{r}.json.gz" for r in range(2)]
    for p in gz:
        with open(p, "wb") as fh:
            fh.truncate(POOL_MIN_BYTES // 8)  # gzip: counted 8x (GZIP_GUESS)
    assert workers_for(gz, None, free=2) == 2
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert workers_for([*big, fifo], None, free=8) == 1  # an input of unknown size: no guess
    monkeypatch.setattr(pool, "_single_threaded", lambda: False)  # a threaded caller: a forkserver costs more
    assert 2 * POOL_MIN_BYTES < FORKSERVER_MIN_BYTES
    assert workers_for(big, None, free=8) == 1
    assert workers_for(big * 2, None, free=8) == 8  # 128 MiB: worth a forkserver, one worker per 16 MiB


def test_free_cpus_counts_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.pool as pool

    monkeypatch.setattr(pool, "_cpus", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    # busy CPUs: the whole runnable processes of the 1-minute load, no more than run right now
    for busy, want in ((0, 4), (1, 3), (3, 1), (40, 1)):
        monkeypatch.setattr(pool, "_busy_cpus", lambda busy=busy: busy)
        assert pool.free_cpus() == want, busy
    monkeypatch.setattr(pool, "_cpus", lambda: 2)  # a cgroup quota of 2 CPUs on a 4-CPU host with 1 busy
    monkeypatch.setattr(pool, "_busy_cpus", lambda: 1)
    assert pool.free_cpus() == 2


def test_busy_cpus_reads_load_and_running_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    import gpuprof.pool as pool

    real_open = builtins.open
    for text, want in (("3.90 2.00 1.00 2/300 99", 1), ("0.40 0.9 1.0 9/300 99", 0), ("2.5 1 1 7/300 99", 2)):
        fake = tmp_path / "loadavg"
        fake.write_text(text)
        monkeypatch.setattr(builtins, "open", lambda f, *a, fake=fake, **k: real_open(
            fake if f == "/proc/loadavg" else f, *a, **k))
        assert pool._busy_cpus() == want, text
