"""Capture where PyTorch is not installed: one line naming what to install, never torch's bare traceback.

Torch is made absent in a child process by a ``sys.meta_path`` finder that refuses it, as an environment
without torch would (``ModuleNotFoundError: No module named 'torch'``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpuprof.cli import _Group
from gpuprof.errors import EXIT_BAD_INPUT
from gpuprof.torchdep import TORCH_HINT, import_torch, is_torch_missing

REPO = Path(__file__).resolve().parents[2]

NO_TORCH = '''
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoTorch())
'''


def _run(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", NO_TORCH + code, *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd or REPO, env=env)


def test_the_hint_names_the_extra_and_what_works_without_torch() -> None:
    assert "\n" not in TORCH_HINT
    assert TORCH_HINT.startswith("gpuprof capture needs PyTorch: pip install torch")
    assert "'capture' extra" in TORCH_HINT and "gpuprof analyze" in TORCH_HINT


def test_profile_without_torch_is_an_import_error_naming_the_extra(tmp_path: Path) -> None:
    code = '''
import gpuprof
assert "torch" not in sys.modules
try:
    with gpuprof.profile(sys.argv[1]):
        pass
except ImportError as err:
    print("caught", type(err).__name__, err.name, "|", err)
'''
    proc = _run(code, str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"caught ImportError torch | {TORCH_HINT}"
    assert not (tmp_path / "logs").exists()  # nothing written before it failed


def test_uncaught_the_last_line_is_the_hint_with_no_chained_traceback(tmp_path: Path) -> None:
    proc = _run("import gpuprof\ngpuprof.profile(sys.argv[1]).start()\n", str(tmp_path))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == f"ImportError: {TORCH_HINT}"
    assert "ModuleNotFoundError" not in proc.stderr and "during handling" not in proc.stderr


def test_profile_step_raises_it_where_the_function_is_decorated(tmp_path: Path) -> None:
    # profile_step checks its arguments (and so torch) when it decorates, before any training
    code = '''
import gpuprof

try:
    @gpuprof.profile_step(sys.argv[1])
    def train_step():
        return 1
except ImportError as err:
    print("caught", err)
'''
    proc = _run(code, str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"caught {TORCH_HINT}"


def test_an_example_without_torch_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    code = '''
import runpy
sys.path.insert(0, "examples")
sys.argv = ["examples/train.py", "--logdir", sys.argv[1], "--steps", "2"]
runpy.run_path("examples/train.py", run_name="__main__")
'''
    proc = _run(code, str(tmp_path / "logs"))
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert proc.stderr.strip() == f"example: error: {TORCH_HINT}"
    assert proc.stdout == ""


def test_the_command_line_maps_it_to_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.group(cls=_Group)
    def cli() -> None:
        """A group like gpuprof's, with a command that captures."""

    @cli.command()
    def capture() -> None:
        import_torch()

    monkeypatch.setitem(sys.modules, "torch", None)  # this process's torch, hidden for the call
    result = CliRunner().invoke(cli, ["capture"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert result.stderr.strip() == f"gpuprof: error: {TORCH_HINT}"


def test_a_broken_torch_keeps_its_own_error() -> None:
    # installed but failing (a missing CUDA library): "pip install torch" would be the wrong advice
    assert is_torch_missing(ImportError(TORCH_HINT, name="torch"))
    assert is_torch_missing(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert not is_torch_missing(ImportError("libcudart.so.12: cannot open shared object file", name="torch._C"))
    assert not is_torch_missing(ValueError(TORCH_HINT))
