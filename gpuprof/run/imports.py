"""Run code right after a module finishes importing, without importing it ourselves.

The bootstrap runs in every Python process of a ``gpuprof run`` job, most of
which never import torch (``pip``, a shell helper) or never train (torchrun's
agent). Importing torch there to hook the optimizer would cost seconds and
change what those processes do, so the bootstrap instead waits: a finder at the
front of ``sys.meta_path`` notices when a watched module is being imported and
runs the callbacks once its code has run. For any other module the finder
returns None after one dictionary look-up, so imports cost what they did.

This is the one post-import hook of ``gpuprof run``: ``sitecustomize`` loads
this file by its path (as ``_gpuprof_run_imports``: before torch, gpuprof's
package is not imported), the bootstrap imports it as ``gpuprof.run.imports``
later. So it imports nothing of gpuprof's, and a process holds one finder of
this kind, found in ``sys.meta_path`` by its mark (``GPUPROF_POST_IMPORT``)
whichever copy of this module asks. Looking for the module's spec, the finder
asks the other finders in order, skipping every finder of its own kind (two of
them, from two loads of a ``sitecustomize`` or two copies of gpuprof, would
otherwise each defer to the other without end; the hooks a skipped one holds
run with the asking one's), and a look-up of a name it is
already looking up on this thread gets None (a finder that asks the meta path
again, as this one does, cannot send it round in a circle).

A callback that raises is the caller's to report (it is wrapped by the
bootstrap's guard); the import itself always completes as it would without us.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any, Callable, Sequence

__all__ = ["when_imported", "uninstall", "finder", "MARK"]

Callback = Callable[[ModuleType], None]
#: the attribute that marks a finder of this kind, whichever copy of this module made it
MARK = "GPUPROF_POST_IMPORT"


class _Finder:
    """A meta-path finder that calls the hooks of a module once the module's code has run.

    A look-up alone (``importlib.util.find_spec("torch")``, as libraries do
    to test for torch) gets a spec whose module is never executed: the
    hooks wait until the module's code actually runs, once per name.
    """

    GPUPROF_POST_IMPORT = True

    def __init__(self) -> None:
        self.hooks: dict[str, list[Callback]] = {}
        self._local = threading.local()

    def add(self, name: str, callback: Callback) -> None:
        self.hooks.setdefault(name, []).append(callback)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.hooks:
            return None
        busy: set[str] = self._local.__dict__.setdefault("busy", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = _find_after(fullname, path, target)
        finally:
            busy.discard(fullname)
        loader = spec.loader if spec is not None else None
        exec_module = getattr(loader, "exec_module", None)
        if spec is None or loader is None or exec_module is None:
            return spec

        def exec_then_call(module: ModuleType) -> None:
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module  # our instance attribute, set below
                except AttributeError:
                    pass
            # once the module's code ran without raising, and once per name (a look-up alone, such as
            # importlib.util.find_spec, gets a spec that is never executed: the hooks wait for the real one)
            for cb in self.hooks.pop(fullname, []):
                cb(module)
            for other in list(sys.meta_path):  # another finder of our kind was skipped: its hooks run here, once
                hooks = getattr(other, "hooks", None) if other is not self and _ours(other) else None
                for cb in hooks.pop(fullname, []) if isinstance(hooks, dict) else []:
                    cb(module)

        try:
            loader.exec_module = exec_then_call  # type: ignore[method-assign]  # this loader instance only
        except (AttributeError, TypeError):  # a loader with slots: watch no more, import as usual
            return spec
        return spec


def _ours(candidate: object) -> bool:
    return getattr(candidate, MARK, False) is True


def _find_after(name: str, path: Sequence[str] | None,
                target: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    """The spec the import would get without any finder of our kind: the first other finder that knows it."""
    for other in list(sys.meta_path):
        if _ours(other):
            continue
        find = getattr(other, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path, target)
        if isinstance(spec, importlib.machinery.ModuleSpec):
            return spec
    return None


def finder() -> Any:
    """This process's finder (the first of our kind on ``sys.meta_path``), installed first if there is none."""
    for candidate in sys.meta_path:
        if _ours(candidate) and callable(getattr(candidate, "add", None)):
            return candidate
    made = _Finder()
    sys.meta_path.insert(0, made)
    return made


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` has been imported (now, if it already is)."""
    module = sys.modules.get(name)
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
        callback(module)
        return
    finder().add(name, callback)


def uninstall() -> None:
    """Remove every finder of our kind (tests)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not _ours(f)]
