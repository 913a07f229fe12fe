"""Re-escaping the event names that torch 2.13's trace export writes unescaped.

torch 2.13 writes an event's name into ``export_chrome_trace``'s JSON as is,
between quotes: a backslash becomes ``/``, a newline is dropped, a name with
other control or non-ASCII characters becomes ``unknown``, but a double quote
is left alone. A Python frame (``with_stack=True``) or ``record_function``
name that holds a quote therefore makes the file invalid JSON, e.g. Dynamo's
lazy imports inside a recorded window write::

    "ph": "X",
    "cat": "python_function",
    "name": "torch/profiler/_cupti_monitor.py(0): "none"",
    "pid": 6286,

The loader calls :func:`repair_names` only after a decode error (valid files
never reach it). It rewrites nothing but that shape: a ``"name": "...",``
line right after the ``"ph"`` or ``"cat"`` line of an event, in Kineto's one
key per line layout, whose value as written is not one JSON string. As the
writer escaped nothing, the text between the quotes is the name itself, and
is escaped as JSON. The caller keeps the repaired text only if it then
decodes; otherwise the original error stands. One regex pass and one copy:
linear time and memory, whatever the text holds.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["repair_names", "repair_note"]

# Kineto's layout: '    "ph": "X",' / '    "cat": "python_function",' then '    "name": "...",'.
# The name is all of its line up to the last '",' (greedy, one line: linear; re.M keeps "." off "\n").
_NAME_LINE = re.compile(
    rb'^[ \t]*"(?:ph|cat)": "[^"\\\n]*",[ \t]*\r?\n[ \t]*"name": "(.*)",[ \t]*\r?$',
    re.M,
)
_CONTROL = re.compile(rb"[\x00-\x1f]")
_STRING = msgspec.json.Decoder(str)


def repair_names(text: bytes | bytearray | memoryview) -> tuple[bytes, int] | None:
    """``text`` with the unescaped event names re-escaped, and how many; None when there are none."""
    pieces: list[bytes] = []
    done = 0
    count = 0
    data = bytes(text)
    for m in _NAME_LINE.finditer(data):
        lo, hi = m.span(1)
        value = data[lo - 1 : hi + 1]  # the name with its quotes, as written
        if _is_string(value):
            continue  # a well-formed name: not ours to touch
        pieces += (data[done:lo], _escape(data[lo:hi]))
        done = hi
        count += 1
    if not count:
        return None
    pieces.append(data[done:])
    return b"".join(pieces), count


def repair_note(count: int) -> str:
    """The load note for ``count`` repaired names."""
    names = "event name" if count == 1 else "event names"
    return f"{count} {names} with unescaped quotes (a torch 2.13 export bug) repaired"


def _is_string(value: bytes) -> bool:
    try:
        _STRING.decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def _escape(raw: bytes) -> bytes:
    out = raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    if _CONTROL.search(out):
        out = _CONTROL.sub(lambda m: b"\\u%04x" % m.group()[0], out)
    return out
