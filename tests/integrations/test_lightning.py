"""gpuprof.integrations.lightning.GpuprofCallback with the real Lightning package, on CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import GpuprofWarning, Profiler, Schedule  # noqa: E402
from gpuprof.integrations.lightning import GpuprofCallback  # noqa: E402

from .conftest import codes, finding, line_of, report_json, slow_sample  # noqa: E402

HERE = Path(__file__)
SCHEDULE = Schedule(wait=1, warmup=1, active=2)


class Samples(Dataset[Any]):
    def __init__(self, n: int = 96, slow: bool = True) -> None:
        self.n, self.slow = n, slow

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.slow:
            slow_sample(i)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), i % 4


class Tiny(L.LightningModule):
    def __init__(self, workers: int = 0, item_every_step: bool = False, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        self.workers, self.item_every_step, self.fail_at = workers, item_every_step, fail_at
        self.losses: list[torch.Tensor] = []
        self.seen: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise KeyError("planted failure in training_step")
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(loss.detach().clone())
        if self.item_every_step:
            self.seen.append(loss.item())  # planted: .item() every step
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Samples(), batch_size=8, shuffle=True, num_workers=self.workers, persistent_workers=self.workers > 0)  # loader line


def _fit(tmp_path: Path, module: Tiny, cb: Any = None, steps: int = 8, **trainer_kw: Any) -> Any:
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(max_steps=steps, callbacks=[cb] if cb is not None else [], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, num_sanity_val_steps=0, default_root_dir=str(tmp_path),
                        **trainer_kw)
    trainer.fit(module)
    return trainer


def _module(**kw: Any) -> Tiny:
    L.seed_everything(0, verbose=False)
    return Tiny(**kw)


def test_single_process_loader_named_at_users_line_and_clean_twin_quiet(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "bad", run="r", schedule=SCHEDULE, print_report=False)
    _fit(tmp_path, _module(workers=0), cb)
    rep = report_json(tmp_path / "bad" / "r")
    f = finding(rep, "GP601")
    assert f["origin"] == "runtime"
    assert f["location"]["file"] == str(HERE) and f["location"]["line"] == line_of(HERE, "# loader line")
    assert cb.result is not None and cb.result.steps == 8 and cb.result.inactive is None
    # the clean twin: one worker process, persistent
    clean = GpuprofCallback(tmp_path / "good", run="r", schedule=SCHEDULE, print_report=False)
    _fit(tmp_path, _module(workers=1), clean)
    assert not codes(report_json(tmp_path / "good" / "r")) & {"GP601", "GP102", "GP604"}


def test_losses_bit_identical_with_and_without_the_callback(tmp_path: Path) -> None:
    plain = _module(workers=0)
    _fit(tmp_path, plain)
    profiled = _module(workers=0)
    _fit(tmp_path, profiled, GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False))
    assert len(plain.losses) == len(profiled.losses) == 8
    assert all(torch.equal(a, b) for a, b in zip(plain.losses, profiled.losses))
    for p, q in zip(plain.parameters(), profiled.parameters()):
        assert torch.equal(p, q)


def test_lightning_profiler_active_records_nothing_and_says_so(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    with pytest.warns(GpuprofWarning) as got:
        _fit(tmp_path, _module(workers=0), cb, steps=4, profiler="simple")
    said = [str(w.message) for w in got if issubclass(w.category, GpuprofWarning)]
    assert len(said) == 1 and "Lightning's own profiler is active" in said[0] and "SimpleProfiler" in said[0]
    assert "\n" not in said[0]
    assert cb.result is not None and cb.result.inactive and cb.result.steps == 0
    assert not (tmp_path / "logs").exists()


def test_gradient_accumulation_one_step_per_optimizer_step(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    module = _module(workers=0)
    _fit(tmp_path, module, cb, steps=4, accumulate_grad_batches=2)
    assert len(module.losses) == 8  # 4 optimizer steps of 2 batches
    assert cb.result is not None and cb.result.steps == 4 and cb.micro_batches == 8
    notes = report_json(tmp_path / "logs" / "r")["notes"]
    assert any("accumulate_grad_batches=2" in n for n in notes), notes


def test_users_exception_passes_unchanged_and_the_capture_is_closed(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    with pytest.raises(KeyError, match="planted failure"):
        _fit(tmp_path, _module(workers=0, fail_at=5), cb)
    assert cb.result is not None and cb.result.steps == 5
    assert (tmp_path / "logs" / "r" / "report.json").exists()
    # nothing is left running: a new capture in this process records
    with gpuprof.profile(tmp_path / "after", run="r", schedule=SCHEDULE, print_report=False,
                         tensorboard=False) as prof:
        prof.step()
    assert prof.result is not None and prof.result.inactive is None and prof.result.steps == 1


def test_a_gpuprof_failure_is_one_warning_and_training_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _module(workers=0)
    _fit(tmp_path, plain)

    def broken(self: Profiler) -> None:
        raise RuntimeError("planted gpuprof failure")

    monkeypatch.setattr(Profiler, "step", broken)
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    module = _module(workers=0)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _fit(tmp_path, module, cb)
    ours = [str(w.message) for w in got if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "planted gpuprof failure" in ours[0] and "Training continues" in ours[0], ours
    assert all(torch.equal(a, b) for a, b in zip(plain.losses, module.losses)) and len(module.losses) == 8
    assert cb.result is not None  # the capture was stopped (what was recorded is kept)


class _Strategy:
    def __init__(self) -> None:
        self.broadcasts: list[Any] = []

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self.broadcasts.append((obj, src))
        return "run-from-rank0"


class _Rank3Trainer:
    """What a Lightning Trainer says on rank 3 of 4 (2 nodes of 2 devices); no process group needed."""

    global_rank, local_rank, world_size, num_devices = 3, 1, 4, 2
    global_step = 0
    accumulate_grad_batches = 1
    datamodule = None
    val_dataloaders = None

    def __init__(self, loader: Any) -> None:
        from lightning.pytorch.profilers import PassThroughProfiler

        self.profiler = PassThroughProfiler()
        self.strategy = _Strategy()
        self.train_dataloader = loader


def test_rank_and_world_come_from_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GPUPROF_RUN"):
        monkeypatch.delenv(var, raising=False)
    module = _module(workers=0)
    trainer = _Rank3Trainer(module.train_dataloader())
    cb = GpuprofCallback(tmp_path / "logs", schedule=SCHEDULE, print_report=True, tensorboard=False)
    cb.on_train_start(trainer, module)
    prof = cb._driver.profiler
    assert prof is not None
    try:
        assert (prof.ranks.rank, prof.ranks.local_rank, prof.ranks.world_size, prof.ranks.local_world_size) == (3, 1, 4, 2)
        assert trainer.strategy.broadcasts and trainer.strategy.broadcasts[0][1] == 0
        assert prof.run_dir == tmp_path / "logs" / "run-from-rank0"  # rank 0's name, from the broadcast
        assert prof.out_dir == prof.run_dir / "rank3"
        assert prof.config.print_report is False  # only rank 0 prints
    finally:
        cb.on_train_end(trainer, module)
    assert cb.result is not None and cb.result.rank == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a host sync needs a CUDA device")
def test_item_every_step_named_at_users_line_on_cuda(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(max_steps=8, callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cuda", devices=1)
    trainer.fit(Tiny(workers=0, item_every_step=True))
    f = finding(report_json(tmp_path / "logs" / "r"), "GP630")
    assert f["location"]["line"] == line_of(HERE, "# planted: .item() every step")


class _WithValidation(Tiny):
    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(Samples(n=16, slow=False), batch_size=8)


@pytest.mark.slow
def test_validation_is_an_eval_phase_of_the_job(tmp_path: Path) -> None:
    """Lightning's validation loop (on_validation_start) marks the step it runs in: the job's timeline shows an
    ``eval`` phase there, not a slowdown."""
    L.seed_everything(0, verbose=False)
    module = _WithValidation(workers=0)
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    _fit(tmp_path, module, cb, steps=12, val_check_interval=6, check_val_every_n_epoch=None)
    job = report_json(tmp_path / "logs" / "r")["job"]
    assert job["steps"] == 12
    evals = [(p["start_step"], p["end_step"]) for p in job["phases"] if p["kind"] == "eval"]
    # validation runs after the 6th and 12th optimizer steps: the first lands in the time of step 6 (0-based:
    # steps 0-5 done); the last one, after training's last step, in no step
    assert evals == [(6, 6)], job["phases"]


@pytest.mark.slow
def test_an_out_of_memory_error_passes_through_unchanged(tmp_path: Path) -> None:
    """torch.OutOfMemoryError raised in training_step: Lightning and the callback let the very same object out,
    and the run's report says the run hit out-of-memory (GP641)."""

    class Ooms(Tiny):
        oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 4:
                raise self.oom
            return super().training_step(batch, batch_idx)

    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    L.seed_everything(0, verbose=False)
    module = Ooms(workers=0)
    with pytest.raises(torch.OutOfMemoryError) as info:
        _fit(tmp_path, module, cb)
    assert info.value is Ooms.oom
    assert "GP641" in codes(report_json(tmp_path / "logs" / "r"))
