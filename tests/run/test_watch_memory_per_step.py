"""What the whole-job watch keeps per step stays a few machine words: a run of a million steps must not cost
the trainer hundreds of MB of Python floats (a list slot and a float object: 32 bytes a value)."""

from __future__ import annotations

import dataclasses
import statistics
import tracemalloc

from gpuprof.capture.checks.base import Live
from gpuprof.capture.memory import MemorySampler

STEPS = 200_000


def _bytes_per_value(series: object, value: float | int) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(STEPS):
            series.append(value + i)  # type: ignore[attr-defined]
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / STEPS


def test_step_clock_and_data_wait_keep_about_eight_bytes_a_step() -> None:
    fields = {f.name: f for f in dataclasses.fields(Live)}
    for name in ("step_s", "fetch_s"):
        series = fields[name].default_factory()  # type: ignore[misc]
        assert _bytes_per_value(series, 0.5) <= 10  # a double (the array grows by ~12%), not 32 bytes
        assert statistics.median(series) == 0.5 + (STEPS - 1) / 2 and len(series) == STEPS  # still a series


def test_cuda_counters_and_host_rss_keep_about_eight_bytes_a_sample() -> None:
    s = MemorySampler(cuda=False)
    try:
        for series in (s.allocated, s.reserved, s.peak, s.rss, s.rss_steps):
            assert _bytes_per_value(series, 2**40) <= 10  # an int64, not a Python int object and a list slot
    finally:
        s.close()
