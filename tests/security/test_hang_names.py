"""A stalled process whose stack holds hostile names: every output of the watch keeps them inert.

The hang watchdog names the file and function the job waits at and writes every thread's stack. Those names
come from the process (a code object can be named anything: ``compile`` with any file name,
``CodeType.replace(co_name=...)``; a thread can be named anything). Printed raw, an ESC sequence cleared
the user's screen, an OSC 8 sequence planted a link, a newline turned one notice into three and broke
``hang.md``'s table, and ``<img onerror>`` was live markup in it. Each output now escapes them as the
findings do (:func:`gpuprof.render.safe.visible` / ``clip`` on the terminal, ``md_escape`` / ``md_code``
in markdown): the hang notice, ``hang.md``, the ``gpuprof run:`` lines, ``gpuprof trigger``'s lines, and
the GP651 finding in the end-of-run card and report.md. ``hang.json`` keeps the names as they are (data).
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from gpuprof.capture.job.watchdog import Watchdog
from gpuprof.render.safe import UNSAFE_CODEPOINTS, clip, is_inert

from .conftest import HTML_HOSTILE, PWNED

ESC_CLEAR = "clear\x1b[2Jscreen"
OSC8 = "link\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
BEL_TITLE = "title\x1b]0;pwned\x07set"
RLO = "\u202eyp.evil"
NEWLINES = "two\nlines | forged | cell |\n| row"
MARKUP = f"<img src=x onerror=\"{PWNED}\">"
C1 = "csi\x9b31mc1"
NAMES = [ESC_CLEAR, OSC8, BEL_TITLE, RLO, NEWLINES, MARKUP, C1, HTML_HOSTILE[2]]
IDS = ["esc", "osc8", "bel", "rlo", "newlines", "markup", "c1", "script"]


def _hostile_waiter(function: str, filename: str) -> Callable[[threading.Event], None]:
    """A function whose code object is named ``function`` and claims to come from ``filename``."""
    ns: dict[str, Any] = {}
    exec(compile("def wait(ev):\n    ev.wait(30)\n", filename, "exec"), ns)  # noqa: S102 - our own constant source
    fn = ns["wait"]
    fn.__code__ = fn.__code__.replace(co_name=function)
    return fn  # type: ignore[no-any-return]


def _stall(tmp_path: Path, name: str) -> tuple[str, Path, dict[str, Any]]:
    """A driving thread (itself named ``name``) stalled inside the hostile function; the watchdog reports it.
    (what it printed, the run directory, the one rank's hang.json entry)"""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    release = threading.Event()
    fn = _hostile_waiter(name, f"/srv/job/{name}.py")
    thread = threading.Thread(target=fn, args=(release,), name=name, daemon=True)
    thread.start()
    out = io.StringIO()
    steps = [5]
    wd = Watchdog(10.0, lambda: steps[0], time.perf_counter, lambda: False, [], thread.ident, run_dir, run_dir,
                  "rank0", 0, lambda: out, lambda new, old: None)
    try:
        for _ in range(200):  # the thread is inside the hostile function
            if thread.ident is not None and any(f.f_code.co_name == name for f in _frames_of(thread.ident)):
                break
            time.sleep(0.01)
        assert wd._hung(5, 12.5, 10.0)
        steps[0] = 6
        wd.record.resumed_at_step = None  # type: ignore[union-attr]
        wd._resumed(6, 14.0)
    finally:
        release.set()
        thread.join(10)
    (entry,) = json.loads((run_dir / "hang.json").read_text())["ranks"]
    return out.getvalue(), run_dir, entry


def _frames_of(ident: int) -> list[Any]:
    import sys

    f = sys._current_frames().get(ident)
    out = []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c != "\n" and ord(c) in UNSAFE_CODEPOINTS]


def _prose(md: str) -> str:
    """``md`` without its code blocks and code spans (markup in those is shown as text by every renderer)."""
    md = re.sub(r"```\n.*?\n```\n", "", md, flags=re.S)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", md)


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_the_hang_notice_is_one_inert_line_naming_the_frame_as_escapes(tmp_path: Path, name: str) -> None:
    printed, run_dir, entry = _stall(tmp_path, name)
    lines = printed.splitlines()
    assert len(lines) == 2, printed  # the stall, then the resumption: one line each, whatever the names
    notice = lines[0]
    assert notice.startswith("gpuprof: no step finished for 12.5 s after step 5")
    assert is_inert(notice) and is_inert(lines[1])
    assert f"{clip(f'/srv/job/{name}.py', 300)}:2 ({clip(name, 200)})" in notice  # the names, shown as escapes
    # hang.json is data: the names as the process holds them
    assert entry["waiting_at"] == {"file": f"/srv/job/{name}.py", "line": 2, "function": name}


@pytest.mark.parametrize("name", NAMES, ids=IDS)
def test_hang_md_keeps_its_table_and_its_stacks_whatever_the_names(tmp_path: Path, name: str) -> None:
    _, run_dir, entry = _stall(tmp_path, name)
    md = (run_dir / "hang.md").read_text()
    assert _raw_controls(md) == []  # no ESC, BEL, C1, bidi override or line separator reaches the file
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert len(rows) == 3  # header, rule, the one rank: a newline in a name breaks no row
    assert [len(re.split(r"(?<!\\)\|", r)) - 2 for r in rows] == [6, 6, 6]  # six cells each, no pipe forged one
    prose = _prose(md)
    assert "<img" not in prose and "<script" not in prose and "</script" not in prose  # markup is text
    # each frame of the driving thread on one line of its code block (a newline in a name forges no frame)
    (driver,) = [t for t in entry["threads"] if t["driver"]]
    block = md.split(f"### thread {_md_heading(name)} (drives the capture)\n\n```\n", 1)[1].split("\n```\n", 1)[0]
    assert len(block.splitlines()) == len(driver["frames"])
    assert f'in {clip(name)}' in block


def _md_heading(name: str) -> str:
    from gpuprof.render.markdown import md_escape

    return md_escape(name)


def test_gpuprof_run_lines_are_inert(capsys: pytest.CaptureFixture[str]) -> None:
    """The bootstrap's one-line failures carry the error's text (a user's exception, a module's name)."""
    from gpuprof.run.bootstrap import _guarded

    def fails() -> None:
        raise RuntimeError(f"{ESC_CLEAR} {OSC8}\n{RLO} {BEL_TITLE}")

    assert _guarded("hooking torch", fails) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuprof run: hooking torch failed (RuntimeError: ")
    assert is_inert(err.rstrip("\n"))


def test_gpuprof_trigger_names_the_run_directory_inertly() -> None:
    from gpuprof.capture.job.trigger import Registration, describe

    for name in NAMES:
        line = describe(Registration(123, 1, None, f"/logs/{name}", 0, True))
        assert is_inert(line) and "\n" not in line, line
        assert line.endswith(clip(f"/logs/{name}"))


@pytest.mark.parametrize("name", [NEWLINES, OSC8, MARKUP], ids=["newlines", "osc8", "markup"])
def test_the_gp651_finding_is_inert_in_the_end_of_run_card_and_report_md(tmp_path: Path, name: str) -> None:
    from gpuprof.capture.end.text import finding_lines
    from gpuprof.capture.job.hang import HangRecord, hang_finding
    from gpuprof.findings import SourceLocation
    from gpuprof.render.markdown import _finding

    rec = HangRecord("rank0", 0, 1, "host", 5, 12.5, 10.0, 0.0, SourceLocation(f"/srv/{name}.py", 2, name), [])
    f = hang_finding(rec, f"/logs/{name}/hang.md")
    card = finding_lines(f)
    assert len(card) == 2 and all(is_inert(line) for line in card)
    md = "\n".join(_finding(1, f))
    assert _raw_controls(md) == [] and "<img" not in _prose(md)


@pytest.mark.parametrize("series", [
    "x", {"bucket": 1, "first_step": [0], "step_time_us": ["1e3"]}, {"bucket": 0, "first_step": [0], "step_time_us": [1.0]},
    {"bucket": 1, "first_step": [0, 1], "step_time_us": [1.0]}, {"bucket": True, "first_step": [0], "step_time_us": [1.0]},
    {"bucket": 1, "first_step": [0], "step_time_us": [float("nan")]}, {"bucket": 1, "first_step": [0], "step_time_us": []}])
def test_a_series_that_is_not_one_is_left_out_of_hang_md(series: object) -> None:
    from gpuprof.capture.job.hangseries import series_lines

    good = {"rank": 0, "series": {"bucket": 1, "first_step": [0], "step_time_us": [5000.0], "data_wait_us": ["x"]}}
    lines = series_lines([good, {"rank": 1, "series": series}])
    assert [ln for ln in lines if ln.startswith("| 0 |")] == ["| 0 | 1 | 5.0 | 5.0 | - | - | - |"]  # bad column: '-'
    assert not [ln for ln in lines if ln.startswith("| 1 |")]
