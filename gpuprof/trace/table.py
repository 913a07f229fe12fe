"""Events of one kind held as columns: the loaded trace's Python frames.

A trace recorded with ``with_stack=True`` is mostly ``python_function``
events (two thirds of the events of the xDiT trace bench/ measures), and one
:class:`~gpuprof.trace.model.Event` per event costs ~175 bytes of Python
objects, more than the event's JSON text. An :class:`EventTable` keeps the
fields those events have as numpy columns instead (~24-40 bytes an event):
``ts``/``dur`` (float64), ``name_code`` into ``names`` and ``thread_code``
into ``threads`` (int32; the distinct values in order of first appearance in
time order, as :class:`gpuprof.trace.columns.Columns` numbers them), and
``ext``/``corr`` (int64, or None where every event has none: -1).

It is a read-only ``Sequence[Event]``: indexing and iteration make the
Events on demand (equal to what the loader made before, not the same objects
each time), so code that reads a few frames is unchanged; code that walks
all of them reads the columns (:func:`gpuprof.trace.columns.columns`,
:meth:`EventTable.subset`, :meth:`EventTable.take`) instead.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, TypeGuard, Union, overload

import numpy as np

from gpuprof.trace.model import Event

__all__ = ["EventTable", "TableBuilder", "is_table"]

HostThread = tuple[Union[int, str], Union[int, str]]

_BLOCK = 1 << 16  # events made per block while iterating: bounded temporary lists


class EventTable(Sequence[Event]):
    """Events of one kind, sorted by start, as columns (see the module docstring)."""

    __slots__ = ("kind", "names", "threads", "name_code", "thread_code", "ts", "dur", "ext", "corr")

    def __init__(self, kind: int, names: list[str], threads: list[HostThread], name_code: np.ndarray,
                 thread_code: np.ndarray, ts: np.ndarray, dur: np.ndarray, ext: np.ndarray | None,
                 corr: np.ndarray | None) -> None:
        self.kind = kind
        self.names = names
        self.threads = threads
        self.name_code = _frozen(name_code)
        self.thread_code = _frozen(thread_code)
        self.ts = _frozen(ts)
        self.dur = _frozen(dur)
        self.ext = None if ext is None else _frozen(ext)
        self.corr = None if corr is None else _frozen(corr)

    def __len__(self) -> int:
        return len(self.ts)

    def __bool__(self) -> bool:
        return len(self.ts) > 0

    @overload
    def __getitem__(self, i: int) -> Event: ...

    @overload
    def __getitem__(self, i: slice) -> list[Event]: ...

    def __getitem__(self, i: int | slice) -> Event | list[Event]:
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        n = len(self)
        if not -n <= i < n:
            raise IndexError("EventTable index out of range")
        if i < 0:
            i += n
        return self._make(slice(i, i + 1))[0]

    def __iter__(self) -> Iterator[Event]:
        for lo in range(0, len(self), _BLOCK):
            yield from self._make(slice(lo, lo + _BLOCK))

    def take(self, idx: np.ndarray | list[int]) -> list[Event]:
        """The events at positions ``idx``, made as Events, in that order."""
        return self._make(np.asarray(idx, dtype=np.intp))

    def _make(self, sel: slice | np.ndarray) -> list[Event]:
        kind, names, threads = self.kind, self.names, self.threads
        nc = self.name_code[sel].tolist()
        tc = self.thread_code[sel].tolist()
        ts = self.ts[sel].tolist()
        dur = self.dur[sel].tolist()
        n = len(ts)
        ext = [-1] * n if self.ext is None else self.ext[sel].tolist()
        corr = [-1] * n if self.corr is None else self.corr[sel].tolist()
        return [Event(kind, names[a], s, d, threads[b][0], threads[b][1], x, c)
                for a, b, s, d, x, c in zip(nc, tc, ts, dur, ext, corr)]

    def subset(self, idx: np.ndarray) -> EventTable:
        """A table of the events at positions ``idx`` (in that order), sharing the names and threads."""
        return EventTable(self.kind, self.names, self.threads, self.name_code[idx], self.thread_code[idx],
                          self.ts[idx], self.dur[idx], None if self.ext is None else self.ext[idx],
                          None if self.corr is None else self.corr[idx])

    def name_mask(self, wanted: Callable[[str], object]) -> np.ndarray:
        """Per event, whether ``wanted`` accepts its name: asked once per distinct name."""
        ok = np.array([bool(wanted(n)) for n in self.names], dtype=np.bool_)
        return ok[self.name_code] if len(ok) else np.zeros(len(self), np.bool_)

    def named(self, wanted: Callable[[str], object]) -> list[Event]:
        """The events whose name ``wanted`` accepts, in order, made as Events (``wanted``: once per distinct name)."""
        return self.take(np.flatnonzero(self.name_mask(wanted)))

    def on_threads(self, keys: Collection[HostThread]) -> EventTable:
        """The events whose ``(pid, tid)`` is one of ``keys``, in order (each distinct thread asked once)."""
        ok = np.array([th in keys for th in self.threads], dtype=np.bool_)
        if ok.all():
            return self
        return self.subset(np.flatnonzero(ok[self.thread_code]) if len(ok) else np.zeros(0, np.intp))

    def by_thread(self) -> dict[HostThread, EventTable]:
        """The events grouped by ``(pid, tid)``: threads in order of first appearance, each in time order."""
        if len(self.threads) <= 1:
            return {self.threads[0]: self} if self.threads else {}
        groups = group_indices(self.thread_code, len(self.threads))
        return {th: self.subset(at) for th, at in zip(self.threads, groups)}

    @classmethod
    def of(cls, events: Sequence[Event], kind: int) -> EventTable:
        """``events`` (a list a caller built, e.g. a Trace made by hand) as a table of ``kind``, sorted by start."""
        if is_table(events):
            return events
        b = TableBuilder(kind)
        for e in events:
            b.add(e.name, e.ts, e.dur, e.pid, e.tid, e.ext, e.corr)
        return b.table()

    def __add__(self, other: Sequence[Event]) -> list[Event]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Event]) -> list[Event]:
        return [*other, *self]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventTable, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence, as list

    def __repr__(self) -> str:
        return f"EventTable(kind={self.kind}, {len(self)} events, {len(self.names)} names, {len(self.threads)} threads)"


def is_table(events: Sequence[Event]) -> TypeGuard[EventTable]:
    return type(events) is EventTable


def group_indices(code: np.ndarray, n_groups: int) -> list[np.ndarray]:
    """Per code ``0..n_groups-1``, the positions holding it, in order (one stable sort)."""
    order = np.argsort(code, kind="stable")
    bounds = np.searchsorted(code[order], np.arange(n_groups + 1))
    return [order[bounds[g] : bounds[g + 1]] for g in range(n_groups)]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # shared by every reader: a write would be a bug
    return a


class TableBuilder:
    """Collects one kind's events field by field while loading; :meth:`table` sorts them into an EventTable.

    ``add`` costs about what making an Event did, and holds 32-40 bytes an event instead of ~175.
    """

    def __init__(self, kind: int) -> None:
        self.kind = kind
        # name -> its code in self.name: a new name gets the next one (len); the loader gives every name it sees one
        # (see add_columns), and table() keeps those of the events
        self.name_codes: dict[str, int] = {}
        self._thread_codes: dict[tuple[object, ...], int] = {}
        self._threads: list[HostThread] = []
        self.ts = array("d")
        self.dur = array("d")
        self.name = array("i")
        self.thread = array("i")
        self.ext = array("q")
        self.corr = array("q")
        self._any_ext = False
        self._any_corr = False

    def add(self, name: str, ts: float, dur: float, pid: Union[int, str], tid: Union[int, str], ext: int, corr: int) -> None:
        nc = self.name_codes.get(name)
        if nc is None:
            nc = self.name_codes[name] = len(self.name_codes)
        # a float pid/tid (no profiler writes one) is kept as written: 1.0 must not share int 1's entry
        key: tuple[object, ...] = (pid, tid) if type(pid) is not float and type(tid) is not float else (pid, tid, type(pid), type(tid))
        tc = self._thread_codes.get(key)
        if tc is None:
            tc = self._thread_codes[key] = len(self._threads)
            self._threads.append((pid, tid))
        self.ts.append(ts)
        self.dur.append(dur)
        self.name.append(nc)
        self.thread.append(tc)
        self.ext.append(ext)
        self.corr.append(corr)
        if ext != -1:
            self._any_ext = True
        if corr != -1:
            self._any_corr = True

    def add_columns(self, name_code: list[int], threads: list[HostThread], ts: list[float], dur: list[float],
                    ids: list[tuple[int, int, int]], share: Callable[[Any, Any], Any] | None = None) -> None:
        """Many events at once, as :meth:`add` would add them in turn: their name codes (the builder's
        ``name_codes`` of each name, which the caller gave each new name), ``(pid, tid)``, starts, durations, and
        ``(position, ext, corr)`` for those with an ext or corr (position in these lists; the rest have -1).
        ``share(v, v)``: the one object of an int or str pid/tid the table holds (the loader's shared ids)."""
        n = len(ts)
        if share is None:
            share = _same
        if float in map(type, itertools.chain.from_iterable(threads)):  # (no profiler writes one) see add
            names = list(self.name_codes)
            ext_of, corr_of = [-1] * n, [-1] * n
            for i, x, c in ids:
                ext_of[i], corr_of[i] = x, c
            for i in range(n):
                pid, tid = threads[i]
                self.add(names[name_code[i]], ts[i], dur[i], pid if type(pid) is float else share(pid, pid),  # type: ignore[arg-type]
                         tid if type(tid) is float else share(tid, tid), ext_of[i], corr_of[i])  # type: ignore[arg-type]
            return
        # each column made by numpy and copied into the array's buffer (array's append or extend parses
        # each value with a format string)
        self.name.frombytes(np.array(name_code, np.int32).tobytes())
        codes = self._thread_codes
        known = len(codes)
        # a new thread gets the next code, as in add (map asks the length before each setdefault)
        self.thread.frombytes(np.fromiter(map(codes.setdefault, threads, iter(codes.__len__, -1)), np.int32, n).tobytes())
        if len(codes) > known:  # the new threads, in the order of their codes
            self._threads.extend((share(p, p), share(t, t)) for p, t in itertools.islice(codes, known, None))  # type: ignore[misc]
        self.ts.frombytes(np.array(ts, np.float64).tobytes())
        self.dur.frombytes(np.array(dur, np.float64).tobytes())
        ext_col = np.full(n, -1, np.int64)
        corr_col = np.full(n, -1, np.int64)
        if ids:
            at, ext, corr = zip(*ids)
            pos = np.array(at, np.intp)
            ext_col[pos] = ext
            corr_col[pos] = corr
            self._any_ext = self._any_ext or ext.count(-1) != len(ext)
            self._any_corr = self._any_corr or corr.count(-1) != len(corr)
        self.ext.frombytes(ext_col.tobytes())
        self.corr.frombytes(corr_col.tobytes())

    def __len__(self) -> int:
        return len(self.ts)

    def table(self) -> EventTable:
        """The events sorted by start (stable, as ``list.sort(key=ts_of)``); codes renumbered by first appearance."""
        ts = np.frombuffer(self.ts, np.float64)  # views of the arrays (empty ones too); sorted copies below
        order = np.argsort(ts, kind="stable")
        names, name_code = _renumber(list(self.name_codes), np.frombuffer(self.name, np.int32)[order])
        threads, thread_code = _renumber(self._threads, np.frombuffer(self.thread, np.int32)[order])
        out = EventTable(
            self.kind, names, threads, name_code, thread_code, ts[order],
            np.frombuffer(self.dur, np.float64)[order],
            np.frombuffer(self.ext, np.int64)[order] if self._any_ext else None,
            np.frombuffer(self.corr, np.int64)[order] if self._any_corr else None,
        )
        self.__init__(self.kind)  # type: ignore[misc]  # frees the arrays (one builder, one table)
        return out


def _same(value: object, _default: object) -> object:
    return value


def _renumber(values: list, code: np.ndarray) -> tuple[list, np.ndarray]:  # type: ignore[type-arg]
    """Codes renumbered in order of first appearance in ``code``, with the values in that order."""
    if not len(code):
        return [], code.astype(np.int32)
    seen, first = np.unique(code, return_index=True)
    rank = np.argsort(first, kind="stable")
    new_of_old = np.full(len(values), -1, np.int32)
    new_of_old[seen[rank]] = np.arange(len(rank), dtype=np.int32)
    return [values[i] for i in seen[rank].tolist()], new_of_old[code]
