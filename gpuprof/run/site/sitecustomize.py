"""``gpuprof run``'s bootstrap, loaded by every Python process of the job (docs/run.md, "Launchers").

``gpuprof run`` puts this directory first on ``PYTHONPATH``; it holds only
this file, so nothing else of the user's can be shadowed. It first runs the
``sitecustomize`` it hides (the environment's own, if any), so the process is
set up as it would be without gpuprof. Then it waits: gpuprof itself (whose
package imports numpy, ~0.15 s of CPU) is imported only once the process has
imported torch (or a framework's Trainer module, which is then patched), so
``pip``, shell helpers and torchrun's agent before it imports torch pay one
tuple look-up per import. With ``--step-function``
the bootstrap starts at once (it must see the script define the function).

It also keeps Python's own ending for an uncaught KeyboardInterrupt (death by
SIGINT, a shell's 130): Python records that exception and kills itself with
SIGINT once finalized, but a C extension that runs Python source through
``PyRun_String`` afterwards (torch's profiler does, when a capture stops at
exit) clears the record and the process would exit 1. So the exception is
noted in ``sys.excepthook`` (after the traceback is printed, unchanged) and
the last exit handler ends the process by SIGINT itself.

Nothing here may raise: a process that cannot import gpuprof (another
interpreter, a broken install) runs unprofiled, silently.
"""

import atexit
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from typing import Any

_ENV = "GPUPROF_RUN_CONFIG"
_UNCAUGHT: "list[BaseException]" = []  # the exception ending the process, as sys.excepthook saw it


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, the one this file shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _bootstrap(module_name: str = "", module: Any = None) -> None:
    try:
        from gpuprof.run import bootstrap
    except Exception:  # noqa: BLE001 - gpuprof not importable in this interpreter: leave the process alone
        return
    bootstrap.start()  # never raises; once per process
    if module is not None:
        bootstrap.on_framework(module_name, module)  # never raises


#: modules whose import ends the wait: torch, and the framework Trainers that get gpuprof's callback (each
#: imports torch first, but may be the module being imported when torch's import ends, too early to patch)
_WATCHED = ("torch", "lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer",
            "transformers.trainer")


class _WhenImported:
    """A meta-path finder that starts the bootstrap once a watched module's code has run.

    A look-up alone (``importlib.util.find_spec("torch")``, as libraries do
    to test for torch) gets a spec whose module is never executed: the
    finder stays until the module's code actually runs, once per name.
    """

    def __init__(self) -> None:
        self.done: "set[str]" = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _WATCHED or fullname in self.done:
            return None
        spec = None
        for finder in sys.meta_path:  # the first other finder that knows it, as the import would ask them
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        loader: Any = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_start(module: Any) -> None:
            try:
                exec_module(module)
            finally:
                with contextlib.suppress(AttributeError):
                    del loader.exec_module
            if fullname in self.done:
                return
            self.done.add(fullname)
            if fullname == "torch":
                _bootstrap()
            else:
                _bootstrap(fullname, module)

        with contextlib.suppress(AttributeError, TypeError):  # a loader with slots: no bootstrap, import as usual
            loader.exec_module = exec_then_start
        return spec


def _excepthook_keeping_ctrl_c(previous: Any) -> Any:
    def excepthook(tp: Any, value: BaseException, tb: Any) -> Any:
        _UNCAUGHT.append(value)
        try:
            return previous(tp, value, tb)  # the user's traceback, exactly as Python prints it
        finally:
            boot = sys.modules.get("gpuprof.run.bootstrap")
            if boot is not None:
                boot.on_uncaught(value)  # never raises

    return excepthook


def _exit_by_sigint_after_ctrl_c() -> None:
    if not _UNCAUGHT or not isinstance(_UNCAUGHT[-1], KeyboardInterrupt):
        return
    if threading.current_thread() is not threading.main_thread() or "gpuprof.run.bootstrap" not in sys.modules:
        return  # gpuprof never ran here: Python's own ending is intact
    import signal

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing to flush
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _start() -> None:
    text = os.environ.get(_ENV)
    if not text:
        return
    sys.excepthook = _excepthook_keeping_ctrl_c(sys.excepthook)
    atexit.register(_exit_by_sigint_after_ctrl_c)  # registered first: runs last
    try:
        now = json.loads(text).get("step_function") is not None
    except Exception:  # noqa: BLE001 - not ours to judge here: the bootstrap says what is wrong, in one line
        now = True
    if now or "torch" in sys.modules:
        _bootstrap()
    sys.meta_path.insert(0, _WhenImported())


try:
    _chain()
except Exception as _err:  # noqa: BLE001 - the environment's own sitecustomize failed: say so as Python would
    sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(_err).__name__}: {_err}\n")
with contextlib.suppress(Exception):  # never break the user's process
    _start()
