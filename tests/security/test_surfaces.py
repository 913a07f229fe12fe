"""The README's "Limits" and "Untrusted names, safe outputs" promises on the surfaces added since they were made.

The command line and capture have their tests (test_limits_inputs,
test_render_names, test_outputs_*); here the same promises are held on the
TensorBoard plugin (a shared logdir), the node-report merge (reports from
other machines), rank 0's gather (summaries from the other ranks) and
capture's own analysis. docs/security-tests.md maps each promise and
surface to its test.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuprof.render.safe import UNSAFE_CODEPOINTS
from gpuprof_testing.realtraces import shared_path

from .conftest import HUGE_NAME, TEXT_HOSTILE
from .test_tbplugin_files import _get, _plugin, _until_ready

REPO = Path(__file__).resolve().parents[2]
RANK0 = ("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")
RANK1 = ("hta", "HolisticTraceAnalysis", "tests", "data", "trace_filter", "sampled_rank-1.json.gz")
MAX_SHOWN = 1000  # one name is shown with at most this many characters (README)


def _inert(text: str) -> None:
    bad = [c for c in text if (ord(c) in UNSAFE_CODEPOINTS or c == "\x1b") and c != "\n"]
    assert not bad, f"live control characters reached the output: {bad[:5]}"


def _logdir_listing(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.lstat().st_size) for p in root.rglob("*"))


# --- TensorBoard plugin: Limits ------------------------------------------------------------------------------

def _view_errors(logdir: Path, run: str = "run") -> list[str]:
    c, _ = _plugin(logdir)
    j = _until_ready(c, f"/run?run={run}", within=60)
    return j["view"]["errors"]


def test_plugin_event_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_MAX_EVENT_BYTES", "4096")
    logdir = tmp_path / "logdir"
    big = {"ph": "X", "cat": "cpu_op", "name": "a" * 10_000, "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    (logdir / "run").mkdir(parents=True)
    (logdir / "run" / "w.pt.trace.json").write_text(json.dumps({"traceEvents": [big] * 3}))
    errors = _view_errors(logdir)
    assert len(errors) == 1 and "GPUPROF_MAX_EVENT_BYTES" in errors[0] and "w.pt.trace.json" in errors[0]


def test_plugin_gzip_bomb(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    # 160 MB of whitespace inside the events list: a few hundred KB of gzip
    with gzip.open(logdir / "run" / "w.pt.trace.json.gz", "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [')
        for _ in range(160):
            fh.write(b" " * (1 << 20))
        fh.write(b"]}")
    errors = _view_errors(logdir)
    assert len(errors) == 1 and "GPUPROF_MAX_GZIP_RATIO" in errors[0]


def test_plugin_deep_nesting(tmp_path: Path) -> None:
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    deep = "[" * 100_000 + "]" * 100_000
    (logdir / "run" / "w.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "args": ' + deep + "}]}")
    errors = _view_errors(logdir)
    assert len(errors) == 1 and "w.pt.trace.json" in errors[0] and "\n" not in errors[0]


def _memory_status(logdir: Path) -> dict[str, Any]:
    c, _ = _plugin(logdir)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        j = _get(c, "/memory?run=run&i=0")
        if j["status"] != "pending":
            return j
        time.sleep(0.05)
    raise AssertionError("memory page still pending")


@pytest.mark.parametrize("kind, words", [
    ("device", "GPUPROF_MAX_DEVICE_INDEX"),
    ("shared", "GPUPROF_MAX_SNAPSHOT_ITEMS_PER_BYTE"),
    ("memo", "more memory than"),
    ("code", "plain data"),
])
def test_plugin_snapshot_limits(tmp_path: Path, kind: str, words: str) -> None:
    """The memory page is built in a child whose unpickler memory is capped (TensorBoard's own process is not)."""
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    path = logdir / "run" / "x.memory_snapshot.pickle"
    if kind == "device":
        path.write_bytes(pickle.dumps({"segments": [{"device": 10**10, "address": 0, "total_size": 1, "blocks": []}],
                                       "device_traces": []}))
    elif kind == "shared":
        one = [{"address": 0, "size": 1, "state": "active_allocated", "frames": []}] * 1000
        blocks = [one] * 1000
        path.write_bytes(pickle.dumps({"segments": [{"device": 0, "address": 0, "total_size": 10**9,
                                                     "blocks": b} for b in blocks], "device_traces": []}))
    elif kind == "memo":  # 9 bytes that make the C unpickler size a memo table of gigabytes
        path.write_bytes(b"\x80\x02}r" + (0x0FFFFFF0).to_bytes(4, "little") + b".")
    else:
        path.write_bytes(pickle.dumps(os.system))  # a pickle that would import and call code
    j = _memory_status(logdir)
    assert j["status"] == "error" and words in j["error"], j
    assert "x.memory_snapshot.pickle" in j["error"] and "\n" not in j["error"]


# --- TensorBoard plugin: names and outputs --------------------------------------------------------------------

def test_plugin_serves_hostile_names_as_inert_json_and_writes_nothing(tmp_path: Path) -> None:
    from gpuprof_testing.tracegen import TraceBuilder

    logdir = tmp_path / "logdir"
    names = TEXT_HOSTILE + ["</script><script>alert(1)</script>", HUGE_NAME]
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            for n in names:
                b.cpu(us=50, name=n)
            b.gemm(us=2000)
    (logdir / "run").mkdir(parents=True)
    b.write(logdir / "run" / "w.pt.trace.json")
    before = _logdir_listing(logdir)
    c, _ = _plugin(logdir)
    _until_ready(c, "/run?run=run")
    raw = c.get("/run?run=run").get_data(as_text=True)
    assert "<" not in raw and ">" not in raw  # script_json: no markup can be read out of it, even misused
    _inert(raw)
    doc = json.loads(raw)
    assert doc["status"] == "ready"
    assert _logdir_listing(logdir) == before  # the plugin wrote nothing into the logdir


# --- node-report merge -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from gpuprof.distributed.summary import summarize
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    s0, s1 = (msgspec.to_builtins(summarize(compute_metrics(load_trace(shared_path(*p))))) for p in (RANK0, RANK1))
    return {"s0": s0, "s1": s1, "dir": tmp_path_factory.mktemp("node")}


def _node_report(path: Path, *ranks: dict[str, Any]) -> Path:
    from gpuprof.report import SCHEMA_VERSION

    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "sections": [
        {"kind": "rank_summaries", "version": 1, "ranks": list(ranks)}]}))
    return path


def _run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120"))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(TEXT_HOSTILE) + 1))
def test_node_merge_renders_hostile_rank_paths_inert(node: dict[str, Any], i: int) -> None:
    name = (TEXT_HOSTILE + [HUGE_NAME])[i]
    a = _node_report(node["dir"] / f"a{i}.json", dict(node["s0"], path=name))
    b = _node_report(node["dir"] / f"b{i}.json", node["s1"])
    for fmt in ("terminal", "markdown"):
        r = _run_cli("analyze", a, b, "--format", fmt)
        assert r.returncode in (0, 1), r.stderr
        _inert(r.stdout)
        assert max(len(line) for line in r.stdout.splitlines()) < 2 * MAX_SHOWN
    r = _run_cli("analyze", a, b, "--format", "json")
    doc = json.loads(r.stdout)
    sec = next(s for s in doc["sections"] if s["kind"] == "cross_rank")
    assert sec["ranks"][0]["path"] == name  # JSON keeps the exact name


def test_node_merge_deep_nesting_and_output_onto_an_input(node: dict[str, Any]) -> None:
    deep = node["dir"] / "deep.json"
    deep.write_text('{"schema_version": "1.1", "sections": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    b = _node_report(node["dir"] / "b.json", node["s1"])
    r = _run_cli("analyze", deep, b)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "deep.json" in r.stderr
    a = _node_report(node["dir"] / "a.json", node["s0"])
    before = a.read_bytes()
    r = _run_cli("analyze", a, b, "--format", "json", "-o", a)
    assert r.returncode == 2 and "a.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert a.read_bytes() == before


def test_node_merge_output_replaces_a_planted_symlink(node: dict[str, Any], tmp_path: Path) -> None:
    a = _node_report(node["dir"] / "a.json", node["s0"])
    b = _node_report(node["dir"] / "b.json", node["s1"])
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "merged.json"
    out.symlink_to(victim)
    r = _run_cli("analyze", a, b, "--format", "json", "-o", out)
    assert r.returncode in (0, 1), r.stderr
    assert victim.read_text() == "keep" and not out.is_symlink() and json.loads(out.read_text())["sections"]


# --- rank 0's gather -------------------------------------------------------------------------------------------

def _gather(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], other: dict[str, Any]) -> Path:
    torch = pytest.importorskip("torch")
    from gpuprof.capture.end import gather
    from gpuprof.distributed.reports import RankSummaries
    from gpuprof.distributed.summary import RankSummary
    from gpuprof.report import Report

    store = torch.distributed.HashStore()
    store.set("gpuprof/run/summary/1", msgspec.msgpack.encode(other))
    monkeypatch.setattr(gather, "_store_and_group", lambda: (store, 0, 2))
    mine = msgspec.convert(node["s0"], RankSummary)
    path = gather.gather_cross_rank(Report(command="capture", sections=[RankSummaries([mine])]), tmp_path, "run",
                                    wait_s=5)
    assert path is not None
    return path


@pytest.mark.parametrize("i", range(len(TEXT_HOSTILE) + 1))
def test_gather_renders_a_hostile_rank_path_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   node: dict[str, Any], i: int) -> None:
    name = (TEXT_HOSTILE + [HUGE_NAME])[i]
    path = _gather(tmp_path, monkeypatch, node, dict(node["s1"], path=name))
    md = (tmp_path / "report.cross_rank.md").read_text()
    _inert(md)
    assert max(len(line) for line in md.splitlines()) < 2 * MAX_SHOWN
    sec = next(s for s in json.loads(path.read_text())["sections"] if s["kind"] == "cross_rank")
    assert sec["ranks"][1]["path"] == name


def test_gather_replaces_planted_symlinks_and_keeps_the_old_file_on_a_full_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]) -> None:
    import errno

    from gpuprof import atomic

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "report.cross_rank.json").symlink_to(victim)
    (tmp_path / "report.cross_rank.md").symlink_to(victim)
    path = _gather(tmp_path, monkeypatch, node, node["s1"])
    assert victim.read_text() == "keep" and not path.is_symlink()
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError):  # capture's guard turns it into one warning; the previous report stays
        _gather(tmp_path, monkeypatch, node, node["s1"])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.cross_rank.json", "report.cross_rank.md", "victim"]


# --- capture's own analysis: the limits hold there too, as one warning ------------------------------------------

def test_capture_analysis_under_a_limit_is_one_note_and_the_loop_runs_on(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    import warnings

    import gpuprof
    from gpuprof.capture import Schedule

    monkeypatch.setenv("GPUPROF_MAX_EVENT_BYTES", "64")  # every event of the trace capture writes is over it
    model = torch.nn.Linear(8, 8)
    done = 0
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with gpuprof.profile(str(tmp_path), run="r", schedule=Schedule(wait=1, warmup=1, active=2),
                             tensorboard=False, memory_history=False, print_report=False) as prof:
            for _ in range(6):
                model(torch.randn(4, 8)).sum().backward()
                prof.step()
                done += 1
    assert done == 6
    report = json.loads(next(tmp_path.glob("r/**/report.json")).read_text())
    text = json.dumps(report)
    assert "GPUPROF_MAX_EVENT_BYTES" in text, report["notes"]


# --- the command line: JSON keeps the exact names ----------------------------------------------------------------

def _strings(obj: Any) -> set[str]:
    if isinstance(obj, str):
        return {obj}
    if isinstance(obj, dict):
        return set().union(*(_strings(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(_strings(v) for v in obj)) if obj else set()
    return set()


@pytest.mark.parametrize("name", [n for n in TEXT_HOSTILE if "\x00" not in n])  # NUL: the builder's file cannot
def test_cli_json_keeps_the_exact_names(tmp_path: Path, name: str) -> None:
    from click.testing import CliRunner

    from gpuprof.cli import cli
    from gpuprof_testing.tracegen import TraceBuilder

    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.cpu(us=5000, name=name)
            b.gemm(us=2000)
    path = b.write(tmp_path / "t.pt.trace.json")
    res = CliRunner().invoke(cli, ["analyze", str(path), "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    assert name in _strings(json.loads(res.output))
