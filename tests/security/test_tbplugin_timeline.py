"""The TensorBoard tab's timeline routes (``timeline``, ``timeline_ranks``) on a shared logdir and hostile requests.

A request names a run and a trace; both are looked up among the runs the
walk listed, never opened by the name, so ``..``, an absolute path or a huge
name finds nothing and gets a short 404. A trace that is a symbolic link or a
FIFO is not listed; one swapped for either after the listing is refused when
read (:mod:`gpuprof.tbplugin.safeopen`): no secret in any answer, no worker
stalled. Hostile event names reach the page as inert JSON, and an answer is
bounded whatever the trace (the timeline's own bounds, gpuprof.trace.timelinerows).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

pytest.importorskip("tensorboard")

SECRET = "TOPSECRET-PASSWORD-1234"
NO_TRACE = {"status": "missing", "error": "no such trace in the run"}
NO_RUN = {"status": "missing", "error": "no such run under the logdir"}


def _trace(path: Path, names: tuple[str, ...] = ("gemm",), steps: int = 3) -> Path:
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            for i, name in enumerate(names):
                with b.op(name):
                    b.kernel(name, us=200 + 10 * i)
            b.cpu(us=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _client(logdir: Path) -> tuple[Any, Any]:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    plugin = GpuprofPlugin(TBContext(logdir=str(logdir)))
    apps = plugin.get_plugin_apps()
    return Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr)), plugin


def _get(c: Any, route: str, **params: str) -> tuple[int, str]:
    r = c.get(f"/{route}?{urlencode(params)}")
    return r.status_code, r.get_data(as_text=True)


def _until_done(c: Any, route: str, within: float = 60.0, **params: str) -> tuple[int, str]:
    deadline = time.monotonic() + within  # a bound for a stalled worker, not a speed
    while time.monotonic() < deadline:
        code, body = _get(c, route, **params)
        if json.loads(body)["status"] != "pending":
            return code, body
        time.sleep(0.02)
    raise AssertionError(f"{route} {params} still pending after {within} s")


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """``logdir/run/w.pt.trace.json`` and, outside the logdir, a valid trace and a plain secret."""
    _trace(tmp_path / "outside" / "secret.json", names=(SECRET,))
    (tmp_path / "outside" / "shadow").write_text(SECRET)
    _trace(tmp_path / "logdir" / "run" / "w.pt.trace.json")
    return tmp_path / "logdir"


def test_dotdot_and_absolute_names_reach_nothing_outside(logdir: Path) -> None:
    c, _ = _client(logdir)
    outside = logdir.parent / "outside"
    for run in ("..", "../outside", "run/..", "run/../..", str(outside), "./run", "run/", "/"):
        for route in ("timeline", "timeline_ranks"):
            code, body = _get(c, route, run=run, trace="secret.json")
            assert (code, json.loads(body)) == (404, NO_RUN), (route, run)
    for trace in ("../outside/secret.json", "run/../../outside/secret.json", "../../outside/secret.json",
                  str(outside / "secret.json"), "run/../run/w.pt.trace.json", "run/./w.pt.trace.json",
                  str(logdir / "run" / "w.pt.trace.json"), "run\\w.pt.trace.json", "run/w.pt.trace.json\x00"):
        code, body = _get(c, "timeline", run="run", trace=trace)
        assert (code, json.loads(body)) == (404, NO_TRACE), trace
        assert SECRET not in body
    code, body = _until_done(c, "timeline", run="run", trace="run/w.pt.trace.json")  # the listed name works
    assert code == 200 and json.loads(body)["timeline"]["lanes"] and SECRET not in body


def test_huge_names_get_a_short_answer_that_does_not_repeat_them(logdir: Path) -> None:
    c, _ = _client(logdir)
    huge = "run/" + "x" * 1_000_000
    for params in ({"run": huge, "trace": "run/w.pt.trace.json"}, {"run": "run", "trace": huge},
                   {"run": huge, "trace": huge}):
        code, body = _get(c, "timeline", **params)
        assert code == 404 and len(body) < 200 and "xxxx" not in body
    code, body = _get(c, "timeline_ranks", run=huge)
    assert code == 404 and len(body) < 200


def test_symlinked_trace_is_not_listed_and_one_swapped_in_later_is_refused(logdir: Path) -> None:
    outside = logdir.parent / "outside"
    (logdir / "run" / "link.pt.trace.json").symlink_to(outside / "secret.json")
    (logdir / "linked").symlink_to(outside)  # a run directory that is a link: not walked
    c, _ = _client(logdir)
    code, body = _get(c, "timeline", run="run", trace="run/link.pt.trace.json")
    assert (code, json.loads(body)) == (404, NO_TRACE)
    code, body = _get(c, "timeline", run="linked", trace="linked/secret.json")
    assert (code, json.loads(body)) == (404, NO_RUN)
    # the listed trace replaced by a link to the secret trace between the walk and the read
    assert [r["name"] for r in json.loads(_get(c, "runs")[1])["runs"]] == ["run"]
    trace = logdir / "run" / "w.pt.trace.json"
    trace.unlink()
    trace.symlink_to(outside / "secret.json")
    for route, params in (("timeline", {"run": "run", "trace": "run/w.pt.trace.json"}), ("timeline_ranks", {"run": "run"})):
        code, body = _until_done(c, route, **params)
        assert code == 200 and SECRET not in body and "outside" not in body
        j = json.loads(body)
        if route == "timeline":
            assert j["status"] == "error" and "symbolic link" in j["error"] and "\n" not in j["error"]
        else:
            assert j == {"status": "ready", "timelines": []}


def test_fifo_is_not_listed_and_one_swapped_in_later_blocks_nothing(logdir: Path) -> None:
    os.mkfifo(logdir / "run" / "pipe.pt.trace.json")  # nobody ever writes to it
    _trace(logdir / "other" / "w.pt.trace.json")
    c, plugin = _client(logdir)
    code, body = _get(c, "timeline", run="run", trace="run/pipe.pt.trace.json")
    assert (code, json.loads(body)) == (404, NO_TRACE)
    assert [r["name"] for r in json.loads(_get(c, "runs")[1])["runs"]] == ["other", "run"]
    trace = logdir / "run" / "w.pt.trace.json"
    trace.unlink()
    os.mkfifo(trace)  # swapped after the walk: a blocking open would hang the worker for good
    code, body = _until_done(c, "timeline", run="run", trace="run/w.pt.trace.json")
    assert code == 200 and "not a regular file" in json.loads(body)["error"]
    code, body = _until_done(c, "timeline", run="other", trace="other/w.pt.trace.json")  # the queue went on
    assert json.loads(body)["status"] == "ready"
    assert plugin._store.abandoned == 0  # refused at once, not by the time budget


def test_hostile_event_names_arrive_as_inert_exact_json(tmp_path: Path) -> None:
    from gpuprof.trace.timelinerows import MAX_NAME

    corpus = tuple(HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME])
    _trace(tmp_path / "run" / "w.pt.trace.json", names=corpus, steps=2)
    c, _ = _client(tmp_path)
    code, body = _until_done(c, "timeline", run="run", trace="run/w.pt.trace.json")
    assert code == 200 and body.isascii() and not set("<>&\u2028\u2029") & set(body)  # nothing HTML reacts to
    names = set(json.loads(body)["timeline"]["names"])
    for name in HTML_HOSTILE:  # whole and exact where they fit
        assert name in names
    assert HUGE_NAME not in body and any(n.startswith(HUGE_NAME[:MAX_NAME - 1]) for n in names)
    assert len(body) < 200_000  # the 200,000-character name is cut: the answer stays small


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_answer_is_bounded_for_a_trace_with_many_events(tmp_path: Path) -> None:
    from gpuprof.trace.timelinerows import MAX_EVENTS

    b = TraceBuilder()
    for _ in range(2):
        with b.step():
            for i in range(4000):  # 16,000 events (ops and kernels), distinct names: over MAX_EVENTS
                with b.op(f"aten::op_{i}_" + "y" * 100):
                    b.kernel(f"kernel_{i}_" + "z" * 100, us=5)
    b.write(tmp_path / "run" / "w.pt.trace.json")
    c, _ = _client(tmp_path)
    code, body = _until_done(c, "timeline", run="run", trace="run/w.pt.trace.json", within=120)
    tl = json.loads(body)["timeline"]
    assert tl["events_total"] >= 16_000 > MAX_EVENTS >= tl["events_kept"]
    assert sum(len(ln["events"]) for ln in tl["lanes"]) == tl["events_kept"]
    # the name table holds only the names the kept rows use, each at most MAX_NAME characters
    assert len(tl["names"]) <= tl["events_kept"] and len(body) < 4 << 20
