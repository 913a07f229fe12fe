"""Never break training: each failure inside gpuprof is one warning and the loop runs on;
the user's exceptions and KeyboardInterrupt pass through unchanged after the trace is flushed."""

from __future__ import annotations

import errno
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning, Schedule  # noqa: E402

from .conftest import quick_schedule, report_json, run_dir, tiny_model, traces, train_step  # noqa: E402

STEPS = 7


def _run(logdir: Path, **kw: Any) -> tuple[Any, list[warnings.WarningMessage], int]:
    """Run a short loop; return the profiler, gpuprof's warnings, and the steps the loop completed."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    kw.setdefault("print_report", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpuprof.profile(logdir, schedule=quick_schedule(), **kw) as prof:
            for _ in range(STEPS):
                train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
                prof.step()
                done += 1
    ours = [w for w in caught if issubclass(w.category, GpuprofWarning)]
    return prof, ours, done


def test_profiler_start_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Any) -> None:
        raise RuntimeError("injected: profiler cannot start")

    monkeypatch.setattr(torch.profiler.profile, "start", boom)
    prof, ours, done = _run(tmp_path, tensorboard=False)
    assert done == STEPS
    assert len(ours) == 1 and "profiler failed" in str(ours[0].message)
    assert "injected: profiler cannot start" in str(ours[0].message)
    assert not traces(tmp_path)
    assert report_json(run_dir(tmp_path))["sections"][0]["failures"]["profiler"].startswith("RuntimeError")


def test_cupti_missing_falls_back_to_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.profiler import ProfilerActivity

    orig_start = torch.profiler.profile.start

    def start(self: Any) -> None:
        if ProfilerActivity.CUDA in self.activities:
            raise RuntimeError("injected: CUPTI_ERROR_NOT_INITIALIZED (libcupti.so not found)")
        orig_start(self)

    monkeypatch.setattr(torch.profiler.profile, "start", start)
    prof, ours, done = _run(tmp_path, tensorboard=False,
                            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    assert done == STEPS
    assert len(ours) == 1 and "CUPTI" in str(ours[0].message) and "CPU activity only" in str(ours[0].message)
    assert len(traces(tmp_path)) == 1  # the CPU trace is still written


def test_disk_full_during_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(self: Any, path: str, *a: Any, **k: Any) -> None:
        Path(path).write_bytes(b"partial")  # a half-written file must not stay behind
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", full)
    prof, ours, done = _run(tmp_path, tensorboard=False)
    assert done == STEPS
    assert len(ours) == 1 and "trace export failed" in str(ours[0].message)
    assert "No space left on device" in str(ours[0].message)
    rdir = run_dir(tmp_path)
    assert not traces(tmp_path) and not list(rdir.glob("*.partial*"))
    assert (rdir / "report.json").exists()  # the rest still works


def test_unwritable_logdir(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the logdir should go")
    prof, ours, done = _run(blocker / "logs")
    assert done == STEPS
    assert len(ours) == 1 and "log directory failed" in str(ours[0].message)
    assert prof.report is not None  # runtime checks still ran
    assert blocker.read_text() == "a file where the logdir should go"


def test_tensorboard_writer_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    from gpuprof.render import tensorboard as tbmod

    def broken(self: Any, step: int, values: Any) -> None:
        raise OSError(errno.EIO, "injected writer error")

    monkeypatch.setattr(tbmod.TensorBoardWriter, "add_step", broken)
    prof, ours, done = _run(tmp_path, flush_every=2)  # flushes inside the loop too
    assert done == STEPS
    assert len(ours) == 1 and "TensorBoard writer failed" in str(ours[0].message)
    assert len(traces(tmp_path)) == 1 and (run_dir(tmp_path) / "report.json").exists()


def test_tensorboard_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.render import tensorboard as tbmod

    def missing(self: Any, *a: Any, **k: Any) -> None:
        raise ModuleNotFoundError("No module named 'tensorboard'")

    monkeypatch.setattr(tbmod.TensorBoardWriter, "__init__", missing)
    prof, ours, done = _run(tmp_path)
    assert done == STEPS
    assert len(ours) == 1 and "tensorboard>=2.21" in str(ours[0].message)


def test_analyzer_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.capture.end import analyse as summary

    def broken(*a: Any, **k: Any) -> None:
        raise ValueError("injected analyzer bug")

    monkeypatch.setattr(summary, "_analyze_one", broken)
    monkeypatch.setenv("GPUPROF_REPORT_PROCESS", "0")  # broken in this process only (not in the report's child)
    prof, ours, done = _run(tmp_path, tensorboard=False)
    assert len(ours) == 1 and "trace analysis failed" in str(ours[0].message)
    assert report_json(run_dir(tmp_path))["command"] == "capture"


class UserError(Exception):
    pass


@pytest.mark.parametrize("exc_type", [UserError, KeyboardInterrupt])
def test_user_exception_passes_through_after_flush(tmp_path: Path, exc_type: type[BaseException]) -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    raised = exc_type("from the user's loop")
    with pytest.raises(exc_type) as info:
        with gpuprof.profile(tmp_path, schedule=Schedule(wait=1, warmup=1, active=10), print_report=False,
                             tensorboard=False) as prof:
            for i in range(8):
                train_step(model, opt, torch.randn(8, 16), torch.randint(0, 4, (8,)))
                if i == 4:
                    raise raised  # in the middle of the recorded window
                prof.step()
    assert info.value is raised and info.value.__cause__ is None  # unchanged
    assert prof.finished
    found = traces(tmp_path)
    assert len(found) == 1  # the steps recorded so far were flushed
    assert prof.traces[0].first_step == 2
    assert not torch.autograd.profiler._is_profiler_enabled  # profiler torn down


def test_decorator_user_exception_flushes(tmp_path: Path) -> None:
    calls = []

    @gpuprof.profile_step(tmp_path, schedule=Schedule(wait=0, warmup=1, active=10), print_report=False,
                          tensorboard=False)
    def step(i: int) -> int:
        calls.append(i)
        torch.randn(64, 64) @ torch.randn(64, 64)
        if i == 3:
            raise UserError("bad batch")
        return i

    for i in range(3):
        step(i)
    with pytest.raises(UserError, match="bad batch"):
        step(3)
    assert len(traces(tmp_path)) == 1 and step.profiler is None
    assert step(4) == 4  # later calls still run (unprofiled)
    assert calls == [0, 1, 2, 3, 4]


def test_dataloader_patch_removed_after_run(tmp_path: Path) -> None:
    from torch.utils.data import dataloader as dl

    before = (dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__)
    _run(tmp_path, tensorboard=False, analyze=False)
    assert (dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__) == before


def test_device_error_passes_through_when_enrichment_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.capture.checks import errors

    def broken(*a: Any, **k: Any) -> None:
        raise ValueError("injected enrichment bug")

    monkeypatch.setattr(errors, "enrich_device_error", broken)
    raised = RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError) as info:
            with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False, tensorboard=False):
                raise raised
    assert info.value is raised and info.value.__cause__ is None  # the original, unchanged
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "injected enrichment bug" in ours[0]
    assert not torch.autograd.profiler._is_profiler_enabled


def test_another_running_profiler_means_no_capture(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.profiler.profile() as user:
            with gpuprof.profile(tmp_path, schedule=quick_schedule(), print_report=False) as prof:
                for _ in range(STEPS):
                    torch.randn(8, 8) @ torch.randn(8, 8)
                    prof.step()
    ours = [str(w.message) for w in caught if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "already running" in ours[0]
    assert prof.inactive is not None and prof.report is None and not list(tmp_path.iterdir())
    assert any(e.name == "aten::mm" for e in user.function_events)  # the user's profiler saw every op


def test_failure_text_reaches_the_terminal_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure's text (an exception message, maybe built from a path or a name) is shown, never acted on."""
    def boom(self: Any) -> None:
        raise RuntimeError("bad \x1b[2J\x1b]0;owned\x07 name\u202e")

    monkeypatch.setattr(torch.profiler.profile, "start", boom)
    prof, ours, done = _run(tmp_path, tensorboard=False)
    text = str(ours[0].message)
    assert done == STEPS and len(ours) == 1
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "bad \\x1b[2J\\x1b]0;owned\\x07 name\\u202e" in text
