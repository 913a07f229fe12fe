"""Plain values for people: durations, byte sizes, shares, counts, bandwidths.

One definition of each format, used by the rules (finding messages), the
report renderers and ``gpuprof memory``, so the same number reads the same
everywhere. This module depends on nothing else in gpuprof: rules use it
without depending on a renderer.

Conventions: durations are microseconds (as in the trace files); shares are
fractions (0.25 means 25 %); byte sizes use binary units (KiB = 1024 bytes);
bandwidths are decimal GB/s, as the CUDA tools report them. A missing value
(``None``, NaN or infinity) formats as ``n/a``.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "MISSING",
    "fmt_us",
    "fmt_ms",
    "fmt_pct",
    "fmt_share_of",
    "fmt_bytes",
    "fmt_count",
    "fmt_gbps",
    "parse_bytes",
]

MISSING = "n/a"
"""What every formatter here prints for a missing value."""


def _nonfinite(x: float) -> bool:
    return isinstance(x, float) and not math.isfinite(x)


def fmt_us(us: float | None) -> str:
    """A duration given in µs, in the unit that keeps 3 significant digits: ``850 µs``, ``12.3 ms``, ``1.50 s``."""
    if us is None or _nonfinite(us):
        return MISSING
    a = abs(us)
    if a < 1000:
        return f"{us:.0f} µs" if a >= 10 or a == 0 else f"{us:.1f} µs"
    if a < 1_000_000:
        ms = us / 1000
        return f"{ms:.1f} ms" if abs(ms) >= 10 else f"{ms:.2f} ms"
    return f"{us / 1_000_000:.2f} s"


def fmt_ms(us: float | None) -> str:
    """A duration given in µs as a bare number of milliseconds with 2 decimals (``12.35``), for ms columns."""
    if us is None or _nonfinite(us):
        return MISSING
    return f"{us / 1000:.2f}"


def fmt_pct(share: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.4567`` -> ``45.7%``."""
    if share is None or _nonfinite(share):
        return MISSING
    return f"{share * 100:.{digits}f}%"


def fmt_share_of(part_us: float | None, whole_us: float | None) -> str:
    """``part`` as a percentage of ``whole`` (``n/a`` when whole is zero or unknown)."""
    if part_us is None or whole_us is None or _nonfinite(part_us) or _nonfinite(whole_us) or not whole_us:
        return MISSING
    return fmt_pct(part_us / whole_us)


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n: int | float | None, digits: int = 1) -> str:
    """A byte count in binary units: ``1536`` -> ``1.5 KiB`` (``1.50 KiB`` with ``digits=2``).

    Whole bytes below 1 KiB print without decimals (``400 B``). The memory
    reports use two decimals because allocator blocks of neighbouring sizes
    would otherwise read the same.
    """
    if n is None or _nonfinite(n):
        return MISSING
    v = float(n)
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit in _BYTE_UNITS:
        if v < 1024 or unit == _BYTE_UNITS[-1]:
            if unit == "B":
                return f"{sign}{v:.0f} B"
            return f"{sign}{v:.{digits}f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_count(n: int | float | None) -> str:
    """An integer count with thousands separators: ``12345`` -> ``12,345``."""
    if n is None or _nonfinite(n):
        return MISSING
    return f"{int(n):,}"


def fmt_gbps(gbps: float | None) -> str:
    """A bandwidth in GB/s (decimal gigabytes, as CUDA tools report it): ``12.3 GB/s``."""
    if gbps is None or _nonfinite(gbps):
        return MISSING
    return f"{gbps:.1f} GB/s"


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.I)
_MULT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """``"80GiB"``, ``"512 MB"``, ``"1048576"`` -> bytes (binary multiples either way).

    Raises ``ValueError`` with a one-line explanation for anything else.
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 80GiB, 512MiB or a number of bytes)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _MULT[unit])
