"""The width text is drawn at, without the terminal renderer (rich): ``gpuprof run``'s end-of-run card reads it.

:func:`gpuprof.render.terminal.terminal_width` is this, with the tty question asked of stdout when not given.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["DEFAULT_WIDTH", "MIN_WIDTH", "width_for"]

DEFAULT_WIDTH = 120  # columns when the output is not a terminal and COLUMNS is unset (files, pipes, tests)
MIN_WIDTH = 40  # narrower terminals are drawn as if this wide


def width_for(is_tty: bool) -> int:
    """The terminal's width when the output is one (``shutil.get_terminal_size``, which lets ``COLUMNS`` override
    it, as usual), else ``COLUMNS`` when it is a positive integer, else :data:`DEFAULT_WIDTH`; never below
    :data:`MIN_WIDTH`."""
    if is_tty:
        cols = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    else:
        cols = _env_columns() or DEFAULT_WIDTH
    return max(cols, MIN_WIDTH)


def _env_columns() -> int | None:
    raw = os.environ.get("COLUMNS", "").strip()
    try:
        cols = int(raw)
    except ValueError:
        return None
    return cols if cols > 0 else None
