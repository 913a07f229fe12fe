"""Traces without ProfilerStep markers: the lead-in, GP205 over the whole trace, GP206 start-up cost, and
GP101's named idle parts (issue 9 items 2-3).

Every figure checked on a real trace is recomputed here from the raw JSON events, with nothing from gpuprof.
"""

from __future__ import annotations

import gzip
import json

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training

ALEXNET = ("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "alexnet",
           "benchmark_result_2869224_1695835535_trace.json.gz")
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
_ALLOC = ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaMallocHost", "cudaFreeHost")


@pytest.fixture(scope="module")
def alexnet():
    path = shared_path(*ALEXNET)
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)
    # complete events, less the profiler's own "PyTorch Profiler" span (cat "Trace"), which gpuprof does not load
    events = [e for e in raw["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    return path, events, analyze(path)


def _raw_first_gpu_work(events) -> float:
    runtime = {e["args"]["correlation"]: e for e in events
               if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    starts = []
    for g in events:
        if g.get("cat") in _GPU_CATS:
            r = runtime.get(g["args"].get("correlation"))
            starts.append(min(g["ts"], r["ts"]) if r else g["ts"])
    return min(starts)


def _busy(events) -> list[tuple[float, float]]:
    spans = sorted((g["ts"], g["ts"] + g["dur"]) for g in events if g.get("cat") in _GPU_CATS)
    out: list[list[float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _idle_inside(calls, busy) -> float:
    """Time inside ``calls`` (disjoint, one thread) when no GPU work ran."""
    total = 0.0
    for c in calls:
        s, e = c["ts"], c["ts"] + c["dur"]
        total += (e - s) - sum(max(0.0, min(e, b) - max(s, a)) for a, b in busy)
    return total


# -- lead-in ---------------------------------------------------------------------------------------------


def test_lead_in_is_left_out_of_the_whole_trace_step_real(alexnet):
    path, events, report = alexnet
    t = report.traces[0]
    first_event = min(e["ts"] for e in events)
    last_end = max(e["ts"] + e["dur"] for e in events)
    first_gpu = _raw_first_gpu_work(events)
    assert t.lead_in_us == pytest.approx(first_gpu - first_event, abs=1.0)
    assert t.lead_in_us > 30e6  # 30 s of CUDA start-up before the first GPU work
    busy = sum(b - a for a, b in _busy(events))
    assert t.gpu_utilization == pytest.approx(busy / (last_end - first_gpu), rel=1e-6)
    assert t.step_time_mean_us == pytest.approx(last_end - first_gpu, abs=1.0)
    js = report.to_dict()["traces"][0]
    assert js["lead_in_us"] == t.lead_in_us
    assert any("lead-in" in n for n in t.notes)


def test_lead_in_synthetic_and_absent_with_steps(tmp_path):
    tb = TraceBuilder()
    tb.cpu(ms=200.0, name="aten::randn")  # the model and data built before the GPU is used
    for _ in range(10):
        tb.gemm(us=1000)
    report = analyze(tb.write(tmp_path / "nosteps.json"))
    t = report.traces[0]
    assert t.lead_in_us is not None and 200_000 <= t.lead_in_us < 201_000
    assert t.gpu_utilization > 0.9  # 10 ms of GEMMs in a ~10 ms window; over the whole trace it would be 5%
    assert "GP101" not in {f.code for f in report.findings}
    stepped = analyze(simple_training(TraceBuilder(), steps=3).write(tmp_path / "steps.json")).traces[0]
    assert stepped.lead_in_us is None


# -- GP206 start-up cost ---------------------------------------------------------------------------------


def _startup(tmp_path, steps: bool) -> TraceBuilder:
    tb = TraceBuilder()
    tb.runtime("cudaGetDeviceCount", ms=800.0)  # the first CUDA call creates the context
    for i in range(4):
        with (tb.step() if steps else tb.annotate(f"iteration {i}")):
            # the first launch of the kernel loads its module (lazy loading): 40 ms instead of 5 µs
            tb.kernel("void my_ext::fused_kernel<float>(float*)", us=500, launch_us=40_000.0 if i == 0 else None)
            for _ in range(8):
                tb.gemm(us=500)
    return tb


def test_gp206_bad(tmp_path):
    found = [f for f in analyze(_startup(tmp_path, steps=False).write(tmp_path / "s.json")).findings
             if f.code == "GP206"]
    assert len(found) == 1
    f = found[0]
    calls = {c["call"]: c for c in f.evidence[0].extra["calls"]}
    assert set(calls) == {"cudaGetDeviceCount", "cudaLaunchKernel"}
    assert "context creation" in calls["cudaGetDeviceCount"]["what"]
    assert "first launch of my_ext::fused_kernel" in calls["cudaLaunchKernel"]["what"]
    assert calls["cudaLaunchKernel"]["others_median_us"] < 100
    # the context creation is in the lead-in, the first launch inside the profiled trace: only that one costs
    assert f.evidence[0].extra["in_lead_in_us"] == pytest.approx(800_000, rel=0.01)
    assert 39_000 < f.cost_us_per_step <= 40_100
    assert "start-up" in f.message and "schedule" in f.advice
    # GP205 does not report the same calls again
    assert not [g for g in analyze(tmp_path / "s.json").findings if g.code == "GP205"]


def test_gp206_bad_real(alexnet):
    path, events, report = alexnet
    f = next(f for f in report.findings if f.code == "GP206")
    runtime = sorted((e for e in events if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
    first = runtime[0]
    calls = f.evidence[0].extra["calls"]
    assert calls[0]["call"] == first["name"] == "cudaDeviceGetStreamPriorityRange"
    assert calls[0]["us"] == pytest.approx(first["dur"], abs=0.1)
    # the first cudaFree (6 s) is start-up; the later ones are more than 10x shorter
    frees = [e["dur"] for e in runtime if e["name"] == "cudaFree"]
    got = next(c for c in calls if c["call"] == "cudaFree")
    assert got["us"] == pytest.approx(frees[0], abs=0.1) and frees[0] > 10 * sorted(frees[1:])[len(frees[1:]) // 2]
    assert f.evidence[0].extra["in_lead_in_us"] == pytest.approx(first["dur"], rel=1e-6)


def test_gp206_good(tmp_path):
    # a warmed-up loop: no first call stands out
    assert not [f for f in analyze(simple_training(TraceBuilder(), steps=5).write(tmp_path / "g.json")).findings
                if f.code == "GP206"]
    # a slow call made every step is not start-up work: GP205 reports it, GP206 does not
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.runtime("cudaStreamCreateWithFlags", ms=20.0)
            for _ in range(4):
                tb.gemm(us=1000)
    codes = [f.code for f in analyze(tb.write(tmp_path / "streams.json")).findings]
    assert "GP206" not in codes and "GP205" in codes


def test_gp206_bad_two_slow_startup_frees_do_not_hide_each_other(tmp_path):
    # two slow cudaFree calls before any GPU work (context creation, then the allocator's first free), then a run
    # with cheap frees: the ratio to the others would keep only the slower one; by position both are start-up
    tb = TraceBuilder()
    tb.runtime("cudaGetDeviceCount", us=50.0)
    tb.runtime("cudaFree", ms=266.0)
    tb.runtime("cudaFree", ms=715.0)
    for _ in range(3):
        for _ in range(8):
            tb.gemm(us=2000)
        tb.cuda_free(us=100.0)
    report = analyze(tb.write(tmp_path / "frees.json"))
    f = next(f for f in report.findings if f.code == "GP206")
    calls = sorted(c["us"] for c in f.evidence[0].extra["calls"] if c["call"] == "cudaFree")
    assert calls == pytest.approx([266_000.0, 715_000.0], rel=0.01)
    assert f.evidence[0].value == pytest.approx(981_000.0, rel=0.01)  # named in full: half the trace here
    assert all("before the first GPU work" in c["what"] for c in f.evidence[0].extra["calls"] if c["call"] == "cudaFree")
    assert "2 calls took 981.0 ms" in f.message


def test_gp206_good_mid_run_allocator_calls_stay_gp205s(tmp_path):
    # caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): hipFree every step, one of them 70 ms. Not
    # "start-up work" (it is after the first step); GP205 reports the churn, with the slow free in it.
    tb = TraceBuilder(hip=True)
    for i in range(6):
        with tb.step():
            for _ in range(4):
                tb.gemm(us=1000)
            tb.cuda_malloc(us=300.0)
            tb.cuda_free(us=70_000.0 if i == 3 else 2_000.0)
    report = analyze(tb.write(tmp_path / "hipfree.json"))
    assert "GP206" not in {f.code for f in report.findings}
    gp205 = next(f for f in report.findings if f.code == "GP205")
    assert gp205.evidence[0].extra["allocator_us_per_step"] > (70_000 + 5 * 2_000) / 6 * 0.99


# -- GP205 without step markers --------------------------------------------------------------------------


def _churn(tmp_path, calls: int, free_us: float) -> str:
    tb = TraceBuilder()
    for _ in range(calls):
        tb.cuda_malloc(us=400.0)
        for _ in range(2):
            tb.gemm(us=1000)
        tb.cuda_free(us=free_us)
    return str(tb.write(tmp_path / f"churn{calls}_{free_us}.json"))


def test_gp205_bad_whole_trace(tmp_path):
    found = [f for f in analyze(_churn(tmp_path, 12, 600.0)).findings if f.code == "GP205"]
    assert len(found) == 1
    ev = found[0].evidence[0]
    # the first cudaMalloc comes before the first GPU work (the lead-in); the other 23 calls are churn, none
    # of them slower than the later ones of its kind (not start-up work)
    assert ev.extra["calls"] == {"cudaMalloc": 11, "cudaFree": 12}
    # 400 + 600 µs per round with the GPU idle, against 2 ms of GEMMs per round (one malloc in the lead-in)
    assert ev.value == pytest.approx((11 * 400 + 12 * 600) / (12 * 2000), rel=0.03)
    assert "without step markers" in found[0].message and "over the trace" in found[0].message


def test_gp205_bad_whole_trace_real(alexnet):
    path, events, report = alexnet
    f = next(f for f in report.findings if f.code == "GP205")
    first_gpu = _raw_first_gpu_work(events)
    gp206 = {(c["call"], c["us"]) for g in report.findings if g.code == "GP206" for c in g.evidence[0].extra["calls"]}
    allocs = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] in _ALLOC and e["ts"] >= first_gpu
              and (e["name"], round(e["dur"], 1)) not in gp206]
    counts: dict[str, int] = {}
    for e in allocs:
        counts[e["name"]] = counts.get(e["name"], 0) + 1
    ev = f.evidence[0]
    assert ev.extra["calls"] == counts
    busy = _busy(events)
    idle = _idle_inside(allocs, busy)
    assert f.cost_us_per_step == pytest.approx(idle, rel=1e-3)
    assert ev.value == pytest.approx(idle / sum(b - a for a, b in busy), rel=1e-3)


def test_gp205_good_whole_trace(tmp_path):
    # too few allocator calls to call it churn
    assert not [f for f in analyze(_churn(tmp_path, 4, 600.0)).findings if f.code == "GP205"]
    # many calls, but short against the GPU work (10 µs each against 2 ms of GEMMs)
    tb = TraceBuilder()
    for _ in range(12):
        tb.runtime("cudaMalloc", us=10.0)
        for _ in range(2):
            tb.gemm(us=1000)
    assert not [f for f in analyze(tb.write(tmp_path / "cheap.json")).findings if f.code == "GP205"]


# -- GP101 names the idle time's parts ------------------------------------------------------------------


def test_gp101_bad_names_python_functions_and_linked_findings(tmp_path):
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 80, "main"), ("train.py", 30, "build_batch")):
                tb.cpu(ms=6.0, name="aten::cat")  # no rule explains this host work
            with tb.frames(("train.py", 80, "main"), ("train.py", 50, "train_step")):
                for _ in range(4):
                    tb.gemm(us=1000)
                tb.cuda_free(us=3000.0)  # empty_cache(): GP205
    report = analyze(tb.write(tmp_path / "parts.json"))
    f = next(f for f in report.findings if f.code == "GP101")
    parts = {p["name"]: p for p in next(e for e in f.evidence if e.metric == "idle_parts_us_per_step").extra["parts"]}
    build = parts["train.py(30): build_batch"]
    assert build["kind"] == "python" and build["explained_by"] == []
    assert 6000 <= build["us_per_step"] < 6100
    assert parts["cudaFree"]["explained_by"] == ["GP205"]
    assert 2900 < parts["cudaFree"]["us_per_step"] <= 3000
    # the link is data on the finding; renderers draw it (gpuprof.render.format.linked_message)
    from gpuprof.render.format import linked_message

    assert "Python train.py(30): build_batch" in f.message and "(see " not in f.message
    assert [(k.kind, k.code) for k in f.links] == [("explained_by", "GP205")]
    assert "(see GP205)" in linked_message(f)
    # the named parts are part of the idle time, never more
    assert sum(p["us_per_step"] for p in parts.values()) <= f.cost_us_per_step + 1


def test_gp101_bad_idle_parts_real(alexnet):
    path, events, report = alexnet
    f = next(f for f in report.findings if f.code == "GP101")
    parts = next(e for e in f.evidence if e.metric == "idle_parts_us_per_step").extra["parts"]
    assert parts[0]["name"] == "cudaFree"
    frees = [e for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaFree"]
    assert parts[0]["us_per_step"] == pytest.approx(_idle_inside(frees, _busy(events)), abs=0.5)
    assert set(parts[0]["explained_by"]) == {"GP205", "GP206"}
    from gpuprof.render.format import linked_message

    assert "GP206" in linked_message(f) and "lead-in" in f.message and "GP206" in {k.code for k in f.links}


def test_gp101_good_named_parts_stay_quiet(tmp_path):
    # a busy GPU: no GP101, whatever the host does meanwhile
    path = simple_training(TraceBuilder(), steps=5).write(tmp_path / "good.json")
    assert "GP101" not in {f.code for f in analyze(path).findings}
