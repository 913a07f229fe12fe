"""Pair ``B``/``E`` duration events into complete (``X``) events.

The Chrome Trace Event Format allows a slice to be written as a begin (``B``)
and an end (``E``) event instead of one complete event with a ``dur``. Each
thread (``pid``, ``tid``) has a stack of open slices: an ``E`` closes the most
recent open ``B`` of its thread (LIFO), whatever its name, and its ``args``
are merged into the ``B``'s. Events are taken in time order, and in file
order at equal times (a stable sort), as the trace viewers do. The complete
events come out in the order of their ``B``, so a parent stays ahead of a
child that starts at the same time.

Pairing runs once, on every ``B``/``E`` of the file, after all chunks are
decoded (possibly in two processes): a pair split across chunks is paired
like any other.

What cannot be paired is never guessed:

* a ``B`` that no ``E`` closes is dropped: its duration is unknown, and
  stretching it to the end of the trace (as viewers draw it) would invent
  busy time, a longer step or a longer kernel;
* an ``E`` with no open ``B`` on its thread is ignored;
* a ``B``/``E`` without a usable ``ts`` is ignored.

Each of these is counted, and the loader says so in the trace's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Iterable

import msgspec

from gpuprof.trace.raw import RawArgs, RawEvent

__all__ = ["Paired", "pair_slices"]

_ARG_FIELDS = RawArgs.__struct_fields__


@dataclass
class Paired:
    """The complete events made of ``B``/``E`` pairs, and what could not be paired."""

    complete: list[RawEvent] = field(default_factory=list)
    unclosed_begins: int = 0  # B without a matching E: dropped
    unopened_ends: int = 0  # E without an open B on its thread: ignored
    no_time: int = 0  # B/E without a usable ts: ignored

    def notes(self) -> list[str]:
        out = []
        if self.unclosed_begins:
            out.append(
                f"{_events(self.unclosed_begins, 'B (begin)')} with no matching E (end) on the thread: "
                "dropped, as the duration is unknown"
            )
        if self.unopened_ends:
            out.append(f"{_events(self.unopened_ends, 'E (end)')} with no open B (begin) on the thread: ignored")
        if self.no_time:
            out.append(f"{_events(self.no_time, 'B/E')} without a valid ts: ignored")
        return out


def _events(n: int, what: str) -> str:
    return f"{n} {what} event{'' if n == 1 else 's'}"


def pair_slices(events: Iterable[RawEvent]) -> Paired:
    """Turn the ``B`` and ``E`` events of a trace (in file order) into ``X`` events."""
    out = Paired()
    timed = []
    for ev in events:
        ts = ev.ts
        if ts is None or ts != ts:  # missing or NaN
            out.no_time += 1
        else:
            timed.append(ev)
    timed.sort(key=attrgetter("ts"))  # stable: file order at equal times
    open_slices: dict[tuple[object, object], list[tuple[int, RawEvent]]] = {}
    done: list[tuple[int, RawEvent]] = []
    for i, ev in enumerate(timed):
        key = (ev.pid, ev.tid)
        if ev.ph == "B":
            open_slices.setdefault(key, []).append((i, ev))
            continue
        stack = open_slices.get(key)
        if not stack:
            out.unopened_ends += 1
            continue
        at, begin = stack.pop()
        done.append((at, _complete(begin, ev)))
    # in the order of their B: a parent before the child that starts at the same time,
    # as a complete-event trace writes them (later sorts by ts keep that order)
    done.sort(key=itemgetter(0))
    out.complete = [ev for _, ev in done]
    out.unclosed_begins = sum(len(s) for s in open_slices.values())
    return out


def _complete(begin: RawEvent, end: RawEvent) -> RawEvent:
    assert begin.ts is not None and end.ts is not None
    return RawEvent(
        ph="X",
        cat=begin.cat if begin.cat is not None else end.cat,
        name=begin.name if begin.name is not None else end.name,
        pid=begin.pid,
        tid=begin.tid,
        ts=begin.ts,
        dur=end.ts - begin.ts,
        args=_merged_args(begin.args, end.args),
    )


def _merged_args(begin: RawArgs | None, end: RawArgs | None) -> RawArgs | None:
    """The B's args, with the E's filling the keys the B lacks (the format merges them)."""
    if end is None:
        return begin
    if begin is None:
        return end
    values = {}
    for name in _ARG_FIELDS:
        v = getattr(begin, name)
        # an undecoded value (msgspec.Raw) is absent when empty
        values[name] = getattr(end, name) if v is None or (type(v) is msgspec.Raw and not v) else v
    return RawArgs(**values)
