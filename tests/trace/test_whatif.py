"""Each finding's what-if, through ``gpuprof analyze``: the replayed saving, the margin note, and the real traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.findings import Finding, Severity
from gpuprof.render import render
from gpuprof.rules.replayed import declared_what_ifs, with_what_if
from gpuprof.trace.critpath.margin import (
    NOTE_HIDDEN,
    NOTE_MORE,
    NOTE_NOT_REPLAYED,
    NOTE_STARVES,
    margin_note,
)
from gpuprof.trace.critpath.path import critical_path, critical_segments
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import TRACES, shared_path
from gpuprof_testing.tracegen import TraceBuilder


def _finding(report_findings: list[Finding], code: str) -> Finding:
    got = [f for f in report_findings if f.code == code]
    assert got, f"{code} not found in {[f.code for f in report_findings]}"
    return got[0]


def test_data_loading_finding_gets_the_replayed_saving(tmp_path: Path) -> None:
    b = TraceBuilder()
    waits = []
    for _ in range(4):
        with b.step():
            t0 = b.now
            b.dataloader(ms=3.0)  # num_workers=0: GP102, GP103
            waits.append(b.now - t0)
            b.kernel("k", us=500)
            b.device_synchronize()
    path = b.write(tmp_path / "t.pt.trace.json")
    report = analyze(str(path))
    f = _finding(report.findings, "GP102")
    # the GPU has nothing queued during the load: removing it saves all of it (its range, as recorded)
    assert f.what_if_saving_us == pytest.approx(sum(waits) / 4, abs=2.0)
    assert f.what_if_note is None  # the rule's cost agrees within the margin
    out = json.loads(render(report, "json"))
    row = next(x for x in out["findings"] if x["code"] == "GP102")
    assert row["what_if_saving_us"] == f.what_if_saving_us
    cp = out["traces"][0]["critical_path"]
    assert sum(p["us"] for p in cp["parts"]) == pytest.approx(cp["length_us"])
    text = render(report, "markdown")
    assert "What-if" in text and "### Critical path" in text


def test_notes_say_which_figure_to_believe() -> None:
    assert (margin_note(1000.0, 100.0, 10_000.0) or "").startswith(NOTE_HIDDEN)
    assert (margin_note(1000.0, 3000.0, 10_000.0) or "").startswith(NOTE_MORE)  # without a reason: no GPU claim
    assert (margin_note(1000.0, 3000.0, 10_000.0, ("x", f"{NOTE_STARVES}: y")) or "").startswith(NOTE_STARVES)
    assert margin_note(1000.0, 900.0, 10_000.0) is None  # within 25% of the larger
    assert margin_note(50.0, 0.0, 10_000.0) is None  # 50 µs apart: under 1% of the step
    assert margin_note(None, 10.0, 100.0) is None


def test_a_finding_whose_cause_is_not_on_the_graph_says_so(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernel("k", us=100)
    m = compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))
    own = Finding("GP302", "no-tensor-cores", Severity.WARNING, "m", "a", cost_us_per_step=10.0)
    replayable = Finding("GP301", "launch-bound", Severity.WARNING, "m", "a", cost_us_per_step=10.0)
    memory = Finding("GP510", "near-capacity", Severity.WARNING, "m", "a", origin="memory")
    got = with_what_if(m, [own, replayable, memory])
    assert got[0].what_if_saving_us is None and got[0].what_if_note == NOTE_NOT_REPLAYED
    assert got[1].what_if_saving_us is not None
    assert got[2] == memory  # nothing to compare: left as it was
    declared = declared_what_ifs()
    assert "GP302" not in declared and "GP301" in declared


def _shared_traces() -> list[Path]:
    if not TRACES.exists():
        return []
    skip = {"benchmark_simple_add_et.json.gz"}
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and p.name not in skip and "plugin_outputs" not in p.parts and "test_resources" not in p.parts)


@pytest.mark.slow
def test_every_shared_trace_has_a_critical_path_that_sums_to_its_steps() -> None:
    files = _shared_traces()
    if not files:
        shared_path("traces")  # skips with the one-line reason
    seen = 0
    for p in files:
        try:
            m = compute_metrics(load_trace(str(p)))
        except Exception as err:  # not a trace this test is about (a load error is test_load's business)
            if type(err).__name__ == "InputError":
                continue
            raise
        cp = critical_path(m)
        if not m.steps:
            assert cp is None
            continue
        assert cp is not None, p
        seen += 1
        assert cp.length_us == pytest.approx(m.mean_step_time), p
        assert sum(x.us for x in cp.parts) == pytest.approx(cp.length_us, rel=1e-9, abs=1e-6), p
        assert all(x.us > 0 for x in cp.parts), p
        segs = critical_segments(m)  # the median step's path, for a timeline: it tiles that step
        durs = sorted(s.dur for s in m.steps)
        assert sum(e - s for _, s, e, _, _ in segs) == pytest.approx(durs[(len(durs) - 1) // 2], rel=1e-6), p
        assert all(lane.startswith(("host:", "gpu:")) for lane, *_ in segs), p
    assert seen >= 30


def test_v100_data_loading_what_if_beside_its_cost() -> None:
    # the shared V100 pair: the num_workers=0 trace's data-loading finding, replayed
    p = shared_path("tbplugin", "samples", "resnet50_num_workers_0")
    report = analyze(str(sorted(p.glob("*.pt.trace.json.gz"))[0]))
    f = _finding(report.findings, "GP102")
    assert f.what_if_saving_us is not None and f.cost_us_per_step is not None
    # the host waits for data with nothing queued on the GPU: the replay saves about the rule's cost
    assert f.what_if_saving_us == pytest.approx(f.cost_us_per_step, rel=0.25)


def _report_doc(path: Path) -> dict[str, object]:
    return json.loads(render(analyze(str(path)), "json"))


def test_a_fixed_data_wait_measures_what_the_replay_said(tmp_path: Path) -> None:
    # before: the main process loads each batch (3 ms) before 1 ms of GPU work; after: the load is gone
    from gpuprof.diff.compare import diff_reports

    def run(load_ms: float, name: str) -> Path:
        b = TraceBuilder()
        for _ in range(6):
            with b.step():
                b.dataloader(ms=load_ms) if load_ms else b.cpu(us=20)
                b.kernel("k", us=1000)
                b.device_synchronize()
        return b.write(tmp_path / f"{name}.pt.trace.json")

    d = diff_reports(_report_doc(run(3.0, "before")), _report_doc(run(0.0, "after")))
    row = next(r for r in d["findings"]["removed"] if r["code"] == "GP102")
    what_if, measured = row["what_if_saving_us_per_step"], row["measured_saving_us_per_step"]
    assert what_if is not None and measured is not None
    assert what_if == pytest.approx(measured, rel=0.15)
    assert row["what_if_gap"] is None


@pytest.mark.slow
def test_v100_pair_says_why_the_measured_change_is_not_the_what_if() -> None:
    from gpuprof.diff.compare import diff_reports

    d = shared_path("tbplugin", "samples")
    before, after = (json.loads(render(analyze(str(d / name)), "json"))
                     for name in ("resnet50_num_workers_0", "resnet50_num_workers_4"))
    row = next(r for r in diff_reports(before, after)["findings"]["removed"] if r["code"] == "GP102")
    what_if, measured = row["what_if_saving_us_per_step"], row["measured_saving_us_per_step"]
    # the replay removes the data wait and holds the rest (47 ms); the runs' other host work grew by ~24 ms
    assert what_if == pytest.approx(row["measured_part_saving_us_per_step"], rel=0.1)
    assert abs(measured - what_if) > 0.15 * what_if
    gap = row["what_if_gap"]
    assert gap is not None and "the rest of the step grew" in gap


def test_host_sync_finding_replays_its_site(tmp_path: Path) -> None:
    b = TraceBuilder()
    marks = []
    for _ in range(3):
        with b.step():
            k = b.kernel("k", us=2000)
            b.sync_item(line=("train.py", 42))  # .item(): a device→host copy and a stream sync, after k
            b.cpu(us=800)
            k2 = b.kernel("k2", us=1000)
            b.device_synchronize()
            marks.append((k, k2))
    doc = b.to_dict()
    events = doc["traceEvents"]
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    f = next(x for x in report.findings if x.code == "GP203" and x.location is not None and x.location.line == 42)
    # hand schedule: without the .item() the host skips both its waits (the copy call and the sync), so k2 is
    # launched earlier by their length; it starts 5 µs after its launch or when the stream is free (after the
    # 4-byte copy, which stays queued behind k), and the steps end with it
    waits = [e for e in events if e.get("name") in ("cudaMemcpyAsync", "cudaStreamSynchronize")]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    saved = 0.0
    for i, (_k, k2) in enumerate(marks):
        held = sum(float(w["dur"]) for w in waits[2 * i:2 * i + 2])
        launch = float(k2["ts"]) - 5.0
        start = max(launch - held + 5.0, float(copies[i]["ts"]) + float(copies[i]["dur"]))
        saved += float(k2["ts"]) - start
    assert f.what_if_saving_us == pytest.approx(saved / 3, abs=1.0)
    assert f.what_if_saving_us > 700.0  # the host work the sync serialised behind k


def test_launch_bound_finding_is_replayed_as_a_graph(tmp_path: Path) -> None:
    b = TraceBuilder(launch_us=6.0, gap_us=3.0)
    for _ in range(4):
        with b.step():
            for _ in range(400):
                b.kernel("tiny", us=2.0)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    f = _finding(report.findings, "GP301")
    # one launch per stretch: the 400 kernels of 2 µs run back to back (800 µs) and the host no longer spends its
    # 400 launch calls of 6 µs; its 3 µs between calls (Python, the dispatcher) stay, 1200 µs: still longer than
    # the GPU's 800, so the step shrinks by the launch calls' time
    assert f.what_if_saving_us == pytest.approx(400 * 6.0, abs=1.0)


def test_cross_rank_findings_say_they_are_not_replayed() -> None:
    from gpuprof.rules.replayed import cross_rank_not_replayed
    from gpuprof.trace.critpath.margin import NOTE_CROSS_RANK

    costly = Finding("GP701", "straggler-rank", Severity.WARNING, "m", "a", cost_us_per_step=500.0)
    free = Finding("GP704", "small-collectives", Severity.WARNING, "m", "a")
    got = cross_rank_not_replayed([costly, free])
    assert got[0].what_if_note == NOTE_CROSS_RANK and got[0].what_if_saving_us is None
    assert got[1] == free


def _code_strings_and_private_imports(path: Path) -> tuple[list[str], list[str]]:
    """The string literals of a module that name a rule code (docstrings aside), and the private names it imports
    from gpuprof."""
    import ast
    import re

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    codes = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docs and re.search(r"\bGP\d", n.value)]
    private = [f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               and (n.module or "").startswith("gpuprof") for a in n.names if a.name.startswith("_")]
    return codes, private


def test_the_replay_knows_no_rule_and_the_rules_declare_their_what_if() -> None:
    """Issue 45: each rule declares its what-if beside its check; the critical-path package keeps the replay
    primitives, with public names (no rule code in its code, no private name imported across its modules)."""
    import gpuprof.trace.critpath as critpath
    from gpuprof.rules.base import all_rules

    for path in sorted(Path(critpath.__file__).parent.glob("*.py")):
        codes, private = _code_strings_and_private_imports(path)
        assert not codes, f"{path.name} names rule codes: {codes}"
        assert not private, f"{path.name} imports private names: {private}"
    declared = {r.code for r in all_rules() if r.what_if is not None}
    assert declared == {"GP102", "GP103", "GP201", "GP202", "GP203", "GP204", "GP205", "GP301"}
    assert all(r.what_if.label for r in all_rules() if r.what_if is not None)
