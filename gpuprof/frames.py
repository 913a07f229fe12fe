"""One answer, for all of gpuprof, to "is this source file the user's code?".

A finding points at the user's line: the innermost frame of *their* code, past
the libraries it called. Every part that picks such a frame asks
:func:`is_user_file`: ``gpuprof analyze`` (Python frames in traces),
``gpuprof memory`` (allocation sites in snapshots and traces), the capture's
warnings (their ``stacklevel``), its findings' locations (the loop's line, a
DataLoader's, a device-mismatch error's) and the leak sites (GP640). Before
this module each had its own list, and they disagreed: a ``transformers``
file was library code to ``analyze`` and the user's code to ``memory``.

Not the user's code (the policy):

* anything installed: a path through ``site-packages/`` or ``dist-packages/``
  (``transformers``, ``accelerate``, ``numpy``, pytest...), and the Python
  standard library (``.../lib/pythonX.Y/...`` outside those);
* ``torch`` and its compilers (``functorch``, ``triton``) wherever they live
  (a source checkout too), and gpuprof itself;
* relative paths that start with a known library's package (``torch/nn/...``,
  ``transformers/...``, as older traces write them) or are a bare standard
  library module (``threading.py``);
* interpreter internals (``<frozen importlib._bootstrap>``, ``<built-in>``),
  C/C++ sources (``.cpp``, ``.cu``... in ``context="all"`` snapshots), and
  frames with no file (``??``, empty).

Everything else is the user's: their scripts and packages, a notebook cell
(``<ipython-input-3-...>``), ``<stdin>``/``<string>``. Torch-free and cheap
(results are cached per file name).
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from types import FrameType

__all__ = ["LIBRARY_ROOTS", "is_user_file", "user_frame"]

# Top-level packages and standard-library modules whose files are never "the user's line",
# for paths written relative to their package root.
LIBRARY_ROOTS = frozenset(
    """torch torchvision torchaudio torchtext functorch transformers accelerate triton numpy lightning
    pytorch_lightning lightning_fabric deepspeed apex timm diffusers datasets tqdm collections contextlib
    functools typing threading multiprocessing importlib runpy asyncio abc copy enum weakref warnings logging
    concurrent selectors queue json re dataclasses inspect traceback site codecs os posixpath genericpath
    tensorboard gpuprof""".split()
)

_INSTALLED = re.compile(r"/(site|dist)-packages/")
_STDLIB = re.compile(r"/lib(64)?/python\d+(\.\d+)?/")
_ANYWHERE = re.compile(r"(^|/)(torch|functorch|triton)/|(^|/)gpuprof/(capture|trace|memory|rules|render|cli)/")
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)).replace("\\", "/") + "/"  # this gpuprof, wherever installed
# C/C++/CUDA sources, and object files and libraries (``thread48.o``, ``libtorch_cuda.so.2``: native stack frames)
_NATIVE = re.compile(r"\.(c|cc|cpp|cxx|h|hh|hpp|cu|cuh|o|so|a|dylib|dll|pyd)(\.\d+)*$")
_INTERNAL_PSEUDO = ("<frozen ", "<built-in", "<__array_function__")


@lru_cache(maxsize=65536)
def is_user_file(filename: str) -> bool:
    """True when ``filename`` (a frame's source file, as recorded) is the user's own code."""
    if not filename or filename == "??":
        return False
    if filename.startswith("<"):
        return not filename.startswith(_INTERNAL_PSEUDO)
    path = filename.replace("\\", "/")
    if path.startswith(_OWN_DIR) or _INSTALLED.search(path) or _STDLIB.search(path) or _ANYWHERE.search(path) or _NATIVE.search(path):
        return False
    if "/" in path:
        return path.split("/", 1)[0] not in LIBRARY_ROOTS
    return not (path.endswith(".py") and path[:-3] in LIBRARY_ROOTS)


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame of the user's code (:func:`is_user_file`) on the calling thread's stack,
    looking from ``depth`` frames above this call (1: its caller); None when every frame is a library's."""
    f: FrameType | None = sys._getframe(depth)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    return f
