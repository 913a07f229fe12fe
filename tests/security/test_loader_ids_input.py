"""Hostile ids in a stranger's trace: an External id, correlation, device or stream beyond int64.

The analysis keeps them in int64 columns. Before, such a value made ``gpuprof analyze`` end with an internal
error (``OverflowError``, exit 3) when the columns were built. Now an int beyond int64 is a one-line input
error naming the field (exit 2), and one written as a string is read as absent (-1), as any unreadable string
id is; the trace's other events are analysed as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.trace.load import load_trace

BIG = 2**64


def _trace(tmp_path: Path, event: dict[str, object]) -> Path:
    ok = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5.0, "dur": 2.0,
          "args": {"External id": 3}}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [event, ok]}))
    return p


def _analyze(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(path), "--format", "json", "-o", "/dev/null"],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("cat", "key"), [("python_function", "External id"), ("cpu_op", "External id"),
                                          ("cpu_op", "external id"), ("cuda_runtime", "correlation"),
                                          ("kernel", "device"), ("kernel", "stream"), ("kernel", "correlation")])
@pytest.mark.parametrize("value", [BIG, -BIG, 2**63])
def test_an_int_id_beyond_int64_is_one_line_naming_the_field(tmp_path: Path, cat: str, key: str, value: int) -> None:
    p = _trace(tmp_path, {"ph": "X", "cat": cat, "name": "f", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2.0,
                          "args": {key: value}})
    r = _analyze(p)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0] and key in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_the_largest_int64_id_is_kept(tmp_path: Path) -> None:
    top = 2**63 - 1
    p = _trace(tmp_path, {"ph": "X", "cat": "cpu_op", "name": "f", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
                          "args": {"External id": top}})
    t = load_trace(p)
    assert sorted(o.ext for o in t.ops) == [3, top]
    assert _analyze(p).returncode in (0, 1)  # a report (1: findings), no internal error


@pytest.mark.parametrize(("cat", "key"), [("cpu_op", "External id"), ("cuda_runtime", "correlation"),
                                          ("kernel", "device"), ("kernel", "stream")])
def test_a_string_id_beyond_int64_reads_as_absent(tmp_path: Path, cat: str, key: str) -> None:
    p = _trace(tmp_path, {"ph": "X", "cat": cat, "name": "f", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2.0,
                          "args": {key: str(BIG), "correlation": 1} if key != "correlation" else {key: str(BIG)}})
    r = _analyze(p)
    assert r.returncode in (0, 1), r.stderr  # analysed: no internal error (3)
    t = load_trace(p)
    ev = (t.ops + t.runtime + t.kernels)[0] if cat != "cpu_op" else next(o for o in t.ops if o.name == "f")
    got = {"External id": ev.ext, "correlation": ev.corr, "device": ev.device, "stream": ev.stream}[key]
    assert got != BIG and got >= -1
