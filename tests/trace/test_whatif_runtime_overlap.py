"""GP205's and GP702's what-ifs: runtime calls cut from the host, collectives overlapped with compute.

The synthetic traces come from :class:`~gpuprof_testing.tracegen.TraceBuilder`, whose clock makes the
schedule (a kernel starts when its launch call returns or its stream is free; a sync returns 2 µs after
the GPU work it waits for); each expected figure is computed from the events it returned, not from
gpuprof's graph. The real traces are the shared ones (skipped, with the reason, when absent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuprof.analysis import analyze
from gpuprof.distributed.analysis import cross_rank
from gpuprof.distributed.summary import RankSummary, summarize
from gpuprof.distributed.whatif import OVERLAP_LESS, OVERLAP_MORE, OVERLAP_NOT_REPLAYED
from gpuprof.findings import Finding
from gpuprof.rules.replayed import NOTE_OTHER_THREADS
from gpuprof.trace.critpath.graph import GPU_COMM, build_graph
from gpuprof.trace.critpath.margin import NOTE_HIDDEN, NOTE_STARVES, margin_note
from gpuprof.trace.critpath.overlap import overlap_saving, overlapped
from gpuprof.trace.critpath.replay import Removal, Replayer, replay_saving
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof_testing.realtraces import TRACES, shared_path
from gpuprof_testing.tracegen import TraceBuilder

HTA = ("hta", "HolisticTraceAnalysis", "tests", "data")


def _end(ev: dict[str, Any]) -> float:
    return float(ev["ts"]) + float(ev["dur"])


def _gp205(findings: list[Finding], word: str) -> Finding:
    got = [f for f in findings if f.code == "GP205" and word in f.message]
    assert len(got) == 1, [f.message for f in findings if f.code == "GP205"]
    return got[0]


# ---------------------------------------------------------------- GP205: runtime calls cut from the host


def test_gp205_bad_host_bound_calls_save_their_own_time(tmp_path: Path) -> None:
    b = TraceBuilder()
    mallocs, queries = [], []
    for _ in range(4):
        with b.step():
            mallocs.append(b.cuda_malloc(us=800))  # the allocator's cache emptied every step
            queries.append(b.runtime("cudaGetDeviceProperties", us=600))  # a slow query in the loop
            b.kernel("k", us=300)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    churn = _gp205(report.findings, "Allocator calls")
    slow = _gp205(report.findings, "cudaGetDeviceProperties")
    # the host sets the step (the GPU idles until the kernel's launch): each finding saves its own calls' time,
    # and only its own (the other calls stay)
    assert churn.what_if_saving_us == pytest.approx(sum(float(e["dur"]) for e in mallocs) / 4, abs=0.5)
    assert slow.what_if_saving_us == pytest.approx(sum(float(e["dur"]) for e in queries) / 4, abs=0.5)
    assert churn.what_if_note is None and slow.what_if_note is None  # the rules' costs agree


def test_gp205_a_fixed_churn_measures_what_the_replay_said(tmp_path: Path) -> None:
    # before: cudaMalloc/cudaFree every step (the cache emptied); after: the allocator stays warm
    from gpuprof.diff.compare import diff_reports
    from gpuprof.render import render

    def run(churn: bool, name: str) -> dict[str, Any]:
        b = TraceBuilder()
        for _ in range(6):
            with b.step():
                if churn:
                    b.cuda_malloc(us=700)
                b.kernel("k", us=400)
                b.cpu(us=300)
                if churn:
                    b.cuda_free(us=300)
                b.kernel("k2", us=400)
                b.device_synchronize()
        doc: dict[str, Any] = json.loads(render(analyze(str(b.write(tmp_path / f"{name}.pt.trace.json"))), "json"))
        return doc

    d = diff_reports(run(True, "before"), run(False, "after"))
    row = next(r for r in d["findings"]["removed"] if r["code"] == "GP205")
    what_if, measured = row["what_if_saving_us_per_step"], row["measured_saving_us_per_step"]
    assert what_if is not None and measured is not None
    assert what_if == pytest.approx(measured, rel=0.15) and row["what_if_gap"] is None


def test_gp205_start_up_calls_gp206_reports_are_not_cut(tmp_path: Path) -> None:
    b = TraceBuilder()
    churn = []
    for i in range(4):
        with b.step():
            if i == 0:
                b.cuda_malloc(us=20_000)  # the first cudaMalloc, 25x the others: GP206's start-up work
            churn.append(b.cuda_malloc(us=800))
            b.kernel("k", us=300)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    assert any(f.code == "GP206" for f in report.findings)
    f = _gp205(report.findings, "Allocator calls")
    # host-bound: the per-step calls' time, without the one-off 20 ms call (GP205 leaves it out of its cost too)
    assert f.what_if_saving_us == pytest.approx(sum(float(e["dur"]) for e in churn) / 4, abs=0.5)
    assert f.what_if_note is None


def test_gp205_bad_a_cudafree_that_waits_for_the_gpu_starves_it(tmp_path: Path) -> None:
    b = TraceBuilder()
    marks = []
    for _ in range(3):
        with b.step():
            a = b.kernel("a", us=1000)
            free = b.cuda_free(us=200)  # waits for the whole device, then 200 µs
            b.cpu(us=800)
            k = b.kernel("b", us=1000)
            b.device_synchronize()
            marks.append((a, free, k))
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    f = _gp205(report.findings, "Allocator calls")
    # hand schedule: without the cudaFree call the host launches b earlier by the call's length; b starts 5 µs
    # after its launch call starts, or when a is done, and the step ends 2 µs after b
    saved = 0.0
    for a, free, k in marks:
        launch = float(k["ts"]) - 5.0 - float(free["dur"])
        saved += _end(k) - (max(launch + 5.0, _end(a)) + 1000.0)
    assert f.what_if_saving_us == pytest.approx(saved / 3, abs=1.0)
    # the rule counts the call's 200 µs with no kernel running; the replay also frees the host work it serialised
    assert f.cost_us_per_step == pytest.approx(200.0, abs=5.0)
    assert f.what_if_saving_us > 700.0 and (f.what_if_note or "").startswith(NOTE_STARVES)


def test_gp205_good_calls_under_a_long_kernel_save_nothing(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            b.kernel("long", us=3000)
            b.cuda_malloc(us=800)  # while the GPU is busy: hidden
            b.device_synchronize()
    m = compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))
    g = m.memo(build_graph)
    cut = next(calls for name, calls in g.host_runtime if name == "cudaMalloc")
    assert len(cut) == 4
    assert replay_saving(Replayer(g), Removal(cut_host=cut)) == pytest.approx(0.0, abs=1e-6)


def test_gp205_calls_on_another_thread_say_the_replay_sees_only_the_main_one(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            with b.thread(b.main_tid + 7, join=True):  # a pin-memory-like thread allocates; the main one waits
                b.cuda_malloc(us=900)
            b.kernel("k", us=300)
            b.device_synchronize()
    report = analyze(str(b.write(tmp_path / "t.pt.trace.json")))
    f = _gp205(report.findings, "Allocator calls")
    assert f.cost_us_per_step == pytest.approx(900.0, abs=1.0)
    assert f.what_if_saving_us == 0.0 and f.what_if_note == NOTE_OTHER_THREADS


def test_cut_host_time_inside_a_data_wait_shortens_it(tmp_path: Path) -> None:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.dataloader(ms=1.0)
            b.kernel("k", us=200)
            b.device_synchronize()
    m = compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))
    g = m.memo(build_graph)
    r = Replayer(g)
    waits = [(float(a), float(e)) for a, e, k in zip(g.w_ts, g.w_end, g.w_kind) if k == 2]
    assert len(waits) == 3
    from gpuprof.trace.intervals import Intervals

    # 300 µs of every data wait cut: each step shorter by that (the GPU has nothing queued meanwhile)
    cut = Intervals.from_pairs((a + 100.0, a + 400.0) for a, _ in waits)
    assert replay_saving(r, Removal(cut_host=cut)) == pytest.approx(300.0, abs=1e-6)


# ---------------------------------------------------------------- GP702: collectives overlapped


def _ddp(tmp_path: Path, rank: int, comm_us: float, after_us: float, one_stream: bool = False) -> Path:
    """Forward (two short kernels the host outpaces: their launch latency is the trace's), backward (1 ms), then
    an all-reduce on the NCCL stream, then ``after_us`` of compute that waits for it."""
    b = TraceBuilder(rank=rank, world_size=2)
    for _ in range(3):
        with b.step():
            for _k in range(2):
                b.kernel("fwd", us=100, stream=7)
                b.cpu(us=200)
            b.kernel("bwd", us=1000, stream=7)
            if one_stream:  # the collective on the compute stream: what follows is queued behind it
                b.nccl(us=comm_us, stream=7, wait_for_compute=False)
                b.kernel("opt", us=after_us, stream=7)
            else:
                nccl = b.nccl(us=comm_us)
                b.kernel("opt", us=after_us, stream=7, wait_for=[int(nccl["tid"])])
            b.device_synchronize()
    return b.write(tmp_path / f"rank{rank}.pt.trace.json")


def _hand_overlap(path: Path) -> float:
    """Per step: the compute after the all-reduce starts when launched (or when backward is done) instead of
    after it; the step ends with the later of it and the all-reduce (the sync waits for both)."""
    doc = json.loads(path.read_text())
    ev = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("name") == "cudaLaunchKernel"}
    saved = 0.0
    for i in range(0, len(ev), 5):
        bwd, comm, opt = ev[i + 2:i + 5]
        start = max(float(launches[opt["args"]["correlation"]]["ts"]) + 5.0, _end(bwd))
        saved += _end(opt) - max(start + float(opt["dur"]), _end(comm))
    return saved / (len(ev) // 5)


@pytest.mark.parametrize("comm_us, after_us", [(2000.0, 500.0), (2000.0, 2500.0)])
def test_gp702_bad_overlap_replayed_on_each_rank(tmp_path: Path, comm_us: float, after_us: float) -> None:
    paths = [_ddp(tmp_path, r, comm_us, after_us) for r in (0, 1)]
    m = compute_metrics(load_trace(str(paths[0])))
    expected = _hand_overlap(paths[0])
    assert expected == pytest.approx(min(after_us, comm_us), abs=1.0)  # the schedule is what the test says
    assert overlap_saving(m) == pytest.approx(expected, abs=0.5)
    report = analyze([str(p) for p in paths])
    f = next(x for x in report.findings if x.code == "GP702")
    assert f.cost_us_per_step == pytest.approx(comm_us, rel=0.01)  # the exposed transfer
    assert f.what_if_saving_us == pytest.approx(expected, abs=0.5)
    # short compute after it: the step still waits for the all-reduce, the replay saves less than its cost
    assert f.what_if_note == (OVERLAP_LESS if after_us < comm_us else None)


def test_gp702_bad_a_collective_on_the_compute_stream_leaves_it(tmp_path: Path) -> None:
    path = _ddp(tmp_path, 0, 2000.0, 500.0, one_stream=True)
    m = compute_metrics(load_trace(str(path)))
    g = m.memo(build_graph)
    assert len(set(g.g_stream.tolist())) == 1  # one stream: the compute was queued behind the all-reduce
    expected = _hand_overlap(path)
    assert expected == pytest.approx(500.0, abs=1.0)
    assert overlap_saving(m) == pytest.approx(expected, abs=0.5)


def test_gp702_overlapped_graph_keeps_the_collectives_and_frees_what_waited(tmp_path: Path) -> None:
    m = compute_metrics(load_trace(str(_ddp(tmp_path, 0, 2000.0, 500.0))))
    g = m.memo(build_graph)
    g2 = overlapped(g)
    assert g2 is not None and g2.n_gpu == g.n_gpu
    comm, comm2 = g.g_kind == GPU_COMM, g2.g_kind == GPU_COMM
    assert sorted(g.g_ts[comm]) == sorted(g2.g_ts[comm2])  # the same collectives, recorded times
    assert not set(g2.g_stream[comm2].tolist()) & set(g2.g_stream[~comm2].tolist())  # on lanes of their own
    assert (g2.g_dep[~comm2] < 0).all()  # nothing waits for a collective any more
    # the unchanged graph replays the recording, and a graph without collectives has nothing to overlap
    assert Replayer(g).end() == pytest.approx(max(m.steps[-1].cpu_end, float(g.g_end.max())))
    b = TraceBuilder()
    with b.step():
        b.kernel("k", us=100)
    plain = compute_metrics(load_trace(str(b.write(tmp_path / "plain.pt.trace.json"))))
    assert overlapped(plain.memo(build_graph)) is None and overlap_saving(plain) is None


@pytest.fixture(scope="module")
def real() -> RankSummary:
    return summarize(compute_metrics(load_trace(shared_path(*HTA, "nccl_parser_config", "nccl_data.json.gz"))))


def _exposed(base: RankSummary, n: int, savings: list[float | None]) -> list[RankSummary]:
    """``n`` ranks of ``base`` whose collectives are 5x longer and all exposed (GP702 fires), with these what-ifs."""
    long = [d * 5 for d in base.inst_dur]
    per = sum(long) / base.num_steps
    return [msgspec.structs.replace(base, rank=r, path=f"rank{r}", world_size=n, inst_dur=long, inst_exposed=long,
                                    exposed_comm_us=per, comm_us=per, overlap_what_if_us=savings[r])
            for r in range(n)]


def test_gp702_bad_ranks_combine_as_the_median_of_those_replayed(real: RankSummary) -> None:
    _, found = cross_rank(_exposed(real, 4, [1000.0, None, 3000.0, 90_000.0]))
    f = next(x for x in found if x.code == "GP702")
    assert f.what_if_saving_us == 3000.0  # the median of 1000, 3000, 90000: the rank with none is left out
    assert margin_note(f.cost_us_per_step, 3000.0, real.step_us) is not None  # beyond the margin: a note
    assert f.what_if_note == (OVERLAP_LESS if (f.cost_us_per_step or 0) > 3000.0 else OVERLAP_MORE)
    _, found = cross_rank(_exposed(real, 2, [None, None]))
    f = next(x for x in found if x.code == "GP702")
    assert f.what_if_saving_us is None and f.what_if_note == OVERLAP_NOT_REPLAYED
    _, found = cross_rank(_exposed(real, 2, [1e12, 1e12]))  # a hand-edited node report: never above the step
    f = next(x for x in found if x.code == "GP702")
    assert f.what_if_saving_us is not None and f.what_if_saving_us <= real.step_us * 1.0001


def test_gp702_real_hta_pair_is_replayed_within_the_step() -> None:
    r0 = shared_path(*HTA, "timeline_analysis", "sampled_rank-0.json.gz")
    r1 = shared_path(*HTA, "trace_filter", "sampled_rank-1.json.gz")
    report = analyze([str(r0), str(r1)])
    sec = next(s for s in report.sections if s.kind == "cross_rank")
    per_rank = [s.overlap_what_if_us for s in sec.summaries]
    assert all(x is not None and 0.0 <= x <= s.step_mean_us for x, s in zip(per_rank, sec.summaries))
    f = next(x for x in report.findings if x.code == "GP702")
    assert f.what_if_saving_us is not None and f.cost_us_per_step is not None
    assert 0.0 <= f.what_if_saving_us <= sec.step_us
    # the host sets these steps (their GPU work ends milliseconds before each step does): overlapping the
    # collectives frees nothing the step waits for, and the note says so
    assert f.what_if_saving_us == 0.0
    want = margin_note(f.cost_us_per_step, f.what_if_saving_us, sec.step_us)
    assert (f.what_if_note is None) == (want is None) and f.what_if_note in (None, OVERLAP_LESS)


# ---------------------------------------------------------------- every shared trace


def _shared() -> list[Path]:
    if not TRACES.exists():
        shared_path("traces")  # skips with the one-line reason
    skip = {"benchmark_simple_add_et.json.gz"}
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                  and p.name not in skip and "plugin_outputs" not in p.parts and "test_resources" not in p.parts)


def _check_gp205(m: TraceMetrics, findings: list[Finding], p: Path) -> int:
    seen = 0
    for f in findings:
        if f.code != "GP205" or f.cost_us_per_step is None:
            continue
        seen += 1
        assert f.what_if_saving_us is not None, p
        assert 0.0 <= f.what_if_saving_us <= m.mean_step_time + 0.1, p
        want = margin_note(f.cost_us_per_step, f.what_if_saving_us, m.mean_step_time)
        note = f.what_if_note
        assert (note is None) == (want is None), (p, note)
        if want is not None and note is not None:  # the same direction (its reason is the graph's)
            assert note == NOTE_OTHER_THREADS and want.startswith(NOTE_HIDDEN) \
                or note.startswith(NOTE_HIDDEN) == want.startswith(NOTE_HIDDEN), (p, note)
    return seen


@pytest.mark.slow  # analyses every shared trace
def test_every_shared_trace_replays_gp205_and_its_collectives_within_the_step() -> None:
    gp205 = comm = 0
    for p in _shared():
        try:
            m = compute_metrics(load_trace(str(p)))
        except Exception as err:  # not a trace this test is about (a load error is test_load's business)
            if type(err).__name__ == "InputError":
                continue
            raise
        if m.main_device is not None and m.steps:
            s = overlap_saving(m)
            if s is not None:
                comm += 1
                assert 0.0 <= s <= m.mean_step_time, p
        gp205 += _check_gp205(m, analyze(str(p)).findings, p)
    assert gp205 >= 3 and comm >= 5  # the shared set holds both (alexnet's and the 2021 V100 runs' churn; NCCL)
