"""``--html`` page titles and the TensorBoard tab's error lines: no control characters, no server paths.

A page title is shown by the browser's tab bar and history; an error line of
the tab is sent to whoever opens a (possibly shared) TensorBoard. Both name
files, whose names come from strangers, on a machine whose layout is not
theirs to see. So: the last part of the name only, its control characters,
DEL, C1 codes and line separators as visible escapes.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import shared_path

TRACE = ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
         "benchmark_result_2869224_1695835535_trace.json.gz")
HOSTILE = "evil\x1b]0;owned\x07\x1b[2J\u2028\u202e\x85\x7f\nname"
# what may not appear: C0 controls, DEL, C1 controls, line/paragraph separators, bidi overrides
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _clean(text: str, secret_dir: Path) -> None:
    assert not _CONTROL.search(text), repr(text)
    assert str(secret_dir) not in text and "/tmp" not in text, text


def _title_of(page: str) -> tuple[str, str]:
    """The <title> element's text and the data's title (the script sets both from it)."""
    head = html.unescape(re.search(r"<title>(.*?)</title>", page, re.S).group(1))  # type: ignore[union-attr]
    data = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
    body = json.loads(data.group(1)) if data else {}
    return head, str(body.get("title", ""))


@pytest.fixture
def hostile_trace(tmp_path: Path) -> Path:
    d = tmp_path / "private" / "home"
    d.mkdir(parents=True)
    dst = d / (HOSTILE + ".pt.trace.json.gz")
    shutil.copyfile(shared_path(*TRACE), dst)
    return dst


def test_the_report_page_title_names_the_file_only_and_inertly(hostile_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    res = CliRunner().invoke(cli, ["analyze", str(hostile_trace), "--html", str(out), "--fail-on", "never",
                                   "--format", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    head, data_title = _title_of(out.read_text())
    for title in (head, data_title):
        _clean(title, hostile_trace.parent)
        assert title.startswith("gpuprof report: evil\\x1b]0;owned\\x07") and "name.pt.trace.json.gz" in title


def test_the_diff_page_title_names_the_files_only_and_inertly(hostile_trace: Path, tmp_path: Path) -> None:
    saved = hostile_trace.parent / (HOSTILE + ".json")
    res = CliRunner().invoke(cli, ["analyze", str(hostile_trace), "--format", "json", "-o", str(saved),
                                   "--fail-on", "never"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "diff.html"
    res = CliRunner().invoke(cli, ["diff", str(saved), str(saved), "--html", str(out)])
    assert res.exit_code == 0, res.output
    for title in _title_of(out.read_text()):
        _clean(title, hostile_trace.parent)
        assert title.startswith("gpuprof diff: evil\\x1b") and "\u2192" in title


def test_the_memory_page_title_names_the_file_only_and_inertly(tmp_path: Path) -> None:
    from gpuprof_testing.realtraces import shared_snapshot

    d = tmp_path / "private" / "home"
    d.mkdir(parents=True)
    snap = d / (HOSTILE + ".pickle")
    shutil.copyfile(shared_snapshot("cs336_magma_memory_snapshot.pickle"), snap)
    out = tmp_path / "memory.html"
    res = CliRunner().invoke(cli, ["memory", str(snap), "--html", str(out)])
    assert res.exit_code in (0, 1), res.output
    page = out.read_text()
    head = html.unescape(re.search(r"<title>(.*?)</title>", page, re.S).group(1))  # type: ignore[union-attr]
    _clean(head, d)
    assert head.startswith("gpuprof memory: evil\\x1b]0;owned") and head.endswith("name.pickle")


def test_client_error_lines() -> None:
    from gpuprof.tbplugin.errortext import client_error

    logdir = Path("/srv/tb/logs")
    assert client_error(f"{logdir}/run/x.json: not JSON", logdir) == "run/x.json: not JSON"
    line = client_error("internal error in gpuprof (OSError: '/usr/lib/python3/x.py'; tmp=/var/tmp/a.b)\nnext\x1b[2J",
                        logdir)
    assert line == "internal error in gpuprof (OSError: '.../x.py'; tmp=.../a.b) next\\x1b[2J"
    assert client_error(f"{logdir}: unreadable", str(logdir) + "/") == ".: unreadable"


def _route(root: Path, url: str) -> dict[str, Any]:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    plugin = GpuprofPlugin(TBContext(logdir=str(root)))
    apps = plugin.get_plugin_apps()
    c = Client(lambda environ, start_response: apps[environ["PATH_INFO"]](environ, start_response))
    for _ in range(3000):  # a hang guard, not a measured time
        j: dict[str, Any] = json.loads(c.get(url).get_data(as_text=True))
        if j["status"] != "pending":
            return j
        time.sleep(0.02)
    raise AssertionError(f"{url} still pending")


@pytest.mark.slow
def test_the_tabs_error_lines_name_no_server_path_and_no_control_character(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logdir = tmp_path / "private" / "logs"
    run = logdir / "r1"
    run.mkdir(parents=True)
    shutil.copyfile(shared_path(*TRACE), run / "good.pt.trace.json.gz")
    (run / (HOSTILE + ".pt.trace.json")).write_text('{"traceEvents": [')  # truncated: an error naming the file
    (run / "report.json").write_text('{"schema_version": "1.2", "command": "capture", "traces": [], '
                                     '"findings": [{"code": "GP630", "cost_us_per_step": NaN}]}')
    (run / (HOSTILE + ".memory_snapshot.pickle")).write_bytes(b"\x80\x04not a pickle at all")
    got = _route(logdir, "/run?run=r1")
    assert got["status"] == "ready", got
    errors = got["view"]["errors"]
    assert len(errors) == 2, errors
    for line in errors:
        _clean(line, logdir)
    assert any(e.startswith("r1/evil\\x1b]0;owned") for e in errors), errors
    assert any(e.startswith("r1/report.json: malformed report: findings[0].cost_us_per_step") for e in errors)
    memory = _route(logdir, "/memory?run=r1&i=0")
    assert memory["status"] == "error", memory
    _clean(memory["error"], logdir)
    assert memory["error"].startswith("r1/evil\\x1b]0;owned"), memory
