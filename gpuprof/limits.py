"""A documented limit on what an input may cost: its default and the environment variable that raises it.

The limits themselves live beside the code they bound (:mod:`gpuprof.inputs`
for traces and snapshots, :mod:`gpuprof.remote` for URL listings...); this
module only says how one is read and named in a message, and imports nothing
of gpuprof's at load time, so any module may define one (docs/limits.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Limit", "env_seconds"]


@dataclass(frozen=True)
class Limit:
    """A documented limit: its default and the environment variable that overrides it."""

    env: str
    default: int
    what: str  # for messages: "the largest single event"

    def value(self) -> int:
        """The limit in force: the environment variable when set to a size or number, else the default."""
        text = os.environ.get(self.env, "").strip()
        if not text:
            return self.default
        from gpuprof.units import parse_bytes

        try:
            v = parse_bytes(text)
        except ValueError:
            return self.default  # a typo must not lift the limit, nor stop the run
        return v if v > 0 else self.default

    def exceeded(self, got: str) -> str:
        """The end of a one-line error: what was found and how to raise the limit."""
        return f"{got}, beyond {self.what} gpuprof accepts ({self.value():,}; set {self.env} to raise it)"


def env_seconds(env: str, default: float) -> float:
    """Seconds from the environment variable ``env`` (unset or blank: ``default``); anything but a positive finite
    number is the usual one-line :class:`~gpuprof.errors.InputError` naming the variable (exit 2), not a guess."""
    import math

    from gpuprof.errors import InputError

    raw = os.environ.get(env)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(env, f"must be a positive number of seconds, not {raw!r}")
    return value
