"""Shared rule helpers: the vectorised step lookup agrees with the one-at-a-time one."""

from __future__ import annotations

import pytest

from gpuprof.rules.common import host_step_of, host_steps_of
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.realtraces import shared_path


@pytest.mark.slow  # whole real traces analysed: out of the README's fast command
def test_host_steps_of_matches_host_step_of_on_a_real_trace() -> None:
    m = compute_metrics(load_trace(shared_path("tbplugin", "samples", "resnet50_num_workers_0",
                                               "worker0.1623143089861.pt.trace.json.gz")))
    events = m.trace.ops + m.trace.runtime + m.trace.kernels  # inside, between and after the steps
    got = host_steps_of(m, events)
    want = [host_step_of(m, e.ts) for e in events]
    assert got == want
    assert None in want and len(set(want) - {None}) == m.num_steps  # both kinds of answer were checked
