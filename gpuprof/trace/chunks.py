"""Cutting a trace's JSON text into chunks of whole events, in bounded memory.

The text (blocks from a :class:`~gpuprof.trace.source.Source`) is cut at
event boundaries (``}`` ``,`` ``{`` between two events of the ``traceEvents``
array), so that each chunk can be decoded on its own and dropped before the
next block is read: peak memory is one chunk plus what the caller keeps,
whatever the file size.

Why a cut is safe: a chunk is only accepted when the caller's ``try_cut``
decodes ``[`` + chunk + ``]`` as a list of events. A cut inside a string or
inside a nested object leaves an unbalanced chunk that cannot decode, so an
accepted cut is always a real event boundary; on failure the next earlier
boundary is tried, then more text is read, up to ``MAX_EVENT_BYTES`` for one
event. The loader (:mod:`gpuprof.trace.load`) and the annotator
(:mod:`gpuprof.render.annotate`) share this one loop.
"""

from __future__ import annotations

import contextlib
import re
from typing import Callable, Iterator

from gpuprof.errors import InputError
from gpuprof.inputs import MAX_EVENT_BYTES
from gpuprof.trace.source import Source

__all__ = ["BLOCK", "MARKER", "find_events", "Progress", "Text", "TryCut", "as_json_list", "candidate_cuts",
           "event_chunks", "read_head", "read_rest", "show"]

BLOCK = 1024 * 1024  # bytes of JSON text per chunk: small enough that a chunk and its decoded events stay in the CPU caches (16 MiB chunks loaded 1.4x slower)
_BOUNDARY_TRIES = 16
_WS = frozenset(b" \t\r\n")
MARKER = re.compile(rb'"traceEvents"\s*:\s*\[')
# the marker, a whole JSON string, or a bracket: enough to know the nesting depth at each marker
_TOKENS = re.compile(rb'(?P<marker>"traceEvents"\s*:\s*\[)|"(?:[^"\\]|\\.)*"|[{}\[\]]', re.S)


def find_events(text: bytes | bytearray) -> re.Match[bytes] | None:
    """The top-level ``"traceEvents": [`` of a trace object's text, or None.

    Not the first one anywhere: ``"metadata": {"traceEvents": [1, 2]}``
    before the real key is a valid trace. The scan jumps string by string
    (a bracket inside a name does not count), in C (one regex), so it costs
    about what the search for the marker did.
    """
    depth = 0
    for m in _TOKENS.finditer(text):
        if m.lastgroup == "marker":
            if depth == 1:
                return m
            depth += 1  # the marker's "[" opens a nested list
            continue
        c = m.group()[:1]
        if c in (b"{", b"["):
            depth += 1
        elif c in (b"}", b"]"):
            depth -= 1
    return None

Progress = Callable[[int, int], None]  # (bytes read so far, total bytes)
# try_cut(buf, lo, end, base): decode the events buf[lo:end] (base: where buf[lo] is in the
# file's text, for messages) and keep what the caller needs. True: accepted; False: the cut
# is not an event boundary (try an earlier one); raises InputError for bad input.
TryCut = Callable[[bytearray, int, int, int], bool]


def read_head(src: Source) -> tuple[bytes, int | None, bool]:
    """Read the start of a trace up to where its events begin.

    Returns the text read so far, the offset just after the ``[`` that opens
    the events (``"traceEvents": [`` of an object, or a top-level ``[``) and
    whether the file is a bare list of events. The offset is None for an
    object that ends with no ``traceEvents`` key (all of its text is
    returned then). Raises :class:`~gpuprof.errors.InputError` for an empty
    file, one that is not JSON text, and one with more than
    ``MAX_EVENT_BYTES`` of text before its events (the header is held
    whole, like one event). The annotator reads its input the same way.
    """
    buf = src.read(BLOCK)
    if not buf.strip():
        raise InputError(src.path, "empty file")
    start = _skip_ws(buf, 0)
    first = buf[start : start + 1]
    if first == b"[":
        return buf, start + 1, True
    if first != b"{":
        raise InputError(src.path, f"not a PyTorch profiler trace (JSON text expected, found {show(buf[start:start + 12])})")
    m = find_events(buf)
    if m is not None:
        return buf, m.end(), False
    limit = MAX_EVENT_BYTES.value()
    text = bytearray(buf)
    while m is None:
        if len(text) > limit:
            raise InputError(src.path, MAX_EVENT_BYTES.exceeded(f'no "traceEvents" array in the first {len(text):,} bytes'))
        more = src.read(max(BLOCK, len(text)))  # doubling: finding the marker costs O(header), not O(header^2)
        if not more:
            return bytes(text), None, False
        text += more
        m = find_events(text)  # from the start: the depth needs it (doubling keeps the total O(header))
    return bytes(text), m.end(), False


class Text:
    """The JSON text read so far and not yet decoded, in one reused buffer.

    ``buf[pos:end]`` is the undecoded text (the bytes after ``end`` are stale);
    ``offset`` is the position of ``buf[0]`` in the file's JSON text (for
    error messages). Before each read the undecoded tail moves to the front,
    and the file is read straight into the buffer, so a block of text is
    copied once, by the read itself. Chunks are decoded in place (see
    :func:`as_json_list`).
    """

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = bytearray(buf)
        self.pos = pos
        self.end = len(buf)
        self.offset = 0

    @property
    def pending(self) -> int:
        return self.end - self.pos

    def read_more(self, src: Source, n: int) -> int:
        """Read up to ``n`` more bytes after the pending text; returns how many were read."""
        buf = self.buf
        if self.pos > 1:
            # keep one byte before pos: as_json_list borrows it for the "["
            drop = self.pos - 1
            keep = self.end - drop
            buf[:keep] = buf[drop : self.end]
            self.offset += drop
            self.pos -= drop
            self.end = keep
        if len(buf) < self.end + n:
            buf.extend(bytes(self.end + n - len(buf)))  # grows to about one block, once
        with memoryview(buf) as view:
            got = src.read_into(view[self.end : self.end + n])
        self.end += got
        return got

    def rest(self) -> bytes:
        return bytes(self.buf[self.pos : self.end])


@contextlib.contextmanager
def as_json_list(buf: bytearray, lo: int, hi: int) -> Iterator[memoryview]:
    """The events ``buf[lo:hi]`` as one JSON list, without copying them.

    The bytes just outside the range (a ``,``, ``[`` or whitespace before the
    first event and after the last) are replaced by ``[`` and ``]`` while the
    view is in use and put back after it, so a reader sees exactly
    ``[`` + events + ``]`` (same length, same byte offsets).
    """
    saved_lo, saved_hi = buf[lo - 1], buf[hi]
    buf[lo - 1] = 0x5B  # [
    buf[hi] = 0x5D  # ]
    whole = memoryview(buf)
    view = whole[lo - 1 : hi + 1]
    try:
        yield view
    except BaseException:
        # Raised while values decoded from the view are still held (Ctrl-C or SIGTERM in the middle of ingesting a
        # chunk): releasing the view would raise BufferError and replace the caller's exception with it (a Ctrl-C
        # read as "internal error"). The views go with those values; the exception goes on as it is.
        with contextlib.suppress(BufferError):
            view.release()
            whole.release()
        raise
    else:
        view.release()
        whole.release()
    finally:
        buf[lo - 1] = saved_lo
        buf[hi] = saved_hi


def event_chunks(src: Source, text: Text, try_cut: TryCut, progress: Progress | None = None) -> Iterator[tuple[int, int, int]]:
    """Cut the pending events of ``text``, and the rest of ``src``, into chunks ``try_cut`` accepts.

    Yields ``(lo, end, nxt)`` per accepted chunk: ``text.buf[lo:end]`` holds
    whole events and ``text.buf[end:nxt]`` the separator before the next
    one; the buffer stays as it is until the caller asks for the next chunk.
    Returns at the end of the input: ``text.rest()`` is then the last events
    and whatever follows the array (at most ``MAX_EVENT_BYTES``), which no
    boundary ends and the caller decodes with the file's trailer.
    """
    max_event = MAX_EVENT_BYTES.value()
    eof = False
    while True:
        if progress is not None:
            progress(src.position, src.size)
        if not eof and text.pending < BLOCK:
            if text.read_more(src, BLOCK):
                continue
            eof = True
        if eof:
            if text.pending > max_event:
                raise InputError(src.path, too_big(text.pending))
            return
        buf, lo = text.buf, text.pos
        base = text.offset + lo
        cut = None
        for end, nxt in candidate_cuts(buf, lo, text.end):
            if try_cut(buf, lo, end, base):
                cut = end, nxt
                break
        if cut is None:
            # No boundary accepted in this much text: one event (or the text
            # after the events) is this big. Read as much again, so finding
            # its end costs O(its size) rather than O(size^2 / BLOCK), up to
            # the limit on one event.
            if text.pending > max_event:
                raise InputError(src.path, too_big(text.pending))
            if not text.read_more(src, max(BLOCK, min(text.pending, max_event + 1 - text.pending))):
                eof = True
            continue
        yield lo, cut[0], cut[1]
        text.pos = cut[1]


def candidate_cuts(pending: bytes | bytearray, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, int]]:
    """Possible event boundaries in ``pending[lo:hi]``, last first, at most ``_BOUNDARY_TRIES`` of them.

    Each is (index after the ``}`` ending an event, index of the ``{`` starting
    the next). A caller accepts the first whose prefix decodes as a list of
    events; see the module docstring for why that makes the cut safe.
    """
    if hi is None:
        hi = len(pending)
    for _ in range(_BOUNDARY_TRIES):
        b = last_boundary(pending, lo, hi)
        if b is None:
            return
        yield b
        hi = b[0] - 1


def last_boundary(buf: bytes | bytearray, lo: int, hi: int) -> tuple[int, int] | None:
    """Last ``}`` ws* ``,`` ws* ``{`` in ``buf[lo:hi]``: (index after ``}``, index of ``{``)."""
    pos = hi
    ws = _WS
    while True:
        j = buf.rfind(b"{", lo, pos)
        if j < 0:
            return None
        k = j - 1
        while k >= lo and buf[k] in ws:
            k -= 1
        if k >= lo and buf[k] == 0x2C:  # ","
            k -= 1
            while k >= lo and buf[k] in ws:
                k -= 1
            if k >= lo and buf[k] == 0x7D:  # "}"
                return k + 1, j
        pos = j


def too_big(pending: int) -> str:
    return MAX_EVENT_BYTES.exceeded(f"an event (or the text after the events) of more than {pending:,} bytes")


def read_rest(src: Source) -> bytes:
    parts: list[bytes] = []
    while True:
        more = src.read(BLOCK)
        if not more:
            return b"".join(parts)
        parts.append(more)


def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def show(b: bytes) -> str:
    return repr(b.decode("utf-8", "replace")) if b else "nothing"
