"""Alarms that are the job's (issue 41 item 3): the slowdown detector against the run's own spread and against
CPU starvation (run-queue wait), and the host-contention note (GP656). Synthetic series fed to the detectors;
no clock is read (the run-queue wait is a counter the test advances)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from gpuprof.capture.config import Schedule  # noqa: E402
from gpuprof.capture.end.analyse import within_run_spread  # noqa: E402
from gpuprof.capture.job.job import JobWindows  # noqa: E402
from gpuprof.capture.job.phases import WatchData  # noqa: E402
from gpuprof.capture.job.verdict import contention_finding  # noqa: E402
from gpuprof.capture.job.windows import CAUSE_SHARE, SlowdownDetector, WindowPlan  # noqa: E402
from gpuprof.findings import Evidence, Finding, Severity  # noqa: E402


class _Wait:
    """A fake run-queue wait counter (seconds), advanced by the test with each step."""

    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def _job(det: SlowdownDetector) -> JobWindows:
    plan = WindowPlan(Schedule(wait=1, warmup=1, active=2).to_torch())
    return JobWindows(plan, 2, 5, lambda: True, det)


def _feed(job: JobWindows, times: np.ndarray, wait: _Wait | None = None,
          waited: np.ndarray | None = None) -> None:
    for i, t in enumerate(times):
        if wait is not None and waited is not None:
            wait.s += float(waited[i])  # the step's wait happened before the step ended (the detector reads after)
        job.step(i + 1, float(t), float(i), False, False, None)


def _steady(n: int, seed: int) -> np.ndarray:
    return 0.005 * (1 + 0.05 * np.random.default_rng(seed).standard_normal(n))


@pytest.mark.parametrize("seed", range(5))
def test_a_steady_noisy_series_opens_no_anomaly_window(seed: int) -> None:
    """A busy machine's steady loop: a third of the steps, at random, take twice as long. Runs of five such steps
    happen by chance; they are within the run's spread, so no window and no GP650."""
    rng = np.random.default_rng(seed)
    t = _steady(2000, seed)
    t[rng.random(2000) < 0.35] *= 2.0
    job = _job(SlowdownDetector(wait=None))
    _feed(job, t)
    assert job.anomalies == [] and job.plan.windows == [] and job.contention == []


@pytest.mark.parametrize("seed", range(3))
def test_a_planted_slowdown_is_still_found_in_that_noise(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = _steady(300, seed)
    t[rng.random(300) < 0.35] *= 2.0
    t[150:] += 0.02  # the job itself: 20 ms more per step from step 150
    job = _job(SlowdownDetector(wait=None))
    _feed(job, t)
    assert [a.kind for a in job.anomalies] == ["slowdown"] and abs(job.anomalies[0].onset - 150) <= 2
    assert job.plan.windows and job.plan.windows[0].reason == "anomaly"


def test_a_slowdown_the_run_queue_wait_explains_is_host_contention_not_an_anomaly() -> None:
    """Starvation: from step 200 the step time rises and the training thread's run-queue wait rises with it
    (90% of the added time): a host-contention episode with its wait share, no window, no GP650."""
    t = _steady(400, 1)
    t[200:260] += 0.01
    waited = np.zeros(400)
    waited[200:260] = 0.009
    wait = _Wait()
    job = _job(SlowdownDetector(wait=wait, load=lambda: (6.0, 2)))
    _feed(job, t, wait, waited)
    assert job.anomalies == [] and job.plan.windows == []
    assert len(job.contention) == 1
    ep = job.contention[0]
    assert ep.kind == "host_contention" and abs(ep.onset - 200) <= 2
    assert ep.wait_share == pytest.approx(0.009 / 0.015, rel=0.1)
    f = contention_finding(job.contention, None)
    assert f.code == "GP656" and f.severity is Severity.INFO
    assert f.evidence[0].value == pytest.approx(ep.wait_share, abs=1e-3)
    assert "load average 6.0 on 2 cores" in f.message and "from step" in f.message


def test_a_slowdown_the_wait_does_not_explain_stays_the_jobs() -> None:
    """The same slowdown with a little wait (below CAUSE_SHARE of the added time): the job's slowdown."""
    t = _steady(400, 2)
    t[200:] += 0.01
    waited = np.zeros(400)
    waited[200:] = 0.01 * CAUSE_SHARE * 0.5
    wait = _Wait()
    job = _job(SlowdownDetector(wait=wait, load=None))
    _feed(job, t, wait, waited)
    assert [a.kind for a in job.anomalies] == ["slowdown"] and job.contention == []


def _gp901(ratio: float) -> Finding:
    return Finding(code="GP901", name="step-outliers", severity=Severity.WARNING, message="slow steps", advice="",
                   evidence=(Evidence("slow_step_ratio", ratio, 1.5, "x median"),))


def test_gp901_within_the_jobs_own_spread_is_left_out_with_a_note() -> None:
    """A window's 'outlier' at 1.8x its median, in a job where a third of the steps take 2x (a busy machine): the
    job's own spread, no GP901. The same window in a quiet job keeps its GP901."""
    rng = np.random.default_rng(0)
    busy = _steady(500, 0)
    busy[rng.random(500) < 0.35] *= 2.0
    other = Finding(code="GP101", name="x", severity=Severity.WARNING, message="kept", advice="")
    kept, notes = within_run_spread([_gp901(1.8), other], WatchData(step_s=busy, recorded_steps=tuple(range(10, 15))))
    assert [f.code for f in kept] == ["GP101"] and len(notes) == 1 and "1.8x" in notes[0]
    kept, notes = within_run_spread([_gp901(1.8), other], WatchData(step_s=_steady(500, 1)))
    assert [f.code for f in kept] == ["GP901", "GP101"] and notes == []
    kept, _ = within_run_spread([_gp901(3.5)], WatchData(step_s=busy))  # beyond the spread: the window's own
    assert [f.code for f in kept] == ["GP901"]


def test_a_busy_machines_steady_wait_is_not_taken_for_the_cause_of_a_real_slowdown() -> None:
    """Beside a hog every step waits 40 ms for a core; from step 200 the job itself sleeps 50 ms more per step
    and waits no more than before: the job's slowdown (the wait is measured above the normal steps')."""
    t = _steady(400, 3) + 0.04
    t[200:] += 0.05
    waited = np.full(400, 0.04)
    wait = _Wait()
    job = _job(SlowdownDetector(wait=wait, load=None))
    _feed(job, t, wait, waited)
    assert [a.kind for a in job.anomalies] == ["slowdown"] and job.contention == []
    assert abs(job.anomalies[0].onset - 200) <= 2
