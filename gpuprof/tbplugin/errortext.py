"""Error lines as the TensorBoard tab's browser gets them: no control characters, no paths of the server.

The tab may be opened by people who are not the server's users (a shared
TensorBoard): an error naming ``/home/alice/runs/x/rank0.json`` tells them the
server's layout, and a file name holding an escape sequence or a newline
should not reach a page or a log as one. So every error line the plugin
sends is made :func:`client_error`: a path inside the log directory becomes
its path relative to it (what the tab shows everywhere else), any other
absolute path (a temporary file, the Python installation, in an exception's
text) becomes ``.../`` and its last part, and control characters, DEL, bidi
controls and line separators become visible escapes
(:func:`gpuprof.render.safe.visible`), all on one line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from gpuprof.render.safe import one_line

__all__ = ["client_error"]

# an absolute POSIX path: a "/" that starts the text or follows a space, quote, bracket or "=", then no space
_ABSOLUTE = re.compile(r"""(?:(?<=^)|(?<=[\s'"(\[=]))/[^\s'"()\[\],;]*""")
MAX_ERROR = 500  # characters of one error line


def client_error(text: object, logdir: Path | str | None) -> str:
    """``text`` as one line fit for the browser (module docstring)."""
    s = str(text)
    for root in _roots(logdir):
        s = s.replace(root + os.sep, "").replace(root, ".")
    s = _ABSOLUTE.sub(_hide, s)
    return one_line(s, MAX_ERROR)


def _roots(logdir: Path | str | None) -> list[str]:
    if logdir is None:
        return []
    given = os.fspath(logdir).rstrip(os.sep) or os.sep
    out = [given]
    try:
        real = os.path.realpath(given)
    except OSError:
        real = given
    if real != given:
        out.append(real)
    # the longest first: a resolved path may contain the given one
    return sorted((r for r in out if r != os.sep), key=len, reverse=True)


def _hide(m: re.Match[str]) -> str:
    path = m.group(0).rstrip(".:")
    tail = m.group(0)[len(path):]
    name = Path(path).name
    return (".../" + name if name else "...") + tail
