"""The phases of a watched job, found from its step-time series (pure Python and numpy: no torch).

``gpuprof analyze`` reads the result back from report.json; the capture's
report computes it from the numbers the watch (:mod:`gpuprof.capture.checks.watch`)
copied at the end of a window or of the run. The method, documented in
docs/run.md ("The watch"), is meant to be robust to the noise of real
training loops (a garbage-collection pause, a checkpoint save, a slow batch):

1. ``y = log(step time)``: a slowdown is a ratio, whatever the step's size.
   Steps a framework marked as evaluation, and the steps the torch profiler
   recorded (slower by the profiler's own cost), are set aside: they are
   phases of their own (``eval``, ``recorded``).
2. ``y`` is smoothed by a running median over ``SMOOTH`` steps, so one slow
   step never opens a phase.
3. Binary segmentation with a least-squares cost: a segment is split where
   the split lowers the sum of squared deviations most, when that gain
   exceeds ``PENALTY * sigma**2 * log(n)`` (``sigma``: the step-to-step noise
   of the raw ``y``, from the median absolute difference, so robust to
   outliers) and both parts have at least ``MIN_LEN`` steps; at most
   ``MAX_SEGMENTS`` segments.
4. Neighbouring segments whose median step times differ by less than
   ``MIN_CHANGE`` are merged back (a change a user would not act on).
5. Labels: ``eval`` and ``recorded`` for the steps set aside; the first segment is ``warmup``
   when it is slower than the next by ``MIN_CHANGE`` and short (at most
   ``WARMUP_MAX_STEPS`` or ``WARMUP_MAX_SHARE`` of the job), and the leading
   steps slower than the reference by ``SLOW_RATIO`` are ``warmup`` too
   (step 0 builds the CUDA context, autotunes, starts the workers), and
   beyond the noise (``exp(3 sigma)``); the
   reference is the median of the first segment after warm-up; a segment
   slower than it by ``SLOW_RATIO`` or more is a ``slowdown``, any other is
   ``steady``. A segment shorter than ``MIN_PHASE`` steps takes its
   predecessor's label (a burst of a few slow steps is noise, not a phase),
   and neighbouring steps with the same label are one phase.
6. Other processes' load: a ``slowdown`` phase becomes ``contention`` when the
   sampler's figures of the training thread (:mod:`gpuprof.capture.job.sampler`,
   about one a second, weighted by the steps each shares with the phase) say
   the machine, not the job, made it slower: its time waiting for a core per
   step rose by at least ``CAUSE_SHARE`` of the time the phase's median step
   added over the steady reference's, and its time on a core per step did not
   rise by ``SLOW_RATIO`` (a job that does more work per step stays a
   ``slowdown``, busy machine or not). Without the figures (not Linux, a
   report from an older gpuprof) nothing is relabelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuprof.capture.job.windows import CAUSE_SHARE
from gpuprof.report import JobPhase, JobSamples, JobSeries, JobSummary
from gpuprof.stats import least_squares_split, running_median, segments, step_noise

__all__ = ["WatchData", "detect_phases", "compact_series", "job_summary", "Segment", "per_step_rss",
           "SMOOTH", "MIN_LEN", "MIN_PHASE", "PENALTY", "MIN_CHANGE", "SLOW_RATIO", "MAX_POINTS", "SET_ASIDE"]

Floats = npt.NDArray[np.float64]

SMOOTH = 5  # steps in the running median
MIN_LEN = 5  # steps in a segment, at least
MIN_PHASE = 10  # a steady or slowdown phase is at least this long (shorter segments join the one before)
PENALTY = 8.0  # x sigma^2 x log(n): the gain a split must bring
MAX_SEGMENTS = 32
MIN_CHANGE = 0.10  # neighbouring segments closer than this (relative median step time) are one phase
SLOW_RATIO = 0.20  # a segment this much slower than the reference is a slowdown
WARMUP_MAX_STEPS = 50
WARMUP_MAX_SHARE = 0.10
MAX_POINTS = 2000  # points of the compact series in report.json, at most
SET_ASIDE = ("eval", "recorded", "own_work")  # labels of steps kept out of the training series


@dataclass(frozen=True)
class WatchData:
    """The numbers the phases and the compact series are computed from (copied from the live session)."""

    step_s: Floats  # each step's time
    fetch_s: Floats | None = None  # each step's time waiting for DataLoader batches (None: no loader seen)
    eval_steps: tuple[int, ...] = ()  # steps whose time includes an evaluation
    recorded_steps: tuple[int, ...] = ()  # steps the torch profiler recorded (a window)
    own_steps: tuple[int, ...] = ()  # steps gpuprof slowed (a profiler alive, a window's report, just after)
    cuda_allocated: Floats | None = None  # bytes, per step (CUDA only)
    cuda_reserved: Floats | None = None
    cuda_peak: Floats | None = None
    samples: JobSamples | None = None
    cores: int | None = None
    host_rss: Floats | None = None  # bytes, per step (the last RSS sample taken at or before the step)


@dataclass(frozen=True)
class Segment:
    """Steps ``[start, end)`` of a series (positions in the series, not step numbers)."""

    start: int
    end: int


def _merge_close(times: Floats, segs: list[Segment], min_change: float) -> list[Segment]:
    """Neighbours whose median step times differ by less than ``min_change`` become one segment."""
    out: list[Segment] = []
    for seg in segs:
        if out:
            prev = out[-1]
            a = float(np.median(times[prev.start:prev.end]))
            b = float(np.median(times[seg.start:seg.end]))
            if a > 0 and b > 0 and abs(math.log(b / a)) < math.log1p(min_change):
                out[-1] = Segment(prev.start, seg.end)
                continue
        out.append(seg)
    return out


def detect_phases(step_s: Sequence[float] | Floats, eval_steps: Sequence[int] = (),
                  fetch_s: Sequence[float] | Floats | None = None,
                  recorded_steps: Sequence[int] = (), own_steps: Sequence[int] = (),
                  samples: JobSamples | None = None) -> list[JobPhase]:
    """The job's phases, in step order, covering every step (module docstring); ``samples``: the sampler's, for
    ``contention`` (item 6)."""
    times = np.asarray(step_s, dtype=np.float64)
    n = len(times)
    if n == 0:
        return []
    labels = np.full(n, "", dtype=object)
    # eval wins over recorded, recorded over own_work (a recorded step is gpuprof's own work too)
    for kind, marks in (("own_work", own_steps), ("recorded", recorded_steps), ("eval", eval_steps)):
        labels[[i for i in marks if 0 <= i < n]] = kind
    idx = np.flatnonzero(labels == "")  # positions of the training steps
    if len(idx):
        t = np.maximum(times[idx], 1e-9)
        y = np.log(t)
        sigma = max(step_noise(y) if len(y) >= 3 else 0.0, 1e-3)
        penalty = PENALTY * sigma * sigma * math.log(max(len(y), 2))
        split = least_squares_split(running_median(y, SMOOTH), MIN_LEN, penalty)
        segs = _merge_close(t, [Segment(a, b) for a, b in segments(len(y), split, MAX_SEGMENTS)], MIN_CHANGE)
        meds = [float(np.median(t[g.start:g.end])) for g in segs]
        first = 0
        if (len(segs) > 1 and meds[0] > meds[1] * (1 + MIN_CHANGE)
                and segs[0].end <= max(WARMUP_MAX_STEPS, WARMUP_MAX_SHARE * len(t))):
            first = 1
        ref = meds[first]
        kinds = ["warmup" if k < first else "slowdown" if meds[k] >= ref * (1 + SLOW_RATIO) else "steady"
                 for k in range(len(segs))]
        for k, g in enumerate(segs):
            if g.end - g.start < MIN_PHASE and k > first:
                kinds[k] = kinds[k - 1]
            labels[idx[g.start:g.end]] = kinds[k]
        # leading steps far slower than the reference: warm-up (step 0 builds the context, starts the workers)
        lead = 0
        limit = min(len(idx), WARMUP_MAX_STEPS, segs[first].end)
        slow = ref * max(1 + SLOW_RATIO, math.exp(3 * sigma))  # beyond the noise, not one unlucky step
        while lead < limit and t[lead] >= slow and labels[idx[lead]] != "warmup":
            lead += 1
        if lead and lead < segs[first].end:
            labels[idx[:lead]] = "warmup"
        _keep_word(labels, times, ref)
        waits = _contention(labels, times, samples)
    else:
        waits = {}
    fetch = np.asarray(fetch_s, dtype=np.float64) if fetch_s is not None else None
    return [_phase(label, start, end, times, fetch, waits.get(start)) for label, start, end in _runs(labels)]


def _thread_share(samples: JobSamples, a: int, b: int) -> tuple[float, float] | None:
    """(the training thread's share of time on a core, its share waiting for one) over steps ``[a, b)``: the
    samples' figures, each weighted by the steps its interval shares with them; None when no sample has them."""
    cpu, wait = samples.thread_cpu_pct, samples.thread_wait_pct
    n = len(samples.step)
    if not cpu or not wait or len(cpu) != n or len(wait) != n:
        return None
    done = np.asarray(samples.step, dtype=np.float64)  # steps completed at each sample: it covers [previous, done)
    before = np.concatenate(([0.0], done[:-1]))
    c = np.array([np.nan if v is None else v for v in cpu], dtype=np.float64)
    w = np.array([np.nan if v is None else v for v in wait], dtype=np.float64)
    weight = np.clip(np.minimum(done, b) - np.maximum(before, a), 0.0, None)
    weight[np.isnan(c) | np.isnan(w)] = 0.0
    total = float(weight.sum())
    if total <= 0:
        return None
    return (float(np.nansum(weight * c)) / total / 100.0, float(np.nansum(weight * w)) / total / 100.0)


def _contention(labels: npt.NDArray[np.object_], times: Floats, samples: JobSamples | None) -> dict[int, float]:
    """Relabel as ``contention`` the slowdown runs that other processes' load explains (module docstring, item
    6); returns the training thread's share of time waiting for a core by the start of each run relabelled."""
    if samples is None or not samples.thread_wait_pct:
        return {}
    runs = _runs(labels)
    ref = next(((a, b) for k, a, b in runs if k == "steady"), None)
    if ref is None:
        return {}
    base = _thread_share(samples, *ref)
    if base is None:
        return {}
    t0 = float(np.median(times[ref[0]:ref[1]]))
    out: dict[int, float] = {}
    for k, a, b in runs:
        if k != "slowdown":
            continue
        got = _thread_share(samples, a, b)
        if got is None:
            continue
        t = float(np.median(times[a:b]))
        added = t - t0
        more_wait = got[1] * t - base[1] * t0
        if added > 0 and more_wait >= CAUSE_SHARE * added and got[0] * t < base[0] * t0 * (1 + SLOW_RATIO):
            labels[a:b] = "contention"
            out[a] = round(min(got[1], 1.0), 4)
    return out


def _runs(labels: npt.NDArray[np.object_]) -> list[tuple[str, int, int]]:
    """``(label, start, end)`` per run of equal labels (``end`` exclusive)."""
    out: list[tuple[str, int, int]] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((str(labels[start]), start, i))
            start = i
    return out


def _keep_word(labels: npt.NDArray[np.object_], times: Floats, ref: float) -> None:
    """Phases keep their labels' word: a ``slowdown`` is at least ``SLOW_RATIO`` slower than the steady reference
    (the first steady phase's median, as the reports say "x steady") and ``MIN_PHASE`` training steps long (a
    slowdown broken only by steps set aside counts as one); one that is not becomes ``steady``. Runs of a
    training label split only by set-aside steps (a window, gpuprof's own work) are judged on their steps."""
    for _ in range(2):  # the reference can move when a slowdown becomes steady; the second pass settles it
        runs = _runs(labels)
        steady = next(((a, b) for k, a, b in runs if k == "steady"), None)
        if steady is not None:
            ref = float(np.median(times[steady[0]:steady[1]]))
        # stretches of slowdown runs, joined across set-aside runs
        stretches: list[list[tuple[int, int]]] = []
        open_stretch = False
        for k, a, b in runs:
            if k == "slowdown":
                if not open_stretch:
                    stretches.append([])
                stretches[-1].append((a, b))
                open_stretch = True
            elif k not in SET_ASIDE:
                open_stretch = False
        for stretch in stretches:
            steps = np.concatenate([times[a:b] for a, b in stretch])
            too_short = len(steps) < MIN_PHASE
            for a, b in stretch:
                if too_short or float(np.median(times[a:b])) < ref * (1 + SLOW_RATIO):
                    labels[a:b] = "steady"
        for k, a, b in runs:  # a warm-up is slower than the steady reference, or it is steady
            if k == "warmup" and float(np.median(times[a:b])) < ref * (1 + MIN_CHANGE):
                labels[a:b] = "steady"


def _phase(kind: str, a: int, b: int, times: Floats, fetch: Floats | None, core_wait: float | None = None) -> JobPhase:
    part = times[a:b]
    total = float(part.sum())
    share = None
    if fetch is not None and len(fetch) >= b and total > 0:
        share = round(min(float(fetch[a:b].sum()) / total, 1.0), 4)
    return JobPhase(kind=kind, start_step=a, end_step=b - 1, step_time_median_us=float(np.median(part)) * 1e6,
                    steps=b - a, step_time_min_us=float(part.min()) * 1e6,
                    step_time_p90_us=float(np.percentile(part, 90)) * 1e6, step_time_max_us=float(part.max()) * 1e6,
                    data_wait_share=share, core_wait_share=core_wait)


def _buckets(x: Floats, bucket: int) -> Floats:
    """``x`` as rows of ``bucket`` values (the last row padded with NaN)."""
    rows = -(-len(x) // bucket)
    padded = np.full(rows * bucket, np.nan)
    padded[:len(x)] = x
    return padded.reshape(rows, bucket)


def _col(x: Floats | None, n: int, bucket: int, scale: float) -> list[float] | None:
    if x is None or len(x) < n:
        return None
    return [round(v, 3) for v in (np.nanmedian(_buckets(x[:n], bucket), axis=1) * scale).tolist()]


def per_step_rss(steps: Sequence[int], rss: Sequence[int], n: int) -> Floats | None:
    """One RSS value per step ``0..n-1`` from samples ``(steps[i], rss[i])`` taken every few steps: each step
    holds the last sample taken at or before it (the steps before the first sample: the first sample)."""
    if n == 0 or not len(steps):
        return None
    s = np.asarray(steps, dtype=np.int64)
    v = np.asarray(rss, dtype=np.float64)
    at = np.searchsorted(s, np.arange(n), side="right") - 1
    out: Floats = v[np.maximum(at, 0)]
    return out


def compact_series(data: WatchData, max_points: int = MAX_POINTS) -> JobSeries:
    """The per-step columns, one point per step up to ``max_points`` steps, else per bucket of steps.

    The bucket is the smallest whole number of steps that keeps the series at
    ``max_points`` points or fewer; each point holds its steps' median, and
    the step time also its minimum and maximum, so a single slow step stays
    visible in a long job.
    """
    t = data.step_s
    n = len(t)
    if n == 0:
        return JobSeries()
    bucket = max(1, -(-n // max_points))
    rows = _buckets(t, bucket)
    us = 1e6
    return JobSeries(
        bucket=bucket,
        first_step=list(range(0, n, bucket)),
        step_time_us=[round(v, 3) for v in (np.nanmedian(rows, axis=1) * us).tolist()],
        step_time_min_us=[round(v, 3) for v in (np.nanmin(rows, axis=1) * us).tolist()],
        step_time_max_us=[round(v, 3) for v in (np.nanmax(rows, axis=1) * us).tolist()],
        data_wait_us=_col(data.fetch_s, n, bucket, us),
        cuda_allocated_mib=_col(data.cuda_allocated, n, bucket, 1 / 2**20),
        cuda_reserved_mib=_col(data.cuda_reserved, n, bucket, 1 / 2**20),
        cuda_peak_mib=_col(data.cuda_peak, n, bucket, 1 / 2**20),
        host_rss_mib=_col(data.host_rss, n, bucket, 1 / 2**20),
    )


def job_summary(data: WatchData) -> JobSummary:
    """report.json's ``job``: the step count, the phases, the compact series and the sampler's samples."""
    return JobSummary(steps=len(data.step_s), phases=detect_phases(data.step_s, data.eval_steps, data.fetch_s,
                                                                   data.recorded_steps, data.own_steps, data.samples),
                      series=compact_series(data), samples=data.samples, cores=data.cores)
