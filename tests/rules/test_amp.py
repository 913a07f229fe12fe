"""GP842 per-parameter-optimizer, GP860 fp16-without-gradscaler, GP861 half-parameters.

Real CPU captures where the signal exists on CPU (autocast float16, GradScaler("cpu"),
model.half(), foreach=False/True), synthetic GPU traces where it needs a GPU (GP842).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof_testing.tracegen import TraceBuilder

CODES = ["GP842", "GP860", "GP861", "GP862"]


def _codes(path: Path) -> dict[str, object]:
    return {f.code: f for f in analyze(path, select=CODES).findings}


def _capture(tmp_path: Path, *, half: bool = False, autocast: bool = False, scaler: bool = False,
             foreach: bool | None = None, optim: str = "SGD") -> Path:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(4)])
    if half:
        model = model.half()
    kw = {} if foreach is None else {"foreach": foreach}
    opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **kw) if optim == "SGD"
           else torch.optim.Adam(model.parameters(), lr=1e-3, **kw))
    gs = torch.amp.GradScaler("cpu") if scaler else None
    dtype = torch.float16 if half else torch.float32
    run = f"r{half:d}{autocast:d}{scaler:d}{foreach}{optim}"
    with gpuprof.profile(tmp_path, run=run, schedule=Schedule(wait=0, warmup=1, active=2), print_report=False,
                         tensorboard=False, analyze=False, with_stack=False) as prof:
        for _ in range(3):
            x = torch.randn(4, 16, dtype=dtype)
            if autocast:
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = model(x).float().pow(2).mean()
            else:
                loss = model(x).float().pow(2).mean()
            if gs is not None:
                gs.scale(loss).backward()
                gs.step(opt)
                gs.update()
            else:
                loss.backward()
                opt.step()
            opt.zero_grad()
            prof.step()
    return prof.traces[0].path


# ---------------------------------------------------------------------- optimizer operators (shared helper)


def test_optimizer_ops_real_capture(tmp_path: Path) -> None:
    from gpuprof.rules.amp import optimizer_ops
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    def ops(path: Path):
        m = compute_metrics(load_trace(path))
        return optimizer_ops(m), m.num_steps

    loop_trace = _capture(tmp_path, foreach=False)
    loop, n = ops(loop_trace)
    assert loop.optimizer == "SGD" and not loop.multi_tensor
    # 8 parameters (4 weights, 4 biases), momentum SGD: at least mul_ and add_ for each, every step
    assert len(loop.per_parameter) / n >= 16
    multi, n = ops(_capture(tmp_path, foreach=True))
    assert multi.multi_tensor and not multi.per_parameter  # the per-tensor fallback inside _foreach_* is nested
    # GP842 is a GPU rule: the CPU loop (PyTorch's default on CPU) is not reported
    assert "GP842" not in _codes(loop_trace)


def _gpu_loop(tmp_path: Path, per_param: int, multi: int, steps: int = 3) -> Path:
    tb = TraceBuilder()
    for _ in range(steps):
        with tb.step():
            tb.gemm(us=2000)
            with tb.annotate("Optimizer.step#AdamW.step"):
                for _ in range(per_param):
                    with tb.op("aten::mul_", input_types=["float", "Scalar"], us=8):
                        tb.kernel("void at::native::vectorized_elementwise_kernel<4>", us=2)
                for _ in range(multi):
                    with tb.op("aten::_foreach_mul_", input_types=["TensorList", "Scalar"], us=8):
                        with tb.op("aten::mul_", input_types=["float", "Scalar"], us=1):  # nested: not counted
                            tb.kernel("void at::native::multi_tensor_apply_kernel", us=4)
    return tb.write(tmp_path / f"opt_{per_param}_{multi}.json")


def test_gp842_bad(tmp_path: Path) -> None:
    f = _codes(_gpu_loop(tmp_path, per_param=100, multi=0))["GP842"]
    ev = f.evidence[0]  # type: ignore[attr-defined]
    assert ev.value == 100 and ev.extra["optimizer"] == "AdamW" and ev.extra["top_operators"] == {"aten::mul_": 300}
    assert f.cost_us_per_step >= 800  # type: ignore[attr-defined]  # 100 operators of >= 8 µs
    assert "fused=True" in f.advice  # type: ignore[attr-defined]


def test_gp842_good(tmp_path: Path) -> None:
    assert "GP842" not in _codes(_gpu_loop(tmp_path, per_param=0, multi=6))
    assert "GP842" not in _codes(_gpu_loop(tmp_path, per_param=10, multi=0))  # under min_ops_per_step
    # a fused optimizer's per-parameter bookkeeping (apex FusedAdam: step += 1 per parameter) is not reported
    assert "GP842" not in _codes(_gpu_loop(tmp_path, per_param=100, multi=1))


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_gp842_real_traces() -> None:
    """HTA samples: an SGD loop of 404 add_ per step is reported; apex FusedAdam (multi_tensor_apply
    kernels launched from no aten operator, one add_ per parameter for its step counter) is not."""
    from gpuprof_testing.realtraces import shared_path

    def hta_trace(rel: str) -> Path:
        return shared_path("hta", "HolisticTraceAnalysis", "tests", "data", *rel.split("/"))

    loop = _codes(hta_trace("df_index_resolver/df_index_resolver.json.gz"))["GP842"]
    assert loop.evidence[0].value == 404 and loop.evidence[0].extra["optimizer"] == "SGD"  # type: ignore[attr-defined]
    assert "GP842" not in _codes(hta_trace("trace_diff/control/control.json.gz"))


# ---------------------------------------------------------------------- GP860 / GP861 on real CPU captures


def test_gp860_bad_fp16_autocast_without_scaler(tmp_path: Path) -> None:
    found = _codes(_capture(tmp_path, autocast=True))
    assert set(found) == {"GP860"}
    f = found["GP860"]
    assert f.evidence[0].value >= 4 and "GradScaler" in f.advice  # type: ignore[attr-defined]  # 4 Linear layers


def test_gp860_good_with_scaler(tmp_path: Path) -> None:
    assert _codes(_capture(tmp_path, autocast=True, scaler=True)) == {}


def test_gp860_good_bf16(tmp_path: Path) -> None:
    # bfloat16 autocast needs no scaler: synthetic (the same trace shape as the CPU capture, BFloat16 inputs)
    def trace(dtype: str) -> Path:
        tb = TraceBuilder(device=None, cc=None)
        for _ in range(2):
            with tb.step():
                with tb.op("aten::addmm", input_types=[dtype, dtype, dtype, "Scalar", "Scalar"], us=50):
                    pass
                with tb.op("autograd::engine::evaluate_function: AddmmBackward0", us=80):
                    pass
                with tb.annotate("Optimizer.step#SGD.step"):
                    with tb.op("aten::add_", input_types=["float", "float", "Scalar"], us=5):
                        pass
        return tb.write(tmp_path / f"{dtype.replace(':', '_')}.json")

    assert set(_codes(trace("c10::Half"))) == {"GP860"}
    assert _codes(trace("c10::BFloat16")) == {}


def test_gp861_bad_half_model(tmp_path: Path) -> None:
    found = _codes(_capture(tmp_path, half=True))
    assert set(found) == {"GP861"}  # float16 GEMMs too, but the parameters are GP861's, not GP860's
    ev = found["GP861"].evidence[0]  # type: ignore[attr-defined]
    assert ev.value == 1.0 and ev.extra["dtype"] == "float16" and ev.extra["optimizer"] == "SGD"


def test_gp861_bad_half_model_adam(tmp_path: Path) -> None:
    # Adam's step counters stay float32: the 16-bit share decides, not "no float32 at all"
    ev = _codes(_capture(tmp_path, half=True, optim="Adam"))["GP861"].evidence[0]  # type: ignore[attr-defined]
    assert 0.5 <= ev.value < 1.0


def test_gp861_good_float32_params(tmp_path: Path) -> None:
    assert _codes(_capture(tmp_path, optim="Adam")) == {}


# ---------------------------------------------------------------------- GP862 (GPU-only: synthetic device properties)


def _amp_gpu(tmp_path: Path, device: str | None, cc: tuple[int, int] | None, dtype: str = "c10::Half",
             scaler: bool = True) -> Path:
    tb = TraceBuilder(device=device, cc=cc)
    for _ in range(3):
        with tb.step():
            for _ in range(4):
                with tb.op("aten::addmm", input_types=[dtype, dtype, dtype, "Scalar", "Scalar"], us=30):
                    if device:
                        tb.kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", us=20)
            with tb.op("autograd::engine::evaluate_function: AddmmBackward0", us=80):
                pass
            if scaler:
                with tb.op("aten::_amp_foreach_non_finite_check_and_unscale_",
                           input_types=["TensorList", "float", "float"], us=40):
                    pass
                with tb.op("aten::_amp_update_scale_",
                           input_types=["float", "int", "float", "Scalar", "Scalar", "Scalar"], us=20):
                    pass
            tb.optimizer(ms=0.1, kernels=1 if device else 0)
    return tb.write(tmp_path / f"amp_{device}_{cc}_{dtype.replace(':', '_')}_{scaler}.json")


def test_gp862_bad_fp16_on_ampere(tmp_path: Path) -> None:
    found = _codes(_amp_gpu(tmp_path, "NVIDIA A100-SXM4-80GB", (8, 0)))
    assert set(found) == {"GP862"}  # a GradScaler is there: GP860 stays quiet
    f = found["GP862"]
    assert f.evidence[0].value == 4 and f.evidence[0].extra["compute_capability"] == "8.0"  # type: ignore[attr-defined]
    assert 55 <= f.cost_us_per_step <= 65  # type: ignore[attr-defined]  # the scaler's 40 + 20 µs
    assert "bfloat16" in f.advice  # type: ignore[attr-defined]


def test_gp862_quiet_without_a_scaler_to_drop(tmp_path: Path) -> None:
    # float16 training without a GradScaler: GP860's (add one, or use bfloat16); GP862's "drop the GradScaler"
    # has nothing to drop (issue 42)
    found = _codes(_amp_gpu(tmp_path, "NVIDIA H100 80GB HBM3", (9, 0), scaler=False))
    assert set(found) == {"GP860"}


def test_gp862_good(tmp_path: Path) -> None:
    for device, cc, dtype in (
        ("Tesla V100-SXM2-16GB", (7, 0), "c10::Half"),          # Volta: no bfloat16 tensor cores, float16 is right
        ("NVIDIA A100-SXM4-80GB", (8, 0), "c10::BFloat16"),     # already bfloat16
        (None, None, "c10::Half"),                               # no GPU at all
    ):
        assert "GP862" not in _codes(_amp_gpu(tmp_path, device, cc, dtype)), device
