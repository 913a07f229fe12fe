"""Exit codes a CI gate can trust: never exit 0 with "No findings" for a trace gpuprof could not read,
or for an analysis in which a rule crashed.

Runs the real command line in a subprocess (``python -m gpuprof``), as a CI job would.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK
from gpuprof.runner import STRICT_ENV
from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[2]
ALEXNET = ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
           "benchmark_result_2869224_1695835535_trace.json.gz")


def _gpuprof(*args: str, env: dict[str, str] | None = None, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    e = {**os.environ, **(env or {})}
    e["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    e.pop(STRICT_ENV, None)  # what a user runs: no test-suite strict mode
    return subprocess.run([sys.executable, "-m", "gpuprof", *args], capture_output=True, text=True, env=e,
                          timeout=300)


def _write(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_begin_end_trace_is_analysed_not_silently_empty(tmp_path: Path) -> None:
    """The issue's case: a real trace written with B/E events used to give "No findings", exit 0."""
    trace = json.loads(gzip.decompress(shared_path(*ALEXNET).read_bytes()))
    x_path = tmp_path / "x.json"
    x_path.write_text(json.dumps(trace))
    be = []
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") == "kernel":  # GPU kernels never nest on a stream
            begin = {k: v for k, v in ev.items() if k != "dur"}
            be += [{**begin, "ph": "B"}, {"ph": "E", "pid": ev["pid"], "tid": ev["tid"], "ts": ev["ts"] + ev["dur"]}]
        else:
            be.append(ev)
    be_path = tmp_path / "be.json"
    be_path.write_text(json.dumps({**trace, "traceEvents": be}))
    x = _gpuprof("analyze", str(x_path), "--format", "json")
    got = _gpuprof("analyze", str(be_path), "--format", "json")
    assert x.returncode in (EXIT_OK, EXIT_FINDINGS) and got.returncode == x.returncode, got.stderr
    xk = json.loads(x.stdout)["traces"][0]["top_kernels"]
    assert xk and json.loads(got.stdout)["traces"][0]["top_kernels"] == xk


@pytest.mark.parametrize("events", [
    [{"ph": "B", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.0}],
    [{"ph": "b", "cat": "cpu_op", "name": "a", "id": 1, "pid": 1, "tid": 1, "ts": 1.0},
     {"ph": "e", "cat": "cpu_op", "name": "a", "id": 1, "pid": 1, "tid": 1, "ts": 3.0}],
    [{"ph": "X", "cat": "other_tool", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}],
    [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}],
], ids=["unclosed-B", "async-b-e", "unknown-category", "metadata-only"])
def test_nothing_usable_is_exit_2_in_one_line(tmp_path: Path, events: list[dict[str, Any]]) -> None:
    p = _write(tmp_path, events)
    r = _gpuprof("analyze", str(p))
    assert r.returncode == EXIT_BAD_INPUT, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and "No findings" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuprof: error: {p}: no events gpuprof can analyse")
    assert "Traceback" not in r.stderr


_BREAK_GP101 = '''
from gpuprof.rules.base import get_rule

def _broken(self, ctx):
    raise ZeroDivisionError("injected in GP101")

get_rule("GP101").check = _broken
'''


def test_crashing_rule_is_exit_3_naming_code_and_trace(tmp_path: Path) -> None:
    trace = shared_path(*ALEXNET)
    plugin = tmp_path / "plug"
    plugin.mkdir()
    # sitecustomize runs at interpreter start in the child: the rule is broken in the real CLI process
    (plugin / "sitecustomize.py").write_text(_BREAK_GP101)
    r = _gpuprof("analyze", str(trace), pythonpath=str(plugin))
    assert r.returncode == EXIT_INTERNAL, (r.returncode, r.stdout[-500:], r.stderr)
    assert r.stdout == ""  # no report that could pass for a complete one
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "rule GP101 failed" in lines[0] and str(trace) in lines[0]
    assert "ZeroDivisionError: injected in GP101" in lines[0] and "Traceback" not in r.stderr
    # the traceback, under GPUPROF_DEBUG=1 only; still exit 3
    d = _gpuprof("analyze", str(trace), env={"GPUPROF_DEBUG": "1"}, pythonpath=str(plugin))
    assert d.returncode == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in d.stderr and "_broken" in d.stderr
    assert "traceback of rule GP101" in d.stderr
    # --ignore GP101: the rule does not run, the analysis is complete again
    ok = _gpuprof("analyze", str(trace), "--ignore", "GP101", pythonpath=str(plugin))
    assert ok.returncode in (EXIT_OK, EXIT_FINDINGS), ok.stderr
