"""Write a trace back with gpuprof's findings on their own timeline track.

The annotated trace opens in Perfetto or chrome://tracing like the original,
plus a process "gpuprof findings" (sorted first) with one thread per finding
code; each event a finding points at (``Evidence.events``) becomes a slice
there, named by the code and message, with the cost and advice in its args.
A finding that points at no event becomes one global instant marker at the
start of the trace.

The input can be several GB, so it is never parsed as a whole: the bytes are
copied through in blocks (gzip decompressed and recompressed on the way), cut
only at event boundaries that the decoder accepts (the loader's chunking
loop, :func:`gpuprof.trace.chunks.event_chunks`), and the new events are spliced in just before the
``]`` that closes ``traceEvents``. That ``]`` is found in the last block by
trying the candidates from the end: the right one is the ``]`` where the text
before it decodes as a list of events and the text after it as the rest of the
top-level object (keys such as ``deviceProperties`` may follow the array).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Union

import msgspec

from gpuprof.atomic import atomic_path
from gpuprof.errors import InputError
from gpuprof.findings import EventRef, Finding, sort_findings
from gpuprof.remote import TraceFile
from gpuprof.render import format as F
from gpuprof.trace.chunks import (  # the loader's chunking loop, shared on purpose
    Text,
    as_json_list,
    event_chunks,
    read_head,
)
from gpuprof.trace.decode import syntax_error_before
from gpuprof.trace.namerepair import cut_in_name, repair_names
from gpuprof.trace.source import Source

__all__ = ["annotate_trace", "annotation_events", "FINDINGS_PID", "FINDINGS_PROCESS_NAME"]

FINDINGS_PROCESS_NAME = "gpuprof findings"
# Above Linux's largest pid_max (2**22), so it never collides with a real process id.
FINDINGS_PID = 2_000_000_000
_SORT_FIRST = -1_000_000  # process_sort_index: viewers sort ascending, so this puts the track on top
_NAME_CHARS = 60  # message characters in a slice name
_GZIP_LEVEL = 6  # zlib's default: 3-4x faster than gzip's 9 for a few % more bytes

PathLike = Union[str, "os.PathLike[str]"]


class _Stamp(msgspec.Struct, gc=False):
    """The two fields of an event the annotator reads (to date the no-event markers)."""

    ph: Any = None
    ts: Any = None


_STAMPS = msgspec.json.Decoder(list[_Stamp])
_ANY = msgspec.json.Decoder()
_ENCODER = msgspec.json.Encoder()  # writes NaN/infinity as null: valid JSON for any number in a finding


def annotate_trace(src_path: PathLike, findings: Iterable[Finding], out_path: PathLike) -> int:
    """Copy the trace ``src_path`` to ``out_path`` with ``findings`` marked on their own track.

    ``findings`` should be the findings of this trace (their event references
    are timestamps in this file). ``out_path`` is gzip-compressed when its
    name ends with ``.gz``; it may be ``src_path`` itself (the file is written
    aside and moved into place). Returns the number of events added.

    Raises :class:`InputError` naming ``src_path`` when it is not a readable
    trace and naming ``out_path`` when it cannot be written.
    """
    src = Path(src_path)
    out = Path(out_path)
    findings = list(findings)
    source = Source(src)
    try:
        # a private temporary file beside ``out`` (see gpuprof.atomic), moved into place when complete
        with atomic_path(out, streams=True) as tmp:  # --annotate names it: /dev/stdout and pipes too
            sink = _Sink(out, tmp)
            try:
                added = _copy_with_findings(source, sink, findings)
                sink.close()
            except BaseException:
                sink.abort()
                raise
    except OSError as err:  # creating the temporary file or moving it into place; the sink names ``out`` itself
        raise InputError(out, f"cannot write the annotated trace: {err.strerror or err}") from None
    finally:
        source.close()
    return added


# --------------------------------------------------------------------------- output


class _Sink:
    """The output file (plain or gzip), written aside and moved into place; errors name ``out``."""

    def __init__(self, out: Path, tmp: Path) -> None:
        self.out = out
        try:
            self.raw: BinaryIO = open(tmp, "wb")
        except OSError as err:
            raise InputError(out, f"cannot write the annotated trace: {err.strerror or err}") from None
        self.stream: BinaryIO = self.raw
        if out.name.endswith(".gz"):
            inner = out.name[:-3]
            self.stream = gzip.GzipFile(filename=inner, mode="wb", fileobj=self.raw, compresslevel=_GZIP_LEVEL)  # type: ignore[assignment]

    def write(self, data: bytes) -> None:
        try:
            self.stream.write(data)
        except OSError as err:
            raise InputError(self.out, f"cannot write the annotated trace: {err.strerror or err}") from None

    def close(self) -> None:
        try:
            if self.stream is not self.raw:
                self.stream.close()
            self.raw.close()
        except OSError as err:
            raise InputError(self.out, f"cannot write the annotated trace: {err.strerror or err}") from None

    def abort(self) -> None:
        for f in (self.stream, self.raw):
            try:
                f.close()
            except OSError:
                pass  # already failing; the caller's error is the one to report


# --------------------------------------------------------------------------- streaming copy


class _Clock:
    """The earliest complete-event timestamp seen, to place markers at the start of the trace."""

    def __init__(self) -> None:
        self.first_ts: float | None = None
        self.any_ts: float | None = None

    def see(self, stamps: list[_Stamp]) -> None:
        first, any_ts = self.first_ts, self.any_ts
        for s in stamps:
            ts = s.ts
            if type(ts) is not float and type(ts) is not int:
                continue
            if ts != ts:
                continue
            if any_ts is None or ts < any_ts:
                any_ts = ts
            if s.ph == "X" and (first is None or ts < first):
                first = ts
        self.first_ts, self.any_ts = first, any_ts

    @property
    def start(self) -> float:
        if self.first_ts is not None:
            return float(self.first_ts)
        return float(self.any_ts) if self.any_ts is not None else 0.0


def _copy_with_findings(src: Source, sink: _Sink, findings: list[Finding]) -> int:
    buf, events_at, list_format = read_head(src)
    if events_at is None:
        raise InputError(src.path, 'not a PyTorch profiler trace (no "traceEvents" array)')

    sink.write(buf[:events_at])
    text = Text(buf, events_at)
    clock = _Clock()
    events_before = False  # whether event text before the final text was written

    repaired: list[bytes] = []  # the accepted chunk's text with its names repaired, if it needed that

    def try_cut(b: bytearray, lo: int, end: int, base: int) -> bool:
        repaired.clear()
        with as_json_list(b, lo, end) as view:
            try:
                stamps = _STAMPS.decode(view)
            except msgspec.ValidationError:
                return False
            except msgspec.DecodeError as err:
                # torch 2.13's unescaped names (see gpuprof.trace.namerepair): the loader repaired
                # them, so the annotated trace carries them repaired, as valid JSON
                fixed = _repaired_stamps(b, lo - 1, end + 1) if syntax_error_before(err, end - lo + 1) else None
                if fixed is None:
                    return False  # a "}, {" inside a string or nested object: try an earlier one
                text, stamps = fixed
                repaired.append(text[1:-1])
        if cut_in_name(b, lo, end):
            return False  # a "}, {" inside a name written unescaped
        clock.see(stamps)
        return True

    for lo, end, nxt in event_chunks(src, text, try_cut):
        sink.write(repaired[0] if repaired else bytes(text.buf[lo:end]))
        sink.write(bytes(text.buf[end:nxt]))
        events_before = True

    pending = text.rest()
    close, body = _find_array_end(src.path, pending, list_format, clock)
    body = body.rstrip()
    sink.write(body)
    new = annotation_events(findings, clock.start)
    if new:
        if body or events_before:
            sink.write(b",\n")
        sink.write(b",\n".join(_ENCODER.encode(e) for e in new))
        sink.write(b"\n")
    sink.write(pending[close:])
    return len(new)


def _repaired_stamps(text: bytes | bytearray, lo: int, hi: int) -> tuple[bytes, list[_Stamp]] | None:
    """``text[lo:hi]`` (``[`` + events + ``]``) with unescaped names repaired, and its stamps; None if that does not decode."""
    fixed = repair_names(text, lo, hi)
    if fixed is None:
        return None
    try:
        return fixed[0], _STAMPS.decode(fixed[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _find_array_end(path: TraceFile, tail: bytes, list_format: bool, clock: _Clock) -> tuple[int, bytes]:
    """Index in ``tail`` (which starts inside ``traceEvents``, at an event) of the array's closing ``]``,
    and the events before it (with unescaped names repaired, if they need it)."""
    pos = len(tail)
    while True:
        c = tail.rfind(b"]", 0, pos)
        if c < 0:
            raise InputError(path, "truncated or malformed trace (cannot find the end of the traceEvents array)")
        pos = c
        if not _is_trailer(tail[c + 1 :], list_format):
            continue
        text = b"[" + tail[:c] + b"]"
        try:
            stamps = _STAMPS.decode(text)
        except msgspec.ValidationError:
            continue
        except msgspec.DecodeError as err:
            fixed = _repaired_stamps(text, 0, len(text)) if syntax_error_before(err, len(text) - 1) else None
            if fixed is None:
                continue  # the "]" of an array that follows traceEvents (e.g. deviceProperties)
            clock.see(fixed[1])
            return c, fixed[0][1:-1]
        clock.see(stamps)
        return c, tail[:c]


def _is_trailer(text: bytes, list_format: bool) -> bool:
    """Whether ``text`` can follow the ``]`` of traceEvents up to the end of the file."""
    rest = text.strip()
    if list_format:
        return rest == b""
    if rest == b"}":
        return True
    if not rest.startswith(b","):
        return False
    try:
        return isinstance(_ANY.decode(b"{" + rest[1:]), dict)
    except msgspec.DecodeError:
        return False


# --------------------------------------------------------------------------- the new events


def findings_of_trace(findings: Iterable[Finding], trace: str, traces: Iterable[str]) -> list[Finding]:
    """The findings to draw on ``trace``'s track: its own, and the report's findings of no one trace.

    A report's runtime findings (a capture's GP6xx), cross-rank findings
    (GP7xx) and the like belong to the run, not to one of its ``traces``: every
    annotated trace shows them, as markers at its start (their event
    references, if any, are on other clocks and are left out), so the track
    never says "no problems" about a run the report finds problems in.
    """
    own = set(traces)
    out = []
    for f in findings:
        if f.source == trace:
            out.append(f)
        elif f.source not in own:
            out.append(dataclasses.replace(
                f, evidence=tuple(dataclasses.replace(e, events=()) for e in f.evidence)))
    return out


def annotation_events(findings: Iterable[Finding], start_ts: float = 0.0) -> list[dict[str, Any]]:
    """The trace events that show ``findings``: metadata, one slice per event reference, markers.

    Slices of one code that overlap go to extra lanes ("GP203 ... (2)") because
    trace viewers draw a thread's slices as a properly nested stack and drop
    or misplace partial overlaps. ``start_ts`` dates the markers of findings
    without event references (the trace's first timestamp).
    """
    ordered = sort_findings(findings)
    pid = FINDINGS_PID
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": FINDINGS_PROCESS_NAME}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": _SORT_FIRST}},
    ]
    if not ordered:
        out.append(_instant("gpuprof: no findings", start_ts, pid, 0, {"message": "gpuprof found no problems in this trace"}))
        return out

    by_code: dict[str, list[Finding]] = {}
    for f in ordered:  # most expensive first: the thread order follows the cost order
        by_code.setdefault(f.code, []).append(f)

    next_tid = 1
    for code, group in by_code.items():
        label = f"{code} {group[0].name}"
        slices: list[tuple[EventRef, Finding]] = []
        for f in group:
            for e in f.evidence:
                slices.extend((ref, f) for ref in e.events)
        lanes = _assign_lanes([ref for ref, _ in slices])
        n_lanes = max(lanes, default=0) + 1
        tids = list(range(next_tid, next_tid + n_lanes))
        next_tid += n_lanes
        for lane, tid in enumerate(tids):
            name = label if lane == 0 else f"{label} ({lane + 1})"
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        for (ref, f), lane in zip(slices, lanes):
            args = _finding_args(f)
            args["trace_event"] = ref.name
            out.append(
                {"ph": "X", "cat": "gpuprof", "name": _slice_name(f), "pid": pid, "tid": tids[lane], "ts": ref.ts,
                 "dur": max(ref.dur, 0.0), "args": args}
            )
        for f in group:
            if not any(e.events for e in f.evidence):
                out.append(_instant(_slice_name(f), start_ts, pid, tids[0], _finding_args(f)))
    return out


def _assign_lanes(refs: list[EventRef]) -> list[int]:
    """Greedy interval colouring: each ref goes to the first lane where it nests in or follows what is there."""
    lanes: list[list[tuple[float, float]]] = []  # per lane: stack of open (ts, end) ranges
    result = [0] * len(refs)
    for i in sorted(range(len(refs)), key=lambda i: (refs[i].ts, -refs[i].dur)):
        ts, end = refs[i].ts, refs[i].ts + max(refs[i].dur, 0.0)
        for n, stack in enumerate(lanes):
            while stack and stack[-1][1] <= ts:
                stack.pop()  # ranges that ended before this one starts
            if not stack or end <= stack[-1][1]:  # empty lane, or properly nested in the open range
                stack.append((ts, end))
                result[i] = n
                break
        else:
            lanes.append([(ts, end)])
            result[i] = len(lanes) - 1
    return result


def _slice_name(f: Finding) -> str:
    return f"{f.code} {F.short_message(F.linked_message(f), _NAME_CHARS)}"


def _finding_args(f: Finding) -> dict[str, Any]:
    args: dict[str, Any] = {"code": f.code, "finding": f.name, "severity": f.severity.value,
                            "message": F.linked_message(f), "cost": F.fmt_cost(f),
                            "cost_us_per_step": f.cost_us_per_step, "cost_share": f.cost_share, "advice": f.advice}
    if f.location is not None:
        args["location"] = str(f.location)
    if f.evidence:
        args["evidence"] = "; ".join(F.fmt_evidence(e) for e in f.evidence)
    if f.source:
        args["source"] = f.source
    return args


def _instant(name: str, ts: float, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "i", "s": "g", "cat": "gpuprof", "name": name, "pid": pid, "tid": tid, "ts": ts, "args": args}
