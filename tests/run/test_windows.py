"""Windows after the default one: the plan (the torch profiler's schedule), the anomaly detectors, and an
in-process capture that records a window on request and on a trigger (gpuprof.capture.job.windows, job, trigger)."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerAction  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.capture.job.trigger import trigger  # noqa: E402
from gpuprof.capture.job.windows import (  # noqa: E402
    ANOMALY_FACTOR,
    ANOMALY_STEPS,
    BASELINE_MIN_STEPS,
    WINDOW_WARMUP,
    GrowthDetector,
    SlowdownDetector,
    WindowPlan,
)

NONE, WARMUP, REC, SAVE = ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD, \
    ProfilerAction.RECORD_AND_SAVE


def _actions(plan: WindowPlan, n: int) -> list[ProfilerAction]:
    return [plan(s) for s in range(n)]


def test_plan_keeps_the_default_window_and_places_a_request_after_it() -> None:
    base = Schedule(wait=2, warmup=1, active=3).to_torch()
    plan = WindowPlan(base)
    assert _actions(plan, 8) == [base(s) for s in range(8)]  # nothing asked: the configured schedule alone
    assert plan.request(4, "trigger", "test") and not plan.request(2, "trigger")  # one pending at a time
    w = plan.place_pending(1)  # asked at step 1, during the default window's wait: placed after it
    assert w is not None and w.reason == "trigger" and w.steps == 4
    default_last = max(s for s in range(20) if base(s) is not NONE)
    assert w.start >= default_last + 2  # one step between the windows: the profiler is made afresh
    acts = _actions(plan, w.last + 3)
    assert acts[w.start:w.first] == [WARMUP] * WINDOW_WARMUP
    assert acts[w.first:w.last] == [REC] * (w.steps - 1) and acts[w.last] is SAVE
    assert acts[w.last + 1:] == [NONE, NONE]
    assert plan.window_at(w.first) == w and plan.window_at(default_last) is None
    # a second request while the first is planned goes after it
    assert plan.request(2, "anomaly")
    w2 = plan.place_pending(w.start)
    assert w2 is not None and w2.start >= w.last + 2 and plan.window_at(w2.last) == w2


def test_slowdown_detector_fires_once_at_the_onset_and_starts_afresh() -> None:
    det = SlowdownDetector()
    fired = []
    times = [0.010 + 0.0005 * (i % 3) for i in range(100)] + [0.030] * 40  # slower from step 100
    for i, t in enumerate(times):
        a = det.observe(i, t)
        if a is not None:
            fired.append(a)
    assert len(fired) == 1, fired  # the lasting slowdown is one anomaly: the new level became the baseline
    a = fired[0]
    assert a.kind == "slowdown" and a.onset == 100 and a.detected == 100 + ANOMALY_STEPS - 1
    assert a.before_s == pytest.approx(statistics.median(times[100 - 64:100]))
    assert a.after_s == pytest.approx(0.030)


def test_slowdown_detector_ignores_noise_and_short_spikes() -> None:
    det = SlowdownDetector()
    times = [0.010] * BASELINE_MIN_STEPS
    times += [0.010 * (ANOMALY_FACTOR - 0.05)] * 50  # slower, but under the threshold
    times += ([0.05] * (ANOMALY_STEPS - 1) + [0.010] * 10) * 5  # spikes one step short of an anomaly
    assert all(det.observe(i, t) is None for i, t in enumerate(times))


def test_growth_detector_needs_a_steady_rise() -> None:
    det = GrowthDetector(min_total=2 * 2**20, min_rising_share=0.7, steps=16)
    assert all(det.observe(i, 100 * 2**20 + (i % 2) * 2**20) is None for i in range(40))  # up and down
    det.reset()
    found = [det.observe(i, 100 * 2**20 + i * 256 * 1024) for i in range(40)]
    hits = [a for a in found if a is not None]
    assert hits and hits[0].kind == "memory_growth" and hits[0].onset == 0 and hits[0].detected == 16
    small = GrowthDetector(min_total=2 * 2**20, min_rising_share=0.7, steps=16)
    assert all(small.observe(i, 100 * 2**20 + i * 1024) is None for i in range(40))  # rises by too little


def _trace_step_ids(path: str) -> list[int]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return sorted(int(e["name"].split("#")[1]) for e in events
                  if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X")


def _train(prof: gpuprof.capture.Profiler, steps: int, on_step: object = None) -> None:
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    for i in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.002)
        prof.step()
        if callable(on_step):
            on_step(i)


def test_request_window_records_its_own_trace_and_lists_it_in_job_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(tmp_path / "reg"))
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")
    asked: list[tuple[int, bool]] = []
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=1, warmup=1, active=2), tensorboard=False,
                         print_report=False, max_auto_windows=0, hang_timeout=0) as prof:
        def ask(i: int) -> None:
            if i == 20:  # asked from another thread, as a trigger's would be
                t = threading.Thread(target=lambda: asked.append((prof.step_num, prof.request_window(3))))
                t.start()
                t.join()
        _train(prof, 40, ask)
    assert asked and asked[0][1] is True
    with pytest.raises(ValueError):
        prof.request_window(0)
    assert prof.request_window(3) is False  # stopped: nothing more is recorded
    at = asked[0][0]
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    wins = doc["job"]["windows"]
    assert wins[0] == {"start_step": 2, "steps": 2, "reason": "default"}  # wait 1 + warm-up 1, then 2 recorded
    assert len(wins) == 2 and wins[1]["reason"] == "trigger" and wins[1]["steps"] == 3
    # asked while step `at` runs: its end is the next boundary, then one warm-up step, then the recorded steps
    assert wins[1]["start_step"] == at + 1 + WINDOW_WARMUP
    traces = {t.first_step: t for t in prof.traces}
    assert len(traces) == 2 and len({t.path for t in prof.traces}) == 2
    ids = _trace_step_ids(str(traces[wins[1]["start_step"]].path))
    assert ids == list(range(at + 1 + WINDOW_WARMUP, at + 1 + WINDOW_WARMUP + 3))  # the trace holds exactly those steps
    assert len(doc["traces"]) == 2  # both windows analysed
    assert any(n.startswith(f"the window recorded on demand (steps {ids[0]}-{ids[-1]}) against the steady window")
               for n in doc["notes"]), doc["notes"]
    assert f"recorded windows: steps 2-3 (default), steps {ids[0]}-{ids[-1]} (trigger)" in doc["notes"]
    assert doc["sections"][-1]["recorded_steps"][1] == [ids[0], ids[-1]]


def test_trigger_reaches_a_running_capture_within_n_plus_2_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(tmp_path / "reg"))
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")
    n = 4
    seen: dict[str, int] = {}
    done = threading.Event()
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=1, warmup=1, active=2), tensorboard=False,
                         print_report=False, max_auto_windows=0, hang_timeout=0) as prof:
        registered = list((tmp_path / "reg").glob("*.json"))
        assert [p.name for p in registered] == [f"{os.getpid()}.json"]
        assert (tmp_path / "reg").stat().st_mode & 0o777 == 0o700

        def send() -> None:
            while prof.step_num < 20:
                time.sleep(0.005)
            seen["before"] = prof.step_num
            reached = trigger(os.getpid(), n)
            seen["after"] = prof.step_num
            seen["reached"] = len(reached)
            done.set()

        t = threading.Thread(target=send)
        t.start()
        _train(prof, 60, lambda i: None)
        t.join()
    assert done.is_set() and seen["reached"] == 1
    assert not list((tmp_path / "reg").glob("*.json")), "the registration is removed when the capture stops"
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    trig = [w for w in doc["job"]["windows"] if w["reason"] == "trigger"]
    assert len(trig) == 1 and trig[0]["steps"] == n
    last = trig[0]["start_step"] + n - 1
    assert seen["before"] < trig[0]["start_step"]
    assert last <= seen["after"] + n + 2  # recorded within N+2 steps of the request


def test_a_bare_sigusr2_records_the_default_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from gpuprof.capture.job.windows import DEFAULT_WINDOW_STEPS

    monkeypatch.setenv("GPUPROF_RUNTIME_DIR", str(tmp_path / "reg"))
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")
    sent: list[int] = []
    with gpuprof.profile(tmp_path, run="r", schedule=Schedule(wait=1, warmup=1, active=2), tensorboard=False,
                         print_report=False, max_auto_windows=0, hang_timeout=0) as prof:
        def kill(i: int) -> None:
            if i == 15:
                sent.append(prof.step_num)
                os.kill(os.getpid(), signal.SIGUSR2)  # as `kill -USR2 PID` would
        _train(prof, 40, kill)
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    trig = [w for w in doc["job"]["windows"] if w["reason"] == "trigger"]
    assert len(trig) == 1 and trig[0]["steps"] == DEFAULT_WINDOW_STEPS
    assert trig[0]["start_step"] == sent[0] + 1 + WINDOW_WARMUP  # the next boundary, one warm-up step


def test_memory_growth_outside_windows_asks_for_an_anomaly_window_once_per_allowance() -> None:
    from gpuprof.capture.job.job import JobWindows

    plan = WindowPlan(Schedule(wait=1, warmup=1, active=2).to_torch())
    job = JobWindows(plan, 1, 3, lambda: True, SlowdownDetector(),
                     GrowthDetector(min_total=2 * 2**20, min_rising_share=0.7, steps=16))
    placed = []
    for step in range(1, 80):
        recording = bool(placed) and placed[-1].start <= step - 1 <= placed[-1].last
        job.step(step, 0.01, step * 0.01, recording, False, 100 * 2**20 + step * 512 * 1024)
        if plan.windows and (not placed or plan.windows[-1] is not placed[-1]):
            placed.append(plan.windows[-1])
    assert len(placed) == 1 and job.auto_left == 0  # the allowance (1) is spent; the growth goes on unrecorded
    w = placed[0]
    assert w.reason == "anomaly" and w.steps == 3 and w.anomaly is not None and w.anomaly.kind == "memory_growth"
    assert w.anomaly.onset == 0 and w.start == w.anomaly.detected + 1  # from the step after the one that told
    assert "grew by" in w.detail


def test_the_anomaly_thresholds_are_gp650_options_and_the_new_settings_are_checked() -> None:
    from gpuprof.capture.config import CaptureConfig

    cfg = CaptureConfig(options={"GP650.anomaly_factor": 2.0, "GP650.anomaly_steps": 3, "GP650.anomaly_min_ms": 0})
    assert (cfg.options.anomaly_factor, cfg.options.anomaly_steps, cfg.options.anomaly_min_ms) == (2.0, 3, 0)
    assert (CaptureConfig().hang_timeout, CaptureConfig().max_auto_windows, CaptureConfig().trigger) == (None, 2, True)
    for bad in ({"hang_timeout": -1}, {"hang_timeout": float("inf")}, {"hang_timeout": "5"},
                {"max_auto_windows": -1}, {"max_auto_windows": 1.5}, {"max_auto_windows": True}):
        with pytest.raises(ValueError):
            CaptureConfig(**bad)  # type: ignore[arg-type]
    det = SlowdownDetector(2.0, 3, 0.0)
    # (the 1.9x steps are few enough to stay outside the run's own spread: the factor alone decides)
    times = [0.010] * 60 + [0.019] * 3 + [0.010] * 10 + [0.021] * 3
    hits = [a for i, t in enumerate(times) if (a := det.observe(i, t)) is not None]
    assert [(a.onset, a.detected) for a in hits] == [(73, 75)]  # 1.9x is under a 2.0 factor; 3 in a row fire


def test_a_schedule_without_free_steps_says_once_that_the_window_has_no_room() -> None:
    import warnings

    from gpuprof.capture.job.job import JobWindows

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        always = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=0)
    plan = WindowPlan(always)
    said: list[tuple[str, str]] = []
    job = JobWindows(plan, 0, 5, lambda: True, SlowdownDetector(), None, lambda k, m: said.append((k, m)))
    for step in (1, 2):
        assert job.request(3, "trigger")
        job.step(step, 0.01, 0.0, True, False, None)
    assert plan.windows == [] and not plan.pending
    assert len(said) == 2 and all(k == "window unplaced" for k, _ in said)  # the guard says a key once
    assert "records continuously" in said[0][1]
    with pytest.raises(ValueError):
        job.request(3, "whenever")
    with pytest.raises(ValueError):
        job.request(0, "trigger")
