"""Every shared trace: the timeline is built, bounded, and accounts for every event of the recorded steps.

Slow (every shared trace is loaded and analysed); skipped cleanly without the shared data.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.errors import InputError
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof.trace.timelinerows import MAX_EVENTS, MAX_LANES, MAX_NAME
from gpuprof.views.timeline import build_timeline
from gpuprof_testing.realtraces import TRACES, shared_path

pytestmark = pytest.mark.slow


def _traces() -> list[Path]:
    if not TRACES.is_dir():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


@pytest.mark.parametrize("path", _traces() or [None], ids=lambda p: str(p.relative_to(TRACES)) if p else "absent")
def test_every_shared_trace_has_a_bounded_timeline_holding_every_event(path: Path | None) -> None:
    if path is None:
        shared_path("absent")  # skips with the one reason every shared-data test gives
        return
    try:
        trace = load_trace(path)
    except InputError as err:  # a file gpuprof refuses (not a trace): its own tests cover that
        pytest.skip(f"not a loadable trace: {err}")
    m = compute_metrics(trace)
    tl = build_timeline(m)
    if not m.steps:
        assert tl is None
        return
    assert tl is not None
    assert tl.events_kept <= MAX_EVENTS and len(tl.lanes) <= MAX_LANES
    assert all(len(n) <= MAX_NAME + 1 for n in tl.names)
    for ln in tl.lanes:  # every event of the steps in exactly one row; rows in (depth, start) order
        assert sum(r[5] for r in ln.events) == ln.total
        keys = [(r[4], r[0]) for r in ln.events]
        assert keys == sorted(keys)
        assert all(0 <= r[2] < len(tl.names) and r[1] >= 0 and r[4] < ln.depth for r in ln.events)
    assert tl.events_total == sum(ln.total for ln in tl.lanes)
    assert tl.critical_step is not None and 0 <= tl.critical_step < len(tl.steps)
