"""The one bounded reader of the hang's files in a run directory (``hang.json``, the reports a hang goes into).

Every rank's watchdog reads these while other ranks write them, and a run directory may hold anything: a link
is not followed, a FIFO is not opened for a blocking read, a file over the bound is not read, a truncated or
deeply nested ``hang.json`` is an unusable file with its reason, never an exception in the watchdog's thread.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["MAX_HANG_JSON_BYTES", "Unreadable", "read_entries", "read_json", "read_regular"]

MAX_HANG_JSON_BYTES = 32 * 2**20  # a hang.json (or cross-rank report) larger than this is not read (it is replaced)


class Unreadable(OSError):
    """A file that exists but is not read, with why (an OSError: the callers' handlers for a planted link or
    FIFO already catch it)."""


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` (None when there is none); :class:`Unreadable` naming why when
    it is a link, not a regular file, larger than ``limit`` bytes or cannot be opened."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise Unreadable(f"{path.name} cannot be read ({err.strerror or err})") from None
    if stat.S_ISLNK(st.st_mode):
        raise Unreadable(f"{path.name} is a symbolic link (not followed)")
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(f"{path.name} is not a regular file")
    if st.st_size > limit:
        raise Unreadable(f"{path.name} is larger than {limit:,} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the lstat
                raise Unreadable(f"{path.name} is not a regular file")
            data = fh.read(limit + 1)
    except Unreadable:
        raise
    except OSError as err:
        raise Unreadable(f"{path.name} cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise Unreadable(f"{path.name} is larger than {limit:,} bytes")
    return data


def read_json(path: Path, limit: int = MAX_HANG_JSON_BYTES) -> object:
    """The JSON document in ``path`` (None when there is no file); :class:`Unreadable` when it cannot be read,
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
