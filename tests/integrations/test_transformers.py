"""gpuprof.integrations.transformers.GpuprofCallback with the real transformers package, on CPU.

The model is built from a tiny ``BertConfig`` (no download)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from gpuprof.capture import GpuprofWarning, Profiler, Schedule  # noqa: E402
from gpuprof.integrations.transformers import GpuprofCallback  # noqa: E402

from .conftest import codes, finding, line_of, report_json, slow_sample  # noqa: E402

HERE = Path(__file__)
SCHEDULE = Schedule(wait=1, warmup=1, active=2)


class Tokens(Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 128

    def __getitem__(self, i: int) -> dict[str, Any]:
        slow_sample(i)
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": i % 2}


def _model() -> Any:
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16, num_labels=2)
    return transformers.BertForSequenceClassification(cfg)


def _train(tmp_path: Path, cb: Any = None, *, steps: int = 6, workers: int = 0, accumulation: int = 1,
           trainer_cls: Any = None) -> Any:
    args_cls = transformers.Seq2SeqTrainingArguments if trainer_cls is transformers.Seq2SeqTrainer else \
        transformers.TrainingArguments
    args = args_cls(output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=4,
                    gradient_accumulation_steps=accumulation, logging_steps=1, report_to=[], save_strategy="no",
                    use_cpu=True, seed=0, disable_tqdm=True, dataloader_num_workers=workers,
                    dataloader_persistent_workers=workers > 0)
    trainer = (trainer_cls or transformers.Trainer)(model=_model(), args=args, train_dataset=Tokens(),
                                                    callbacks=[cb] if cb is not None else [])
    trainer.train()  # train line
    return trainer


def _losses(trainer: Any) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_default_single_process_loader_flagged_clean_twin_quiet(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "bad", run="r", schedule=SCHEDULE, print_report=False)
    _train(tmp_path, cb, workers=0)  # the Trainer's default: dataloader_num_workers=0
    rep = report_json(tmp_path / "bad" / "r")
    f = finding(rep, "GP601")
    assert "transformers.Trainer" in f["message"] and f["origin"] == "runtime"
    assert f["location"]["file"] == str(HERE) and f["location"]["line"] == line_of(HERE, "# train line")
    assert any("dataloader_num_workers=0" in n for n in rep["notes"]), rep["notes"]
    clean = GpuprofCallback(tmp_path / "good", run="r", schedule=SCHEDULE, print_report=False)
    _train(tmp_path, clean, workers=1)
    assert not codes(report_json(tmp_path / "good" / "r")) & {"GP601", "GP102", "GP604"}


def test_losses_and_weights_bit_identical_with_and_without_the_callback(tmp_path: Path) -> None:
    plain = _train(tmp_path)
    profiled = _train(tmp_path, GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False))
    assert len(_losses(plain)) == 6 and _losses(plain) == _losses(profiled)
    for p, q in zip(plain.model.parameters(), profiled.model.parameters()):
        assert torch.equal(p, q)


def test_one_gpuprof_step_per_optimizer_step_with_accumulation_seq2seq(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    _train(tmp_path, cb, steps=4, accumulation=3, trainer_cls=transformers.Seq2SeqTrainer)
    assert cb.result is not None and cb.result.steps == 4 == cb.optimizer_steps
    assert cb.micro_batches == 12
    notes = report_json(tmp_path / "logs" / "r")["notes"]
    assert "12 micro-batches in 4 optimizer steps" in notes and any("gradient_accumulation_steps=3" in n for n in notes)


def test_another_profiler_running_records_nothing_and_says_so(tmp_path: Path) -> None:
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            _train(tmp_path, cb, steps=3)
    ours = [str(w.message) for w in got if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "records nothing" in ours[0] and "\n" not in ours[0], ours
    assert cb.result is not None and cb.result.inactive and not cb.result.traces
    assert not list((tmp_path / "logs").rglob("*.pt.trace.json.gz"))


def test_a_gpuprof_failure_is_one_warning_and_training_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _train(tmp_path, steps=4)

    def broken(self: Profiler, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted gpuprof failure")

    monkeypatch.setattr(Profiler, "watch", broken)  # fails inside on_train_begin
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        profiled = _train(tmp_path, cb, steps=4)
    ours = [str(w.message) for w in got if issubclass(w.category, GpuprofWarning)]
    assert len(ours) == 1 and "planted gpuprof failure" in ours[0] and "Training continues" in ours[0], ours
    assert _losses(plain) == _losses(profiled) and len(_losses(plain)) == 4


def test_rank_and_world_come_from_the_training_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")  # as torchrun/accelerate launch set it

    class Args:  # what TrainingArguments says on rank 2 of 4 (no process group needed)
        process_index, local_process_index, world_size = 2, 0, 4
        gradient_accumulation_steps, dataloader_num_workers = 1, 0

    cb = GpuprofCallback(tmp_path / "logs", schedule=SCHEDULE, print_report=True, tensorboard=False)
    cb.on_train_begin(Args(), None, None, model=_model())
    prof = cb._driver.profiler
    assert prof is not None
    try:
        assert (prof.ranks.rank, prof.ranks.local_rank, prof.ranks.world_size) == (2, 0, 4)
        assert prof.run_dir == tmp_path / "logs" / "run-job7" and prof.out_dir == prof.run_dir / "rank2"
        assert prof.config.print_report is False  # only rank 0 prints
    finally:
        cb.on_train_end(Args(), None, None)
    assert cb.result is not None and cb.result.rank == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a host sync needs a CUDA device")
def test_logging_every_step_syncs_named_on_cuda(tmp_path: Path) -> None:
    # logging_steps=1 makes the Trainer read the loss with .item() every optimizer step
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4,
                                          logging_steps=1, report_to=[], save_strategy="no", seed=0)
    transformers.Trainer(model=_model(), args=args, train_dataset=Tokens(), callbacks=[cb]).train()
    assert "GP630" in codes(report_json(tmp_path / "logs" / "r"))


@pytest.mark.slow
def test_evaluation_is_an_eval_phase_of_the_job(tmp_path: Path) -> None:
    """The Trainer's evaluation (on_evaluate) marks the step it runs in: an ``eval`` phase, not a slowdown."""
    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4,
                                          per_device_eval_batch_size=4, eval_strategy="steps", eval_steps=3,
                                          report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=_model(), args=args, train_dataset=Tokens(), eval_dataset=Tokens(),
                                   callbacks=[cb])
    trainer.train()
    job = report_json(tmp_path / "logs" / "r")["job"]
    assert job["steps"] == 6
    # evaluation after the 3rd optimizer step runs in the time of step 3 (0-based); the one after the last step
    # is in no step
    assert [(p["start_step"], p["end_step"]) for p in job["phases"] if p["kind"] == "eval"] == [(3, 3)], job["phases"]


def test_an_out_of_memory_error_passes_through_unchanged(tmp_path: Path) -> None:
    """torch.OutOfMemoryError raised in a Trainer's training_step leaves trainer.train() as the same object.
    (transformers' callbacks get no exception event, so the run's report is written only by a later
    on_train_end; on CUDA the out-of-memory observer writes oom.pickle/oom.json before the error leaves.)"""
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    class Ooms(transformers.Trainer):  # type: ignore[misc]
        def training_step(self, *args: Any, **kwargs: Any) -> Any:
            if self.state.global_step == 3:
                raise oom
            return super().training_step(*args, **kwargs)

    cb = GpuprofCallback(tmp_path / "logs", run="r", schedule=SCHEDULE, print_report=False)
    with pytest.raises(torch.OutOfMemoryError) as info:
        _train(tmp_path, cb, steps=6, trainer_cls=Ooms)
    assert info.value is oom
    assert info.value.__traceback__ is not None and "Tried to allocate 2.00 GiB" in str(info.value)
    cb.on_train_end(None, None, None)  # what a `finally:` around trainer.train() does: the capture closes
    assert (tmp_path / "logs" / "r" / "report.json").exists()
