"""Capture where Linux's /proc and fork are missing (macOS, Windows): it degrades with a note, never crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpuprof
import gpuprof.capture.memory as M

REPO = Path(__file__).resolve().parents[2]


def test_without_proc_statm_the_sampler_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_proc(path: str, *args: object, **kw: object) -> int:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(M.os, "open", no_proc)
    s = M.MemorySampler(cuda=False)
    assert not s.available
    s.sample()  # a no-op, not an error
    assert len(s.rss) == 0


def test_a_capture_without_proc_statm_runs_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    real_open = os.open

    def no_proc(path: str, *args: object, **kw: object) -> int:
        if str(path) == "/proc/self/statm":
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(M.os, "open", no_proc)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    with gpuprof.profile(tmp_path, schedule=gpuprof.capture.Schedule(wait=0, warmup=1, active=2),
                         print_report=False) as prof:
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            steps += 1
            prof.step()
    assert steps == 5  # the loop ran on
    result = prof.result
    assert result is not None and result.traces and result.steps == 5
    note = "no /proc/self/statm on this system: the process's resident memory (RSS) is not sampled"
    assert note in prof.guard.notes
    assert note in json.dumps(result.report)  # the report says so


def test_capture_imports_where_os_has_no_fork_hooks(tmp_path: Path) -> None:
    # Windows has no os.register_at_fork; the capture package must still import
    code = "import os\ndel os.register_at_fork\nimport gpuprof.capture\nprint('ok')\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
