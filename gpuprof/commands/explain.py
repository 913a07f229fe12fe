"""``gpuprof explain CODE``'s library path: the code a word names (see :mod:`gpuprof.codes`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.errors import GpuprofError

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.codespec import CodeSpec

__all__ = ["explained", "reported_by_short"]


def explained(code: str) -> tuple[CodeSpec, str | None]:
    """The code ``gpuprof explain CODE`` explains, and a note when the word is also another code's former name.

    The command line's and the MCP server's one lookup; an unknown or ambiguous word is a GpuprofError (exit 2).
    """
    from gpuprof.codes import catalogue, lookup

    found = lookup(code)
    if not found:
        raise GpuprofError(f"unknown code {code!r} (see `gpuprof rules`)")
    if len(found) > 1:
        which = ", ".join(f"{c.code} ({reported_by_short(c.reported_by)})" for c in found)
        raise GpuprofError(f"the former name {code!r} belongs to {which}; explain one by its code")
    also = [c for c in catalogue() if code.strip().lower() in c.aliases and c.code != found[0].code]
    if not also:
        return found[0], None
    # a current name that is also another code's former name: say so
    which = ", ".join(f"{c.code} ({c.name})" for c in also)
    return found[0], f"{code.strip().lower()!r} is also the former name of {which}"


def reported_by_short(reported_by: str) -> str:
    """A code's ``reported_by`` as ``gpuprof rules`` lists it: ``analyze``, ``capture``, ``memory``."""
    return reported_by.split(" (")[0].removeprefix("gpuprof ")
