"""torch's profiler chatter (kineto's ``USDT: ... profiler_start`` and c10's ``CPUAllocator.cpp``
warning) stays out of the user's stderr during a capture; the user's own warnings and settings stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import ctypes, os, sys, warnings
import torch
import gpuprof
from gpuprof.capture import Schedule

before = [torch.randn(1000) for _ in range(20)]  # allocated before the profiler: freed while it runs
with gpuprof.profile(sys.argv[1], schedule=Schedule(wait=1, warmup=1, active=3), print_report=False,
                     tensorboard=False) as prof:
    for i in range(6):
        x = torch.randn(64, 64) @ torch.randn(64, 64)
        if before:
            del before[:5]
        if i == 3:
            warnings.warn("the user's own warning")
        prof.step()
lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
print("c10", ctypes.c_int.in_dll(lib, "FLAGS_caffe2_log_level").value, "kineto", os.environ.get("KINETO_LOG_LEVEL"))
"""


def _capture(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("KINETO_LOG_LEVEL", "TORCH_CPP_LOG_LEVEL")}
    full.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "logs")], capture_output=True, text=True,
                          env=full, timeout=120, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the c10 switch is reached through libc10.so")
def test_capture_keeps_torch_profiler_lines_out_of_the_users_log(tmp_path: Path) -> None:
    proc = _capture(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "USDT" not in proc.stderr and "profiler_start" not in proc.stderr
    assert "CPUAllocator.cpp" not in proc.stderr
    assert "the user's own warning" in proc.stderr  # a Python warning of the user's still shows
    # both switches back as they were once gpuprof's profiler stopped
    assert proc.stdout.split() == ["c10", "1", "kineto", "None"]


@pytest.mark.slow
def test_a_kineto_level_the_user_set_is_kept(tmp_path: Path) -> None:
    proc = _capture(tmp_path, KINETO_LOG_LEVEL="3")  # the user asked for kineto's STAGE lines
    assert proc.returncode == 0, proc.stderr
    assert "Completed Stage" in proc.stderr
    assert proc.stdout.split()[-1] == "3"
