"""What-if bounds and notes (issue 42.2): each note's reason is the graph's, checked where it holds and where not.

A finding's cost is set by hand here (the rule's estimate is not what is tested): a cost far above or below the
replay puts the finding beyond the margin, and the note then has to say why from the replay (which edge ends the
replayed steps, whether GPU work ran earlier). The traces are built by ``TraceBuilder``; the expected figures come
from the events it wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.findings import Finding, Severity
from gpuprof.rules.loaderfix import NOTE_LOADER_CPU, loader_saving
from gpuprof.rules.replayed import with_what_if
from gpuprof.trace.critpath.margin import NOTE_HIDDEN, NOTE_MORE, NOTE_STARVES, WHY_HOST
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof_testing.tracegen import TraceBuilder

GAPS = (4.0, 6.0, 9.0, 5.0, 7.0, 8.0)


def _metrics(b: TraceBuilder, tmp_path: Path) -> TraceMetrics:
    return compute_metrics(load_trace(str(b.write(tmp_path / "t.pt.trace.json"))))


def _one(m: TraceMetrics, code: str, cost: float, cores: int | None = None) -> Finding:
    (f,) = with_what_if(m, [Finding(code, "x", Severity.WARNING, "m", "a", cost_us_per_step=cost)], cores=cores)
    return f


def _end(e: dict[str, Any]) -> float:
    return float(e["ts"]) + float(e["dur"])


def _gpu_idle_after(events: list[dict[str, Any]], t0: float, t1: float) -> float:
    """Independent: time in [t0, t1] with no GPU event running (one stream here)."""
    spans = sorted((float(e["ts"]), _end(e)) for e in events if e.get("cat") in ("kernel", "gpu_memcpy"))
    busy, hi = 0.0, t0
    for a, b in spans:
        a, b = max(a, hi), min(b, t1)
        if b > a:
            busy += b - a
            hi = b
    return (t1 - t0) - busy


def test_gp201_on_a_gpu_bound_step_saves_at_most_the_gpu_idle_after_its_waits(tmp_path: Path) -> None:
    # pageable blocking copies queued behind 5 ms of kernels: the host waits in each copy call while the GPU runs;
    # made asynchronous, the host runs on, but the GPU was busy: the step saves at most its idle time after them
    b = TraceBuilder(stream_gaps_us=GAPS)
    for _ in range(3):
        with b.step():
            for _ in range(10):
                b.kernel("compute", us=500.0)
            b.copy_h2d(64 << 20, pageable=True, blocking=False, us=800.0)
            b.cpu(us=40.0, name="aten::host_op")
            b.kernel("after", us=300.0)
            b.device_synchronize()
    doc = b.to_dict()
    m = _metrics(b, tmp_path)
    f = _one(m, "GP201", 6000.0)  # a cost far above the replay
    assert f.what_if_saving_us is not None
    ev = doc["traceEvents"]
    calls = [e for e in ev if e.get("name") == "cudaMemcpyAsync"]
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    last_gpu = max(_end(e) for e in ev if e.get("cat") == "kernel")
    bound = _gpu_idle_after(ev, float(calls[0]["ts"]), last_gpu) / 3  # the GPU's idle after the first copy wait
    waits = sum(float(c["dur"]) for c in calls) / 3
    assert waits > 4000.0  # the host did wait milliseconds in the copies ...
    assert f.what_if_saving_us <= bound + 0.5  # ... but the step saves at most the GPU's idle (a launch gap each)
    assert bound < 0.05 * waits and len(steps) == 3
    note = f.what_if_note or ""
    assert note.startswith(NOTE_HIDDEN) and "GPU" in note and not note.startswith(NOTE_STARVES)


def test_hidden_reason_is_the_gpu_where_the_gpu_ends_the_replay_and_the_host_where_it_does_not(tmp_path: Path) -> None:
    # holds: data loading while the GPU still runs the previous step's kernel (GPU-bound)
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            b.dataloader(ms=1.0, single_process=False)
            b.device_synchronize()
            b.kernel("long", us=3000)
    f = _one(_metrics(b, tmp_path), "GP103", 1000.0)
    assert f.what_if_saving_us is not None and f.what_if_saving_us < 400.0
    assert (f.what_if_note or "").startswith(NOTE_HIDDEN + ": the GPU's queued work")
    # does not hold: a host-bound step whose host work after the data wait ends each step (the GPU idles)
    b = TraceBuilder()
    for _ in range(4):
        with b.step():
            b.kernel("short", us=50)
            b.dataloader(ms=1.0, single_process=False)
            b.cpu(us=2000, name="aten::host_work")
    f = _one(_metrics(b, tmp_path / "h"), "GP103", 5000.0)
    note = f.what_if_note or ""
    assert note.startswith(f"{NOTE_HIDDEN}: {WHY_HOST}") and "queued" not in note


def test_starves_only_where_gpu_work_was_held_back(tmp_path: Path) -> None:
    # holds: each step's kernel is launched after its data wait: without the wait it runs earlier
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.dataloader(ms=1.0, single_process=False)
            b.kernel("after_load", us=1500)
            b.device_synchronize()
    f = _one(_metrics(b, tmp_path), "GP103", 100.0)
    assert f.what_if_saving_us is not None and f.what_if_saving_us > 900.0
    assert (f.what_if_note or "").startswith(NOTE_STARVES)
    # does not hold: the GPU's one kernel was launched before every data wait, so nothing on the GPU moves; the host
    # still saves its waits (more than the cost given): said without naming the GPU as the cause
    b = TraceBuilder()
    with b.step():
        b.kernel("early", us=2000)
        b.dataloader(ms=1.0, single_process=False)
        b.cpu(us=200)
    for _ in range(2):
        with b.step():
            b.dataloader(ms=1.0, single_process=False)
            b.cpu(us=200)
    f = _one(_metrics(b, tmp_path / "n"), "GP103", 10.0)
    note = f.what_if_note or ""
    assert f.what_if_saving_us is not None and f.what_if_saving_us > 300.0
    assert note.startswith(NOTE_MORE) and "starves" not in note


def test_loader_what_if_without_gpu_shares_the_trainers_cores(tmp_path: Path) -> None:
    b = TraceBuilder(device=None)
    loads = []
    for _ in range(4):
        with b.step():
            t0 = b.now
            b.dataloader(ms=3.0)
            loads.append(b.now - t0)
            b.cpu(us=2000, name="aten::addmm")
    m = _metrics(b, tmp_path)
    wait = sum(loads) / 4
    f = _one(m, "GP102", wait)
    # cores unknown (a trace does not record them): no figure, the model said, no GPU named
    assert f.what_if_saving_us is None
    note = f.what_if_note or ""
    assert note.startswith(NOTE_LOADER_CPU) and "GPU work" not in note and "starves" not in note
    # cores known (the capture's): the workers take 1/N of the loading from the trainer's compute
    f2 = _one(m, "GP102", wait, cores=2)
    assert f2.what_if_saving_us == pytest.approx(wait / 2, abs=1.0)
    assert "GPU" not in (f2.what_if_note or "").replace("no GPU in this trace", "")
    assert loader_saving(1000.0, 8) == pytest.approx(875.0) and loader_saving(1000.0, 1) == 0.0


def test_gp601_absorbing_a_cpu_loader_finding_models_the_runs_cores(tmp_path: Path) -> None:
    from gpuprof.codes import apply_overlaps
    from gpuprof.findings import Evidence

    b = TraceBuilder(device=None)
    for _ in range(4):
        with b.step():
            b.dataloader(ms=3.0)
            b.cpu(us=2000, name="aten::addmm")
    m = _metrics(b, tmp_path)
    gp102 = _one(m, "GP102", 3000.0)
    wait = next(e.value for e in gp102.evidence if e.metric == "loader_wait_us")
    assert isinstance(wait, float) and wait > 2900.0

    def gp601(extra: dict[str, Any]) -> Finding:
        return Finding("GP601", "dataloader-main-process", Severity.WARNING, "m", "a", cost_us_per_step=3000.0,
                       cost_share=0.6, origin="runtime",
                       evidence=(Evidence("data_loading_share", 0.6, 0.3, "fraction", extra=extra),))

    # the run measured 4 cores: the workers keep a quarter of the loading in the step
    (w,) = [f for f in apply_overlaps([gp102, gp601({"num_workers": 0, "cores": 4})]) if f.code == "GP601"]
    assert w.what_if_saving_us == pytest.approx(wait * 0.75, abs=0.5)
    # cores not known: no figure, the loader note carried
    (w,) = [f for f in apply_overlaps([gp102, gp601({"num_workers": 0})]) if f.code == "GP601"]
    assert w.what_if_saving_us is None and (w.what_if_note or "").startswith(NOTE_LOADER_CPU)


def _gp102_and_gp601(tmp_path: Path, extra: dict[str, Any]) -> tuple[float, Finding]:
    """A CPU-only trace's GP102 (3 ms of loading in a 5 ms step), absorbed by a GP601 whose evidence is ``extra``:
    (the replayed wait, GP601 with the loader fix's what-if)."""
    from gpuprof.codes import apply_overlaps
    from gpuprof.findings import Evidence

    b = TraceBuilder(device=None)
    for _ in range(4):
        with b.step():
            b.dataloader(ms=3.0)
            b.cpu(us=2000, name="aten::addmm")
    gp102 = _one(_metrics(b, tmp_path), "GP102", 3000.0)
    wait = next(e.value for e in gp102.evidence if e.metric == "loader_wait_us")
    assert isinstance(wait, float)
    gp601 = Finding("GP601", "dataloader-main-process", Severity.WARNING, "m", "a", cost_us_per_step=3000.0,
                    cost_share=0.6, origin="runtime",
                    evidence=(Evidence("data_loading_share", 0.6, 0.3, "fraction", extra=extra),))
    (w,) = [f for f in apply_overlaps([gp102, gp601]) if f.code == "GP601"]
    return wait, w


@pytest.mark.parametrize("trainer", [2.0, 1.4, 0.3])
def test_no_saving_is_promised_when_no_core_is_free_beside_the_trainer(tmp_path: Path, trainer: float) -> None:
    """Issue 46 item 7: on 2 cores with none idle over the steps (the trainer's compute on both, or other processes
    on what it leaves), DataLoader workers can only take their CPU from the trainer: the what-if promises nothing
    (the old model promised half the loading, whatever the cores did)."""
    _wait, w = _gp102_and_gp601(tmp_path, {"num_workers": 0, "cores": 2, "trainer_cpu_cores": trainer,
                                           "idle_cores": 0.0, "cores_measured_s": 30.0})
    assert w.what_if_saving_us == 0.0
    note = w.what_if_note or ""
    assert "no core was free beside the trainer" in note and "GPU work" not in note


def test_the_saving_is_capped_by_the_idle_cores_measured(tmp_path: Path) -> None:
    """The step is at least the job's CPU work spread over the cores the trainer used plus the idle ones: with the
    trainer on 1 core and 0.25 idle, of a 5 ms step at most 5 x 0.25 / 1.25 = 1 ms can go, not the 1.5 ms of the
    unmeasured model; with most of a core idle, the saving is the wait itself at most."""
    wait, w = _gp102_and_gp601(tmp_path, {"num_workers": 0, "cores": 2, "trainer_cpu_cores": 1.0,
                                          "idle_cores": 0.25, "cores_measured_s": 30.0})
    assert w.what_if_saving_us == pytest.approx(1000.0, abs=0.5)
    assert "were idle" in (w.what_if_note or "")
    # a trainer that sleeps while loading (an I/O-bound loader): cores idle, the whole wait can go
    wait, w = _gp102_and_gp601(tmp_path, {"num_workers": 0, "cores": 2, "trainer_cpu_cores": 0.4,
                                          "idle_cores": 1.6, "cores_measured_s": 30.0})
    assert w.what_if_saving_us == pytest.approx(wait, abs=0.5)
    # figures that are not numbers (a hand-edited report) are not a measurement: the unmeasured model
    wait, w = _gp102_and_gp601(tmp_path, {"num_workers": 0, "cores": 2, "trainer_cpu_cores": "2",
                                          "idle_cores": None, "cores_measured_s": 30.0})
    assert w.what_if_saving_us == pytest.approx(wait / 2, abs=0.5)
