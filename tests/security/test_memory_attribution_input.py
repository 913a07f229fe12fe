"""Hostile snapshot parts the memory attribution reads: module names from frames, record_function annotations,
the capture's "gpuprof" facts (registered tensors, the OOM request, pinned host memory). Each is plain data: no
traceback, a documented exit code, bounded work, and nothing from the file obeyed by the terminal or the page."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.snapshots import MiB, SnapshotBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

MODULE_PY = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py"


def _snapshot_with_modules(names: list[str]) -> dict[str, Any]:
    """One allocation per hostile name, each in a module forward whose file and function are that name."""
    b = SnapshotBuilder()
    for name in names:
        frames = [{"filename": f"/home/u/{name}.py", "line": 3, "name": name},
                  {"filename": MODULE_PY, "line": 1736, "name": "_call_impl"},
                  {"filename": f"/tmp/torchinductor_u/ab/{name}.py", "line": 9, "name": "call"},
                  {"filename": "/home/u/train.py", "line": 5, "name": "main"}]
        b.alloc(1 * MiB, frames)
    return b.snapshot()


def _run(path: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["memory", str(path), *args], env={"COLUMNS": "120"})


def test_hostile_module_names_stay_text_in_terminal_json_and_page(tmp_path: Path) -> None:
    snap = _snapshot_with_modules(HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME])
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(snap))
    res = _run(p)
    assert res.exit_code in (0, 1), res.output
    assert "\x1b" not in res.output and "\x07" not in res.output and "\x9b" not in res.output
    assert all(len(line) < 5000 for line in res.output.splitlines())
    js = _run(p, "--format", "json")
    dev = json.loads(js.output)["sections"][0]["devices"][0]
    assert dev["categories"]["activations"] == len(HTML_HOSTILE + TEXT_HOSTILE) * MiB + MiB
    page = tmp_path / "p.html"
    assert _run(p, "--html", str(page)).exit_code in (0, 1)
    html = page.read_text()
    body = html[html.index('<script id="data"'):]
    assert "</script><script>" not in body.split("</script>", 1)[0]
    assert "<img" not in html and "<svg" not in html


@pytest.mark.parametrize("meta", [
    {"tensors": "not a list"},
    {"tensors": [None, 5, "x", {"ptr": "abc", "device": [], "category": "parameters"},
                 {"ptr": -1, "category": "parameters"}, {"ptr": 2 ** 70, "category": "gradients"},
                 {"ptr": 1, "device": 10 ** 9, "category": {"a": 1}}]},
    {"oom": {"device": "zero", "requested_bytes": -5}},
    {"oom": {"device": 0, "requested_bytes": 2 ** 80, "device_free_bytes": "lots"}},
    {"oom": [1, 2]},
    {"host_pinned": {"allocated_bytes": "x", "active_bytes": -3}},
    {"host_pinned": 7},
    {"devices": [{"id": 0, "total_memory": 1 << 30, "free_memory": -1}]},
])
def test_malformed_capture_facts_are_ignored_not_fatal(tmp_path: Path, meta: dict[str, Any]) -> None:
    b = SnapshotBuilder()
    b.alloc(4 * MiB, b.stack(("/home/u/train.py", 10, "main")))
    snap = b.snapshot(device_info=False)
    snap["gpuprof"] = meta
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(snap))
    res = _run(p, "--format", "json")
    assert res.exit_code in (0, 1), res.output
    dev = json.loads(res.output)["sections"][0]["devices"][0]
    cats = dev["categories"]
    assert sum(v for k, v in cats.items() if k != "non_pytorch") == dev["reserved_bytes"]


def test_hostile_annotations_are_bounded_and_ignored_when_malformed(tmp_path: Path) -> None:
    b = SnapshotBuilder()
    b.alloc(4 * MiB, [])
    snap = b.snapshot()
    t = next(e["time_us"] for e in snap["device_traces"][0] if e["action"] == "alloc")
    junk: list[Any] = [None, 5, {"stage": "START"}, {"stage": "END", "name": "x", "time_us": "soon"},
                       {"stage": "START", "name": HUGE_NAME, "device": 0, "time_us": t - 5},
                       {"stage": "END", "name": HUGE_NAME, "device": 0, "time_us": t + 5}]
    # many nested ranges that name no stage, around one that does: the look-up stays bounded
    junk += [{"stage": "START", "name": "## backward ##", "device": 0, "time_us": t - 10},
             {"stage": "END", "name": "## backward ##", "device": 0, "time_us": t + 10}]
    junk += [{"stage": s, "name": f"r{i}", "device": 0, "time_us": t - 1 if s == "START" else t + 1}
             for i in range(5000) for s in ("START", "END")]
    snap["external_annotations"] = junk
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(snap))
    res = _run(p, "--format", "json")
    assert res.exit_code in (0, 1), res.output
    stages = json.loads(res.output)["sections"][0]["devices"][0]["stages"]
    assert [r["stage"] for r in stages] == ["backward"]
