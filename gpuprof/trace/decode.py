"""Decoding trace JSON into the raw structs of :mod:`gpuprof.trace.raw`, with one-line errors.

msgspec decodes straight into the typed structs (never into dicts), a chunk
at a time (see :mod:`gpuprof.trace.chunks`), and hands the events to an
:class:`EventSink` (the normaliser, :class:`gpuprof.trace.normalise.Builder`).
Decoder errors become :class:`~gpuprof.errors.InputError` messages that
count bytes and events from the start of the file, not of the chunk.
"""

from __future__ import annotations

import codecs
import re
from typing import Literal, Protocol

import msgspec

from gpuprof.errors import InputError
from gpuprof.remote import TraceFile
from gpuprof.trace import raw as R
from gpuprof.trace.chunks import TryCut, as_json_list, find_events
from gpuprof.trace.namerepair import cut_in_name, repair_names

__all__ = ["EVENTS_DECODER", "TRACE_DECODER", "TOO_DEEP", "EventSink", "chunk_decoder", "decode_header", "decode_last", "decode_whole",
           "syntax_error_before"]

EVENTS_DECODER = msgspec.json.Decoder(list[R.RawEvent], strict=False)
TRACE_DECODER = msgspec.json.Decoder(R.RawTrace, strict=False)
_ANY_DECODER = msgspec.json.Decoder()

TOO_DEEP = "JSON nested too deeply (a trace event is a few levels deep; this text nests thousands)"



class EventSink(Protocol):
    """Where decoded events go (the normaliser)."""

    events_seen: int
    names_repaired: int  # event names re-escaped (see gpuprof.trace.namerepair)

    def ingest(self, events: list[R.RawEvent]) -> None: ...

    def metadata(self, top: R.RawTrace) -> None: ...


def chunk_decoder(path: TraceFile, sink: EventSink, list_format: bool) -> TryCut:
    """A ``try_cut`` for :func:`gpuprof.trace.chunks.event_chunks` that decodes a chunk into ``sink``."""

    def try_cut(buf: bytearray, lo: int, end: int, base: int) -> bool:
        with as_json_list(buf, lo, end) as view:
            decoded = _decode_chunk(view, buf, lo, end, base)
            if decoded is None or cut_in_name(buf, lo, end):
                return False  # a cut inside a string, a nested object or an unescaped name: try an earlier one
            events, sink.names_repaired = decoded[0], sink.names_repaired + decoded[1]
            del decoded
            try:
                # inside the view: undecoded values (msgspec.Raw, "Input Dims") point into it,
                # so the events are ingested, then dropped, before the view is released
                sink.ingest(events)
            finally:
                del events
        return True

    def _decode_chunk(view: memoryview, buf: bytearray, lo: int, end: int, base: int) -> tuple[list[R.RawEvent], int] | None:
        """The chunk's events and how many names were repaired in them; None for a cut in the wrong place."""
        try:
            return EVENTS_DECODER.decode(view), 0
        except msgspec.ValidationError as err:  # (a subclass of DecodeError: caught first)
            # A wrongly typed value is an error in the file itself, not in the
            # cut: the text before a cut parses the same way as in the whole
            # file, and a bad cut shows up as a syntax error (DecodeError) at
            # its end. Reporting it now, rather than trying earlier cuts and
            # reading on, keeps bad input from costing time and memory
            # quadratic in the file size.
            msg = str(err) if list_format else str(err).replace("`$[", "`$.traceEvents[")
            chunk = b"[" + bytes(buf[lo:end]) + b"]"
            problem = _explain_validation(path, chunk, msgspec.ValidationError(msg), list_format, sink.events_seen)
            raise InputError(path, problem) from None
        except msgspec.DecodeError as err:
            bad_text = _invalid_utf8(err, view)
            if bad_text is not None:  # bytes of a string are never changed by a cut
                raise InputError(path, bad_text) from None
            if not syntax_error_before(err, end - lo + 1):
                return None
            # malformed JSON before the cut: no earlier or later cut can fix it, unless it
            # is torch 2.13's unescaped name (only now, so valid files never pay for the repair)
            fixed = _decode_repaired(buf, True, chunk=(lo - 1, end + 1))  # the view: [ + chunk + ]
            if fixed == "cut":
                return None  # repaired, the text ends at a wrong cut: try an earlier one
            if fixed is None or not isinstance(fixed[0], list):
                if cut_in_name(buf, lo, end):
                    return None  # the error is the cut's: it split a name written unescaped
                raise InputError(path, _explain_decode(err, base - 1)) from None
            return fixed[0], fixed[1]
        except UnicodeDecodeError as err:  # bytes of a string are never changed by a cut
            raise InputError(path, _explain_unicode(err)) from None
        except RecursionError:  # a prefix nests as deep as the whole file
            raise InputError(path, TOO_DEEP) from None

    return try_cut


def decode_header(path: TraceFile, head: bytes, list_format: bool) -> R.RawTrace | None:
    """The top-level keys before ``"traceEvents"`` (device properties, rank, ...); None for a bare list."""
    if list_format:
        return None
    text = head[: find_events(head).start()].rstrip()  # type: ignore[union-attr]
    if text.endswith(b","):
        text = text[:-1]
    try:
        return TRACE_DECODER.decode(text + b"}")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as err:
        raise InputError(path, f"malformed trace header ({err})") from None
    except RecursionError:
        raise InputError(path, TOO_DEEP) from None


def decode_last(
    path: TraceFile, head: bytes | None, pending: bytes, sink: EventSink, list_format: bool, base: int = 0
) -> None:
    """Decode the final text: the last events and whatever follows the array."""
    if head is not None:  # the whole file was one chunk
        decode_whole(path, head + pending, sink, list_format)
        return
    prefix = b"[" if list_format else b'{"traceEvents":['
    decode_whole(path, prefix + pending, sink, list_format, sink.events_seen, base - len(prefix))


def decode_whole(
    path: TraceFile, text: bytes, sink: EventSink, list_format: bool, event_offset: int = 0, byte_offset: int = 0
) -> None:
    try:
        if list_format:
            events = EVENTS_DECODER.decode(text)
            sink.ingest(events)
            return
        top = TRACE_DECODER.decode(text)
    except msgspec.ValidationError as err:
        raise InputError(path, _explain_validation(path, text, err, list_format, event_offset)) from None
    except msgspec.DecodeError as err:
        bad_text = _invalid_utf8(err, text)
        if bad_text is not None:
            raise InputError(path, bad_text) from None
        fixed = _decode_repaired(text, list_format)
        if fixed is None or fixed == "cut":
            raise InputError(path, _explain_decode(err, byte_offset)) from None
        sink.names_repaired += fixed[1]
        if isinstance(fixed[0], list):
            sink.ingest(fixed[0])
            return
        top = fixed[0]
    except UnicodeDecodeError as err:
        raise InputError(path, _explain_unicode(err)) from None
    except RecursionError:
        raise InputError(path, TOO_DEEP) from None
    if top.traceEvents is None:
        raise InputError(path, 'not a PyTorch profiler trace (no "traceEvents" array)')
    sink.metadata(top)
    sink.ingest(top.traceEvents)


_BYTE_RE = re.compile(r"\(byte (\d+)\)")


def _decode_repaired(
    text: bytes | bytearray, list_format: bool, chunk: tuple[int, int] | None = None
) -> tuple[list[R.RawEvent] | R.RawTrace, int] | Literal["cut"] | None:
    """Decode ``text`` (or the ``chunk`` slice of it) with torch 2.13's unescaped names repaired.

    Returns what was decoded and how many names were repaired; None when
    nothing was repaired or the repaired text does not decode either (the
    original error stands). For a ``chunk`` (``[`` + events + ``]``), "cut"
    when the repaired text fails only at its end: a cut in the wrong place,
    which an earlier cut may fix. See :mod:`gpuprof.trace.namerepair`.
    """
    repaired = repair_names(text) if chunk is None else repair_names(text, *chunk)
    if repaired is None:
        return None
    fixed, count = repaired
    try:
        if list_format:
            return EVENTS_DECODER.decode(fixed), count
        return TRACE_DECODER.decode(fixed), count
    except msgspec.ValidationError:  # (a DecodeError: caught first) the original error is the one to report
        return None
    except msgspec.DecodeError as err:
        return "cut" if chunk is not None and not syntax_error_before(err, len(fixed) - 1) else None
    except (UnicodeDecodeError, RecursionError):  # later in the text than the original error
        return None


def _explain_decode(err: Exception, byte_offset: int = 0) -> str:
    msg = str(err)
    if "truncated" in msg:
        return "truncated JSON (the file ends in the middle of the trace)"
    # positions are in the text given to the decoder: make them file positions
    msg = _BYTE_RE.sub(lambda m: f"(byte {int(m.group(1)) + byte_offset})", msg)
    return f"not valid JSON ({msg})"


def _explain_unicode(err: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 text in a JSON string ({err.reason}: byte 0x{err.object[err.start]:02x})"


def _invalid_utf8(err: Exception, text: bytes | bytearray | memoryview) -> str | None:
    """The UTF-8 explanation for a DecodeError that is one (msgspec 0.23 raises DecodeError("Invalid UTF-8 encoded
    string") where earlier versions raised UnicodeDecodeError); None for any other error. The bad byte is found
    by decoding the text 1 MiB at a time (an error path: bounded memory, never a str of the whole text)."""
    if "Invalid UTF-8" not in str(err):
        return None
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(text)
    step = 1 << 20
    try:
        for at in range(0, len(view), step):
            decoder.decode(view[at : at + step], final=at + step >= len(view))
    except UnicodeDecodeError as bad:
        return _explain_unicode(bad)
    return "not valid UTF-8 text in a JSON string"


def syntax_error_before(err: Exception, last: int) -> bool:
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


def _explain_validation(path: TraceFile, text: bytes, err: Exception, list_format: bool, event_offset: int) -> str:
    msg = str(err)
    if list_format and msg.startswith("Expected `object`") and "$[" in msg:
        return "not a PyTorch profiler trace (a JSON list, but not of trace events)"
    if msg.startswith("Expected `object`") and "`$`" in msg:
        try:
            kind = type(_ANY_DECODER.decode(text)).__name__
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            kind = "value"
        return f"not a PyTorch profiler trace (top-level JSON {kind}, expected an object or list)"

    def shift(m: re.Match[str]) -> str:
        return f"{m.group(1)}[{int(m.group(2)) + event_offset}]"

    msg = re.sub(r"(traceEvents|\$)\[(\d+)\]", shift, msg)
    return f"unexpected value in the trace: {msg}"
