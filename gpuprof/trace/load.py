"""Load PyTorch profiler traces fast and in bounded memory.

A trace file is read as a stream of blocks (plain ``.json`` or gzip, detected
from the bytes, not the name) and cut into chunks at event boundaries
(``}`` ``,`` ``{`` between two events of the ``traceEvents`` array). Each chunk
is decoded by msgspec straight into the typed structs of
:mod:`gpuprof.trace.raw` and then normalised into :class:`~gpuprof.trace.model.Event`
records; the JSON text of a chunk is dropped before the next one is read. So
peak memory is one chunk plus the compact events, whatever the file size.

Why a cut is safe: a chunk is only accepted when ``[`` + chunk + ``]`` decodes
as a list of events. A cut inside a string or inside a nested object leaves an
unbalanced chunk that cannot decode, so an accepted cut is always a real event
boundary; on failure the loader tries an earlier boundary and, in the end,
decodes the rest in one piece (where a real syntax error is then reported).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import msgspec

from gpuprof.distributed.collectives import comm_args, is_comm_event_name
from gpuprof.errors import InputError
from gpuprof.inputs import GZIP_RATIO_FLOOR, MAX_EVENT_BYTES, MAX_GZIP_RATIO, STDIN, Opened, is_stdin, open_input
from gpuprof.report import DeviceInfo
from gpuprof.trace import raw as R
from gpuprof.trace.model import DTYPE_DOUBLE, DTYPE_FLOAT, DTYPE_HALF, Event, Trace
from gpuprof.trace.loadhelper import Fallback, Helper
from gpuprof.trace.pairing import pair_slices
from gpuprof.trace.vocab import CATEGORY_KIND, Kind, parse_copy_name

__all__ = ["load_trace", "find_traces", "default_jobs", "TRACE_SUFFIXES", "Progress"]

TRACE_SUFFIXES = (".json", ".json.gz")
BLOCK = 1024 * 1024  # bytes of JSON text per chunk: small enough that a chunk and its decoded events stay in the CPU caches (16 MiB chunks loaded 1.4x slower)
PARALLEL_MIN_BYTES = 64 * 1024 * 1024  # JSON text below which a helper process costs more than it saves
WAIT_FOR_HELPER = False  # tests: wait until the helper is up, so that small inputs use it too
_BOUNDARY_TRIES = 16

Progress = Callable[[int, int], None]  # (bytes read so far, total bytes)

_WS = frozenset(b" \t\r\n")
_MARKER = re.compile(rb'"traceEvents"\s*:\s*\[')

_EVENTS_DECODER = msgspec.json.Decoder(list[R.RawEvent], strict=False)
_TRACE_DECODER = msgspec.json.Decoder(R.RawTrace, strict=False)
_ANY_DECODER = msgspec.json.Decoder()

# plain ints for the hot loop
_CAT_KIND: dict[str, int] = {cat: int(kind) for cat, kind in CATEGORY_KIND.items()}

_DTYPE_FLAGS: dict[str, int] = {
    "float": DTYPE_FLOAT,
    "c10::Half": DTYPE_HALF,
    "c10::BFloat16": DTYPE_HALF,
    "Half": DTYPE_HALF,
    "BFloat16": DTYPE_HALF,
    "c10::Float8_e4m3fn": DTYPE_HALF,
    "c10::Float8_e5m2": DTYPE_HALF,
    "double": DTYPE_DOUBLE,
}


# --------------------------------------------------------------------------- files


def find_traces(path: Union[str, os.PathLike[str]]) -> list[Path]:
    """The trace files named by ``path``: the file itself, or every
    ``*.json``/``*.json.gz`` under a directory (the ``tensorboard_trace_handler``
    layout ``<logdir>/<run>/<worker>[.<span>].pt.trace.json[.gz]``), sorted."""
    if is_stdin(path):
        return [Path(STDIN)]  # standard input: read as a stream (see gpuprof.inputs)
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if p.is_dir():
        found = sorted(
            f
            for f in p.rglob("*")
            if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and not f.name.startswith(".")
        )
        # report.json files written by gpuprof itself are not traces
        found = [f for f in found if not f.name.startswith("report.") and not f.name.endswith((".gpuprof.json", ".gpuprof.json.gz"))]
        if not found:
            raise InputError(p, "directory holds no trace files (*.json or *.json.gz)")
        return found
    return [p]


class _Source:
    """Blocks of JSON text from a plain or gzip file or pipe, with byte progress.

    The input is read front to back, once, never seeked (see
    :mod:`gpuprof.inputs`), so a pipe or standard input streams like a file.
    Reading refuses a gzip stream that decompresses more than
    ``MAX_GZIP_RATIO`` times the compressed bytes read so far (beyond
    ``GZIP_RATIO_FLOOR`` of text): a few MB of gzip must not become GBs of
    text to wade through.
    """

    def __init__(self, path: Path, opened: Opened | None = None) -> None:
        self.path = path
        if opened is None:
            opened = open_input(path, peek=2)
        self.raw = opened.stream
        self.regular = opened.regular
        self.size = opened.size if opened.size is not None else 0
        self.gzipped = opened.head[:2] == b"\x1f\x8b"
        self.estimated_text_bytes = self._estimate_text_bytes(path)
        self.stream: Any = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gzipped else self.raw
        self.text_bytes = 0
        self._max_ratio = MAX_GZIP_RATIO.value()
        self._check_ratio_at = GZIP_RATIO_FLOOR if self.gzipped else -1

    def read(self, n: int) -> bytes:
        with self._errors():
            data = self.stream.read(n)
        self.text_bytes += len(data)
        if 0 <= self._check_ratio_at <= self.text_bytes:
            self._check_ratio()
        return data

    def read_into(self, view: memoryview) -> int:
        """Read into ``view`` (straight from the file or the decompressor); returns how many bytes."""
        with self._errors():
            got = self.stream.readinto(view) or 0
        self.text_bytes += got
        if 0 <= self._check_ratio_at <= self.text_bytes:
            self._check_ratio()
        return got

    def _check_ratio(self) -> None:
        # Checked once per ~1 MiB of text, not per read: cheap at any block size.
        self._check_ratio_at = self.text_bytes + BLOCK
        if self.text_bytes > self._max_ratio * max(self.raw.consumed, 1):
            ratio = self.text_bytes // max(self.raw.consumed, 1)
            raise InputError(
                self.path,
                "gzip bomb? " + MAX_GZIP_RATIO.exceeded(
                    f"{self.raw.consumed:,} bytes of gzip decompress to over {self.text_bytes:,} bytes ({ratio}x)"),
            )

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (gzip.BadGzipFile, zlib.error) as err:
            raise InputError(self.path, f"corrupt gzip data ({err})") from None
        except EOFError:
            raise InputError(self.path, "truncated gzip file (ends before the end-of-stream marker)") from None
        except OSError as err:
            raise InputError(self.path, f"read error: {err.strerror or err}") from None

    def _estimate_text_bytes(self, path: Path) -> int:
        """Size of the JSON text: the file size, or for gzip the size its trailer records (mod 4 GiB).

        0 for a pipe (unknown: the loader then reads in one process). The
        trailer is read through a second handle, so the stream is never seeked.
        """
        if not self.regular:
            return 0
        if not self.gzipped or self.size < 4:
            return self.size
        try:
            with open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                isize = int.from_bytes(f.read(4), "little")
        except OSError:
            return self.size
        return max(isize, self.size)  # a multi-GB text wraps around: the file size is a floor

    @property
    def position(self) -> int:
        """Bytes of the input read so far (compressed bytes for gzip)."""
        return self.raw.consumed

    def close(self) -> None:
        if self.stream is not self.raw:
            self.stream.close()
        self.raw.close()


# --------------------------------------------------------------------------- loading


def load_trace(
    path: Union[str, os.PathLike[str]], progress: Progress | None = None, jobs: int | None = None, opened: Opened | None = None
) -> Trace:
    """Load one trace file into a :class:`Trace` (events sorted by time).

    ``jobs``: processes that decode the file (default: ``GPUPROF_JOBS`` or the
    CPUs this process may use, at most 2). With 2, a big file is decoded
    by this process and one helper process together (see :mod:`gpuprof.trace.loadhelper`).

    Raises :class:`~gpuprof.errors.InputError` with a one-line reason for
    anything that is not a readable PyTorch profiler trace.
    """
    p = Path(path)
    jobs = default_jobs() if jobs is None else jobs
    if opened is not None:
        return _load(p, progress, 1, opened)  # an input already being read (a pipe after sniffing)
    if jobs > 1 and not _is_regular(p):
        # A pipe can be read only once, and the parallel path may need to read
        # the input again (Fallback): stream it in one process.
        jobs = 1
    if jobs > 1:
        try:
            return _load(p, progress, jobs)
        except Fallback:
            # The helper saw something unexpected (a bad cut, bad data) or died.
            # Read the file again alone: that path finds the exact cut or error.
            pass
    return _load(p, progress, 1)


def _load(p: Path, progress: Progress | None, jobs: int, opened: Opened | None = None) -> Trace:
    src = _Source(p, opened)
    builder = _Builder(str(p))
    builder.trace.file_bytes = src.size
    try:
        _read_all(src, builder, progress, jobs)
    finally:
        src.close()
    trace = builder.finish()
    trace.json_bytes = src.text_bytes
    if trace.num_events == 0:
        raise InputError(p, "trace has no events (traceEvents is empty)")
    return trace


def _is_regular(p: Path) -> bool:
    if is_stdin(p):
        return False
    try:
        return p.is_file()  # follows links: /dev/stdin redirected from a file is one
    except OSError:
        return False


def default_jobs() -> int:
    """Processes to load with: ``GPUPROF_JOBS`` if set, else the usable CPUs, at most 2."""
    env = os.environ.get("GPUPROF_JOBS", "").strip()
    if env:
        try:
            return max(1, min(int(env), 2))
        except ValueError:
            return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 2))


def _read_head(src: _Source) -> tuple[bytes, int | None, bool]:
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
        raise InputError(src.path, f"not a PyTorch profiler trace (JSON text expected, found {_show(buf[start:start + 12])})")
    m = _MARKER.search(buf)
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
        # search only the new text (and a marker's length before it)
        from_ = max(0, len(text) - 256)
        text += more
        m = _MARKER.search(text, from_)
    return bytes(text), m.end(), False


def _read_all(src: _Source, builder: "_Builder", progress: Progress | None, jobs: int = 1) -> None:
    buf, events_at, list_format = _read_head(src)
    if events_at is None:
        # Small or odd file: decode it whole; the decoder says what is wrong.
        buf += _read_rest(src)
        _decode_whole(src.path, buf, builder, list_format=False)
        return

    max_event = MAX_EVENT_BYTES.value()
    head = buf[:events_at]  # "{...,"traceEvents": [" or "["
    text = _Text(buf, events_at)
    first_chunk = True
    eof = False
    helper: Helper | None = None
    if jobs > 1 and src.estimated_text_bytes >= PARALLEL_MIN_BYTES:
        # started now, it is ready (~0.1 s) by the time the first chunk is decoded here
        helper = Helper.start(wait=WAIT_FOR_HELPER)  # None where no helper can run: then read on alone
    try:
        while True:
            if progress is not None:
                progress(src.position, src.size)
            if not eof and text.pending < BLOCK:
                if text.read_more(src, BLOCK):
                    continue
                eof = True
            if eof:
                if text.pending > max_event:
                    raise InputError(src.path, _too_big(text.pending))
                rest = text.rest()
                if helper is not None:
                    _finish_with_helper(src.path, rest, builder, helper, list_format, text.offset + text.pos)
                else:
                    _decode_last(src.path, head if first_chunk else None, rest, builder, list_format, text.offset + text.pos)
                break
            if helper is not None and not first_chunk:  # the first chunk is decoded here, with the header
                cut = _dispatch_chunk(text, builder, helper, src.estimated_text_bytes)
            else:
                cut = _decode_prefix(src.path, text, builder, list_format)
            if cut is None:
                # No boundary accepted in this much text: one event (or the text
                # after the events) is this big. Read as much again, so finding
                # its end costs O(its size) rather than O(size^2 / BLOCK), up to
                # the limit on one event.
                if text.pending > max_event:
                    raise InputError(src.path, _too_big(text.pending))
                if text.read_more(src, max(BLOCK, min(text.pending, max_event + 1 - text.pending))):
                    continue
                eof = True
                continue
            if first_chunk:
                builder.header(src.path, head, list_format)
                first_chunk = False
            text.pos = cut
    finally:
        if helper is not None:
            helper.close()
    if progress is not None:
        progress(src.size, src.size)


def _too_big(pending: int) -> str:
    return MAX_EVENT_BYTES.exceeded(f"an event (or the text after the events) of more than {pending:,} bytes")


_TOO_DEEP = "JSON nested too deeply (a trace event is a few levels deep; this text nests thousands)"


class _Text:
    """The JSON text read so far and not yet decoded, in one reused buffer.

    ``buf[pos:end]`` is the undecoded text (the bytes after ``end`` are stale);
    ``offset`` is the position of ``buf[0]`` in the file's JSON text (for
    error messages). Before each read the undecoded tail moves to the front,
    and the file is read straight into the buffer, so a block of text is
    copied once, by the read itself. Chunks are decoded in place (see
    :func:`_decode_range`).
    """

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = bytearray(buf)
        self.pos = pos
        self.end = len(buf)
        self.offset = 0

    @property
    def pending(self) -> int:
        return self.end - self.pos

    def read_more(self, src: _Source, n: int) -> int:
        """Read up to ``n`` more bytes after the pending text; returns how many were read."""
        buf = self.buf
        if self.pos > 1:
            # keep one byte before pos: _decode_range borrows it for the "["
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
    try:
        with memoryview(buf) as whole, whole[lo - 1 : hi + 1] as view:
            yield view
    finally:
        buf[lo - 1] = saved_lo
        buf[hi] = saved_hi


def _decode_range(buf: bytearray, lo: int, hi: int) -> object:
    """Decode the events ``buf[lo:hi]`` in place (see :func:`as_json_list`)."""
    with as_json_list(buf, lo, hi) as view:
        return _EVENTS_DECODER.decode(view)


def _dispatch_chunk(text: _Text, builder: "_Builder", helper: "Helper", total: int) -> int | None:
    """Hand the pending events up to their last boundary to the helper, or decode them here.

    Returns where the next event starts (None: no boundary in the pending
    text). Anything unexpected raises :class:`Fallback`: the sequential reader
    then tries earlier cuts or names the error exactly. ``total``: the
    expected size of the JSON text, to keep the helper's queue short near the
    end, where this process would otherwise wait for it with nothing to do.
    """
    buf, lo = text.buf, text.pos
    cut = _last_boundary(buf, lo, text.end)
    if cut is None:
        return None
    end, nxt = cut
    chunks_left = (total - (text.offset + end)) / max(end - lo, 1)
    if helper.ready(chunks_left):
        with as_json_list(buf, lo, end) as chunk:
            helper.submit(chunk)
    else:
        try:
            events = _decode_range(buf, lo, end)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            raise Fallback from None
        helper.add_local(builder, events)  # type: ignore[arg-type]
    helper.collect(builder)
    return nxt


def _finish_with_helper(path: Path, rest: bytes, builder: "_Builder", helper: "Helper", list_format: bool, base: int) -> None:
    """Decode the final text here while the helper finishes its chunks, then append both in order."""
    part = builder.part()
    try:
        _decode_last(path, None, rest, part, list_format, base)
    except InputError:
        part = None  # decoded again below, after the earlier events, so the message counts them
    helper.finish(builder)
    if part is not None:
        builder.absorb(part)
    else:
        _decode_last(path, None, rest, builder, list_format, base)


def _read_rest(src: _Source) -> bytes:
    parts = []
    while True:
        more = src.read(BLOCK)
        if not more:
            return b"".join(parts)
        parts.append(more)


def _decode_prefix(path: Path, text: _Text, builder: "_Builder", list_format: bool) -> int | None:
    """Decode the longest prefix of the pending text that ends at an event boundary.

    Returns the index in ``text.buf`` where the next event starts, or None when
    no boundary in the pending text decodes (then the caller reads more)."""
    buf, lo = text.buf, text.pos
    base = text.offset + lo  # position of the first pending byte in the file's JSON text
    for end, nxt in candidate_cuts(buf, lo, text.end):
        try:
            events = _decode_range(buf, lo, end)
        except msgspec.ValidationError as err:  # (a subclass of DecodeError: caught first)
            # A wrongly typed value is an error in the file itself, not in the
            # cut: the text before a cut parses the same way as in the whole
            # file, and a bad cut shows up as a syntax error (DecodeError) at
            # its end. Reporting it now, rather than trying earlier cuts and
            # reading on, keeps bad input from costing time and memory
            # quadratic in the file size.
            msg = str(err) if list_format else str(err).replace("`$[", "`$.traceEvents[")
            chunk = b"[" + bytes(buf[lo:end]) + b"]"
            problem = _explain_validation(path, chunk, msgspec.ValidationError(msg), list_format, builder.events_seen)
            raise InputError(path, problem) from None
        except msgspec.DecodeError as err:
            if _is_syntax_error_before(err, end - lo + 1):
                # malformed JSON before the cut: no earlier or later cut can fix it
                raise InputError(path, _explain_decode(err, base - 1)) from None
            continue  # a cut inside a string or nested object: try an earlier one
        except UnicodeDecodeError as err:  # bytes of a string are never changed by a cut
            raise InputError(path, _explain_unicode(err)) from None
        except RecursionError:  # a prefix nests as deep as the whole file
            raise InputError(path, _TOO_DEEP) from None
        builder.ingest(events)  # type: ignore[arg-type]
        return nxt
    return None


def candidate_cuts(pending: bytes | bytearray, lo: int = 0, hi: int | None = None) -> Iterator[tuple[int, int]]:
    """Possible event boundaries in ``pending[lo:hi]``, last first, at most ``_BOUNDARY_TRIES`` of them.

    Each is (index after the ``}`` ending an event, index of the ``{`` starting
    the next). A caller accepts the first whose prefix decodes as a list of
    events; see the module docstring for why that makes the cut safe.
    """
    if hi is None:
        hi = len(pending)
    for _ in range(_BOUNDARY_TRIES):
        b = _last_boundary(pending, lo, hi)
        if b is None:
            return
        yield b
        hi = b[0] - 1


def _last_boundary(buf: bytes | bytearray, lo: int, hi: int) -> tuple[int, int] | None:
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


def _decode_last(
    path: Path, head: bytes | None, pending: bytes, builder: "_Builder", list_format: bool, base: int = 0
) -> None:
    """Decode the final text: the last events and whatever follows the array."""
    if head is not None:  # the whole file was one chunk
        _decode_whole(path, head + pending, builder, list_format)
        return
    prefix = b"[" if list_format else b'{"traceEvents":['
    _decode_whole(path, prefix + pending, builder, list_format, builder.events_seen, base - len(prefix))


def _decode_whole(
    path: Path, text: bytes, builder: "_Builder", list_format: bool, event_offset: int = 0, byte_offset: int = 0
) -> None:
    try:
        if list_format:
            events = _EVENTS_DECODER.decode(text)
            builder.ingest(events)
            return
        top = _TRACE_DECODER.decode(text)
    except msgspec.ValidationError as err:
        raise InputError(path, _explain_validation(path, text, err, list_format, event_offset)) from None
    except msgspec.DecodeError as err:
        raise InputError(path, _explain_decode(err, byte_offset)) from None
    except UnicodeDecodeError as err:
        raise InputError(path, _explain_unicode(err)) from None
    except RecursionError:
        raise InputError(path, _TOO_DEEP) from None
    if top.traceEvents is None:
        raise InputError(path, 'not a PyTorch profiler trace (no "traceEvents" array)')
    builder.metadata(top)
    builder.ingest(top.traceEvents)


_BYTE_RE = re.compile(r"\(byte (\d+)\)")


def _explain_decode(err: Exception, byte_offset: int = 0) -> str:
    msg = str(err)
    if "truncated" in msg:
        return "truncated JSON (the file ends in the middle of the trace)"
    # positions are in the text given to the decoder: make them file positions
    msg = _BYTE_RE.sub(lambda m: f"(byte {int(m.group(1)) + byte_offset})", msg)
    return f"not valid JSON ({msg})"


def _explain_unicode(err: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 text in a JSON string ({err.reason}: byte 0x{err.object[err.start]:02x})"


def _is_syntax_error_before(err: Exception, last: int) -> bool:
    """True when a DecodeError of ``[`` + chunk + ``]`` is a real syntax error.

    A cut at a wrong place shows up only at the end of the text: as
    truncation (inside a string or nested value), as an error at the final
    ``]`` (byte ``last``), or as trailing characters (a cut past the end of
    the event array). Anything earlier is malformed JSON in the file."""
    msg = str(err)
    if "truncated" in msg or "trailing characters" in msg:
        return False
    m = _BYTE_RE.search(msg)
    return m is not None and int(m.group(1)) < last


def _explain_validation(path: Path, text: bytes, err: Exception, list_format: bool, event_offset: int) -> str:
    msg = str(err)
    if list_format and msg.startswith("Expected `object`") and "$[" in msg:
        return "not a PyTorch profiler trace (a JSON list, but not of trace events)"
    if msg.startswith("Expected `object`") and "`$`" in msg:
        try:
            kind = type(_ANY_DECODER.decode(text)).__name__
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            kind = "value"
        return f"not a PyTorch profiler trace (top-level JSON {kind}, expected an object or list)"

    def shift(m: re.Match[bytes] | re.Match[str]) -> str:
        return f"{m.group(1)}[{int(m.group(2)) + event_offset}]"

    msg = re.sub(r"(traceEvents|\$)\[(\d+)\]", shift, msg)
    return f"unexpected value in the trace: {msg}"


def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _show(b: bytes) -> str:
    return repr(b.decode("utf-8", "replace")) if b else "nothing"


# --------------------------------------------------------------------------- normalising


def _as_int(x: object) -> int:
    if type(x) is int:
        return x  # type: ignore[return-value]
    if x is None:
        return -1
    try:
        return int(x)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return -1


class _Builder:
    """Accumulates normalised events into a Trace."""

    def __init__(self, path: str, names: dict[str, str] | None = None, stacks: dict[str, str] | None = None) -> None:
        self.trace = Trace(path=path)
        self.events_seen = 0
        self._names: dict[str, str] = {} if names is None else names
        self._stacks: dict[str, str] = {} if stacks is None else stacks
        self._comm_names: dict[str, bool] = {}
        self._device_props: list[R.RawDeviceProps] = []
        self._meta_seen = False
        # B/E events in file order: paired in finish(), once every chunk is in,
        # so a pair split across chunks (or across processes) still pairs
        self._slices: list[R.RawEvent] = []
        self._no_dur = 0  # X events without dur, kept as zero-length
        self._pairs = 0  # B/E pairs made into complete events

    # -- partial results (see gpuprof.trace.loadhelper)
    def part(self) -> "_Builder":
        """An empty builder for a later chunk, sharing this one's string tables."""
        return _Builder(self.trace.path, self._names, self._stacks)

    def payload(self) -> tuple:
        """What :meth:`merge` needs of this builder's events (picklable)."""
        t = self.trace
        return (self.events_seen, [v for v in t.lists().values()], t.process_labels, t.thread_names,
                self._slices, self._no_dur, t.comm_events)

    def absorb(self, part: "_Builder") -> None:
        """Append a later chunk's builder: its events and the metadata found after them."""
        self.merge(part.payload())
        if part._device_props and not self._device_props:
            self._device_props = part._device_props
        t, p = self.trace, part.trace
        if t.rank is None:
            t.rank = p.rank
        if t.world_size is None:
            t.world_size = p.world_size
        t.backend = t.backend or p.backend
        if t.base_time_ns is None:
            t.base_time_ns = p.base_time_ns
        t.with_stack = t.with_stack or p.with_stack
        t.profile_memory = t.profile_memory or p.profile_memory

    def merge(self, payload: tuple) -> None:
        """Append the events of a later chunk (a :meth:`payload`), as if ingested here."""
        seen, lists, labels, names, slices, no_dur, comm = payload
        self.trace.comm_events.extend(comm)
        self.events_seen += seen
        for mine, theirs in zip(self.trace.lists().values(), lists):
            mine.extend(theirs)
        self.trace.process_labels.update(labels)
        self.trace.thread_names.update(names)
        self._slices.extend(slices)
        self._no_dur += no_dur

    # -- header / metadata
    def header(self, path: Path, head: bytes, list_format: bool) -> None:
        if list_format:
            return
        text = head[: _MARKER.search(head).start()].rstrip()  # type: ignore[union-attr]
        if text.endswith(b","):
            text = text[:-1]
        try:
            top = _TRACE_DECODER.decode(text + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as err:
            raise InputError(path, f"malformed trace header ({err})") from None
        except RecursionError:
            raise InputError(path, _TOO_DEEP) from None
        self.metadata(top)

    def metadata(self, top: R.RawTrace) -> None:
        props = top.deviceProperties or top.computeProperties
        if props and not self._device_props:
            self._device_props = list(props)
        di = top.distributedInfo
        if di is not None:
            r, w = _as_int(di.rank), _as_int(di.world_size)
            if r >= 0 and self.trace.rank is None:
                self.trace.rank = r
            if w > 0 and self.trace.world_size is None:
                self.trace.world_size = w
            if isinstance(di.backend, str) and not self.trace.backend:
                self.trace.backend = di.backend
        if top.baseTimeNanoseconds is not None and self.trace.base_time_ns is None:
            self.trace.base_time_ns = int(top.baseTimeNanoseconds)
        if top.with_stack:
            self.trace.with_stack = True
        if top.profile_memory:
            self.trace.profile_memory = True

    # -- events
    def ingest(self, events: list[R.RawEvent]) -> None:  # noqa: C901 - one hot loop, kept flat for speed
        t = self.trace
        self.events_seen += len(events)
        names = self._names
        cat_kind = _CAT_KIND
        out = {
            int(Kind.CPU_OP): t.ops,
            int(Kind.USER_ANNOTATION): t.annotations,
            int(Kind.PYTHON_FUNCTION): t.python,
            int(Kind.RUNTIME): t.runtime,
            int(Kind.KERNEL): t.kernels,
            int(Kind.MEMCPY): t.memcpys,
            int(Kind.MEMSET): t.memsets,
            int(Kind.GPU_SYNC): t.gpu_syncs,
            int(Kind.GPU_ANNOTATION): t.gpu_annotations,
            int(Kind.MEMORY): t.memory,
        }
        K_OP = int(Kind.CPU_OP)
        K_PY = int(Kind.PYTHON_FUNCTION)
        K_KERNEL = int(Kind.KERNEL)
        K_MEMCPY = int(Kind.MEMCPY)
        K_MEMSET = int(Kind.MEMSET)
        K_SYNC = int(Kind.GPU_SYNC)
        K_GPU_ANN = int(Kind.GPU_ANNOTATION)
        K_MEM = int(Kind.MEMORY)
        dtype_flags = _DTYPE_FLAGS
        stacks = self._stacks
        comm_names = self._comm_names
        comm_out = t.comm_events
        for ev in events:
            ph = ev.ph
            if ph == "X":
                kind = cat_kind.get(ev.cat)  # type: ignore[arg-type]
                if kind is None:
                    continue
            elif ph == "i" or ph == "I":
                if ev.name != "[memory]":
                    continue
                kind = K_MEM
            elif ph == "M":
                self._meta(ev)
                continue
            elif ph == "B" or ph == "E":
                self._slices.append(ev)  # paired in finish()
                continue
            else:
                continue
            ts = ev.ts
            if ts is None or ts != ts:  # missing or NaN: cannot be placed on a timeline
                continue
            dur = ev.dur
            if dur is None or not dur > 0:
                if dur is None and ph == "X":
                    self._no_dur += 1
                dur = 0.0
            name = ev.name
            if type(name) is not str:
                name = "" if name is None else str(name)
            name = names.setdefault(name, name)  # one string object per distinct name
            pid = ev.pid
            tid = ev.tid
            if pid is None:
                pid = -1
            if tid is None:
                tid = -1
            a = ev.args
            if a is None:
                out[kind].append(Event(kind, name, ts, dur, pid, tid))
                continue
            is_comm = comm_names.get(name)
            if is_comm is None:
                is_comm = comm_names[name] = is_comm_event_name(name)
            if is_comm:
                comm_out.append(Event(kind, name, ts, dur, pid, tid, extra=comm_args(a)))
            x = a.external_id
            if x is None:
                x = a.external_id_lc
            ext = x if type(x) is int else _as_int(x)
            c = a.correlation
            corr = c if type(c) is int else _as_int(c)
            if kind == K_OP:
                flags = 0
                it = a.input_type
                if it:
                    for s in it:
                        if type(s) is str:
                            f = dtype_flags.get(s)
                            if f:
                                flags |= f
                cs = a.call_stack
                extra: object = flags
                if cs:
                    extra = (flags, stacks.setdefault(cs, cs))
                out[kind].append(Event(kind, name, ts, dur, pid, tid, ext, corr, -1, -1, 0, extra))
            elif kind == K_KERNEL or kind == K_MEMCPY or kind == K_MEMSET or kind == K_SYNC or kind == K_GPU_ANN:
                d = a.device
                device = d if type(d) is int else _as_int(d)
                if device < 0:
                    device = pid if type(pid) is int else 0
                s = a.stream
                stream = s if type(s) is int else _as_int(s)
                if stream < 0:
                    stream = tid if type(tid) is int else _as_int(tid)
                nb = a.bytes
                nbytes = int(nb) if nb is not None and nb == nb and nb > 0 else 0
                extra = parse_copy_name(name) if kind == K_MEMCPY else None
                out[kind].append(Event(kind, name, ts, dur, pid, tid, ext, corr, device, stream, nbytes, extra))
            elif kind == K_MEM:
                nb = a.mem_bytes
                nbytes = int(nb) if nb is not None and nb == nb else 0
                ta, tr = a.total_allocated, a.total_reserved
                extra = (int(ta), int(tr if tr is not None else -1)) if ta is not None else None
                out[kind].append(
                    Event(kind, name, ts, 0.0, pid, tid, ext, corr, _as_int(a.device_id), _as_int(a.device_type), nbytes, extra)
                )
            elif kind == K_PY:
                out[kind].append(
                    Event(kind, name, ts, dur, pid, tid, ext, corr, -1, -1, 0, (a.python_id, a.python_parent_id))
                )
            else:
                out[kind].append(Event(kind, name, ts, dur, pid, tid, ext, corr))

    def _meta(self, ev: R.RawEvent) -> None:
        a = ev.args
        if a is None:
            return
        if ev.name == "process_labels" and isinstance(a.labels, str):
            self.trace.process_labels[ev.pid if ev.pid is not None else -1] = a.labels
        elif ev.name == "thread_name" and isinstance(a.name, str):
            self.trace.thread_names[(ev.pid if ev.pid is not None else -1, ev.tid if ev.tid is not None else -1)] = a.name

    # -- finish
    def finish(self) -> Trace:
        t = self.trace
        if self._slices:
            self._pair_slices()
        if self._no_dur:
            n = self._no_dur
            t.load_notes.append(f"{n} complete event{'' if n == 1 else 's'} (ph X) without dur: kept with zero duration")
        t.num_events = self.events_seen
        if t.num_events and not t.kept_events:
            raise InputError(t.path, self._nothing_usable())
        t.devices = [_device_info(p, i) for i, p in enumerate(self._device_props)]
        if any(d.vendor != "amd" and not d.name for d in t.devices) and _uses_hip(t):
            # ROCm traces may leave the device name empty; the runtime's names tell the vendor.
            t.devices = [
                DeviceInfo(id=d.id, name=d.name, compute_capability=None, total_memory=d.total_memory, num_sms=d.num_sms, vendor="amd")
                if not d.name
                else d
                for d in t.devices
            ]
        t.sort()
        return t


    def _pair_slices(self) -> None:
        """Turn the B/E events into complete events (see gpuprof.trace.pairing) and normalise those."""
        paired = pair_slices(self._slices)
        self._slices = []
        seen = self.events_seen
        self.ingest(paired.complete)
        self.events_seen = seen  # each pair was counted as its two events already
        self.trace.load_notes += paired.notes()
        self._pairs = len(paired.complete)

    def _nothing_usable(self) -> str:
        """Why a trace with events has none gpuprof can analyse (one line)."""
        pairs = self._pairs
        found = f"; {pairs} B/E pairs were found, none of a known category" if pairs else ""
        return (
            f"no events gpuprof can analyse among the {self.events_seen} in the file: no complete events "
            f"(ph X, or B/E pairs) of a PyTorch profiler category (cpu_op, kernel, cuda_runtime, ...) "
            f"and no [memory] events{found}"
        )


def _uses_hip(t: Trace) -> bool:
    return any(r.name.startswith("hip") for r in t.runtime[:2000])


def _device_info(p: R.RawDeviceProps, index: int) -> DeviceInfo:
    dev_id = _as_int(p.id)
    if dev_id < 0:
        dev_id = index
    major = _as_int(p.computeMajor if p.computeMajor is not None else p.major)
    minor = _as_int(p.computeMinor if p.computeMinor is not None else p.minor)
    name = p.name or ""
    low = name.lower()
    if "nvidia" in low or "tesla" in low or "quadro" in low or "geforce" in low:
        vendor = "nvidia"
    elif "amd" in low or "instinct" in low or "radeon" in low:
        vendor = "amd"
    else:
        vendor = ""
    cc = (major, minor) if major >= 0 and minor >= 0 else None
    if vendor == "amd":
        cc = None  # ROCm reports gfx numbers here, not CUDA compute capabilities
    elif cc is not None and not vendor:
        vendor = "nvidia"
    sms = p.numSms if p.numSms is not None else p.multiProcessorCount
    total = int(p.totalGlobalMem) if p.totalGlobalMem else None
    return DeviceInfo(id=dev_id, name=name, compute_capability=cc, total_memory=total, num_sms=sms, vendor=vendor)


if __name__ == "__main__":  # pragma: no cover - manual timing aid
    import time

    for arg in sys.argv[1:]:
        t0 = time.perf_counter()
        tr = load_trace(arg)
        print(arg, tr.num_events, tr.kept_events, f"{time.perf_counter() - t0:.2f}s")
