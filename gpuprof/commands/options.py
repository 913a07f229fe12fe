"""The commands' ``--select``/``--ignore`` and ``--option`` values, checked (a bad one: a UsageError, exit 2)."""

from __future__ import annotations

from typing import Any, Sequence

from gpuprof.errors import UsageError
from gpuprof.runner import Selection

__all__ = ["split_codes", "parse_option_settings", "selection"]


def split_codes(values: Sequence[str]) -> list[str]:
    """``--select GP101,GP2 --select host-sync`` -> ``["GP101", "GP2", "GP203"]``.

    Names and former names become their codes (:func:`gpuprof.codes.resolve_selectors`);
    an unknown word is a usage error (exit 2) rather than a filter that silently matches nothing.
    """
    from gpuprof.codes import resolve_selectors

    out: list[str] = []
    for v in values:
        out.extend(p.strip() for p in v.split(",") if p.strip())
    try:
        return resolve_selectors(out)
    except ValueError as err:
        raise UsageError(f"--select/--ignore: {err}") from None


def parse_option_settings(items: Sequence[str], origins: tuple[str, ...], where: str) -> dict[str, dict[str, Any]]:
    """``--option`` values checked against the registry; a bad one is a usage error naming it (exit 2)."""
    from gpuprof.codes import parse_options

    try:
        return parse_options(tuple(items), origins=origins, where=where)
    except ValueError as err:
        raise UsageError(str(err), param_hint="--option") from None


def selection(select: Sequence[str], ignore: Sequence[str]) -> Selection:
    """``--select``/``--ignore`` as one :class:`gpuprof.runner.Selection`."""
    return Selection.of(split_codes(select), split_codes(ignore))
