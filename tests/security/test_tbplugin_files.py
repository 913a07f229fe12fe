"""The TensorBoard plugin on a shared logdir: files swapped after the listing, FIFOs, huge logdirs, many requests.

Anyone who can write to the logdir is the attacker here: between the walk
that lists a run and the worker that reads its trace, they can replace the
trace by a symbolic link (to a secret) or a FIFO (to stall the worker), fill
the logdir with tens of thousands of files, or poll it from many tabs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof_testing.tracegen import TraceBuilder

pytest.importorskip("tensorboard")

SECRET = "TOPSECRET-PASSWORD-1234"


def _trace(path: Path, steps: int = 3) -> Path:
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            b.gemm(us=2000)
            b.cpu(us=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _plugin(logdir: Path) -> tuple[Any, Any]:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    plugin = GpuprofPlugin(TBContext(logdir=str(logdir)))
    apps = plugin.get_plugin_apps()
    return Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr)), plugin


def _get(c: Any, url: str) -> dict[str, Any]:
    return json.loads(c.get(url).get_data(as_text=True))


def _until_ready(c: Any, url: str, within: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        j = _get(c, url)
        if j["status"] != "pending":
            return j
        time.sleep(0.02)
    raise AssertionError(f"{url} still pending after {within} s")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "outside" / "secret.json"
    p.parent.mkdir()
    # a valid trace, so following the link would analyse it and show its name; and a plain secret next to it
    _trace(p)
    (tmp_path / "outside" / "shadow").write_text(SECRET)
    return p


@pytest.mark.parametrize("target", ["secret.json", "shadow"])
def test_trace_swapped_for_a_symlink_after_the_listing_leaks_nothing(tmp_path: Path, secret: Path,
                                                                     target: str) -> None:
    logdir = tmp_path / "logdir"
    trace = _trace(logdir / "run" / "w.pt.trace.json")
    c, _ = _plugin(logdir)
    assert [r["name"] for r in _get(c, "/runs")["runs"]] == ["run"]  # listed as a regular file
    trace.unlink()
    trace.symlink_to(secret.parent / target)  # the swap, between the walk and the read
    body = c.get("/run?run=run").get_data(as_text=True)
    j = _until_ready(c, "/run?run=run")
    text = json.dumps(j) + body
    assert SECRET not in text and "TOPSECRET" not in text and "outside" not in text
    assert j["view"]["traces"] == [] and len(j["view"]["errors"]) == 1
    assert "symbolic link" in j["view"]["errors"][0]


def test_run_directory_swapped_for_a_symlink_is_not_followed(tmp_path: Path, secret: Path) -> None:
    logdir = tmp_path / "logdir"
    _trace(logdir / "run" / "secret.json")
    c, _ = _plugin(logdir)
    assert [r["name"] for r in _get(c, "/runs")["runs"]] == ["run"]
    # the whole run directory becomes a link to a directory outside holding a file of the same name
    (logdir / "run" / "secret.json").unlink()
    (logdir / "run").rmdir()
    (logdir / "run").symlink_to(secret.parent)
    j = _until_ready(c, "/run?run=run")
    assert j["view"]["traces"] == [] and "symbolic link" in j["view"]["errors"][0]
    assert SECRET not in json.dumps(j)


def test_report_and_snapshot_swapped_for_symlinks_are_refused(tmp_path: Path) -> None:
    from gpuprof.errors import InputError
    from gpuprof.tbplugin.data import read_report
    from gpuprof.tbplugin.safeopen import open_in_logdir

    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    (tmp_path / "shadow").write_text(SECRET)
    for name in ("report.json", "x.memory_snapshot.pickle"):
        (logdir / "run" / name).symlink_to(tmp_path / "shadow")
    with pytest.raises(InputError, match="symbolic link"):
        read_report(logdir / "run" / "report.json", logdir)
    with pytest.raises(InputError, match="symbolic link"):
        open_in_logdir(logdir, logdir / "run" / "x.memory_snapshot.pickle")
    with pytest.raises(InputError, match="not inside the logdir"):
        open_in_logdir(logdir, logdir / ".." / "shadow")


def test_trace_swapped_for_a_fifo_stalls_nothing(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    fifo = _trace(logdir / "a" / "w.pt.trace.json")
    _trace(logdir / "b" / "w.pt.trace.json")
    c, plugin = _plugin(logdir)
    assert [r["name"] for r in _get(c, "/runs")["runs"]] == ["a", "b"]
    fifo.unlink()
    os.mkfifo(fifo)  # nobody ever writes to it: a blocking open or read would hang the worker for good
    ja = _until_ready(c, "/run?run=a", within=60)
    assert "not a regular file" in ja["view"]["errors"][0]
    jb = _until_ready(c, "/run?run=b", within=60)  # the run queued behind it is analysed
    assert jb["view"]["headline"]["steps"] == 3
    assert plugin._store.abandoned == 0  # refused at once, not by the time budget


def test_an_analysis_past_its_time_budget_never_stalls_the_queue() -> None:
    from gpuprof.tbplugin.store import Store, check_cancelled

    store = Store(budget_s=0.3)
    stop = threading.Event()
    checked: list[str] = []

    def cooperative() -> str:  # a huge trace: the loader checks between chunks
        while True:
            time.sleep(0.01)
            try:
                check_cancelled()
            except Exception:
                checked.append("stopped")
                raise

    def stuck() -> str:  # a job that never reaches a check (a read the kernel never completes)
        stop.wait(30)
        return "late"

    for key, job in (("slow", cooperative), ("stuck", stuck), ("next", lambda: "ok")):
        assert store.get(key, 1, job) is None
    deadline = time.monotonic() + 60  # a bound for a broken queue, not a speed: polling ends at the result
    res = None
    while time.monotonic() < deadline:
        res = store.get("next", 1, lambda: "ok")
        if res is not None:
            break
        time.sleep(0.02)
    assert res is not None and res.value == "ok"
    slow, stuck_res = store.get("slow", 1, cooperative), store.get("stuck", 1, stuck)
    assert slow is not None and "took longer than 0.3 s" in (slow.error or "")
    assert stuck_res is not None and "took longer than 0.3 s" in (stuck_res.error or "")
    assert checked == ["stopped"] and store.abandoned == 2
    stop.set()
    time.sleep(0.1)
    again = store.get("stuck", 1, stuck)  # its late answer did not replace the cached error
    assert again is not None and again.error is not None
    store.close()


def _many_files(logdir: Path, n: int) -> None:
    """``n`` junk files in a few directories sorted before the real run (``aaa...``)."""
    per = 5000
    for d in range(n // per):
        sub = logdir / f"aaa{d}"
        sub.mkdir(parents=True)
        for i in range(per):
            (sub / f"f{i}.txt").touch()


@pytest.mark.slow
def test_25k_files_and_50_concurrent_requests_walk_the_logdir_once(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    _many_files(logdir, 25_000)
    _trace(logdir / "zzz_real" / "w.pt.trace.json")  # sorted after the junk: the old cap of 20k hid it
    c, plugin = _plugin(logdir)
    assert [r["name"] for r in _get(c, "/runs")["runs"]] == ["zzz_real"]
    assert plugin._index.walks == 1
    got: list[list[str]] = []
    errors: list[BaseException] = []

    def poll() -> None:
        try:
            for _ in range(4):  # each tab polls a few times, as the page does every 0.5 s
                got.append([r["name"] for r in _get(c, "/runs")["runs"]])
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=poll) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(got) == 200 and all(g == ["zzz_real"] for g in got)
    assert plugin._index.walks == 1  # 200 requests, no walk: answered from the list
    # a new run appears after the refresh interval (its directory's mtime changed)
    plugin._index.min_interval_s = 0.0
    _trace(logdir / "new" / "w.pt.trace.json")
    assert [r["name"] for r in _get(c, "/runs")["runs"]] == ["new", "zzz_real"]
    assert plugin._index.walks == 2
    _get(c, "/runs")
    assert plugin._index.walks == 2  # nothing changed: the mtimes were looked at, no walk


def test_the_entry_limit_is_said_not_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_TB_MAX_FILES", "100")
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    for i in range(150):
        (logdir / f"f{i}.txt").touch()
    c, _ = _plugin(logdir)
    notes = _get(c, "/runs")["notes"]
    assert len(notes) == 1 and "GPUPROF_TB_MAX_FILES" in notes[0] and "100" in notes[0]
