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

Another tool's ``sitecustomize`` may chain as ddtrace-run's does (drop its own
folder from ``sys.path`` and ``sys.modules["sitecustomize"]``, import
``sitecustomize`` again), which loads this file a second time in the same
process: that load only goes on along the chain (to a file not yet run), and
the bootstrap, its hooks and its one import finder (gpuprof/run/imports.py,
loaded by its path) are set up by the first load alone.

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
import types
from typing import Any

_ENV = "GPUPROF_RUN_CONFIG"
_UNCAUGHT: "list[BaseException]" = []  # the exception ending the process, as sys.excepthook saw it
#: in ``sys.modules`` once any copy of this file has loaded in this process: a second load (another tool's
#: ``sitecustomize`` that chains by dropping ``sys.modules["sitecustomize"]`` and importing it again, as
#: ddtrace-run does) only goes on along the chain; the bootstrap is started once
_STATE = "_gpuprof_run_site"
#: the post-import hook (gpuprof/run/imports.py), loaded by its path under this name: gpuprof's package is
#: not imported before torch is
_IMPORTS = "_gpuprof_run_imports"


def _state() -> "tuple[Any, bool]":
    """(this process's state, whether this is the first load of gpuprof's ``sitecustomize`` in it)."""
    state = sys.modules.get(_STATE)
    if state is not None:
        return state, False
    made: Any = types.ModuleType(_STATE, "gpuprof run's bootstrap has loaded in this process (docs/run.md)")
    made.chained = set()  # the real paths of the sitecustomize files run by the chain
    sys.modules[_STATE] = made
    return made, True


def _chain(state: Any) -> None:
    """Run the next ``sitecustomize`` on the path, the one this file shadows (once per file and process)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin is None:
        return
    origin = os.path.realpath(spec.origin)
    if origin == os.path.realpath(__file__) or origin in state.chained:
        return
    state.chained.add(origin)
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


def _imports() -> Any:
    """gpuprof/run/imports.py (standard library only), loaded once per process by its path."""
    loaded = sys.modules.get(_IMPORTS)
    if loaded is not None:
        return loaded
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "imports.py")
    spec = importlib.util.spec_from_file_location(_IMPORTS, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[_IMPORTS] = loaded
    try:
        spec.loader.exec_module(loaded)
    except BaseException:
        del sys.modules[_IMPORTS]
        raise
    return loaded


def _on_import(name: str) -> Any:
    if name == "torch":
        return lambda module: _bootstrap()
    return lambda module: _bootstrap(name, module)


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
    if now:
        _bootstrap()
    hook = _imports()
    for name in _WATCHED:  # now, where one is imported already (by an earlier sitecustomize)
        hook.when_imported(name, _on_import(name))


_STATE_NOW, _FIRST = _state()
try:
    _chain(_STATE_NOW)
except Exception as _err:  # noqa: BLE001 - the environment's own sitecustomize failed: say so as Python would
    sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(_err).__name__}: {_err}\n")
if _FIRST:
    with contextlib.suppress(Exception):  # never break the user's process
        _start()
