"""Hostile names and paths for the pytest plugin (docs/pytest.md): a test's node id never escapes the
artefact directory, a baseline that is a symlink or a FIFO is refused without blocking, and writing a
baseline replaces a link at the path instead of following it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
from gpuprof.errors import InputError
from gpuprof.pytest_plugin.capture import MAX_NAME, TestCapture, run_name
from gpuprof.pytest_plugin.gate import failure
from gpuprof.pytest_plugin.marker import parse_limits
from gpuprof.pytest_plugin.verdict import load_baseline

REPORT = {"schema_version": "1.2", "inputs": [], "sections": [], "notes": [], "findings": [], "traces": []}


@pytest.mark.parametrize("nodeid", [
    "../../../etc/passwd", "test_a.py::test[../../x]", "a/b/c.py::t", "..", ".", "", "/abs/path.py::t",
    "t.py::test[\x00\x1b[31m]", "t.py::test[" + "é" * 50 + "]", "t.py::" + "x" * 10_000, "t.py::test[$(rm -rf ~)]",
])
def test_a_node_id_becomes_one_safe_name_under_the_directory(nodeid: str, tmp_path: Path) -> None:
    name = run_name(nodeid, tmp_path)
    assert name and "/" not in name and "\x00" not in name and not name.startswith(".")
    assert len(name) <= MAX_NAME
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name), name
    assert (tmp_path / name).resolve().parent == tmp_path.resolve()


def test_a_name_taken_gets_a_new_one(tmp_path: Path) -> None:
    first = run_name("t.py::test", tmp_path)
    (tmp_path / first).mkdir()
    second = run_name("t.py::test", tmp_path)
    assert second == f"{first}-2"
    (tmp_path / second).write_text("a file in the way counts too")
    assert run_name("t.py::test", tmp_path) == f"{first}-3"


def test_a_symlinked_baseline_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text(json.dumps(REPORT))
    link = tmp_path / "base.json"
    link.symlink_to(real)
    with pytest.raises(InputError, match="symbolic link"):
        load_baseline(link)


def test_a_fifo_baseline_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "base.json"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            load_baseline(fifo)
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            outcome.append(err)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():  # unblock the reader before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("load_baseline blocked on a FIFO")
    assert isinstance(outcome[0], InputError) and "not a trace file, run directory or report.json" in str(outcome[0])


def _plan(tmp_path: Path, baseline: str) -> TestCapture:
    run = tmp_path / "logs" / "t"
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps(REPORT))
    plan = TestCapture(tmp_path / "logs", "t", parse_limits((), {"baseline": baseline, "fail_on": "never"}, tmp_path))
    plan.result = CaptureResult(run_dir=str(run), steps=9, step_time_median_ms=1.0, files=(str(run / "report.json"),),
                                traces=(RecordedTrace(path="t", first_step=3, last_step=7),),
                                reports=(WindowReport(at_step=9, final=True, report=REPORT),))
    plan._done = True
    return plan


def test_updating_a_baseline_replaces_a_link_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "base.json"
    link.symlink_to(victim)
    assert failure(_plan(tmp_path, "base.json"), update_baseline=True) is None
    assert victim.read_text() == "keep me"
    assert not link.is_symlink() and json.loads(link.read_text()) == REPORT
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_updating_a_fifo_baseline_fails_the_test_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "base.json"
    os.mkfifo(fifo)
    text = failure(_plan(tmp_path, "base.json"), update_baseline=True)  # no reader: blocking would hang here
    assert text is not None and "baseline: " in text
    assert fifo.exists() and not fifo.is_file()
