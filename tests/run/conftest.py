"""Shared pieces of the ``gpuprof run`` tests: run the command as a user would, on scripts that know nothing of gpuprof."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TIMEOUT_S = 240


def run_env(**extra: str) -> dict[str, str]:
    """This checkout's gpuprof first on the path; one thread per process (2 cores shared by the suite)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    env.pop("GPUPROF_RUN_CONFIG", None)
    env.pop("GPUPROF_RUN", None)
    env.update(extra)
    return env


def gpuprof_run(*args: str, cwd: Path, env: dict[str, str] | None = None,
                timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m gpuprof run ARGS`` in ``cwd``, output captured."""
    return subprocess.run([sys.executable, "-m", "gpuprof", "run", *args], cwd=cwd, env=env or run_env(),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def bare(*args: str, cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """The same script without gpuprof."""
    return subprocess.run([sys.executable, *args], cwd=cwd, env=run_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def user_part(stderr: str) -> str:
    """The script's own stderr: everything before gpuprof's first summary line."""
    lines = []
    for line in stderr.splitlines(keepends=True):
        if line.startswith("gpuprof"):
            break
        lines.append(line)
    return "".join(lines)


def losses(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if "loss" in line]


def report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def capture_section(rep: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in rep["sections"] if s.get("kind") == "capture")


def codes(rep: dict[str, Any]) -> set[str]:
    return {f["code"] for f in rep["findings"]}
