"""Writing files so that a failure (a full disk, an exception) never leaves half a file behind."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], tmp: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path``, on any error it is removed.

    ``tmp`` names the temporary file when its name matters (a writer that picks
    the format from the suffix); by default it is ``path`` + ``.tmp``.
    """
    final = Path(path)
    scratch = Path(tmp) if tmp is not None else final.with_name(final.name + ".tmp")
    try:
        yield scratch
        os.replace(scratch, final)
    except BaseException:
        with contextlib.suppress(OSError):  # the original error is the one to report
            scratch.unlink()
        raise
