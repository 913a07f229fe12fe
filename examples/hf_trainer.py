"""A Hugging Face ``Trainer`` with gpuprof's callback: a tiny BERT (built from a config, no download).

    python examples/hf_trainer.py               # the Trainer's defaults: GP601 (dataloader_num_workers=0)
    python examples/hf_trainer.py --baseline    # dataloader_num_workers=2, loss logged every 10 steps

With ``gradient_accumulation_steps=2`` each gpuprof step is one optimizer step
(two micro-batches). The pathology also logs every step (``logging_steps=1``:
the Trainer reads the loss with ``.item()`` each optimizer step, a host sync on
a GPU). Works with ``accelerate launch``/``torchrun`` too. Needs
``pip install transformers``; runs on CPU in well under a minute.
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402

from common import parse_args, pick_device, schedule  # noqa: E402
from gpuprof.integrations.transformers import GpuprofCallback  # noqa: E402

VOCAB, LENGTH = 512, 32


class Reviews(Dataset):
    """Synthetic reviews tokenized in Python per sample, as a tokenizer in ``__getitem__`` would."""

    def __len__(self) -> int:
        return 2048

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        words = [f"review{i}-word{(i * j) % 37}" for j in range(120)]
        ids = [101] + [hash(w) % (VOCAB - 200) + 200 for w in words][: LENGTH - 2] + [102]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(len(ids), dtype=torch.long),
                "labels": torch.tensor(i % 2)}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], steps=30)
    device = pick_device(args.device)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=LENGTH, num_labels=2)
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=16, gradient_accumulation_steps=2,
            learning_rate=1e-3, seed=0, report_to=[], save_strategy="no", disable_tqdm=True,
            use_cpu=device.type != "cuda",
            logging_steps=10 if args.baseline else 1,  # the pathology: a loss read (.item()) every step
            dataloader_num_workers=2 if args.baseline else 0,  # the pathology: the Trainer's default, 0
            dataloader_persistent_workers=args.baseline,
        )
        trainer = Trainer(model=BertForSequenceClassification(config), args=training, train_dataset=Reviews(),
                          callbacks=[GpuprofCallback(args.logdir, run=args.run, schedule=schedule(args.steps))])
        trainer.train()


if __name__ == "__main__":
    main()
