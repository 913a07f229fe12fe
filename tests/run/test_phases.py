"""The job's phases and compact series (gpuprof/capture/job/phases.py): pure numpy, checked against plain computations."""

from __future__ import annotations

import gzip
import json
import statistics

import numpy as np
import pytest

from gpuprof.capture.job.phases import (
    MAX_POINTS,
    MIN_PHASE,
    SLOW_RATIO,
    WatchData,
    compact_series,
    detect_phases,
    job_summary,
)
from gpuprof.report import JobPhase, JobSamples
from gpuprof_testing.realtraces import shared_path


def _kinds(phases: list[JobPhase]) -> list[tuple[str, int, int]]:
    return [(p.kind, p.start_step, p.end_step) for p in phases]


def _noisy(n: int, base: float, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return base * (1 + noise * rng.standard_normal(n)).clip(0.3)


def _covers(phases: list[JobPhase], n: int) -> None:
    """Phases are contiguous, in order, and cover every step once."""
    assert phases[0].start_step == 0 and phases[-1].end_step == n - 1
    for a, b in zip(phases, phases[1:]):
        assert b.start_step == a.end_step + 1
    assert sum(p.steps for p in phases) == n


@pytest.mark.parametrize("seed", range(8))
def test_planted_slowdown_is_found_where_it_starts(seed: int) -> None:
    t = _noisy(300, 0.005, 0.10, seed)
    t[150:] += 0.005  # a planted sleep in every step from step 150 on
    t[0] = 0.4  # step 0: CUDA context, workers starting
    phases = detect_phases(t)
    _covers(phases, 300)
    main = [p for p in phases if p.kind != "warmup"]
    assert [p.kind for p in main] == ["steady", "slowdown"], _kinds(phases)
    assert abs(main[1].start_step - 150) <= 3
    assert phases[0].kind == "warmup" and phases[0].start_step == 0


@pytest.mark.parametrize("seed", range(8))
def test_noise_and_single_spikes_open_no_phase(seed: int) -> None:
    t = _noisy(400, 0.01, 0.15, seed)
    t[[50, 51, 200, 333]] *= 8  # a GC pause, a checkpoint save: single slow steps
    assert [p.kind for p in detect_phases(t)] == ["steady"]


def test_marked_steps_are_their_own_phases() -> None:
    t = _noisy(200, 0.005, 0.05, 1)
    t[100] = 0.5  # an evaluation between two optimizer steps
    t[5:10] *= 1.5  # the torch profiler's recorded window
    phases = detect_phases(t, eval_steps=[100], recorded_steps=range(5, 10))
    _covers(phases, 200)
    assert ("eval", 100, 100) in _kinds(phases)
    assert ("recorded", 5, 9) in _kinds(phases)
    assert not [p for p in phases if p.kind == "slowdown"]


def test_statistics_are_those_of_the_steps() -> None:
    t = _noisy(120, 0.002, 0.2, 3)
    t[60:] *= 3
    fetch = t * 0.25
    for p in detect_phases(t, fetch_s=fetch):
        part = t[p.start_step:p.end_step + 1]
        assert p.step_time_median_us == pytest.approx(statistics.median(part.tolist()) * 1e6)
        assert p.step_time_max_us == pytest.approx(max(part) * 1e6) and p.step_time_min_us == pytest.approx(min(part) * 1e6)
        assert p.data_wait_share == pytest.approx(0.25, abs=1e-3)


def test_edge_cases() -> None:
    assert detect_phases([]) == []
    assert _kinds(detect_phases([0.01])) == [("steady", 0, 0)]
    assert [p.kind for p in detect_phases([0.01] * 7)] == ["steady"]
    flat = detect_phases([0.0] * 30)  # a clock that did not move: no crash, one phase
    assert len(flat) == 1


def test_compact_series_is_bounded_and_exact_per_bucket() -> None:
    n = 12_345
    t = _noisy(n, 0.003, 0.3, 7)
    fetch = t / 3
    s = compact_series(WatchData(step_s=t, fetch_s=fetch))
    assert s.bucket == -(-n // MAX_POINTS) and len(s.step_time_us) <= MAX_POINTS
    assert s.first_step == list(range(0, n, s.bucket))
    for i in (0, 5, len(s.first_step) - 1):  # the last bucket is a partial one
        a = s.first_step[i]
        part = t[a:a + s.bucket].tolist()
        assert s.step_time_us[i] == pytest.approx(statistics.median(part) * 1e6, abs=1e-3)
        assert s.step_time_max_us[i] == pytest.approx(max(part) * 1e6, abs=1e-3)
        assert s.step_time_min_us[i] == pytest.approx(min(part) * 1e6, abs=1e-3)
        assert s.data_wait_us is not None
        assert s.data_wait_us[i] == pytest.approx(statistics.median(fetch[a:a + s.bucket].tolist()) * 1e6, abs=1e-3)
    assert s.cuda_allocated_mib is None  # no CUDA measured: null, not zeros
    small = compact_series(WatchData(step_s=t[:100]))
    assert small.bucket == 1 and len(small.step_time_us) == 100 and small.data_wait_us is None


def test_job_summary_counts_every_step() -> None:
    t = _noisy(50, 0.01, 0.05, 2)
    job = job_summary(WatchData(step_s=t, cores=4))
    assert job.steps == 50 and job.cores == 4 and job.h2d_copy_us is None
    assert sum(p.steps for p in job.phases) == 50


@pytest.mark.parametrize("rel", [
    ("tbplugin", "historical_2021-01", "resnet50_profiler_api_num_workers_0"),
    ("tbplugin", "historical_2020-12_list_format", "resnet50_num_workers_4"),
])
@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_real_trace_step_times(rel: tuple[str, ...]) -> None:
    """A real job's step times (its ProfilerStep#N ranges, read from the raw JSON): the phases cover them all and
    the steady median is theirs."""
    d = shared_path(*rel)
    path = next(p for p in sorted(d.rglob("*.json*")))
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    steps = sorted((e["ts"], e["dur"]) for e in events
                   if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X")
    assert len(steps) >= 3
    dur_s = [dur / 1e6 for _, dur in steps]
    phases = detect_phases(dur_s)
    _covers(phases, len(dur_s))
    whole = [p for p in phases if p.kind == "steady"]
    assert whole
    for p in phases:
        assert p.step_time_median_us == pytest.approx(statistics.median(dur_s[p.start_step:p.end_step + 1]) * 1e6)


def test_a_slow_first_segment_is_warmup() -> None:
    t = np.concatenate([np.full(20, 0.05), _noisy(280, 0.005, 0.05, 4)])  # 20 slow steps: compilation, autotuning
    phases = detect_phases(t)
    _covers(phases, 300)
    assert _kinds(phases) == [("warmup", 0, 19), ("steady", 20, 299)]


def test_own_work_steps_make_no_phase_of_the_job() -> None:
    """The steps gpuprof slowed (a window's report analysed beside the training) are ``own_work``, never a
    slowdown or a warm-up (issue 41: "slowdown 12-21, 2.41x steady" was gpuprof's own analysis)."""
    t = _noisy(200, 0.005, 0.05, 2)
    t[10:15] *= 1.5  # the default window
    t[15:25] *= 2.4  # the steps after it, while its report was analysed
    phases = detect_phases(t, recorded_steps=range(10, 15), own_steps=range(10, 25))
    _covers(phases, 200)
    assert ("own_work", 15, 24) in _kinds(phases) and ("recorded", 10, 14) in _kinds(phases)
    assert [p.kind for p in phases if p.kind not in ("own_work", "recorded")] == ["steady", "steady"], _kinds(phases)


@pytest.mark.parametrize("seed", range(120, 180))
def test_phases_keep_their_labels_word(seed: int) -> None:
    """A slowdown is slower than the (first) steady phase by SLOW_RATIO and at least MIN_PHASE training steps
    long, counted across the set-aside steps that split it (issue 41: "slowdown 44-44, 0.85x steady")."""
    rng = np.random.default_rng(seed)
    t = 0.005 * (1 + 0.1 * rng.standard_normal(300)).clip(0.3)
    for _ in range(4):  # bursts of every length and height
        a, n = int(rng.integers(20, 280)), int(rng.integers(2, 25))
        t[a:a + n] *= float(rng.uniform(1.1, 2.5))
    w = int(rng.integers(5, 280))
    phases = detect_phases(t, recorded_steps=range(w, w + 5))
    _covers(phases, 300)
    steady = next(p for p in phases if p.kind == "steady")
    stretch = 0
    for p in phases + [JobPhase("end", 0, 0, 0.0)]:
        if p.kind == "slowdown":
            assert p.step_time_median_us >= steady.step_time_median_us * (1 + SLOW_RATIO), _kinds(phases)
            stretch += p.steps
        elif p.kind not in ("recorded", "eval", "own_work"):
            assert stretch == 0 or stretch >= MIN_PHASE, _kinds(phases)
            stretch = 0
        if p.kind == "warmup":
            assert p.step_time_median_us > steady.step_time_median_us, _kinds(phases)


def _samples(n: int, every: int, cpu: list[float], wait: list[float]) -> JobSamples:
    """Sampler figures: a sample each ``every`` steps, the training thread's CPU and wait % per sample."""
    steps = list(range(every, n + 1, every))
    assert len(steps) == len(cpu) == len(wait)
    return JobSamples(step=steps, process_cpu_pct=list(cpu), thread_cpu_pct=list(cpu), thread_wait_pct=list(wait))


def _steady_then_slower(seed: int) -> np.ndarray:
    t = _noisy(400, 0.006, 0.05, seed)
    t[200:] *= 3.0  # steps 200-399 take 3x as long
    return t


@pytest.mark.parametrize("seed", range(4))
def test_a_slowdown_the_core_wait_explains_is_contention(seed: int) -> None:
    """Other processes took the cores from step 200: the thread's time on a core per step stayed (6 ms: 100% of
    a 6 ms step, 33% of an 18 ms one) and its wait rose to two thirds of the step: contention, not a slowdown."""
    t = _steady_then_slower(seed)
    cpu = [100.0] * 10 + [33.3] * 10
    wait = [0.0] * 10 + [66.7] * 10
    phases = detect_phases(t, samples=_samples(400, 20, cpu, wait))
    _covers(phases, 400)
    assert [p.kind for p in phases] == ["steady", "contention"], _kinds(phases)
    assert abs(phases[1].start_step - 200) <= 3
    assert phases[1].core_wait_share == pytest.approx(0.667, abs=0.02)
    assert phases[0].core_wait_share is None
    # the same steps without the thread's figures (an older report, not Linux): a slowdown, as before
    assert [p.kind for p in detect_phases(t)] == ["steady", "slowdown"]


@pytest.mark.parametrize("seed", range(4))
def test_a_job_that_does_more_work_stays_a_slowdown_beside_a_busy_machine(seed: int) -> None:
    """A hog all along takes the same share of the cores before and after: the job's own work per step tripled
    (its time on a core per step 3x) and so did its wait: the job slowed, whatever the machine's load."""
    t = _steady_then_slower(seed)
    cpu = [40.0] * 20
    wait = [60.0] * 20
    phases = detect_phases(t, samples=_samples(400, 20, cpu, wait))
    assert [p.kind for p in phases] == ["steady", "slowdown"], _kinds(phases)
    assert phases[1].core_wait_share is None


def test_a_slowdown_with_no_added_wait_stays_a_slowdown() -> None:
    """A planted sleep (the thread neither on a core nor waiting for one): the wait explains nothing."""
    t = _steady_then_slower(0)
    cpu = [100.0] * 10 + [33.3] * 10
    wait = [2.0] * 20
    assert [p.kind for p in detect_phases(t, samples=_samples(400, 20, cpu, wait))] == ["steady", "slowdown"]


def test_contention_needs_figures_inside_both_phases() -> None:
    """Samples that name no figure (None: a thread that ended, no /proc) relabel nothing; a lone sample
    covering the whole job weighs in both phases alike and cannot tell them apart."""
    t = _steady_then_slower(1)
    none = JobSamples(step=[200, 400], process_cpu_pct=[100.0, 33.0], thread_cpu_pct=[None, None],
                      thread_wait_pct=[None, None])
    assert [p.kind for p in detect_phases(t, samples=none)] == ["steady", "slowdown"]
    one = JobSamples(step=[400], process_cpu_pct=[60.0], thread_cpu_pct=[60.0], thread_wait_pct=[40.0])
    assert [p.kind for p in detect_phases(t, samples=one)] == ["steady", "slowdown"]
