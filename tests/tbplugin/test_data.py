"""The TensorBoard plugin's data side: runs found under a logdir, the views built from gpuprof's analysis,
the comparison of two runs, the worker cache, and the HTTP routes (werkzeug's test client; the browser
tests are in test_browser.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof.tbplugin.data import analyse_trace_file, compare_views, read_report, run_view
from gpuprof.tbplugin.runs import find_runs
from gpuprof.tbplugin.store import Store
from gpuprof_testing.realtraces import shared_path, v100_samples
from gpuprof_testing.tracegen import TraceBuilder

pytest.importorskip("tensorboard", reason="the plugin needs the tensorboard package (gpuprof[tensorboard])")


def _trace(path: Path, loader_ms: float = 0.0, steps: int = 3) -> Path:
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            if loader_ms:
                b.dataloader(ms=loader_ms)
            b.gemm(us=2000)
            b.cpu(us=100)
    path.parent.mkdir(parents=True, exist_ok=True)
    return b.write(path)


def _views(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for r in find_runs(root):
        res: dict[Path, Any] = {p: analyse_trace_file(p) for p in r.traces}
        out[r.name] = run_view(r, root, res)
    return out


def test_runs_are_found_by_layout_without_following_links(tmp_path: Path) -> None:
    _trace(tmp_path / "a" / "w.1.pt.trace.json")
    _trace(tmp_path / "deep" / "er" / "w.pt.trace.json")
    (tmp_path / "job" / "rank0").mkdir(parents=True)
    (tmp_path / "job" / "rank1").mkdir()
    _trace(tmp_path / "job" / "rank0.1.pt.trace.json")
    for r in (0, 1):
        (tmp_path / "job" / f"rank{r}" / "report.json").write_text("{}")
    (tmp_path / "job" / "rank0.1.memory_snapshot.pickle").write_bytes(b"")
    _trace(tmp_path / ".hidden" / "w.pt.trace.json")
    (tmp_path / "a" / "report.md").write_text("not a trace")
    (tmp_path / "a" / "x.memory_stats.gpuprof.json").write_text("{}")  # gpuprof's own output, not a trace
    os.symlink(tmp_path / "a", tmp_path / "link-to-a")
    os.symlink(tmp_path / "a" / "w.1.pt.trace.json", tmp_path / "deep" / "linked.pt.trace.json")
    runs = {r.name: r for r in find_runs(tmp_path)}
    assert sorted(runs) == ["a", "deep/er", "job"]  # no ".hidden", no "link-to-a", the rank dirs belong to "job"
    assert [p.name for p in runs["a"].traces] == ["w.1.pt.trace.json"]
    assert [p.parent.name for p in runs["job"].reports] == ["rank0", "rank1"]
    assert [p.name for p in runs["job"].snapshots] == ["rank0.1.memory_snapshot.pickle"]
    assert runs["job"].summary()["capture"] is True and runs["a"].summary()["capture"] is False


def test_view_of_a_run_with_per_step_breakdowns_and_the_reports_runtime_findings(tmp_path: Path) -> None:
    _trace(tmp_path / "run" / "w.pt.trace.json", loader_ms=3.0, steps=4)
    report = {"schema_version": "1.1", "traces": [], "sections": [{"kind": "capture", "steps": 40,
              "step_time_median_ms": 5.0, "data_loading_share": 0.5}], "notes": ["a note"], "failed_rules": [],
              "findings": [{"code": "GP601", "name": "x", "severity": "warning", "message": "m", "advice": "a",
                            "evidence": [], "cost_us_per_step": 10.0, "cost_share": 0.1, "location": None,
                            "origin": "runtime", "source": None},
                           {"code": "GP102", "origin": "trace", "message": "the report's copy of a trace finding"}]}
    (tmp_path / "run" / "report.json").write_text(json.dumps(report))
    v = _views(tmp_path)["run"]
    assert v["kind"] == "capture" and v["capture"]["steps"] == 40
    t = v["traces"][0]
    assert [s["id"] for s in t["steps"]] == t["summary"]["step_ids"] and len(t["steps"]) == 4
    for s in t["steps"]:  # the parts add up to the step (the metric's definition), per step
        assert sum(s["breakdown_us"].values()) == pytest.approx(s["time_us"], rel=1e-6)
        # 3 ms of loading per step, less what the previous step's queued kernel covers (kernel comes first)
        assert 0 < s["breakdown_us"]["data_loading"] <= 3000 * 1.001
    # the means the report gives are the means of the per-step rows
    for k, mean in t["summary"]["breakdown_us"].items():
        assert mean == pytest.approx(sum(s["breakdown_us"][k] for s in t["steps"]) / 4, rel=1e-6, abs=1e-6)
    codes = [(f["code"], f["origin"]) for f in v["findings"]]
    # the one finding flow, as `gpuprof analyze RUN`: the trace's GP102 is folded into the runtime GP601
    assert ("GP601", "runtime") in codes and ("GP102", "trace") not in codes
    (gp601,) = [f for f in v["findings"] if f["code"] == "GP601"]
    assert {"kind": "supersedes", "code": "GP102", "part": None, "count": 1} in gp601["links"]
    assert v["notes"][0] == "a note"


def test_broken_report_and_trace_are_one_line_errors_not_crashes(tmp_path: Path) -> None:
    _trace(tmp_path / "r" / "ok.pt.trace.json")
    (tmp_path / "r" / "bad.pt.trace.json").write_text("{ not json")
    (tmp_path / "r" / "report.json").write_text("[1, 2]")
    with pytest.raises(Exception) as err:
        analyse_trace_file(tmp_path / "r" / "bad.pt.trace.json")
    run = find_runs(tmp_path)[0]
    res: dict[Path, Any] = {run.traces[0]: str(err.value), run.traces[1]: analyse_trace_file(run.traces[1])}
    v = run_view(run, tmp_path, res)
    assert len(v["traces"]) == 1
    assert any("bad.pt.trace.json" in e for e in v["errors"]) and any("report.json" in e and "schema" in e for e in v["errors"])
    assert all("\n" not in e for e in v["errors"])
    with pytest.raises(Exception, match="not a valid JSON report"):
        (tmp_path / "r" / "report.json").write_text("{")
        read_report(tmp_path / "r" / "report.json")


def test_per_rank_table_and_cross_rank_view_from_two_real_ranks(tmp_path: Path) -> None:
    # HTA's sampled 2-rank traces (distributedInfo rank 0 and 1), copied into one run of a scratch logdir
    run = tmp_path / "job"
    run.mkdir()
    src0 = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "timeline_analysis", "sampled_rank-0.json.gz")
    src1 = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "trace_filter", "sampled_rank-1.json.gz")
    shutil.copy(src0, run / src0.name)
    shutil.copy(src1, run / src1.name)
    v = _views(tmp_path)["job"]
    assert [r["rank"] for r in v["ranks"]] == [0, 1]
    for r, t, x in zip(v["ranks"], v["traces"], v["cross_rank"]["ranks"], strict=True):
        assert r["steps"] == t["summary"]["num_steps"]
        assert r["step_time_us"] == pytest.approx(t["summary"]["step_time_us"])
        assert r["gpu_utilization"] == pytest.approx(t["summary"]["gpu_utilization"])
        # one source of numbers: the Ranks table says what the cross-rank table says (no "vs fastest")
        assert r["step_time_us"] == x["step_us"] and r["wait_us"] == x["wait_us"] and r["vs_fastest"] is None
        assert r["straggler"] == (r["rank"] in v["cross_rank"]["stragglers"])
    # the cross-rank view is gpuprof analyze's cross_rank section of the same two files, and its GP7xx findings
    from gpuprof.analysis import analyze

    report = analyze([str(p) for p in sorted(run.iterdir())])
    want = next(s for s in report.sections if s.kind == "cross_rank").to_dict()
    x = v["cross_rank"]
    assert [r.pop("path") for r in x["ranks"]] == ["job/" + src0.name, "job/" + src1.name]  # relative to the logdir
    for r in want["ranks"]:
        del r["path"]
    assert x == want
    assert [r["rank"] for r in x["ranks"]] == [0, 1] and x["world_size"] == 128 and x["backend"] == "nccl"
    # NCCL SendRecv kernels typed by the host annotations that launched them (nccl:all_to_all, ...)
    assert [c["type"] for c in x["collectives"]] == ["all_reduce", "all_gather", "all_to_all"] and x["stragglers"] == []
    assert all(r["exposed_comm_us"] > 0 for r in x["ranks"])
    cross = [f for f in v["findings"] if f.get("scope") == "cross-rank"]
    # GP706: 2 recorded steps, too few for a straggler, the ranks the others waited for named as info
    assert [f["code"] for f in cross] == [f.code for f in report.findings if f.code.startswith("GP7")] == ["GP702", "GP706"]
    assert cross[0]["trace"] is None
    # one rank alone is no job: no cross-rank view
    (run / src1.name).unlink()
    assert _views(tmp_path)["job"]["cross_rank"] is None


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_comparison_of_the_real_v100_runs_num_workers_0_then_4(tmp_path: Path) -> None:
    files = v100_samples()
    root = files[0].parent.parent
    views = _views(root)
    before, after = views["resnet50_num_workers_0"], views["resnet50_num_workers_4"]
    c = compare_views(before, after)
    assert (c["before"], c["after"]) == ("resnet50_num_workers_0", "resnet50_num_workers_4")
    d = c["diff"]  # gpuprof diff's document of the two runs
    m = {x["name"]: x for x in d["metrics"]}
    assert m["step_time"]["before"] == before["headline"]["step_time_us"]
    assert m["step_time"]["after"] < m["step_time"]["before"]  # 4 workers: faster steps
    assert m["breakdown.data_loading"]["after"] < m["breakdown.data_loading"]["before"]
    assert "GP102" in [f["code"] for f in d["findings"]["removed"]]  # the fix removed the main-process loading finding
    assert "GP102" not in [f["code"] for k in ("added", "changed", "unchanged") for f in d["findings"][k]]
    assert len(before["traces"]) == 2 and before["headline"]["steps"] == sum(t["summary"]["num_steps"] for t in before["traces"])


def test_store_never_blocks_and_reanalyses_a_changed_file(tmp_path: Path) -> None:
    store = Store(capacity=2)
    gate = threading.Event()
    calls: list[str] = []

    finished: list[bool] = []

    def slow() -> str:
        calls.append("slow")
        finished.append(gate.wait(10))
        return "done"

    assert store.get("k", 1, slow) is None
    assert store.get("k", 1, slow) is None  # queued once, not twice
    assert not finished  # the request side never waits for the job: it is still held at the gate
    gate.set()
    for _ in range(200):
        res = store.get("k", 1, slow)
        if res is not None:
            break
        time.sleep(0.01)
    assert res is not None and res.value == "done" and calls == ["slow"] and finished == [True]
    assert store.get("k", 2, lambda: "again") is None  # the file changed: analysed again

    def bad() -> None:
        from gpuprof.errors import InputError
        raise InputError("x.json", "broken")

    store.get("b", 1, bad)
    for _ in range(200):
        res = store.get("b", 1, bad)
        if res is not None:
            break
        time.sleep(0.01)
    assert res is not None and res.error == "x.json: broken"
    # stopping TensorBoard never waits for an analysis: the worker is a daemon thread
    assert [t.daemon for t in threading.enumerate() if t.name == "gpuprof-tb-analysis"] and all(
        t.daemon for t in threading.enumerate() if t.name == "gpuprof-tb-analysis")
    store.close()


# --- the HTTP routes, through werkzeug's test client -------------------------------------------------------

@pytest.fixture
def client(tmp_path: Path) -> Any:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    plugin = GpuprofPlugin(TBContext(logdir=str(tmp_path)))
    apps = plugin.get_plugin_apps()

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        return apps[environ["PATH_INFO"]](environ, start_response)

    return Client(app), plugin


def _until_ready(c: Any, url: str) -> dict[str, Any]:
    for _ in range(600):
        j = json.loads(c.get(url).get_data(as_text=True))
        if j["status"] != "pending":
            return j
        time.sleep(0.02)
    raise AssertionError(f"{url} still pending")


def test_routes_list_analyse_compare_and_serve_the_memory_viewer(client: Any, tmp_path: Path) -> None:
    from gpuprof.tbplugin import page
    from gpuprof_testing.snapshots import MiB, SnapshotBuilder

    c, plugin = client
    _trace(tmp_path / "before" / "w.pt.trace.json", loader_ms=4.0)
    _trace(tmp_path / "after" / "w.pt.trace.json")
    b = SnapshotBuilder()
    b.alloc(8 * MiB, b.stack(("/home/u/train.py", 10, "main")))
    b.dump(tmp_path / "after" / "w.1.memory_snapshot.pickle")
    assert plugin.is_active()
    runs = json.loads(c.get("/runs").get_data(as_text=True))
    assert [r["name"] for r in runs["runs"]] == ["after", "before"]
    first = json.loads(c.get("/run?run=before").get_data(as_text=True))
    assert first["status"] == "pending"  # the request returned before the analysis was done
    v = _until_ready(c, "/run?run=before")["view"]
    assert "GP102" in [f["code"] for f in v["findings"]]
    cmp = _until_ready(c, "/compare?a=before&b=after")["compare"]
    assert "GP102" in [f["code"] for f in cmp["diff"]["findings"]["removed"]]
    assert c.get("/run?run=../etc").status_code == 404
    assert c.get("/memory?run=after&i=5").status_code == 404
    assert _until_ready(c, "/memory?run=after&i=0")["status"] == "ready"
    mem = c.get("/memory.html?run=after&i=0")
    assert mem.status_code == 200 and "train.py" in mem.get_data(as_text=True)
    from gpuprof.memory.html import inline_script_hashes
    assert inline_script_hashes()[0].strip("'") in mem.headers["Content-Security-Policy"]
    idx = c.get("/index.html")
    policies = idx.headers.getlist("Content-Security-Policy")
    assert page.HEADER_POLICY in policies and len(policies) == 2  # ours and TensorBoard's
    assert page.SCRIPT_HASHES[0].strip("'") in policies[1]  # TensorBoard's allows our inline script by hash
    assert "require-trusted-types-for 'script'" in idx.get_data(as_text=True)  # in the <meta> policy
    assert "http" not in page.INDEX_HTML.replace("http-equiv", "").replace("http://www.w3.org/2000/svg", "")
    js = c.get("/index.js").get_data(as_text=True)
    assert "index.html" in js and "//" not in js  # relative: works under --path_prefix


def test_tensorboards_response_validator_accepts_our_headers(client: Any, caplog: pytest.LogCaptureFixture) -> None:
    from tensorboard.backend.security_validator import SecurityValidatorMiddleware
    from werkzeug.test import Client

    c, plugin = client
    apps = plugin.get_plugin_apps()
    checked = Client(SecurityValidatorMiddleware(lambda env, sr: apps[env["PATH_INFO"]](env, sr)))
    with caplog.at_level("WARNING"):
        for url in ("/index.html", "/index.js", "/runs"):
            assert checked.get(url).status_code == 200
    assert [r.getMessage() for r in caplog.records if "Content-Security-Policy" in r.getMessage()
            or "nosniff" in r.getMessage()] == []


def test_entry_point_names_the_plugin_when_installed() -> None:
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="tensorboard_plugins") if ep.name == "gpuprof"]
    if not eps:
        pytest.skip("gpuprof is not installed with its entry points here (a worktree run); CI installs it")
    from gpuprof.tbplugin.plugin import GpuprofPlugin

    assert eps[0].value == "gpuprof.tbplugin.plugin:GpuprofPlugin"
    assert eps[0].load() is GpuprofPlugin


def test_plugin_and_its_analysis_do_not_import_torch(tmp_path: Path) -> None:
    _trace(tmp_path / "r" / "w.pt.trace.json")
    code = ("import sys; from pathlib import Path; import gpuprof.tbplugin.plugin as p; "
            "from gpuprof.tbplugin.data import analyse_trace_file; "
            f"analyse_trace_file(Path({str(tmp_path / 'r' / 'w.pt.trace.json')!r})); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_per_rank_table_from_a_torchrun_captures_rank_reports(tmp_path: Path) -> None:
    """``<run>/rank<R>/report.json`` (capture under torchrun) without traces: the ranks' own step times."""
    for rank, median_ms in ((0, 10.0), (1, 12.5)):
        d = tmp_path / "job" / f"rank{rank}"
        d.mkdir(parents=True)
        (d / "report.json").write_text(json.dumps({
            "schema_version": "1.1", "traces": [], "notes": [], "failed_rules": [],
            "sections": [{"kind": "capture", "steps": 20, "step_time_median_ms": median_ms, "data_loading_share": 0.0}],
            "findings": [{"code": "GP630", "origin": "runtime", "message": f"sync on rank {rank}"}] * (rank + 1)}))
    v = _views(tmp_path)["job"]
    assert [(r["rank"], r["step_time_us"], r["findings"], r["report"]) for r in v["ranks"]] == [
        (0, 10_000.0, 1, "job/rank0/report.json"), (1, 12_500.0, 2, "job/rank1/report.json")]
    assert v["ranks"][1]["vs_fastest"] == pytest.approx(0.25)
    assert v["headline"]["steps"] == 0 and v["kind"] == "capture"


def test_run_view_carries_the_watched_job(tmp_path: Path) -> None:
    """The tab's Job section reads the capture's report.json job (the first report that has one), as is."""
    _trace(tmp_path / "run" / "w.pt.trace.json")
    job = {"steps": 12, "phases": [{"kind": "steady", "start_step": 0, "end_step": 11, "step_time_median_us": 5.0,
                                    "steps": 12}], "series": {"bucket": 1, "first_step": list(range(12))}}
    report = {"schema_version": "1.3", "traces": [], "sections": [], "notes": [], "failed_rules": [], "findings": [],
              "job": job}
    (tmp_path / "run" / "report.json").write_text(json.dumps(report))
    _trace(tmp_path / "plain" / "w.pt.trace.json")
    views = _views(tmp_path)
    assert views["run"]["job"] == job
    assert views["plain"]["job"] is None  # traces alone: no job section


def test_one_trace_run_headline_has_the_mfu_and_waiting_cards(tmp_path: Path) -> None:
    """The tab's cards word the MFU and the waiting in collectives as the terminal does (issue 37)."""
    from gpuprof.analysis import analyze
    from gpuprof.render.format import fmt_comm_wait, fmt_mfu

    run = tmp_path / "one"
    run.mkdir()
    src = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "nccl_parser_config", "nccl_data.json.gz")
    shutil.copy(src, run / src.name)
    head = _views(tmp_path)["one"]["headline"]
    t = analyze(str(src)).traces[0]
    assert head["mfu_text"] == fmt_mfu(t) and head["comm_wait_text"] == fmt_comm_wait(t)
    assert head["comm_wait_text"] is not None and "waits inside collectives" in head["comm_wait_text"]
