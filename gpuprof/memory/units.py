"""Byte sizes in the memory reports, and the allocator's size classes.

The formats themselves live in :mod:`gpuprof.units`; the memory reports print
byte sizes with two decimals, because allocator blocks of neighbouring sizes
(20 MiB segments, 2 MiB tails) would otherwise read the same.
"""

from __future__ import annotations

from gpuprof import units

__all__ = ["fmt_bytes", "SIZE_CLASSES", "size_class"]


def fmt_bytes(n: int | float | None) -> str:
    """A byte count with two decimals: ``1536`` -> ``1.50 KiB`` (see :func:`gpuprof.units.fmt_bytes`)."""
    return units.fmt_bytes(n, digits=2)


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
