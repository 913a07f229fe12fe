"""Regenerate the sample trace that the README's first command analyses.

    python examples/sample_trace/generate.py

Runs the training loop of ``examples/dataloader_workers.py`` (its pathology:
``num_workers=0``) on the CPU under gpuprof's own capture, into a temporary log
directory, and copies the Chrome trace it wrote here. Only the trace is kept:
the TensorBoard events and reports are re-created by anyone who runs the example.

The schedule skips the start-up: the first steps of a process are slow (lazy
initialisation, the allocator and thread pools warming up, the profiler's own
first active steps), and a sample that recorded them taught the wrong thing
(GP901 "warm-up inside the profiled window" on the project's own trace). Here
``WAIT`` steps run unprofiled, ``WARMUP`` more run the profiler without keeping
events, and only then ``ACTIVE`` steps are recorded. The script then analyses
what it wrote and refuses to keep a trace where gpuprof still sees warm-up
(a busy machine makes steps uneven): run it again on a quiet one.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent
REPO = EXAMPLES.parent
WAIT, WARMUP, ACTIVE = 12, 4, 5  # steps 16-20 recorded
BATCH = 16


def record(logdir: str) -> list[Path]:
    """The example's loop, with the schedule above; the traces it wrote."""
    sys.path[:0] = [str(EXAMPLES), str(REPO)]
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    import gpuprof
    from common import mlp  # examples/common.py
    from dataloader_workers import SlowDataset
    from gpuprof.capture import Schedule

    torch.manual_seed(0)
    # one thread: a model this small gains nothing from more, and on a shared machine idle OpenMP
    # threads spinning for a core made the steps 15x slower and uneven (300 ms instead of 20)
    torch.set_num_threads(1)
    steps = WAIT + WARMUP + ACTIVE + 1
    loader = DataLoader(SlowDataset(steps * BATCH), batch_size=BATCH, num_workers=0)  # the pathology
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    with gpuprof.profile(logdir, run="sample", schedule=Schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
                         tensorboard=False, print_report=False) as prof:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    return sorted(Path(logdir).rglob("*.pt.trace.json.gz"))


def main() -> None:
    from gpuprof.analysis import analyze

    with tempfile.TemporaryDirectory() as tmp:
        traces = record(tmp)
        if not traces:
            raise SystemExit("the example wrote no trace")
        for t in traces:
            codes = {f.code for f in analyze(str(t)).findings}
            if "GP901" in codes:
                raise SystemExit(f"{t.name}: gpuprof sees warm-up or uneven steps (GP901); the machine is "
                                 "probably busy: run this again on a quiet one (the sample is unchanged)")
        for old in HERE.glob("*.pt.trace.json.gz"):
            old.unlink()
        for t in traces:
            shutil.copy2(t, HERE / t.name)
            print(f"wrote {HERE / t.name} ({t.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
