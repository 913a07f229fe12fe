"""GP203 host-sync: synthetic and real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training


def _gp203(path, **options):
    return [f for f in analyze(path, select=["GP203"], options={"GP203": options} if options else None).findings]


def _sync_loop(tmp_path: Path, dialect: str = "modern", item: bool = True, synchronize: bool = False,
               print_tensor: bool = False, steps: int = 4) -> Path:
    """Before each sync the host queues ~4 ms of GEMMs; after it, 2 ms of CPU work before the next launch."""
    tb = TraceBuilder(dialect=dialect)

    def queue_work() -> None:
        with tb.frames(("train.py", 30, "train")):
            for _ in range(4):
                tb.gemm(us=1000)

    for _ in range(steps):
        with tb.step():
            if item:
                queue_work()
                tb.sync_item(line=("train.py", 42, "train"))
                tb.cpu(ms=2.0)
            if synchronize:
                queue_work()
                with tb.frames(("train.py", 48, "train")):
                    tb.device_synchronize()
                tb.cpu(ms=2.0)
            if print_tensor:
                queue_work()
                with tb.frames(("train.py", 51, "train"), ("torch/_tensor.py", 431, "__repr__"),
                               ("torch/_tensor_str.py", 664, "_str")):
                    tb.sync_op("aten::item")
                tb.cpu(ms=2.0)
    return tb.write(tmp_path / f"syncs_{dialect}_{item}_{synchronize}_{print_tensor}.json")


@pytest.mark.parametrize("dialect", ["modern", "2021"])
def test_gp203_bad(tmp_path, dialect):
    found = _gp203(_sync_loop(tmp_path, dialect))
    assert len(found) == 1, found
    f = found[0]
    ev = f.evidence[0]
    assert ev.extra["cause"] == ".item()"
    # one .item() per step: its copy and its stream sync count once
    assert ev.extra["count_per_step"] == 1
    assert ev.extra["op_chain"].startswith("aten::item > aten::_local_scalar_dense > ")
    assert {"cudaMemcpyAsync", "cudaStreamSynchronize"} <= set(ev.extra["runtime_calls"])
    # the host waits for the ~4 ms of queued GEMMs, then the GPU idles for the 2 ms of CPU work: the cost is
    # that bubble, never more than the host time blocked; the last step's sync has no launch after it (3 x 2 ms / 4)
    assert ev.extra["host_blocked_us_per_step"] > 3000
    assert 1300 < f.cost_us_per_step < 1700
    assert f.location is not None and (f.location.file, f.location.line) == ("train.py", 42)
    assert ".item()" in f.message and "train.py:42" in f.message and "1 host sync per step" in f.message
    assert "every N steps" in f.advice


def test_gp203_bad_one_finding_per_cause_and_line(tmp_path):
    found = _gp203(_sync_loop(tmp_path, item=True, synchronize=True, print_tensor=True))
    by_cause = {f.evidence[0].extra["cause"]: f for f in found}
    assert set(by_cause) == {".item()", "torch.cuda.synchronize()", "print(tensor) / f-string of a tensor"}, by_cause
    assert by_cause["torch.cuda.synchronize()"].location.line == 48
    assert by_cause["print(tensor) / f-string of a tensor"].location.line == 51
    assert "torch.cuda.Event" in by_cause["torch.cuda.synchronize()"].advice


def test_gp203_good(tmp_path):
    assert _gp203(simple_training(TraceBuilder(), steps=4).write(tmp_path / "good.json")) == []


def test_gp203_good_profiler_closing_sync_is_not_the_users(tmp_path):
    # The profiler's own cudaDeviceSynchronize after the last step, while the GPU still runs.
    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                tb.gemm(us=1000)
    sync = tb.device_synchronize()
    path = tb.write(tmp_path / "closing.json")
    assert sync["dur"] > 3000  # the host really waited
    assert _gp203(path, min_cost_us_per_step=0.0, min_share=0.0) == []


def test_gp203_good_cheap_sync_below_threshold(tmp_path):
    # GPU idle already when .item() runs: the host barely waits, nothing is lost
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            tb.cpu(ms=5.0)
            tb.sync_item(line=("train.py", 42))
            tb.gemm(us=200)
    path = tb.write(tmp_path / "cheap.json")
    assert _gp203(path) == []
    assert len(_gp203(path, min_cost_us_per_step=0.0, min_share=0.0)) == 1


@pytest.mark.slow
def test_gp203_not_fired_by_v100_copy_syncs(v100_samples):
    # Their stream syncs belong to the blocking H2D copies (GP202); the closing device sync is the profiler's.
    for path in v100_samples:
        assert _gp203(path) == [], path


def test_gp203_real_trace_item_found_when_thresholds_off():
    # HTA's cuda_event_sync trace: one .item() (aten::item > aten::_local_scalar_dense) and one event.synchronize()
    path = shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "critical_path", "cuda_event_sync",
                       "event_sync_trace.json.gz")
    found = _gp203(path, min_cost_us_per_step=0.0, min_share=0.0)
    by_cause = {f.evidence[0].extra["cause"]: f for f in found}
    assert set(by_cause) == {".item()", "event.synchronize()"}, by_cause
    assert by_cause[".item()"].evidence[0].extra["count_per_step"] == 1


def test_gp203_leaves_the_cost_of_gp201s_pageable_device_to_host_copies_to_gp201(tmp_path: Path) -> None:
    # `.cpu()` of a 4 MiB result into pageable memory after 4 ms of queued GEMMs, then 2 ms of CPU work:
    # GP201 (pageable copy) and GP203 (host sync) see the same waits; the cost is charged once
    tb = TraceBuilder()
    for _ in range(4):
        with tb.step():
            with tb.frames(("train.py", 30, "train")):
                for _ in range(4):
                    tb.gemm(us=1000)
            with tb.frames(("train.py", 44, "train")):
                tb.copy_d2h(4 << 20, pageable=True, blocking=True)
            tb.cpu(ms=2.0)
    path = tb.write(tmp_path / "cpu_copies.json")
    both = analyze(path, select=["GP201", "GP203"]).findings
    (gp201,) = [f for f in both if f.code == "GP201"]
    (gp203,) = [f for f in both if f.code == "GP203"]
    alone = _gp203(path)[0]  # without GP201 in the analysis, GP203 claims the whole cost itself
    (shared,) = [e for e in gp203.evidence if e.metric == "cost_counted_in"]
    assert shared.value == "GP201" and shared.extra["syncs"] == 4
    assert gp203.cost_us_per_step == pytest.approx(alone.cost_us_per_step - shared.extra["kernel_idle_us_per_step"],
                                                   abs=1.0)
    assert gp203.cost_us_per_step < 0.05 * alone.cost_us_per_step  # every sync here is one of GP201's copies
    assert "counted in GP201" in gp203.message
    assert [(k.kind, k.code) for k in gp203.links] == [("cost_counted_in", "GP201")]
    assert gp201.cost_us_per_step > 0 and not any(e.metric == "cost_counted_in" for e in gp201.evidence)


def test_sync_after_a_host_to_device_copy_is_not_called_cpu(tmp_path: Path) -> None:
    # x.to("cuda") (blocking: copy, then stream sync) right next to a loss.cpu(): the first is a blocking copy,
    # the second .cpu(); a nearby device→host copy must not rename the first
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    tb = TraceBuilder()
    for _ in range(3):
        with tb.step():
            with tb.frames(("train.py", 20, "train")):
                tb.copy_h2d(1 << 20, pageable=False, blocking=True)
            tb.gemm(us=2000)
            with tb.frames(("train.py", 25, "train")):
                tb.copy_d2h(4, pageable=True, blocking=True)
    m = compute_metrics(load_trace(tb.write(tmp_path / "h2d_then_cpu.json")))
    causes = {(s.location.line if s.location else None, s.cause) for s in m.syncs}
    assert (20, "a blocking copy (.to(device))") in causes
    assert (25, ".cpu() / .to('cpu')") in causes
    assert (20, ".cpu() / .to('cpu')") not in causes
