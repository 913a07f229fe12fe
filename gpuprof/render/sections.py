"""Registry of renderers for report sections other than trace summaries.

A section is any object with a ``kind`` string and ``to_dict()`` (see
``gpuprof.report.Section``). The module that defines a section kind registers
how to draw it, so the generic renderers need not know every kind.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["register_section", "terminal_renderer", "markdown_renderer", "section_dict"]

# terminal: fn(console: rich.console.Console, section) -> None
# markdown: fn(section) -> str
_TERMINAL: dict[str, Callable[[Any, Any], None]] = {}
_MARKDOWN: dict[str, Callable[[Any], str]] = {}


def register_section(kind: str, terminal: Callable[[Any, Any], None] | None = None,
                     markdown: Callable[[Any], str] | None = None) -> None:
    if terminal is not None:
        _TERMINAL[kind] = terminal
    if markdown is not None:
        _MARKDOWN[kind] = markdown


def section_dict(section: Any) -> dict[str, Any]:
    """A section's JSON form: its ``to_dict()``, or the section itself when it was read back as a mapping."""
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def terminal_renderer(kind: str) -> Callable[[Any, Any], None] | None:
    _load_known()
    return _TERMINAL.get(kind)


def markdown_renderer(kind: str) -> Callable[[Any], str] | None:
    _load_known()
    return _MARKDOWN.get(kind)


def _load_known() -> None:
    # Section modules register on import; import the ones gpuprof ships (by name: they sit on a higher layer).
    import importlib

    for mod in ("gpuprof.memory.render", "gpuprof.distributed.render"):
        importlib.import_module(mod)
