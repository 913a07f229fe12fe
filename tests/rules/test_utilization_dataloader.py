"""GP101 (low GPU utilisation), GP102 (DataLoader in the main process), GP103 (data-loading share)."""

from __future__ import annotations

from gpuprof.analysis import analyze
from gpuprof_testing.tracegen import TraceBuilder, simple_training


def _codes(path) -> dict[str, object]:
    return {f.code: f for f in analyze(path).findings}


def _stalled(tmp_path, single_process: bool, data_ms: float = 20.0):
    tb = TraceBuilder()
    for _ in range(5):
        with tb.step():
            tb.dataloader(ms=data_ms, single_process=single_process)
            tb.copy_h2d(8 << 20, pageable=False, blocking=False)
            for _ in range(10):
                tb.gemm("bf16", us=300)
            tb.optimizer(ms=0.5)
    return tb.write(tmp_path / "stalled.pt.trace.json.gz")


def test_gp101_bad(tmp_path):
    f = _codes(_stalled(tmp_path, single_process=False))["GP101"]
    util = f.evidence[0].value
    assert util < 0.8
    # the host was loading data for most of the idle time, and the message says so
    assert "loading data" in f.message
    assert f.cost_us_per_step > 15_000


def test_gp101_good(tmp_path):
    path = simple_training(TraceBuilder(), steps=5).write(tmp_path / "good.json")
    assert "GP101" not in _codes(path)


def test_gp102_bad(tmp_path):
    found = _codes(_stalled(tmp_path, single_process=True))
    f = found["GP102"]
    share = f.evidence[0].value
    # 20 ms of data loading per step; the ~3 ms of GPU work runs during the next step's loading, so a step
    # lasts about as long as its loading (the last step no longer holds the GPU queue drained after it)
    assert 0.5 < share < 1.0
    assert f.evidence[0].extra["iterator"] == "_SingleProcessDataLoaderIter"
    assert f.evidence[0].events  # points at the DataLoader ranges
    assert "GP103" not in found  # num_workers=0 is reported once, as GP102


def test_gp102_good(tmp_path):
    found = _codes(_stalled(tmp_path, single_process=False))
    assert "GP102" not in found


def test_gp102_good_when_loading_is_negligible(tmp_path):
    path = _stalled(tmp_path, single_process=True, data_ms=0.01)
    assert "GP102" not in _codes(path)


def test_gp103_bad(tmp_path):
    f = _codes(_stalled(tmp_path, single_process=False))["GP103"]
    assert f.evidence[0].value > 0.4 and f.severity.value == "error"


def test_gp103_good(tmp_path):
    path = simple_training(TraceBuilder(), steps=5).write(tmp_path / "good.json")
    assert "GP103" not in _codes(path)
