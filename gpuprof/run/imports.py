"""Run code right after a module finishes importing, without importing it ourselves.

The bootstrap runs in every Python process of a ``gpuprof run`` job, most of
which never import torch (``pip``, a shell helper) or never train (torchrun's
agent). Importing torch there to hook the optimizer would cost seconds and
change what those processes do, so the bootstrap instead waits: a finder at the
front of ``sys.meta_path`` notices when a watched module is being imported and
runs the callbacks once its code has run. For any other module the finder
returns None after one dictionary look-up, so imports cost what they did.

A callback that raises is the caller's to report (it is wrapped by the
bootstrap's guard); the import itself always completes as it would without us.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Callable, Sequence

__all__ = ["when_imported", "uninstall"]

Callback = Callable[[ModuleType], None]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.hooks: dict[str, list[Callback]] = {}
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.hooks:
            return None
        busy: set[str] = self._local.__dict__.setdefault("busy", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = _find_after(self, fullname, path, target)
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

        try:
            loader.exec_module = exec_then_call  # type: ignore[method-assign]  # this loader instance only
        except (AttributeError, TypeError):  # a loader with slots: watch no more, import as usual
            return spec
        return spec


def _find_after(me: _Finder, name: str, path: Sequence[str] | None,
                target: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is me:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path, target)
        if isinstance(spec, importlib.machinery.ModuleSpec):
            return spec
    return None


_FINDER: _Finder | None = None


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` has been imported (now, if it already is)."""
    global _FINDER
    module = sys.modules.get(name)
    if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
        callback(module)
        return
    if _FINDER is None:
        _FINDER = _Finder()
        sys.meta_path.insert(0, _FINDER)
    _FINDER.hooks.setdefault(name, []).append(callback)


def uninstall() -> None:
    """Remove the finder (tests)."""
    global _FINDER
    if _FINDER is not None and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    _FINDER = None
