"""Ctrl-C in a training run keeps its exit status with gpuprof's callbacks (real tiny runs in subprocesses, CPU).

The run sends itself SIGINT in the middle of training, as Ctrl-C does; the
process must end as it does without gpuprof: a ``transformers.Trainer``
script by SIGINT (status 130 in a shell: the return code is -2 here),
Lightning with the status its own interrupt handling gives (it catches
``KeyboardInterrupt`` in ``fit`` and exits 1). With gpuprof the capture is
still stopped and its report written: what was recorded is kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

HF = """
import os, signal, sys, torch, transformers
from torch.utils.data import Dataset

class Tokens(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 64, (12,), generator=g), "labels": i % 2}

class CtrlC(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 3:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C: Python's handler raises KeyboardInterrupt

torch.manual_seed(0)
cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                              intermediate_size=32, max_position_embeddings=16, num_labels=2)
args = transformers.TrainingArguments(output_dir=sys.argv[2] + "/out", max_steps=8, per_device_train_batch_size=4,
                                      report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
callbacks = [CtrlC()]
if sys.argv[1] == "gpuprof":
    from gpuprof.integrations.transformers import GpuprofCallback
    callbacks.insert(0, GpuprofCallback(sys.argv[2], run="run", print_report=False))
transformers.Trainer(model=transformers.BertForSequenceClassification(cfg), args=args, train_dataset=Tokens(),
                     callbacks=callbacks).train()
print("NOT REACHED")
"""

LIGHTNING = """
import os, signal, sys, torch
import lightning.pytorch as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)
    def training_step(self, batch, i):
        if i == 3:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 2, (64,), generator=g)),
                          batch_size=8)

L.seed_everything(0, verbose=False)
callbacks = []
if sys.argv[1] == "gpuprof":
    from gpuprof.integrations.lightning import GpuprofCallback
    callbacks.append(GpuprofCallback(sys.argv[2], run="run", print_report=False))
L.Trainer(max_steps=8, callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, accelerator="cpu", devices=1, default_root_dir=sys.argv[2]).fit(Tiny())
print("NOT REACHED")
"""


def _run(script: str, tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    logdir = tmp_path / mode
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    # the timeout is a hang guard only, not a measured time. SIGINT back to its default in the child, as a terminal
    # has it: a suite started in the background of a shell without job control inherits SIGINT ignored, and Python
    # then installs no KeyboardInterrupt handler (the plain run itself would train on through its own Ctrl-C)
    return subprocess.run([sys.executable, str(path), mode, str(logdir)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.slow
def test_ctrl_c_in_a_transformers_run_exits_by_sigint_with_and_without_gpuprof(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    plain = _run(HF, tmp_path, "plain")
    with_gpuprof = _run(HF, tmp_path, "gpuprof")
    assert plain.returncode == -signal.SIGINT, plain.stderr[-2000:]
    assert with_gpuprof.returncode == plain.returncode, with_gpuprof.stderr[-2000:]
    assert "KeyboardInterrupt" in with_gpuprof.stderr and "NOT REACHED" not in with_gpuprof.stdout
    assert (tmp_path / "gpuprof" / "run" / "report.json").is_file()  # stopped at exit, what was recorded kept


@pytest.mark.slow
def test_ctrl_c_in_a_lightning_run_keeps_lightnings_exit_status(tmp_path: Path) -> None:
    pytest.importorskip("lightning.pytorch")
    plain = _run(LIGHTNING, tmp_path, "plain")
    with_gpuprof = _run(LIGHTNING, tmp_path, "gpuprof")
    assert plain.returncode not in (0, 3), plain.stderr[-2000:]  # interrupted: not a success, not a gpuprof error
    assert with_gpuprof.returncode == plain.returncode, with_gpuprof.stderr[-2000:]
    assert "NOT REACHED" not in with_gpuprof.stdout
    assert (tmp_path / "gpuprof" / "run" / "report.json").is_file()


@pytest.mark.slow
def test_the_status_flag_is_set_again_only_for_an_interrupt(tmp_path: Path) -> None:
    """The mechanism alone, in a bare interpreter: an exit-time stop that evaluates source text (as a
    dataclass does) keeps 130 for an unhandled KeyboardInterrupt and leaves other statuses alone."""
    body = textwrap.dedent("""
        import atexit, sys
        from gpuprof.capture.exitstatus import keeping_interrupt_status
        def stop():
            with keeping_interrupt_status():
                exec("x = 1", {})  # what clears CPython's flag
        atexit.register(stop)
        {end}
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    codes = []
    for end in ("raise KeyboardInterrupt", "sys.exit(3)", "raise ValueError('x')", "pass"):
        script = tmp_path / "s.py"
        script.write_text(body.replace("{end}", end))
        codes.append(subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60, env=env).returncode)
    assert codes == [-signal.SIGINT, 3, 1, 0]
