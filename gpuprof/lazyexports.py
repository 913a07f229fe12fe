"""Module-level ``__getattr__``/``__dir__`` for a package that exports names from its modules on first use.

``gpuprof analyze`` reads the runtime checks' and the memory rules' code lists for the code registry;
importing ``gpuprof.capture`` or ``gpuprof.memory`` for that must not load their whole machinery (the
sessions and checks, the snapshot replay). Each package lists ``name -> module`` and gets its two hooks here.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, MutableMapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: dict[str, str], namespace: MutableMapping[str, Any], exported: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps each exported name to its module."""
    names = tuple(exported)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value  # once: later reads are plain attribute reads
        return value

    def __dir__() -> list[str]:
        # the public API (what completion and help() should offer) and the module's own dunders; not the
        # helpers and submodules that happen to be bound in the namespace
        return sorted({*names, *(n for n in namespace if n.startswith("__") and n.endswith("__"))})

    return __getattr__, __dir__
