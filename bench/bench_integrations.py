"""Overhead of gpuprof's framework callbacks per training step, as ratios against the same run without them.

For each framework (Lightning, transformers) a tiny model trains on CPU in
paired runs, without and with ``GpuprofCallback``, repeated ``--pairs``
times in a rotating order so machine drift and run order hit every side alike. A timing callback
present in both records the time of every step (Lightning:
``on_train_batch_end``; transformers: ``on_step_end``). Two figures:

* ``steady_ratio``: the callback whose schedule never reaches its recorded
  window (the DataLoader monitor, the step clock, memory samples: what every
  step outside the window pays); the ratio of the median step times, per pair,
  and its median over the pairs; ``steady_ratio_p10`` the same for the 10th
  percentile step (steadier on a loaded machine, where load only adds time),
  ``steady_extra_us_p10`` its difference in microseconds. ``noop_callback_ratio`` is the same for a
  callback that does nothing: what the framework itself charges for calling
  one more callback's hooks (Lightning calls every hook of every callback).
* ``window_extra_s``: with the default schedule (steps 7-11 recorded, the
  trace exported and the report analysed when the window closes), the extra
  time of the whole run over the run without the callback: paid once per run,
  so ``whole_run_ratio`` (mean step with / without) depends on ``--steps``.

    python bench/bench_integrations.py [--pairs 8] [--steps 400] [--only lightning] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from gpuprof.capture import Schedule

NEVER = Schedule(wait=10**9, warmup=0, active=1)  # the window is never reached


def _lightning_run(steps: int, callback: Any) -> list[float]:
    import lightning.pytorch as L
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    times: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            times.append(time.perf_counter())

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

        def training_step(self, batch: Any, i: int) -> Any:
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(32 * steps, 64), torch.randint(0, 10, (32 * steps,)))
    cbs = [Clock()] + ([callback] if callback is not None else [])
    trainer = L.Trainer(max_steps=steps, callbacks=cbs, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Tiny(), DataLoader(data, batch_size=32))
    return [b - a for a, b in zip(times, times[1:])]


def _transformers_run(steps: int, callback: Any) -> list[float]:
    import transformers

    times: list[float] = []

    class Clock(transformers.TrainerCallback):
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter())

    class Tokens(torch.utils.data.Dataset[dict[str, Any]]):
        def __len__(self) -> int:
            return 8 * steps

        def __getitem__(self, i: int) -> dict[str, Any]:
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 64, (16,), generator=g), "labels": i % 2}

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=16, num_labels=2)
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                              report_to=[], save_strategy="no", use_cpu=True, seed=0,
                                              disable_tqdm=True, logging_steps=10**6)
        cbs = [Clock()] + ([callback] if callback is not None else [])
        transformers.Trainer(model=transformers.BertForSequenceClassification(cfg), args=args,
                             train_dataset=Tokens(), callbacks=cbs).train()
    return [b - a for a, b in zip(times, times[1:])]


def measure(run: Callable[[int, Any], list[float]], make_cb: Callable[[str, Schedule], Any], noop: Callable[[], Any],
            pairs: int, steps: int) -> dict[str, Any]:
    """Per pair: no callback (A), a callback that does nothing (N: the framework's own cost of calling
    one more callback's hooks), gpuprof's outside its window (B), gpuprof's with the default schedule (W);
    the order rotates from pair to pair, so use a multiple of 4 pairs."""
    a_ms, n_ms, b_ms, window_s, ratios, noop_ratios, whole = [], [], [], [], [], [], []
    p10: list[float] = []
    extra_us: list[float] = []
    for i in range(pairs):
        with tempfile.TemporaryDirectory() as logdir:
            arms: dict[str, Callable[[], list[float]]] = {
                "a": lambda: run(steps, None),
                "n": lambda: run(steps, noop()),
                "b": lambda: run(steps, make_cb(logdir + "/b", NEVER)),
                "w": lambda: run(steps, make_cb(logdir + "/w", Schedule())),
            }
            order = list(arms)[i % 4:] + list(arms)[: i % 4]  # rotated per pair: no arm always runs first
            got = {k: arms[k]() for k in order}
            a, n, b, w = got["a"], got["n"], got["b"], got["w"]
        p10.append(_p10(b) / _p10(a))
        extra_us.append((_p10(b) - _p10(a)) * 1e6)
        a_ms.append(statistics.median(a) * 1e3)
        n_ms.append(statistics.median(n) * 1e3)
        b_ms.append(statistics.median(b) * 1e3)
        ratios.append(b_ms[-1] / a_ms[-1])
        noop_ratios.append(n_ms[-1] / a_ms[-1])
        window_s.append(sum(w) - sum(a))  # the recorded window, its export and report, paid once per run
        whole.append(statistics.fmean(w) / statistics.fmean(a))
    return {
        "steady_ratio": round(statistics.median(ratios), 4), "steady_ratios": [round(r, 4) for r in ratios],
        "steady_ratio_p10": round(statistics.median(p10), 4), "steady_ratios_p10": [round(r, 4) for r in p10],
        "steady_extra_us_p10": round(statistics.median(extra_us), 1),
        "noop_callback_ratio": round(statistics.median(noop_ratios), 4),
        "without_ms": [round(x, 3) for x in a_ms], "noop_ms": [round(x, 3) for x in n_ms],
        "with_ms": [round(x, 3) for x in b_ms],
        "window_extra_s": round(statistics.median(window_s), 3), "window_extra_s_all": [round(x, 3) for x in window_s],
        "whole_run_ratio": round(statistics.median(whole), 4),
    }


def _p10(xs: list[float]) -> float:
    """The 10th percentile step: load on a shared machine only ever adds time, so the fast steps show
    what the step itself costs."""
    return sorted(xs)[len(xs) // 10]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--only", choices=("lightning", "transformers"), default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    result: dict[str, Any] = {"pairs": args.pairs, "steps": args.steps}
    if args.only in (None, "lightning"):
        import lightning.pytorch as L

        from gpuprof.integrations.lightning import GpuprofCallback as LCallback

        result["lightning"] = measure(_lightning_run, lambda d, s: LCallback(d, schedule=s, print_report=False),
                                      L.Callback, args.pairs, args.steps)
    if args.only in (None, "transformers"):
        import transformers

        from gpuprof.integrations.transformers import GpuprofCallback as TCallback

        result["transformers"] = measure(_transformers_run,
                                         lambda d, s: TCallback(d, schedule=s, print_report=False),
                                         transformers.TrainerCallback, args.pairs, args.steps)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
