"""Capture's one dependency on PyTorch, and what a user without it is told.

Analysis never needs torch; capture does. Without it, ``gpuprof.profile(...)``
(and the first call of a ``profile_step`` function) raise a plain
:class:`ImportError` whose one-line message names what to install, instead of
torch's bare ``ModuleNotFoundError`` from deep inside the capture. Scripts
(the examples) call :func:`exit_without_torch` first: one line on stderr and
exit code 2 (bad usage: the environment lacks a requirement), no traceback.
The command line maps that same ImportError to the same line and exit code.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["TORCH_HINT", "import_torch", "exit_without_torch", "is_torch_missing"]

TORCH_HINT = ("gpuprof capture needs PyTorch: pip install torch (or gpuprof's 'capture' extra, e.g. "
              "pip install -e \".[capture]\" in a clone); gpuprof analyze and gpuprof memory work without it")


def is_torch_missing(err: BaseException) -> bool:
    """True for the ImportError :func:`import_torch` raises, and for torch's own "No module named 'torch'"."""
    return isinstance(err, ImportError) and (err.name == "torch" or str(err) == TORCH_HINT)


def import_torch() -> ModuleType:
    """``torch``, or an :class:`ImportError` with :data:`TORCH_HINT` when it is not installed.

    A torch that is installed but fails to import (a broken build, a missing CUDA library) keeps its own
    error: telling that user to ``pip install torch`` would be wrong.
    """
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as err:
        if err.name != "torch":
            raise
        raise ImportError(TORCH_HINT, name="torch") from None


def exit_without_torch(prog: str = "gpuprof") -> None:
    """For scripts: without torch, print ``<prog>: error: <TORCH_HINT>`` and exit with code 2."""
    try:
        import_torch()
    except ImportError as err:
        if not is_torch_missing(err):
            raise
        print(f"{prog}: error: {TORCH_HINT}", file=sys.stderr)
        raise SystemExit(2) from None
