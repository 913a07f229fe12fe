"""GP308 cpu-dispatch-bound on synthetic CPU-only traces: a step of many tiny operators (each a few µs of self
time, an ``aten::item`` every step) is the framework's, with its share; a step of a few long GEMMs is compute."""

from __future__ import annotations

from pathlib import Path

from gpuprof.analysis import analyze
from gpuprof_testing.tracegen import TraceBuilder


def _trace(tmp_path: Path, tiny: int, gemm_us: float, device: str | None = None) -> Path:
    tb = TraceBuilder(device=device, cc=None if device is None else (8, 0), gap_us=3.0)
    for _ in range(3):
        with tb.step():
            for _ in range(tiny):
                with tb.op("aten::add", input_types=["float", "float", "Scalar"], us=4):
                    pass
            with tb.op("aten::item", us=3):
                pass
            if gemm_us:
                with tb.op("aten::addmm", input_types=["float", "float", "float", "Scalar", "Scalar"], us=gemm_us):
                    pass
    return tb.write(tmp_path / f"t{tiny}_{int(gemm_us)}.json")


def _gp308(path: Path) -> list[object]:
    return [f for f in analyze(str(path)).findings if f.code == "GP308"]


def test_gp308_bad_many_tiny_operators(tmp_path: Path) -> None:
    (f,) = _gp308(_trace(tmp_path, tiny=400, gemm_us=0))
    ev = f.evidence[0]  # type: ignore[attr-defined]
    assert ev.metric == "framework_share" and ev.value >= 0.3
    assert ev.extra["small_ops_per_step"] >= 400 and ev.extra["compute_share"] < 0.5
    assert f"{ev.value:.0%}" in f.message and "torch.compile" in f.advice  # type: ignore[attr-defined]


def test_gp308_good_long_gemms_are_compute(tmp_path: Path) -> None:
    # the same tiny operators beside a 50 ms GEMM: the step is compute, not dispatch
    assert _gp308(_trace(tmp_path, tiny=400, gemm_us=50_000)) == []


def test_gp308_good_few_operators(tmp_path: Path) -> None:
    # fewer small calls per step than min_small_ops: nothing to say however the time splits
    assert _gp308(_trace(tmp_path, tiny=20, gemm_us=0)) == []
