"""Operator figures agree with torch's own ``key_averages()`` on traces captured here.

torch computes ``count``, ``cpu_time_total`` and ``self_cpu_time_total`` per
operator name from its in-memory event tree; gpuprof computes them from the
exported Chrome trace alone. Both must agree for every operator gpuprof lists
(gpuprof's table holds operators, not Python frames or user annotations, which
``key_averages()`` also lists). No GPU here, so the device columns are not
compared (tests/trace/test_attribution.py checks those on real GPU traces).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuprof.trace.load import load_trace  # noqa: E402
from gpuprof.trace.metrics import compute_metrics  # noqa: E402


def _capture(path: Path, with_stack: bool) -> dict[str, tuple[int, float, float]]:
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,)))
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    acts = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=with_stack) as prof:
        for _ in range(4):
            step()
    prof.export_chrome_trace(str(path))
    return {e.key: (e.count, e.cpu_time_total, e.self_cpu_time_total) for e in prof.key_averages()}


@pytest.mark.parametrize("with_stack", [False, True])
def test_op_count_total_and_self_time_match_key_averages(tmp_path: Path, with_stack: bool) -> None:
    theirs = _capture(tmp_path / "t.json", with_stack)
    ours = compute_metrics(load_trace(tmp_path / "t.json")).op_stats
    assert len(ours) >= 20  # aten ops of forward, backward and the optimizer
    assert {"aten::addmm", "aten::mm", "aten::relu"} <= {s.name for s in ours}
    for s in ours:
        assert s.name in theirs, s.name
        count, total, self_ = theirs[s.name]
        assert s.count == count, (s.name, s.count, count)
        # the trace stores times to the nanosecond; key_averages sums the same events
        assert s.total_us == pytest.approx(total, rel=1e-3, abs=0.01 * count), (s.name, s.total_us, total)
        assert s.self_us == pytest.approx(self_, rel=1e-3, abs=0.01 * count), (s.name, s.self_us, self_)
