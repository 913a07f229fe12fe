"""Importing the integrations: no framework for the package, a clear ImportError for a missing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# a fresh interpreter in which the named top-level packages cannot be imported
_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)")
        return None
sys.meta_path.insert(0, Block())
{code}
"""


def _run(blocked: set[str], code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK.format(blocked=blocked, code=code)], cwd=str(REPO),
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})


def test_package_imports_no_framework_nor_torch() -> None:
    proc = _run(set(), "import gpuprof.integrations, sys\n"
                       "print(sorted(m for m in ('torch', 'lightning', 'transformers', 'pytorch_lightning') "
                       "if m in sys.modules))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(("module", "blocked", "names"), [
    ("gpuprof.integrations.lightning", {"lightning", "pytorch_lightning"}, "pip install lightning"),
    ("gpuprof.integrations.transformers", {"transformers"}, "pip install transformers"),
])
def test_missing_framework_is_an_import_error_naming_it(module: str, blocked: set[str], names: str) -> None:
    pytest.importorskip("torch")
    proc = _run(blocked, f"import {module}")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and names in last, proc.stderr[-2000:]
