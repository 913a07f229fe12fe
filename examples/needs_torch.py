"""Imported first by every example: without PyTorch, one line naming what to install and exit code 2.

(Not torch's ``ModuleNotFoundError`` traceback.) gpuprof itself needs no torch for ``gpuprof analyze``.
"""

from gpuprof.torchdep import exit_without_torch

exit_without_torch("example")
