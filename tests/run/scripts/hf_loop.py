"""A Hugging Face Trainer that knows nothing of gpuprof (tests/run): a tiny BERT from a config, no download."""

import sys
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

VOCAB, LENGTH = 256, 16


class Tokens(Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = [101] + [(i * 7 + j * 13) % (VOCAB - 200) + 200 for j in range(LENGTH - 2)] + [102]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(LENGTH, dtype=torch.long),
                "labels": torch.tensor(i % 2)}


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                 gradient_accumulation_steps=2, learning_rate=1e-3, seed=0, report_to=[],
                                 save_strategy="no", disable_tqdm=True, use_cpu=True, logging_steps=1)
        trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=Tokens())
        result = trainer.train()
        print("final loss", repr(result.training_loss), "steps", trainer.state.global_step, flush=True)


if __name__ == "__main__":
    main()
