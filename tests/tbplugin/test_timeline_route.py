"""The tab's timelines, fetched per trace: the run answer carries none, the ``timeline`` route answers one trace's,
the same as the ``--html`` page embeds, and ``timeline_ranks`` each trace's collective lanes (werkzeug's test
client; the drawing in Chromium is in test_browser.py, hostile requests in tests/security/test_tbplugin_timeline.py).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import shared_path

from ..security.html_pages import page_data

pytest.importorskip("tensorboard", reason="the plugin needs the tensorboard package (gpuprof[tensorboard])")

SAMPLE = next((Path(__file__).resolve().parents[2] / "examples" / "sample_trace").glob("*.pt.trace.json.gz"))


def _hta(*parts: str) -> Path:
    return shared_path("hta", "HolisticTraceAnalysis", "tests", "data", *parts)


def _client(logdir: Path) -> Any:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    apps = GpuprofPlugin(TBContext(logdir=str(logdir))).get_plugin_apps()
    return Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr))


def _until_ready(c: Any, url: str) -> tuple[int, dict[str, Any]]:
    deadline = time.monotonic() + 120  # a bound for a broken worker, not a speed: polling ends at the answer
    while time.monotonic() < deadline:
        r = c.get(url)
        j = json.loads(r.get_data(as_text=True))
        if j["status"] != "pending":
            return r.status_code, j
        time.sleep(0.02)
    raise AssertionError(f"{url} still pending")


def _html_timeline(trace: Path, out: Path) -> dict[str, Any]:
    """The timeline ``gpuprof analyze TRACE --html`` embeds in its page."""
    r = CliRunner().invoke(cli, ["analyze", str(trace), "--html", str(out), "--format", "json", "-o",
                                 str(out.with_suffix(".json"))])
    assert r.exit_code in (0, 1), r.output[-2000:]
    tl: dict[str, Any] = page_data(out)["traces"][0]["timeline"]
    return tl


def _timeline_parts(obj: Any) -> Iterator[Any]:
    """Whatever in ``obj`` is a timeline or part of one: lane lists, name tables beside lanes, timeline fields."""
    if isinstance(obj, dict):
        if isinstance(obj.get("lanes"), list) or "origin_us" in obj or "span_us" in obj or "critical_step" in obj:
            yield obj
        for v in obj.values():
            yield from _timeline_parts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _timeline_parts(v)


@pytest.mark.parametrize("which", ["sample", "hta-rank0"])
def test_route_answers_the_html_pages_timeline_and_the_run_answer_has_none(tmp_path: Path, which: str) -> None:
    src = SAMPLE if which == "sample" else _hta("timeline_analysis", "sampled_rank-0.json.gz")
    (tmp_path / "logs" / "run").mkdir(parents=True)
    shutil.copy(src, tmp_path / "logs" / "run" / src.name)
    c = _client(tmp_path / "logs")
    code, run = _until_ready(c, "/run?run=run")
    assert code == 200 and run["status"] == "ready"
    (t,) = run["view"]["traces"]
    # no timeline in the run answer: not under the trace, not in its summary, no lane or event rows anywhere
    assert "timeline" not in t and "timeline" not in t["summary"] and "rank_timeline" not in t
    assert list(_timeline_parts(run)) == []
    ref = t["timeline_ref"]
    assert ref["trace"] == t["file"] == "run/" + src.name
    code, got = _until_ready(c, "/timeline?" + _query(run="run", trace=ref["trace"]))
    assert code == 200 and got["status"] == "ready" and len(list(_timeline_parts(got))) == 1
    want = _html_timeline(src, tmp_path / "page.html")
    assert got["timeline"] == want  # the same lanes, rows, names, steps, markers and critical path as the page
    assert ref["lanes"] == len(want["lanes"]) > 0 and ref["events_kept"] == want["events_kept"] > 0
    assert ref["collectives"] == any(ln["kind"] == "collective" for ln in want["lanes"])
    # the run answer no longer grows with the timeline: the timeline alone is more than a tenth of what it was
    tl_bytes = len(json.dumps(got["timeline"]))
    assert tl_bytes > 0.1 * (len(json.dumps(run)) + tl_bytes)


def test_ranks_route_answers_each_ranks_collective_lanes_only(tmp_path: Path) -> None:
    run = tmp_path / "job"
    run.mkdir()
    for src in (_hta("timeline_analysis", "sampled_rank-0.json.gz"), _hta("trace_filter", "sampled_rank-1.json.gz")):
        shutil.copy(src, run / src.name)
    c = _client(tmp_path)
    _, view = _until_ready(c, "/run?run=job")
    refs = [t["timeline_ref"] for t in view["view"]["traces"]]
    assert [r["collectives"] for r in refs] == [True, True]
    code, ranks = _until_ready(c, "/timeline_ranks?run=job")
    assert code == 200 and len(ranks["timelines"]) == 2
    for ref, part in zip(refs, ranks["timelines"], strict=True):
        _, whole = _until_ready(c, "/timeline?" + _query(run="job", trace=ref["trace"]))
        full = whole["timeline"]
        # independently of the code that cut it: each collective lane's rows, their names read through each table
        want = [(ln["id"], ln["label"], ln["total"], [(r[0], r[1], full["names"][r[2]], *r[3:]) for r in ln["events"]])
                for ln in full["lanes"] if ln["kind"] == "collective"]
        got = [(ln["id"], ln["label"], ln["total"], [(r[0], r[1], part["names"][r[2]], *r[3:]) for r in ln["events"]])
               for ln in part["lanes"]]
        assert got == want and want and all(rows for *_, rows in want)
        assert len(part["names"]) == len({r[2] for ln in part["lanes"] for r in ln["events"]}) < len(full["names"])
        for k in ("kinds", "steps", "span_us", "resolution_us"):  # what GP.timeline.ranks reads besides the lanes
            assert part[k] == full[k]
    # a run with one trace has no per-rank view: its collective lanes come alone
    (run / "sampled_rank-1.json.gz").unlink()
    assert len(_until_ready(c, "/timeline_ranks?run=job")[1]["timelines"]) == 1


def test_bad_run_and_trace_names_get_the_other_routes_answers(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    shutil.copy(SAMPLE, tmp_path / "run" / SAMPLE.name)
    c = _client(tmp_path)
    # the first request queues the analysis and returns at once, as the run route does: the page polls
    first = c.get("/timeline?" + _query(run="run", trace="run/" + SAMPLE.name))
    assert (first.status_code, json.loads(first.get_data())) == (200, {"status": "pending"})
    missing_run = c.get("/run?run=nope")
    for url in ("/timeline?run=nope&trace=run/" + SAMPLE.name, "/timeline?trace=x", "/timeline_ranks?run=nope",
                "/timeline_ranks"):
        r = c.get(url)
        assert (r.status_code, r.get_data()) == (404, missing_run.get_data()), url
    for trace in ("", "nope.json", SAMPLE.name, "./run/" + SAMPLE.name, str(tmp_path / "run" / SAMPLE.name)):
        r = c.get("/timeline?" + _query(run="run", trace=trace))
        assert r.status_code == 404 and json.loads(r.get_data()) == {"status": "missing",
                                                                     "error": "no such trace in the run"}, trace
    assert _until_ready(c, "/timeline?" + _query(run="run", trace="run/" + SAMPLE.name))[1]["status"] == "ready"


def _query(**params: str) -> str:
    from urllib.parse import urlencode

    return urlencode(params)
