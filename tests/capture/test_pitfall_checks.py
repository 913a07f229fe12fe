"""The capture-side pitfalls of issue 22: set_epoch never called (GP712), dtype errors explained (GP614),
CUDA_LAUNCH_BLOCKING / deterministic mode left on (GP623, GP624), and GP640 at the leaking statement."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.capture.leaklines import StatementSite, refine  # noqa: E402
from gpuprof.capture.memory import LeakSite, at_statement  # noqa: E402
from gpuprof.capture.settings import (  # noqa: E402
    TorchSettings,
    deterministic_finding,
    launch_blocking_finding,
    trace_op_facts,
)
from gpuprof.findings import Severity, SourceLocation  # noqa: E402

from .conftest import quick_schedule, tiny_model, train_step  # noqa: E402

QUIET = dict(print_report=False, tensorboard=False)


def _found(prof: Any, code: str) -> list[Any]:
    return [f for f in prof.report.findings if f.code == code]


# ------------------------------------------------------------------ GP712: DistributedSampler.set_epoch()


def _epochs(tmp_path: Path, sampler: DistributedSampler, set_epoch: list[int] | None) -> tuple[Any, int]:
    """Three epochs over a loader with ``sampler``; ``set_epoch``: the epochs before which it is called."""
    ds = TensorDataset(torch.arange(32, dtype=torch.float32))
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    with gpuprof.profile(tmp_path, analyze=False, **QUIET) as prof:
        for epoch in range(3):
            if set_epoch is not None and epoch in set_epoch:
                sampler.set_epoch(epoch)
            for _ in loader:  # the loader's line
                prof.step()
    src, first = inspect.getsourcelines(_epochs)
    return prof, first + next(i for i, s in enumerate(src) if "# the loader's line" in s)


def test_gp712_bad_set_epoch_never_called(tmp_path: Path) -> None:
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=1, rank=0, shuffle=True)
    prof, line = _epochs(tmp_path, sampler, None)
    (f,) = _found(prof, "GP712")
    assert f.severity is Severity.WARNING and f.origin == "runtime"
    assert "kept epoch=0 at all 3 epoch starts" in f.message and "never called" in f.message
    assert "sampler.set_epoch(epoch)" in f.advice
    assert f.location is not None and f.location.file == __file__ and f.location.line == line
    assert f.evidence[0].value == 2 and f.evidence[0].extra["sampler_epochs"] == [0, 0, 0]


def test_gp712_bad_set_epoch_called_once(tmp_path: Path) -> None:
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=2, rank=1, shuffle=True)
    prof, _ = _epochs(tmp_path, sampler, [1])  # set before the second epoch only: the third repeats it
    (f,) = _found(prof, "GP712")
    assert "1 of 2 epoch changes" in f.message and "not called before every epoch" in f.message
    assert f.evidence[0].extra["sampler_epochs"] == [0, 1, 1]


def test_gp712_bad_decorated_step_counts_the_epoch_begun_before_the_capture(tmp_path: Path) -> None:
    ds = TensorDataset(torch.arange(32, dtype=torch.float32))
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)

    @gpuprof.profile_step(tmp_path, analyze=False, **QUIET)
    def step(batch: Any) -> None:
        return None

    for _ in range(3):
        for batch in loader:  # the first epoch's iterator is made before the first step starts the capture
            step(batch)
    result = step.finish()
    assert result is not None
    (f,) = [f for f in result.runtime_findings if f.code == "GP712"]
    assert f.evidence[0].extra["sampler_epochs"] == [0, 0, 0]


def test_gp712_good_set_epoch_each_epoch(tmp_path: Path) -> None:
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=1, rank=0, shuffle=True)
    prof, _ = _epochs(tmp_path, sampler, [0, 1, 2])
    assert not _found(prof, "GP712")


def test_gp712_good_without_shuffle(tmp_path: Path) -> None:
    # an evaluation loader: no shuffle, the order is meant to repeat
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=1, rank=0, shuffle=False)
    prof, _ = _epochs(tmp_path, sampler, None)
    assert not _found(prof, "GP712")


def test_gp712_bad_in_a_gloo_world_of_one(tmp_path: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = DistributedSampler(TensorDataset(torch.zeros(32)))  # rank and world from the process group
        prof, _ = _epochs(tmp_path / "run", sampler, None)
    finally:
        dist.destroy_process_group()
    assert [f.code for f in prof.report.findings if f.code.startswith("GP71")] == ["GP712"]


# ------------------------------------------------------------------ GP614: dtype-mismatch errors


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x))


def _raise_inside(tmp_path: Path, fn: Any) -> tuple[BaseException, BaseException, Any]:
    """Run ``fn`` in a capture's step; (the error fn raised, the error the with block let out, the profiler)."""
    raised: list[BaseException] = []
    with pytest.raises(BaseException) as info:
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
            prof.step()
            try:
                fn()
            except BaseException as err:
                raised.append(err)
                raise
    return raised[0], info.value, prof


def test_gp614_bad_numpy_float64_batch_into_linear(tmp_path: Path) -> None:
    model = Net()
    batch = np.random.default_rng(0).standard_normal((4, 16))  # float64, NumPy's default
    err, out, prof = _raise_inside(tmp_path, lambda: model(torch.from_numpy(batch)))
    assert out is err and type(out) is RuntimeError and out.__cause__ is None  # the user's error, unchanged
    first = str(err).splitlines()[0]
    assert "dtype" in first  # torch's own words ("mat1 and mat2 must have the same dtype, ...")
    (f,) = _found(prof, "GP614")
    assert f.severity is Severity.ERROR and first in f.message
    assert "module `Net.enc.0` (Linear)" in f.message
    assert "input `input` (4, 16) torch.float64" in f.message and "parameter `weight` (8, 16) torch.float32" in f.message
    assert "x.float()" in f.advice and "torch.from_numpy(a).float()" in f.advice
    assert f.location is not None and f.location.file == __file__
    assert f.location.line == inspect.getsourcelines(Net.forward)[1] + 1  # `return self.head(self.enc(x))`
    assert str(err) == str(out) and "gpuprof" not in str(out)


def test_gp614_bad_conv_double_input(tmp_path: Path) -> None:
    conv = nn.Conv2d(3, 4, 3)
    err, out, prof = _raise_inside(tmp_path, lambda: conv(torch.randn(1, 3, 8, 8, dtype=torch.float64)))
    assert out is err
    (f,) = _found(prof, "GP614")
    assert str(err).splitlines()[0] in f.message and "(double)" in f.message  # "Input type (double) and bias ..."
    assert "x.float()" in f.advice


def test_gp614_bad_float_class_targets(tmp_path: Path) -> None:
    logits = torch.randn(3, 4)
    err, out, prof = _raise_inside(tmp_path, lambda: nn.functional.cross_entropy(logits, torch.tensor([1.0, 2, 0])))
    assert out is err
    (f,) = _found(prof, "GP614")
    assert "target.long()" in f.advice


def test_gp614_bad_rnn_value_error_passes_through(tmp_path: Path) -> None:
    lstm = nn.LSTM(4, 4)
    err, out, prof = _raise_inside(tmp_path, lambda: lstm(torch.randn(2, 1, 4, dtype=torch.float64)))
    assert out is err and type(out) is ValueError  # the RNN modules raise ValueError: unchanged too
    (f,) = _found(prof, "GP614")
    assert str(err).splitlines()[0] in f.message and "module `LSTM` (LSTM)" in f.message
    assert "x.float()" in f.advice


def test_gp614_bad_default_dtype_float64_named(tmp_path: Path) -> None:
    model = nn.Linear(16, 4)  # float32: built before the default changed
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        err, out, prof = _raise_inside(tmp_path, lambda: model(torch.randn(2, 16)))
    finally:
        torch.set_default_dtype(prev)
    assert out is err
    (f,) = _found(prof, "GP614")
    assert "torch.set_default_dtype(torch.float64) is in effect" in f.advice
    assert f.evidence[0].extra["default_dtype"] == "torch.float64"


def test_gp614_bad_decorated_step_passes_the_error_through(tmp_path: Path) -> None:
    model = Net()

    @gpuprof.profile_step(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET)
    def step(x: torch.Tensor) -> torch.Tensor:
        return model(x)

    step(torch.randn(2, 16))
    with pytest.raises(RuntimeError) as info:
        step(torch.randn(2, 16, dtype=torch.float16))  # a half batch into a float32 model
    assert type(info.value) is RuntimeError and info.value.__cause__ is None
    assert step.result is not None  # the error ended the capture (finish() ran)
    (f,) = [f for f in step.result.runtime_findings if f.code == "GP614"]
    assert "torch.autocast" in f.advice and "torch.float16" in f.message


def test_gp614_good_float32_batch(tmp_path: Path) -> None:
    model = Net()
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
        for _ in range(3):
            model(torch.from_numpy(np.zeros((4, 16), dtype=np.float32))).sum().backward()
            prof.step()
    assert not _found(prof, "GP614")


def test_gp614_good_other_errors_are_not_dtype_errors(tmp_path: Path) -> None:
    model = Net()
    err, out, prof = _raise_inside(tmp_path, lambda: model(torch.randn(4, 7)))  # a shape error
    assert out is err and "shapes cannot be multiplied" in str(err)
    assert not _found(prof, "GP614")


# ------------------------------------------------------------------ GP623 / GP624: debugging settings left on


def _settings(**kw: Any) -> TorchSettings:
    base: dict[str, Any] = dict(cuda=True, capability=(8, 0), device_name="A100", cudnn_benchmark=True,
                                tf32_matmul=True, matmul_precision="high")
    base.update(kw)
    return TorchSettings(**base)


def _short_run(tmp_path: Path) -> Any:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), **QUIET) as prof:
        for _ in range(6):
            train_step(model, opt, torch.randn(4, 16), torch.randint(0, 4, (4,)))
            prof.step()
    return prof


def test_gp623_bad_launch_blocking_on_a_cpu_run_is_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    (f,) = _found(_short_run(tmp_path), "GP623")
    assert f.severity is Severity.INFO and "does not use CUDA" in f.message
    assert "Unset CUDA_LAUNCH_BLOCKING" in f.advice


def test_gp623_bad_on_cuda_is_a_warning_with_the_measured_wait() -> None:
    f = launch_blocking_finding(_settings(launch_blocking=True), launch_us=24_000.0, launches=1200, steps=4,
                                step_us=20_000.0)
    assert f is not None and f.severity is Severity.WARNING
    assert "6.00 ms per recorded step inside 300 kernel launches, 30% of the mean step" in f.message
    assert f.evidence[0].extra["launches_per_step"] == 300
    bare = launch_blocking_finding(_settings(launch_blocking=True))  # no trace: the setting alone
    assert bare is not None and "per recorded step" not in bare.message


def test_gp623_launch_time_read_from_a_real_cuda_trace() -> None:
    from gpuprof_testing.realtraces import shared_path

    facts = trace_op_facts([shared_path("tbplugin", "samples", "resnet50_num_workers_0",
                                        "worker0.1623143089861.pt.trace.json.gz")])
    assert int(facts["launches"]) > 100 and int(facts["launch_ns"]) > 0


def test_gp623_good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    assert not _found(_short_run(tmp_path), "GP623")
    assert launch_blocking_finding(_settings()) is None


def test_gp624_bad_deterministic_on_a_cpu_run_is_info(tmp_path: Path) -> None:
    cudnn_prev = torch.backends.cudnn.deterministic
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    try:
        prof = _short_run(tmp_path)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = cudnn_prev
    (f,) = _found(prof, "GP624")
    assert f.severity is Severity.INFO and "does not use CUDA" in f.message
    assert "torch.use_deterministic_algorithms(True)" in f.message
    assert "torch.backends.cudnn.deterministic = True" in f.message
    assert "use_deterministic_algorithms(False)" in f.advice


def test_gp624_bad_on_cuda_is_a_warning() -> None:
    f = deterministic_finding(_settings(deterministic=True, deterministic_warn_only=True))
    assert f is not None and f.severity is Severity.WARNING
    assert "warn_only=True" in f.message and "slower" in f.message and "not measured" in f.message
    only_cudnn = deterministic_finding(_settings(cudnn_deterministic=True))
    assert only_cudnn is not None and "index_add_" not in only_cudnn.message  # cuDNN only: no op fallbacks


def test_gp624_good(tmp_path: Path) -> None:
    assert not _found(_short_run(tmp_path), "GP624")
    assert deterministic_finding(_settings()) is None


# ------------------------------------------------------------------ GP640: the statement that keeps the memory

KEPT: list[Any] = []


def _leaky_step(model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    KEPT.append(torch.randn(256, 256))  # the leak: 256 KiB kept every step


def _direct_op_step(x: torch.Tensor) -> None:
    KEPT.append(x * 2)  # an operator the function runs itself: no Python call names the statement


def _leak_run(tmp_path: Path, step: Any) -> Any:
    with gpuprof.profile(tmp_path, schedule=Schedule(wait=1, warmup=1, active=4), **QUIET) as prof:
        for _ in range(7):
            step()
            prof.step()
    KEPT.clear()
    (f,) = _found(prof, "GP640")
    return f


def test_gp640_bad_points_at_the_statement_inside_the_step(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    f = _leak_run(tmp_path, lambda: _leaky_step(model, opt, x, y))
    src, first = inspect.getsourcelines(_leaky_step)
    line = first + next(i for i, s in enumerate(src) if "KEPT.append" in s)
    assert f.location is not None and (f.location.line, f.location.function) == (line, "_leaky_step")
    assert f.location.file.endswith("test_pitfall_checks.py")
    site = next(e for e in f.evidence if e.metric == "leak_site_kept_bytes")
    assert site.extra["statement"] is True and site.extra["function_first_line"] == first
    assert "a statement of _leaky_step()" in f.message


def test_gp640_bad_falls_back_to_the_def_line_and_says_so(tmp_path: Path) -> None:
    x = torch.randn(256, 256)
    f = _leak_run(tmp_path, lambda: _direct_op_step(x))
    first = inspect.getsourcelines(_direct_op_step)[1]
    assert f.location is not None and (f.location.line, f.location.function) == (first, "_direct_op_step")
    assert "is the function's first line (the statement inside it is not known" in f.message
    site = next(e for e in f.evidence if e.metric == "leak_site_kept_bytes")
    assert site.extra["statement"] is False


def test_gp640_good_refine_keeps_the_function_and_device() -> None:
    site = LeakSite(SourceLocation("train.py", 40, "step"), 4 << 20, 4, 4)
    stmts = (StatementSite("cuda", "train.py", "step", 40, 47, 4 << 20, 4),
             StatementSite("cuda", "train.py", "step", 40, 44, 8 << 20, 1),  # one step only: not the leak
             StatementSite("cpu", "train.py", "step", 40, 45, 9 << 20, 4),  # another device
             StatementSite("cuda", "train.py", "other", 60, 61, 9 << 20, 4))  # another function
    moved = at_statement(site, stmts, "cuda")
    assert moved.location == SourceLocation("train.py", 47, "step") and moved.def_line == 40
    assert at_statement(site, stmts[3:], "cuda") is site  # nothing known inside `step`: unchanged
    assert refine(stmts, "cuda", "train.py", "step", 41) is None  # another function of that name
