"""The reader of the hang's JSON files in a run directory (``hang.json``, the reports a hang goes into).

Every rank's watchdog reads these while other ranks write them, and a run directory may hold anything: the
bytes come from :func:`gpuprof.safefile.read_regular` (a link is not followed, a FIFO is not opened for a
blocking read, a file over the bound is not read), and a truncated or deeply nested ``hang.json`` is an
unusable file with its reason, never an exception in the watchdog's thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuprof.safefile import read_regular

__all__ = ["MAX_HANG_JSON_BYTES", "read_entries", "read_json"]

MAX_HANG_JSON_BYTES = 32 * 2**20  # a hang.json (or cross-rank report) larger than this is not read (it is replaced)


def read_json(path: Path, limit: int = MAX_HANG_JSON_BYTES) -> object:
    """The JSON document in ``path`` (None when there is no file); :class:`gpuprof.safefile.Unreadable` (an
    OSError) when it is a link, not a regular file, over ``limit`` or cannot be read,
    ``ValueError`` naming the problem when it is not valid JSON (truncated, damaged or nested too deep)."""
    data = read_regular(path, limit)
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path.name} is not valid JSON (truncated or damaged: "
                         f"{' '.join(str(err).split())[:120]})") from None


def read_entries(run_dir: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The rank entries of ``run_dir/hang.json`` and, when the file exists but cannot be used, why."""
    try:
        doc = read_json(run_dir / "hang.json")
    except (OSError, ValueError) as err:
        return [], str(err)
    if doc is None:
        return [], None
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    if not isinstance(ranks, list):
        return [], "hang.json holds no list of ranks"
    return [r for r in ranks if isinstance(r, dict)], None
