"""Runtime checks (GP6xx): each one triggered for real where CPU allows, or from the facts it reads."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import CheckOptions, DeviceMismatchError, Schedule  # noqa: E402
from gpuprof.capture.checks.loader.dataloader import LoaderRecord, dataloader_findings  # noqa: E402
from gpuprof.capture.checks.syncs.syncs import SYNC_WARNING_TEXT, SyncLocator, is_logging_line  # noqa: E402
from gpuprof.capture.memory import growth_finding  # noqa: E402
from gpuprof.capture.settings import (  # noqa: E402
    TorchSettings,
    anomaly_finding,
    cudnn_benchmark_finding,
    tf32_finding,
)
from gpuprof.findings import Severity  # noqa: E402
from gpuprof.runtimecodes import RUNTIME_CHECKS  # noqa: E402

from .conftest import quick_schedule, tiny_model, train_step  # noqa: E402

QUIET = dict(print_report=False, tensorboard=False)


def _codes(prof: Any) -> list[str]:
    return [f.code for f in prof.report.findings]


def test_every_code_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "capture.md").read_text()
    for check in RUNTIME_CHECKS:
        assert f"### {check.code}" in doc, check.code


# ------------------------------------------------------------------ DataLoader


class SlowDataset(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import time

        time.sleep(0.01)  # "decoding": data loading the clear majority of the step, even when a loaded machine
        # stretches the training step several times over (the checks below want a share over 10%)
        return torch.randn(16), i % 4


def test_num_workers_zero_flagged_with_location_and_cost(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(SlowDataset(), batch_size=8)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
        for x, y in loader:  # this line is the finding's location
            train_step(model, opt, x, y)
            prof.step()
    f = next(f for f in prof.report.findings if f.code == "GP601")
    assert f.origin == "runtime" and f.severity == Severity.WARNING
    assert f.location is not None and f.location.file == __file__
    assert f.cost_share is not None and f.cost_share > 0.10  # 8 x 2 ms sleep per batch
    assert f.cost_us_per_step is not None and f.cost_us_per_step >= 8 * 2000 * 0.9
    rec = next(iter(prof.loaders.records.values()))
    assert rec.batches == 8 and rec.epochs == 1 and rec.num_workers == 0


def _rec(**kw: Any) -> LoaderRecord:
    base = dict(label="DataLoader(X)", num_workers=4, pin_memory=True, persistent_workers=True,
                batch_size=8, location=None, epochs=1, batches=100, fetch_s=0.01)
    base.update(kw)
    return LoaderRecord(**base)


def _dl(rec: LoaderRecord, **kw: Any) -> set[str]:
    args = dict(total_step_s=1.0, num_steps=100, on_cuda=False, cores=8, local_world_size=1, options=CheckOptions())
    args.update(kw)
    return {f.code for f in dataloader_findings([rec], **args)}


def test_dataloader_settings_checks() -> None:
    assert _dl(_rec()) == set()  # a healthy loader
    assert _dl(_rec(pin_memory=False)) == set()  # pinning only matters on CUDA
    assert _dl(_rec(pin_memory=False), on_cuda=True) == {"GP602"}
    assert _dl(_rec(num_workers=16)) == {"GP603"}
    assert _dl(_rec(num_workers=4), local_world_size=4) == {"GP603"}  # 16 workers per node on 8 cores
    assert _dl(_rec(persistent_workers=False, epochs=2)) == set()
    assert _dl(_rec(persistent_workers=False, epochs=5, epoch_start_s=[0.5] * 5)) == {"GP604"}
    assert _dl(_rec(num_workers=0, fetch_s=0.001)) == set()  # negligible loading time


def test_persistent_workers_cost_measured() -> None:
    rec = _rec(persistent_workers=False, epochs=5, epoch_start_s=[0.1, 0.3, 0.3, 0.3, 0.3])
    (f,) = dataloader_findings([rec], total_step_s=10.0, num_steps=100, on_cuda=False, cores=8,
                               local_world_size=1, options=CheckOptions())
    assert f.cost_us_per_step == pytest.approx(0.3 * 4 / 100 * 1e6)


# ------------------------------------------------------------------ placement


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


def test_meta_input_raises_enriched_error(tmp_path: Path) -> None:
    model = Net()
    with pytest.raises(DeviceMismatchError) as info:
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), **QUIET) as prof:
            model(torch.randn(4, 16, device="meta"))
            prof.step()
    err = info.value
    assert isinstance(err, RuntimeError)
    assert isinstance(err.__cause__, RuntimeError) and not isinstance(err.__cause__, DeviceMismatchError)
    text = str(err)
    assert str(err.__cause__).splitlines()[0] in text  # the original message comes first
    assert "module `Net.encoder.0` (Linear)" in text
    assert "parameter `weight` shape (32, 16) on cpu" in text
    assert "input `input` shape (4, 16) on meta" in text
    codes = _codes(prof)
    assert "GP612" in codes and "GP613" in codes
    gp612 = next(f for f in prof.report.findings if f.code == "GP612")
    assert "Net.encoder.0" in gp612.message and "meta" in gp612.message
    assert gp612.location is not None and gp612.location.file == __file__


def test_decorator_enriches_device_error(tmp_path: Path) -> None:
    model = Net()

    @gpuprof.profile_step(tmp_path, schedule=quick_schedule(), **QUIET)
    def step(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m(x)

    step(model, torch.randn(2, 16))
    model.head.to("meta")  # a later step on a module moved away
    with pytest.raises(DeviceMismatchError, match=r"Net\.head") as info:
        step(model, torch.randn(2, 16))
    assert info.value.__cause__ is not None


def test_split_module_and_mixed_model_flagged(tmp_path: Path) -> None:
    model = Net()
    model.head.register_buffer("scale", torch.ones(4, device="meta"))
    bad = nn.Sequential(nn.Linear(4, 4))

    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 4)

    from gpuprof.capture.placement import module_findings

    codes = {f.code for f in module_findings([model])}
    assert codes == {"GP610"}
    f = module_findings([model])[0]
    assert "`Net.head`" in f.message and "buffer `scale` (4,) on meta" in f.message
    assert module_findings([bad]) == []
    assert module_findings([Mixed()]) == []  # all on one device (GP611 needs an accelerator: GPU-only)


def test_clean_model_has_no_placement_findings(tmp_path: Path) -> None:
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, models=[model], **QUIET) as prof:
        for _ in range(5):
            train_step(model, opt, torch.randn(4, 16), torch.randint(0, 4, (4,)))
            prof.step()
    assert not [c for c in _codes(prof) if c.startswith("GP61")]
    assert prof.placement._handle is None  # the global hook is gone after step 0


# ------------------------------------------------------------------ host syncs


def test_sync_locator_counts_per_line() -> None:
    modes: list[Any] = []
    loc = SyncLocator(set_mode=lambda m: modes.append(m) or "default", restore_mode=modes.append)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        loc.install()
        loc.install()  # idempotent
        for _ in range(3):
            warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=1)  # line A
            warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=1)  # line B
        warnings.warn("an unrelated warning", UserWarning, stacklevel=1)
        loc.steps = 3
        loc.uninstall()
    assert modes == ["warn", "default"]
    assert [str(w.message) for w in seen] == ["an unrelated warning"]  # sync warnings consumed, others shown
    fs = loc.findings(CheckOptions())
    assert [f.code for f in fs] == ["GP630", "GP630"]
    assert all(f.location.file == __file__ for f in fs)
    assert {f.evidence[0].value for f in fs} == {1.0}
    assert fs[0].location.line != fs[1].location.line


def test_sync_locator_names_logging_lines() -> None:
    loc = SyncLocator(set_mode=lambda m: "default", restore_mode=lambda m: None)
    sink = io.StringIO()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("default")
        loc.install()
        for _ in range(2):
            print(warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=1), file=sink)  # logging that syncs
            total = warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=1)  # an accumulation that syncs
        loc.steps = 2
        loc.uninstall()
    assert total is None
    by_logging = {f.evidence[0].extra["logging"]: f for f in loc.findings(CheckOptions())}
    assert set(by_logging) == {True, False}
    assert by_logging[True].message.startswith("logging at ") and "every N steps" in by_logging[True].advice
    assert not by_logging[False].message.startswith("logging") and "once per logging interval" in by_logging[False].advice


@pytest.mark.parametrize("line,logs", [
    ("print(loss)", True), ('logger.info("%s", loss.item())', True), ('writer.add_scalar("l", loss, i)', True),
    ('wandb.log({"l": loss})', True), ('self.log("loss", loss)', True), ("pbar.set_postfix(loss=loss.item())", True),
    ("total += loss.item()", False), ("x = blueprint(y)", False), ("math.log(x)", False), ("if (y > 0).any():", False),
])
def test_is_logging_line(line: str, logs: bool) -> None:
    assert is_logging_line(line) is logs


# ------------------------------------------------------------------ settings


def _settings(**kw: Any) -> TorchSettings:
    base = dict(cuda=True, capability=(8, 0), device_name="A100", cudnn_benchmark=False, tf32_matmul=False,
                matmul_precision="highest")
    base.update(kw)
    return TorchSettings(**base)


def test_settings_checks() -> None:
    assert cudnn_benchmark_finding(_settings(), has_conv=True, shapes_stable=True).code == "GP620"
    assert cudnn_benchmark_finding(_settings(cudnn_benchmark=True), True, True) is None
    assert cudnn_benchmark_finding(_settings(), True, False) is None  # shapes change
    assert cudnn_benchmark_finding(_settings(), False, True) is None  # no convolution
    assert cudnn_benchmark_finding(_settings(cuda=False), True, True) is None
    assert tf32_finding(_settings(), fp32_matmuls=12).code == "GP621"
    assert tf32_finding(_settings(capability=(7, 0)), 12) is None  # V100: no TF32
    assert tf32_finding(_settings(tf32_matmul=True, matmul_precision="high"), 12) is None
    assert tf32_finding(_settings(), 0) is None
    assert anomaly_finding(0, 5) is None and anomaly_finding(2, 5).code == "GP622"


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_anomaly_detection_flagged(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.autograd.set_detect_anomaly(True):
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
            for _ in range(6):
                train_step(model, opt, torch.randn(4, 16), torch.randint(0, 4, (4,)))
                prof.step()
    assert "GP622" in _codes(prof)


def test_stable_shape_detection(tmp_path: Path) -> None:
    from gpuprof.capture.checks import SettingsCheck

    def _shapes_stable(p: gpuprof.Profiler) -> bool | None:
        check = p.live.find(SettingsCheck)
        assert check is not None
        return check.shapes_stable(p.live)

    loader = DataLoader(TensorDataset(torch.randn(50, 16), torch.randint(0, 4, (50,))), batch_size=8)
    with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
        for _x, _y in loader:
            prof.step()
    assert _shapes_stable(prof) is True  # the last, short batch does not count

    @gpuprof.profile_step(tmp_path / "b", schedule=quick_schedule(), analyze=False, **QUIET)
    def step(x: torch.Tensor) -> None:
        return None

    for n in (4, 8, 12, 16):  # variable batch shapes (e.g. bucketed sequences)
        step(torch.randn(n, 16))
    assert _shapes_stable(step.profiler) is False
    step.finish()


# ------------------------------------------------------------------ memory


def test_growth_detector() -> None:
    opts = CheckOptions()
    mib = 1 << 20
    leak = [100 * mib + i * mib for i in range(20)]
    f = growth_finding(leak, "cuda", opts)
    assert f is not None and f.code == "GP640" and f.evidence[0].value == pytest.approx(mib, rel=0.01)
    assert growth_finding([100 * mib] * 20, "cuda", opts) is None  # flat
    jump = [100 * mib] * 10 + [140 * mib] * 10  # one jump (a cache growing) is not a leak
    assert growth_finding(jump, "cuda", opts) is None
    saw = [100 * mib + (i % 2) * 8 * mib for i in range(20)]  # alternating
    assert growth_finding(saw, "cuda", opts) is None
    assert growth_finding(leak[:6], "cuda", opts) is None  # too few samples
    assert growth_finding([i * 256 * 1024 for i in range(5)], "cpu_trace", opts) is not None


def test_leak_detected_on_cpu_and_clean_loop_not(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(256, 16)
    y = torch.randint(0, 4, (256,))
    kept: list[torch.Tensor] = []
    for leak, sub in ((True, "leak"), (False, "clean")):
        with gpuprof.profile(tmp_path / sub, schedule=Schedule(wait=1, warmup=1, active=4), **QUIET) as prof:
            for _ in range(7):
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if leak:
                    kept.append(torch.randn(256, 256))  # 256 KiB kept every step
                prof.step()
        assert ("GP640" in _codes(prof)) is leak


def test_oom_error_propagates_with_finding(tmp_path: Path) -> None:
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(torch.OutOfMemoryError) as info:
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, **QUIET) as prof:
            prof.step()
            raise oom
    assert info.value is oom
    f = next(f for f in prof.report.findings if f.code == "GP641")
    assert "Tried to allocate 2.00 GiB" in f.message


def test_select_and_ignore(tmp_path: Path) -> None:
    with torch.autograd.set_detect_anomaly(True):
        with gpuprof.profile(tmp_path, schedule=quick_schedule(), analyze=False, ignore=["GP622"], **QUIET) as p:
            for _ in range(3):
                p.step()
    assert "GP622" not in _codes(p)
