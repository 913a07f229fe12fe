"""The memory page's chart: round axis values (not 267.75/535.50 MiB), a labelled capacity line,
and a marker at each out-of-memory event. The chart's number functions run in node when it is there."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuprof.memory.analysis import analyze_memory
from gpuprof.memory.html import _SCRIPT, build_page_data
from gpuprof.memory.snapshot import load_snapshot

NODE = shutil.which("node")
MiB, GiB = 2**20, 2**30


def _pure_js() -> str:
    """The chart's functions of numbers only (between the ``// <pure>`` markers of the page script)."""
    m = re.search(r"// <pure>.*?\n(.*?)// </pure>", _SCRIPT, re.S)
    assert m, "the page script lost its <pure> section"
    return m.group(1)


def _node(expr: str) -> object:
    if NODE is None:
        pytest.skip("node is not installed")
    fmt = ('function fmtB(n){ const u=["B","KiB","MiB","GiB","TiB"]; let i=0, v=Math.abs(n);'
           ' while(v>=1024&&i<u.length-1){v/=1024;i++;} return (i?v.toFixed(2):Math.round(v))+" "+u[i]; }\n')
    out = subprocess.run([NODE, "-e", fmt + _pure_js() + f"\nconsole.log(JSON.stringify({expr}));"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_oom_events_reach_the_page(oom_snapshot: Path) -> None:
    data = load_snapshot(oom_snapshot)
    section, findings, analyses = analyze_memory(data)
    dev = build_page_data(data, analyses, findings)["devices"][0]
    assert len(dev["ooms"]) == 1
    oom = dev["ooms"][0]
    assert oom["requested"] == 100 * MiB and oom["site"] == "/home/u/proj/model.py:44 (attention)"
    assert dev["t"][0] <= oom["t"] <= dev["t"][-1]  # on the chart's time axis
    assert dev["total_memory"] == 1 * GiB


@pytest.mark.parametrize("top, labels", [
    (562.3 * MiB, ["0 MiB", "100 MiB", "200 MiB", "300 MiB", "400 MiB", "500 MiB"]),
    (13.9 * GiB, ["0 GiB", "2 GiB", "4 GiB", "6 GiB", "8 GiB", "10 GiB", "12 GiB"]),
    (1.2 * GiB, ["0 GiB", "0.2 GiB", "0.4 GiB", "0.6 GiB", "0.8 GiB", "1 GiB", "1.2 GiB"]),
    (900, ["0 B", "200 B", "400 B", "600 B", "800 B"]),
])
def test_axis_values_are_round(top: float, labels: list[str]) -> None:
    ticks = _node(f"byteTicks({top})")
    assert isinstance(ticks, list)
    assert [t["label"] for t in ticks] == labels
    assert all(t["v"] <= top * (1 + 1e-9) for t in ticks)


def test_time_axis_values_are_round() -> None:
    ticks = _node("timeTicks(0.0123, 0.2789)")
    assert isinstance(ticks, list)
    assert [t["label"] for t in ticks] == ["0.05", "0.10", "0.15", "0.20", "0.25"]


def test_capacity_and_oom_are_labelled() -> None:
    marks = _node('overlays({total_memory: 34089730048, ooms: [{t: 1.5, requested: 104857600}]}, fmtB)')
    assert marks == [
        {"kind": "capacity", "v": 34089730048, "label": "device capacity 31.75 GiB"},
        {"kind": "oom", "t": 1.5, "label": "OOM: 100.00 MiB requested"},
    ]


def test_page_script_parses(tmp_path: Path) -> None:
    if NODE is None:
        pytest.skip("node is not installed")
    js = tmp_path / "page.js"
    js.write_text(_SCRIPT, encoding="utf-8")
    out = subprocess.run([NODE, "--check", str(js)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
