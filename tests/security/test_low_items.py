"""The low items of the second trust round, one test (or more) each.

* ``ts: 1.7e308``: no numpy overflow warning, the event left out with a note;
* ``"metadata": {"traceEvents": [1, 2]}`` before the real key: a valid trace;
* a snapshot block with ``frames: 5``: exit 0, not 3;
* click usage errors: one line;
* ``--option GP101.min_utilization=nan`` or ``=-5``: refused;
* a disk that fills at trace export: said as such, not "pass a shorter schedule".
"""

from __future__ import annotations

import errno
import json
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _invoke(*args: str | Path) -> tuple[int, str]:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    res = CliRunner().invoke(cli, [*map(str, args)])
    return res.exit_code, res.output


def _gpuprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "gpuprof", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))


def _ev(**k: Any) -> dict[str, Any]:
    return dict({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0}, **k)


# --- ts: 1.7e308 -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [dict(ts=1.7e308), dict(ts=-1.7e308), dict(dur=1.7e308), dict(ts=1e300, dur=1e300)])
def test_absurd_timestamps_raise_no_numpy_warning_and_are_noted(tmp_path: Path, bad: dict[str, float]) -> None:
    gpu = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20.0, "dur": 3.0,
           "args": {"device": 0, "stream": 7, "correlation": 1}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [_ev(**bad), _ev(ts=10.0), dict(gpu, **bad), gpu]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from numpy now fails the command
        code, text = _invoke("analyze", path, "--format", "json")
    assert code in (0, 1), text
    doc = json.loads(text)
    notes = doc["traces"][0]["notes"]
    assert any("beyond any clock" in n and n.startswith("2 events") for n in notes), notes
    assert doc["traces"][0]["step_time_mean_us"] < 1e6  # the absurd event did not become the step
    r = _gpuprof("analyze", path)  # and on the real stderr
    assert "RuntimeWarning" not in r.stderr and "overflow" not in r.stderr, r.stderr


# --- "metadata": {"traceEvents": [1, 2]} before the real key --------------------------------------------------------

@pytest.mark.parametrize("n", [5, 30_000])  # one block, and many (the chunked reader)
def test_a_nested_traceevents_key_before_the_real_one(tmp_path: Path, n: int) -> None:
    events = ",".join(json.dumps(_ev(ts=float(i * 10), name=f"aten::op{i % 7}")) for i in range(n))
    head = '{"metadata": {"traceEvents": [1, 2], "s": "\\"traceEvents\\": [", "x": [{"traceEvents": []}]}, '
    path = tmp_path / "t.json"
    path.write_text(head + '"traceEvents": [' + events + '], "displayTimeUnit": "ms"}')
    code, text = _invoke("analyze", path, "--format", "json")
    assert code in (0, 1), text
    assert json.loads(text)["traces"][0]["num_events"] == n


def test_a_trace_without_a_top_level_traceevents_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"metadata": {"traceEvents": [' + ",".join(json.dumps(_ev()) for _ in range(3)) + ']}}')
    code, text = _invoke("analyze", path)
    assert code == 2 and "t.json" in text and len(text.strip().splitlines()) == 1, text


# --- snapshot frames: 5 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["block", "segment", "device_trace", "history"])
def test_a_snapshot_with_frames_not_a_list_is_read(tmp_path: Path, where: str) -> None:
    from gpuprof_testing.snapshots import MiB, SnapshotBuilder

    b = SnapshotBuilder()
    b.alloc(4 * MiB)
    b.alloc(2 * MiB)
    snap = b.snapshot()
    seg = snap["segments"][0]
    if where == "block":
        seg["blocks"][0]["frames"] = 5
    elif where == "segment":
        seg["frames"] = 5
    elif where == "device_trace":
        snap["device_traces"][0][0]["frames"] = 5
    else:
        seg["blocks"][0].pop("frames", None)
        seg["blocks"][0]["history"] = [{"addr": seg["blocks"][0]["address"], "real_size": 4 * MiB, "frames": 5}]
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(snap))
    for extra in ((), ("--format", "json")):
        code, text = _invoke("memory", path, *extra)
        assert code in (0, 1), text
    html = tmp_path / "s.html"
    code, text = _invoke("memory", path, "--html", html)
    assert code in (0, 1) and html.exists(), text


# --- click usage errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["analyze", "--bogus", "x"], "No such option '--bogus'"),
    (["analyze"], "Missing argument 'PATHS...'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
    (["analyze", "x", "--jobs", "0"], "'--jobs'"),
    (["analyze", "x", "--format", "yaml"], "'--format'"),
    (["memory", "--bogus"], "No such option '--bogus'"),
])
def test_usage_errors_are_one_line_with_exit_2(args: list[str], words: str) -> None:
    r = _gpuprof(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("gpuprof: error: ") and words in lines[0] and "--help" in lines[0]


def test_bare_gpuprof_still_prints_its_help() -> None:
    r = _gpuprof()
    assert "Commands:" in r.stdout + r.stderr and "analyze" in r.stdout + r.stderr


# --- --option values ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["nan", "-5", "inf", "-inf", "1e400", "-0.1"])
def test_option_values_that_would_silently_turn_a_rule_off_are_refused(tmp_path: Path, value: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [_ev()]}))
    r = _gpuprof("analyze", path, "--option", f"GP101.min_utilization={value}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "GP101.min_utilization" in r.stderr and "finite number of 0 or more" in r.stderr


def test_option_values_given_to_capture_are_checked_the_same_way() -> None:
    from gpuprof.codes import parse_options

    for bad in (float("nan"), -5, float("inf")):
        with pytest.raises(ValueError, match="finite number of 0 or more"):
            parse_options({"GP101.min_utilization": bad})
    assert parse_options({"GP101.min_utilization": 0.0}) == {"GP101": {"min_utilization": 0.0}}


# --- a disk filling at trace export --------------------------------------------------------------------------------

def _capture(logdir: Path, before_export: Any = None) -> Any:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    model = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(str(logdir), run="r", schedule=Schedule(wait=1, warmup=1, active=2),
                             tensorboard=False, memory_history=False, print_report=False) as prof:
            for i in range(8):
                model(x).sum().backward()
                if i == 2 and before_export is not None:
                    before_export()
                prof.step()
    return prof, [str(w.message) for w in caught if "gpuprof" in str(w.message)]


def test_enospc_at_trace_export_is_said_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")

    def full(self: Any, path: str, *a: Any, **k: Any) -> None:
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", full)
    prof, warned = _capture(tmp_path)
    assert any("trace export failed" in w and "No space left on device" in w for w in warned), warned
    report = json.loads(next(tmp_path.glob("r/**/report.json")).read_text())
    notes = report["notes"]
    assert any(n.startswith("the trace export failed (OSError: [Errno 28] No space left on device)") and
               "no trace was written" in n for n in notes), notes
    assert not any("shorter schedule" in n for n in notes), notes


@pytest.fixture
def small_tmpfs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 1 MiB tmpfs (root only): writes really fail with ENOSPC once it is full."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_real_full_disk_at_trace_export(small_tmpfs: Path) -> None:
    def fill() -> None:
        with open(small_tmpfs / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError as err:
                assert err.errno == errno.ENOSPC

    prof, warned = _capture(small_tmpfs, before_export=fill)
    # the training went on; what was lost is said (the export, and the reports that could not be written)
    assert any("No space left on device" in w for w in warned), warned
    result = prof.result
    assert result is not None
    notes = list((result.report or {}).get("notes", []))
    assert any(n.startswith("the trace export failed") and "No space left on device" in n for n in notes), notes
    assert not any("shorter schedule" in n for n in notes), notes
