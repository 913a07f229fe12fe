"""The host-bound verdict of a CPU-only run (issue 41 item 5): GP308 names the framework's dispatch of many tiny
operators with its share and the fix; a compute-heavy step (large matmuls) is not host-bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprof.rules.dispatch import _walk
from gpuprof.trace.model import Event
from gpuprof.trace.vocab import Kind

from .conftest import gpuprof_run

JOBS = Path(__file__).resolve().parent / "jobs"


def _op(name: str, ts: float, dur: float) -> Event:
    return Event(kind=int(Kind.CPU_OP), name=name, ts=ts, dur=dur, pid=1, tid=1)


def test_self_time_splits_compute_from_dispatch() -> None:
    # aten::linear (30 us) holds aten::addmm (25 us, itself holding a 1 us resolve_conj): addmm computes
    ops = [_op("aten::linear", 0, 30), _op("aten::addmm", 2, 25), _op("aten::resolve_conj", 3, 1),
           _op("aten::add", 40, 4), _op("aten::add", 50, 3), _op("aten::add", 60, 200)]  # a pause in one add
    in_ops, small, compute, names = _walk(ops, 10.0)
    assert in_ops == 30 + 4 + 3 + 200  # top-level operators only
    assert compute == 24  # addmm's self time; the add with a pause stays small (its median self time is 4 us)
    assert sorted(names) == ["aten::add"] * 3 + ["aten::linear", "aten::resolve_conj"]
    assert sorted(small) == [1, 4, 4, 4, 5]


def _run(mode: str, tmp_path: Path) -> dict[str, object]:
    r = gpuprof_run(str(JOBS / "host_bound_job.py"), mode, "30", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run_dir = next((tmp_path / "gpuprof_logs").glob("run-*"))
    return {"stderr": r.stderr, "report": json.loads((run_dir / "report.json").read_text())}


@pytest.mark.slow
def test_tiny_operators_and_an_item_every_step_are_host_bound(tmp_path: Path) -> None:
    out = _run("tiny", tmp_path)
    (f,) = [f for f in out["report"]["findings"] if f["code"] == "GP308"]  # type: ignore[index]
    ev = f["evidence"][0]
    assert ev["value"] >= 0.3 and ev["extra"]["compute_share"] < 0.5
    assert ev["extra"]["small_ops_per_step"] >= 1000  # 32 samples one at a time: thousands of operator calls
    assert f"{ev['value']:.0%}" in f["message"] and "torch.compile" in f["advice"] and ".item()" in f["advice"]
    assert "GP308" in out["stderr"]  # type: ignore[operator]


@pytest.mark.slow
def test_large_matmuls_are_not_host_bound(tmp_path: Path) -> None:
    out = _run("matmul", tmp_path)
    assert not [f for f in out["report"]["findings"] if f["code"] == "GP308"]  # type: ignore[index]


@pytest.mark.slow
def test_framework_share_of_a_real_cpu_trace_from_its_raw_events() -> None:
    import gzip
    import statistics

    from gpuprof.rules.dispatch import dispatch_stats
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics
    from gpuprof_testing.realtraces import shared_path

    path = next(shared_path("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0").glob("*.pt.trace.json.gz"))
    st = dispatch_stats(compute_metrics(load_trace(path)), 10.0, 20.0)
    assert st is not None
    # independently, from the raw JSON: the ProfilerStep spans, the cpu_op events inside them, per thread
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    lo, hi = spans[0][0], spans[-1][1]
    ops: dict[object, list[tuple[float, float, str]]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and lo <= e["ts"] < hi:
            ops.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"], e["name"]))
    top = 0.0
    selfs: dict[str, list[float]] = {}
    for evs in ops.values():
        evs.sort(key=lambda x: (x[0], -x[1]))
        for i, (ts, dur, name) in enumerate(evs):
            children = 0.0
            j, end = i + 1, ts + dur
            while j < len(evs) and evs[j][0] < end:  # direct children: inside, not inside an earlier child
                children += evs[j][1]
                cend = evs[j][0] + evs[j][1]
                j += 1
                while j < len(evs) and evs[j][0] < cend:
                    j += 1
            selfs.setdefault(name, []).append(max(dur - children, 0.0))
            if not any(p[0] <= ts < p[0] + p[1] for p in evs[max(0, i - 50):i]):
                top += dur
    # the tiny threshold: 20 dispatch units, a unit the median self time of a view operator's call
    views = ("aten::view", "aten::t", "aten::transpose", "aten::as_strided", "aten::select", "aten::slice",
             "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::alias",
             "aten::_reshape_alias", "aten::reshape", "aten::detach", "detach", "aten::resolve_conj",
             "aten::resolve_neg", "aten::lift_fresh")
    tiny = 20 * statistics.median_high([v for name in views for v in selfs.get(name, [])])
    assert st.tiny_us == pytest.approx(tiny)
    compute = paused = 0.0
    for v in selfs.values():
        med = statistics.median_high(v)
        if med >= tiny:  # computes: every call's self time
            compute += sum(v)
        else:  # small: a call's time over the threshold paused
            paused += sum(max(x - tiny, 0.0) for x in v)
    steps = len(spans)
    busy_us = sum(b - a for a, b in spans) / steps - paused / steps
    assert st.share(st.compute_us) == pytest.approx(compute / steps / busy_us, abs=0.01)
    assert st.share(st.framework_us) == pytest.approx(max(top - compute - paused, 0.0) / steps / busy_us, abs=0.01)
    assert st.share(st.framework_us) < 0.3  # a small job, but most of its step is outside operators: no GP308
