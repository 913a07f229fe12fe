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
decodes; otherwise the original error stands. Linear time and memory,
whatever the text holds (see :func:`repair_names`).
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["cut_in_name", "repair_names", "repair_note"]

_KEY = b'"name": "'
# the line before a name line in Kineto's layout: '    "ph": "X",' or '    "cat": "python_function",'
_EVENT_LINE = re.compile(rb'[ \t]*"(?:ph|cat)": "[^"\\\n]*",[ \t]*\r?')
_NAME_AT = re.compile(rb'[ \t]*"name": "')
_CONTROL = re.compile(rb"[\x00-\x1f]")
_STRING = msgspec.json.Decoder(str)
_BLANK = b" \t"
_NEAR = 64  # blanks looked at after a name line, or between a name's apparent end and a "}"


def repair_names(text: bytes | bytearray, lo: int = 0, hi: int | None = None) -> tuple[bytes, int] | None:
    """``text[lo:hi]`` with the unescaped event names re-escaped, and how many; None when there are none.

    Finds each ``"name": "`` with C searches and looks at its line and the
    line before; after each, the search goes on past its line, so every byte
    is looked at a few times at most (no regex tried at every offset, no
    line scanned once per key on it): linear in the text, whatever it holds.
    """
    hi = len(text) if hi is None else hi
    spans: list[tuple[int, int]] = []  # (start, stop) of each name to escape, between its quotes
    pos = lo
    while True:
        i = text.find(_KEY, pos, hi)
        if i < 0:
            break
        eol = text.find(b"\n", i, hi)
        eol = hi if eol < 0 else eol
        pos = eol + 1  # one key per line at most is a name line's
        start, stop = i + len(_KEY), _value_end(text, i, eol)
        if stop < 0 or not _starts_event_line(text, lo, i):
            continue
        if not _is_string(text[start - 1 : stop + 1]):  # the name with its quotes, as written
            spans.append((start, stop))  # (a well-formed name is not ours to touch)
    if not spans:
        return None
    with memoryview(text) as view:  # the text between the names is copied once, by the join
        pieces: list[bytes | memoryview] = []
        done = lo
        for start, stop in spans:
            pieces += (view[done:start], _escape(bytes(view[start:stop])))
            done = stop
        pieces.append(view[done:hi])
        fixed = b"".join(pieces)
        del pieces  # the slices of view: released before it is
    return fixed, len(spans)


def cut_in_name(buf: bytes | bytearray, lo: int, end: int) -> bool:
    """Whether the ``}`` before ``end`` (a cut of the chunker) is on a name line of Kineto's layout.

    A name such as ``f({"a": 1}, {})`` written unescaped puts a ``}, {``
    boundary inside the name line. The text up to it may decode (the name
    seems to end at its first quote), and accepting that cut would keep a
    cut-off event and start the next chunk in mid-line, beyond repair; or it
    may not, and that error is the cut's, not the file's. Kineto writes the
    ``}`` that ends an event alone on its line, so a ``}`` on a name line is
    never an event's end. Costs a look at the few bytes before the ``}`` in
    Kineto's layout, and one search back to the line's start in others.
    """
    k = end - 2
    stop = max(lo, k - _NEAR)
    while k >= stop and buf[k] in _BLANK:
        k -= 1
    if k < lo or buf[k] == 0x0A:  # "\n": the "}" alone on its line, as Kineto ends an event
        return False
    nl = buf.rfind(b"\n", lo, k)
    return nl >= 0 and _NAME_AT.match(buf, nl + 1, k) is not None and _after_event_line(buf, lo, nl)


def _starts_event_line(text: bytes | bytearray, lo: int, i: int) -> bool:
    """Whether the key at ``i`` begins its line, and the line before is an event's "ph" or "cat" line."""
    nl = text.rfind(b"\n", lo, i)
    if nl < 0 or bytes(text[nl + 1 : i]).strip(_BLANK):
        return False
    return _after_event_line(text, lo, nl)


def _after_event_line(text: bytes | bytearray, lo: int, nl: int) -> bool:
    """Whether the line that ends at ``text[nl]`` (a newline) is an event's "ph" or "cat" line."""
    prev = text.rfind(b"\n", lo, nl)
    return _EVENT_LINE.fullmatch(text, lo if prev < 0 else prev + 1, nl) is not None


def _value_end(text: bytes | bytearray, i: int, eol: int) -> int:
    """Index of the closing quote of a name line ``"name": "...",`` (key at ``i``), or -1 for another shape."""
    lo = max(i, eol - _NEAR)
    e = lo + len(bytes(text[lo:eol]).rstrip(b" \t\r"))
    if e == lo or e - i < len(_KEY) + 2 or text[e - 2 : e] != b'",':
        return -1  # (more than _NEAR blanks at the end: not Kineto's line, which has none)
    return e - 2


def repair_note(count: int) -> str:
    """The load note for ``count`` repaired names."""
    names = "event name" if count == 1 else "event names"
    return f"{count} {names} with unescaped quotes (a torch 2.13 export bug) repaired"


def _is_string(value: bytes | bytearray) -> bool:
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
