"""GP601 speaks the user's framework (issue 37 item 7): the HF Trainer's loader is fixed in
TrainingArguments, a Lightning loader handed to ``trainer.fit`` is named at its ``DataLoader(`` call,
and an Accelerate loop's loader at the user's ``for`` line, not inside accelerate. Real frameworks on
CPU, tiny models from configs, nothing downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

pytest.importorskip("torch")

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

import gpuprof  # noqa: E402
from gpuprof.capture import Schedule  # noqa: E402

from .conftest import finding, line_of, report_json, slow_sample  # noqa: E402

HERE = Path(__file__)
SCHEDULE = Schedule(wait=1, warmup=1, active=2)


class Slow(Dataset[tuple[torch.Tensor, int]]):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        slow_sample(i)
        return torch.randn(16, generator=torch.Generator().manual_seed(i)), i % 4


def test_gp601_bad_accelerate_loop_is_named_at_the_users_for_line(tmp_path: Path) -> None:
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt, loader = accelerator.prepare(model, opt, DataLoader(Slow(), batch_size=8))
    with gpuprof.profile(tmp_path, run="r", schedule=SCHEDULE, print_report=False) as prof:
        for x, y in loader:  # accelerate for line
            loss = torch.nn.functional.cross_entropy(model(x), y)
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            prof.step()
    f = finding(report_json(tmp_path / "r"), "GP601")
    assert f["location"]["file"] == str(HERE) and f["location"]["line"] == line_of(HERE, "# accelerate for line")
    assert "accelerator.prepare" in f["advice"]


def test_gp601_bad_hf_trainer_advice_names_training_arguments(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from gpuprof.integrations.transformers import GpuprofCallback

    class Tokens(Dataset[dict[str, Any]]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict[str, Any]:
            slow_sample(i)
            return {"input_ids": torch.randint(0, 64, (12,), generator=torch.Generator().manual_seed(i)),
                    "labels": i % 2}

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=16, num_labels=2)
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=5, per_device_train_batch_size=4,
                                          report_to=[], save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    cb = GpuprofCallback(tmp_path, run="r", schedule=SCHEDULE, print_report=False)
    transformers.Trainer(model=transformers.BertForSequenceClassification(cfg), args=args, train_dataset=Tokens(),
                         callbacks=[cb]).train()
    f = finding(report_json(tmp_path / "r"), "GP601")
    assert "TrainingArguments(dataloader_num_workers=" in f["advice"]
    assert "dataloader_persistent_workers=True" in f["advice"]
    assert "Set num_workers>0" not in f["advice"]  # not the DataLoader argument the user never writes


def test_gp601_bad_lightning_loader_passed_to_fit_is_named_at_its_dataloader_call(tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")
    from gpuprof.integrations.lightning import GpuprofCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(16, 4)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    L.seed_everything(0, verbose=False)
    train_loader = DataLoader(Slow(), batch_size=8)  # lightning loader line
    other = DataLoader(TensorDataset(torch.zeros(4, 16)), batch_size=2)  # another loader, not given to fit
    cb = GpuprofCallback(tmp_path, run="r", schedule=SCHEDULE, print_report=False)
    trainer = L.Trainer(max_steps=6, callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                        default_root_dir=str(tmp_path))
    trainer.fit(Tiny(), train_dataloaders=train_loader)
    assert other is not None
    f = finding(report_json(tmp_path / "r"), "GP601")
    assert f["location"]["file"] == str(HERE) and f["location"]["line"] == line_of(HERE, "# lightning loader line")
    assert "DataLoader(" in f["advice"] and "num_workers" in f["advice"]
