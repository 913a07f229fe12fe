"""The step clock's last step: its GPU work, not the queue of earlier steps' work it drains."""

from __future__ import annotations

import statistics

import pytest

from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.steps import _last_step_end
from gpuprof_testing.realtraces import shared_path


def test_the_host_sets_the_pace_the_drain_is_not_a_step() -> None:
    # steps of 10 ms; the GPU runs 6 ms behind, so the last step's work ends 6 ms after its host end
    assert _last_step_end(100.0, 110.0, 116.0, 106.0, [10.0, 10.0, 10.0]) == pytest.approx(110.0)
    # a last step longer on the host (a checkpoint) keeps its host time
    assert _last_step_end(100.0, 140.0, 146.0, 106.0, [10.0, 10.0]) == pytest.approx(140.0)
    # a short host step whose GPU work is a step's worth: up to a typical step
    assert _last_step_end(100.0, 103.0, 112.0, 101.0, [10.0, 10.0]) == pytest.approx(110.0)


def test_a_host_running_steps_ahead_keeps_all_its_gpu_work() -> None:
    # the GPU is still busy with earlier steps' work after the last host step ended: the host is no clock
    assert _last_step_end(100.0, 101.0, 190.0, 160.0, [1.0, 1.0]) == pytest.approx(190.0)
    assert _last_step_end(100.0, 101.0, 190.0, 160.0, []) == pytest.approx(190.0)  # the only step


def test_real_trace_last_step_is_a_step_not_the_queue() -> None:
    # HTA ns_resolution (V100, GPU 97% busy, the host one step ahead): the last step used to end with the
    # GPU queue, 184.9 ms against 95.7 ms host steps, a mean of 96.7 ms instead of 78.9 ms
    m = compute_metrics(load_trace(shared_path("hta", "HolisticTraceAnalysis", "tests", "data", "ns_resolution_trace",
                                               "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")))
    durs = [s.dur for s in m.steps]
    assert durs[-1] <= statistics.median(durs) * 1.01
    assert m.mean_step_time == pytest.approx(78_860, rel=0.01)


def test_real_trace_whose_host_runs_steps_ahead_keeps_its_gpu_work() -> None:
    # TraceLens mi300 resnet_act_checkpoint: host steps of 16 ms, GPU work of 28 ms per step; the last step
    # holds the queue the host ran ahead with, which is GPU work of these steps, not a drain to drop
    m = compute_metrics(load_trace(shared_path("hta", "TraceLens", "tests", "traces", "mi300",
                                               "resnet_act_checkpoint.json.gz")))
    busy = m.gpu_busy_total()
    assert busy / m.total_time > 0.95 and busy / len(m.steps) > 27_000
