"""``gpuprof run``'s bootstrap, loaded by every Python process of the job (docs/run.md, "Launchers").

``gpuprof run`` puts this directory first on ``PYTHONPATH``; it holds only
this file, so nothing else of the user's can be shadowed. It first runs the
``sitecustomize`` it hides (the environment's own, if any), so the process is
set up as it would be without gpuprof, then starts gpuprof's bootstrap, which
does nothing until the process imports torch. Nothing here may raise: a
process that cannot import gpuprof (another interpreter, a broken install)
runs unprofiled, silently.
"""

import importlib.machinery
import importlib.util
import os
import sys


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


def _bootstrap() -> None:
    try:
        from gpuprof.run import bootstrap
    except Exception:  # noqa: BLE001 - gpuprof not importable in this interpreter: leave the process alone
        return
    bootstrap.start()  # never raises


try:
    _chain()
except Exception as _err:  # noqa: BLE001 - the environment's own sitecustomize failed: say so as Python would
    sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(_err).__name__}: {_err}\n")
if os.environ.get("GPUPROF_RUN_CONFIG"):
    _bootstrap()
