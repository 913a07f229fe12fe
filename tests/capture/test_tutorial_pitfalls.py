"""Pitfalls found running the tutorials (issue 37 item 7), capture side: a GradScaler built before the
capture (GP850/GP851 as if built inside), and set_epoch() called with the same epoch every time (GP712
says so, not "never called")."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402
from gpuprof.capture.checks.amp.amp import mark_shown, shown_before  # noqa: E402

from .conftest import tiny_model  # noqa: E402

QUIET = dict(print_report=False, tensorboard=False, analyze=False)


def _line(marker: str) -> int:
    return next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1) if marker in ln and "_line(" not in ln)


def _train_with(tmp_path: Path, scaler: Any) -> Any:
    """Two steps scaling the loss with ``scaler`` (built by the caller, before the capture starts)."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(tmp_path, run="amp", schedule=Schedule(wait=0, warmup=1, active=1), **QUIET) as prof:
        for _ in range(2):
            loss = model(torch.randn(4, 16)).sum()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            prof.step()
    return prof


def _amp(prof: Any) -> dict[str, Any]:
    return {f.code: f for f in prof.report.findings if f.code in ("GP850", "GP851")}


# ------------------------------------------------------------------ GP850/GP851: a scaler built before the capture


def _user_script(tmp_path: Path, line: str) -> Any:
    """The scaler built by ``line`` in a user's script (a module of its own, as ``python train.py`` makes
    one: its own warning registry), before any capture; the module is forgotten again by the caller."""
    path = tmp_path / "train_script.py"
    path.write_text("import torch\n\n\ndef build():\n    return " + line + "\n")
    spec = importlib.util.spec_from_file_location(f"user_script_{abs(hash(tmp_path))}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _built_before(tmp_path: Path, line: str) -> tuple[dict[str, Any], str]:
    mod = _user_script(tmp_path, line)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # PyTorch's warnings shown once per line, as in a plain run
            scaler = mod.build()
            return _amp(_train_with(tmp_path, scaler)), mod.__file__
    finally:
        del sys.modules[mod.__name__]


@pytest.mark.skipif(torch.cuda.is_available(), reason="GP851 needs a machine without CUDA")
def test_gp851_bad_gradscaler_built_before_the_capture(tmp_path: Path) -> None:
    found, script = _built_before(tmp_path, "torch.cuda.amp.GradScaler()")  # deprecated, and off here
    assert set(found) == {"GP850", "GP851"}  # as if it was built inside the capture
    for f in found.values():
        assert f.location is not None and (f.location.file, f.location.line) == (script, 5)  # the constructor
    assert "torch.amp.GradScaler('cuda', args...)" in found["GP850"].message
    assert "GradScaler for device 'cuda'" in found["GP851"].message and "without loss scaling" in found["GP851"].message
    assert "before the capture" in found["GP851"].message


@pytest.mark.skipif(torch.cuda.is_available(), reason="GP851 needs a machine without CUDA")
def test_gp851_bad_torch_amp_scaler_for_cuda_built_before(tmp_path: Path) -> None:
    found, script = _built_before(tmp_path, 'torch.amp.GradScaler("cuda")')  # disabled here, not deprecated
    assert set(found) == {"GP851"}
    assert found["GP851"].location is not None and (found["GP851"].location.file, found["GP851"].location.line) == (script, 5)


@pytest.mark.parametrize("line", ['torch.amp.GradScaler("cpu")',  # scales on the CPU: nothing to say
                                  'torch.amp.GradScaler("cuda", enabled=False)'])  # the user's choice: no warning
def test_gp851_good_cpu_scaler_or_deliberately_disabled_before_the_capture(tmp_path: Path, line: str) -> None:
    assert not _built_before(tmp_path, line)[0]


def test_shown_before_reads_the_warning_registries_of_loaded_modules() -> None:
    import types

    mod = types.ModuleType("fake_user_module")
    mod.__file__ = "/home/u/train.py"
    mod.__warningregistry__ = {  # type: ignore[attr-defined]
        "version": 3,
        ("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` "
         "instead.", FutureWarning, 12): True,
        ("an unrelated warning", UserWarning, 13): True,
    }
    lib = types.ModuleType("torch_fake_scaler")
    lib.__file__ = "/usr/lib/python3.11/site-packages/torch/cuda/amp/grad_scaler.py"
    lib.__warningregistry__ = {  # type: ignore[attr-defined]
        ("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.", UserWarning, 31): True}
    modules: dict[str, object] = {"fake_user_module": mod, "torch_fake_scaler": lib, "broken": None}
    events = shown_before(modules)
    by_kind = {e.kind: e for e in events}
    assert set(by_kind) == {"deprecated", "disabled"}
    assert by_kind["deprecated"].location is not None and by_kind["deprecated"].location.line == 12
    # the disabling warning points into torch (stacklevel inside the deprecated subclass): the user's
    # line is the deprecated constructor's, the same construction
    assert by_kind["disabled"].location == by_kind["deprecated"].location
    mark_shown(modules)  # a capture ended: a later one does not report what it saw (a line fixed since)
    assert shown_before(modules) == []
    mod.__warningregistry__[("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",  # type: ignore[attr-defined]
                             UserWarning, 20)] = True
    (again,) = shown_before(modules)  # a new warning since: reported
    assert again.location is not None and again.location.line == 20


# ------------------------------------------------------------------ GP712: set_epoch(0) every epoch


def _epochs(tmp_path: Path, sampler: DistributedSampler, value: Any) -> Any:
    ds = TensorDataset(torch.arange(32, dtype=torch.float32))
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    with gpuprof.profile(tmp_path, **QUIET) as prof:
        for epoch in range(3):
            sampler.set_epoch(value(epoch))  # SET-EPOCH
            for _ in loader:
                prof.step()
    return prof


def test_gp712_bad_set_epoch_called_with_the_same_value_every_epoch(tmp_path: Path) -> None:
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=1, rank=0, shuffle=True)
    prof = _epochs(tmp_path, sampler, lambda epoch: 0)
    (f,) = [f for f in prof.report.findings if f.code == "GP712"]
    assert "never called" not in f.message
    assert "set_epoch(0) is called before every epoch" in f.message
    assert "the loop's epoch number" in f.advice and "set_epoch(epoch)" in f.advice
    assert f.evidence[0].extra["set_epoch_calls"] == 3 and f.evidence[0].extra["set_epoch_values"] == [0]
    assert f.location is not None and f.location.line == _line("# SET-EPOCH")  # the call to fix


def test_gp712_good_set_epoch_with_the_epoch(tmp_path: Path) -> None:
    sampler = DistributedSampler(TensorDataset(torch.zeros(32)), num_replicas=1, rank=0, shuffle=True)
    assert not [f for f in _epochs(tmp_path, sampler, lambda epoch: epoch).report.findings if f.code == "GP712"]
    assert DistributedSampler.set_epoch.__module__ == "torch.utils.data.distributed"  # given back after the capture


# ------------------------------------------------------------------ GP601: the framework that iterates the loader


def _library(path: str, source: str, ns: dict[str, Any]) -> None:
    exec(compile(source, path, "exec"), ns)  # functions whose frames carry a library's file name


def test_iterated_from_skips_library_frames_and_names_the_closest_framework() -> None:
    from gpuprof.capture.checks.loader.loaderplace import iterated_from, num_workers_advice

    ns: dict[str, Any] = {"sys": sys}
    _library("/venv/lib/python3.11/site-packages/accelerate/data_loader.py",
             "def shard_iter():\n    return sys._getframe(0)\n", ns)
    _library("/venv/lib/python3.11/site-packages/transformers/trainer.py",
             "def inner_loop():\n    return shard_iter()\n", ns)
    place, framework = iterated_from(ns["inner_loop"]())  # HF Trainer over accelerate: transformers
    assert framework == "transformers"
    assert place is not None and place.file == __file__ and place.function.startswith("test_iterated_from")
    place, framework = iterated_from(ns["shard_iter"]())  # a plain Accelerate loop
    assert framework == "accelerate" and place is not None and place.file == __file__
    assert "TrainingArguments(dataloader_num_workers=" in num_workers_advice("transformers")
    assert "accelerator.prepare" in num_workers_advice("accelerate")
    assert "DataLoader(...)" in num_workers_advice("lightning")
    assert num_workers_advice(None).startswith("Set num_workers>0")
