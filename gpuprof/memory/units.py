"""Byte sizes for people: ``fmt_bytes`` and ``parse_bytes``."""

from __future__ import annotations

import re

__all__ = ["fmt_bytes", "parse_bytes", "SIZE_CLASSES", "size_class"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def fmt_bytes(n: int | float | None) -> str:
    """``1536`` -> ``"1.50 KiB"``; None -> ``"?"``."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    v = float(abs(n))
    for unit in _UNITS:
        if v < 1024 or unit == _UNITS[-1]:
            return f"{sign}{int(v)} B" if unit == "B" else f"{sign}{v:.2f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.I)
_MULT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """``"80GiB"``, ``"512 MB"``, ``"1048576"`` -> bytes (binary multiples either way)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 80GiB, 512MiB or a number of bytes)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _MULT[unit])


# Size classes that match the caching allocator's own boundaries: blocks of at
# most 1 MiB come from the small pool (2 MiB segments), requests under 10 MiB
# share 20 MiB segments, larger ones get segments of their own.
SIZE_CLASSES: tuple[tuple[str, int], ...] = (
    ("<= 1 MiB (small pool)", 1 << 20),
    ("1-10 MiB", 10 << 20),
    ("10-100 MiB", 100 << 20),
    ("100 MiB-1 GiB", 1 << 30),
    ("> 1 GiB", 1 << 62),
)


def size_class(n: int) -> int:
    """Index into :data:`SIZE_CLASSES` for a block of ``n`` bytes."""
    for i, (_, hi) in enumerate(SIZE_CLASSES):
        if n <= hi:
            return i
    return len(SIZE_CLASSES) - 1
