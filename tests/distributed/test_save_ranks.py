"""GP845 on a real 2-process DDP job (torchrun, gloo, CPU): every rank calling torch.save is named from
rank 1's trace at the user's torch.save line; saving on rank 0 only is quiet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.analysis import analyze
from gpuprof.trace.load import load_trace

pytestmark = pytest.mark.slow  # torchrun starts two processes that import torch

REPO = Path(__file__).resolve().parents[2]

SCRIPT = '''\
import sys

import torch
import torch.distributed as dist

import gpuprof
from gpuprof.capture import Schedule


def main(logdir, only_rank0):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gpuprof.profile(logdir, run="r", schedule=Schedule(wait=0, warmup=1, active=4), print_report=False,
                         tensorboard=False, analyze=False) as prof:
        for step in range(5):
            model(torch.randn(8, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            if step % 2 == 0 and (rank == 0 or not only_rank0):
                torch.save(model.module.state_dict(), f"{logdir}/ckpt{rank}.pt")  # SAVE-LINE
            prof.step()
    dist.destroy_process_group()


main(sys.argv[1], sys.argv[2] == "rank0")
'''


def _job(tmp_path: Path, mode: str) -> tuple[Path, Path]:
    pytest.importorskip("torch")
    script = tmp_path / "ddp_save.py"
    script.write_text(SCRIPT)
    logdir = tmp_path / mode
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           str(logdir), mode]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = [p for p in logdir.rglob("*.pt.trace.json*")]
    by_rank = {load_trace(p).rank: p for p in traces}
    assert set(by_rank) == {0, 1}, traces
    return by_rank[1], script


def test_gp845_bad_real_ddp_every_rank_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rank1, script = _job(tmp_path, "every")
    monkeypatch.chdir(tmp_path)  # analysed where the script is (torch records its path relative to sys.path)
    (f,) = [f for f in analyze(rank1, select=["GP845"]).findings]
    assert "rank 1 of 2" in f.message and "dist.get_rank() == 0" in f.advice
    line = next(i for i, s in enumerate(script.read_text().splitlines(), 1) if "# SAVE-LINE" in s)
    assert f.location is not None and f.location.file.endswith("ddp_save.py") and f.location.line == line
    # independent count: the torch.save frames in rank 1's trace
    saves = [p for p in load_trace(rank1).python if p.name.startswith("torch/serialization.py(") and p.name.endswith(": save")]
    assert f.evidence[0].value == len(saves) >= 2


def test_gp845_good_real_ddp_saves_on_rank_zero_only(tmp_path: Path) -> None:
    rank1, _ = _job(tmp_path, "rank0")
    assert [f for f in analyze(rank1, select=["GP845"]).findings] == []
