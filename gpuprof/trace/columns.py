"""Event fields as numpy columns, read once per event list of a loaded trace.

Metrics, rules and views work on arrays (sorts, binary searches, group-bys);
reading a field of every event into an array (``np.fromiter`` over an
``attrgetter``) is a Python-level pass over the list, and most of the cost
of the array code. :func:`columns` reads each field of a trace's event list
at most once, on first use, and hands every later caller the same arrays.

A :class:`Columns` holds one event list and builds each column lazily:
``ts``, ``dur``, ``end``, ``ext``, ``corr``, ``device``, ``stream`` (float64
or int64 arrays, one entry per event, in the list's order), ``name_code``
with ``names`` (the distinct names in order of first appearance; ``names[
name_code[i]]`` is the name of event ``i``) and ``thread_code`` with
``threads`` (the distinct ``(pid, tid)`` pairs, same scheme). The arrays are
shared, so they are read-only (a write raises).

The cache lives beside the trace (keyed by the trace object, dropped when
the trace is freed) and by the identity of the list, so ``columns(trace,
trace.ops)`` is built once however many modules ask. It assumes what
``analyze`` guarantees: a trace's lists are not changed once loading (and
:meth:`Trace.sort`) is done. A list whose length changed since its columns
were built is read again.

Cost, measured (bench/README.md, "shared event columns"): a field costs about 2 ms per 50k events.
The hot paths group events with the ``ThreadIndex`` lists and ask for the columns of each group
(``columns(trace, group)``: any list the caller keeps alive is cached the same way). Those groups
are made from their kind's thread codes (:func:`~gpuprof.trace.threads.grouped_by_thread`), and
their columns are taken from the kind's by position (:func:`subset_columns`): names and threads
renumbered in order of first appearance in the group, as reading the group would number them.
The GPU work's columns (:func:`gpu_columns`) are the kinds' columns end to end. So each field of a
loaded trace is read from the rows once per kind (issue 44: those reads were half the column cost).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter
from typing import Union

import numpy as np

from gpuprof.trace.model import Event, Trace, name_of
from gpuprof.trace.table import group_indices, is_table

__all__ = ["Columns", "columns", "gpu_columns", "gpu_launch_positions", "named", "subset_columns"]

HostThread = tuple[Union[int, str], Union[int, str]]

_ts = attrgetter("ts")
_dur = attrgetter("dur")
_ext = attrgetter("ext")
_corr = attrgetter("corr")
_device = attrgetter("device")
_stream = attrgetter("stream")
_name = attrgetter("name")
_thread = attrgetter("pid", "tid")  # the tuple is made in C


class Columns:
    """Numpy columns of one event list, each built on first use (see the module docstring)."""

    def __init__(self, events: Sequence[Event], base: Columns | None = None,
                 at: np.ndarray | tuple[np.ndarray, int] | None = None, parts: list[Columns] | None = None) -> None:
        self.events = events
        self.n = len(events)
        # where the columns come from instead of the rows: ``base``'s columns at positions ``at`` (a list
        # that is a subset of base's, in order: subset_columns), given as the positions or as (code, c):
        # where ``code == c``, found again on each use (nothing held), or the concatenation of ``parts``
        self._base = base
        self._where = at
        self._parts = parts
        if is_table(events):  # loaded as columns (Python frames): nothing to read, the same arrays
            held = dict(ts=events.ts, dur=events.dur, ext=events.ext, corr=events.corr,
                        _name_table=(events.name_code, events.names), _thread_table=(events.thread_code, events.threads))
            self.__dict__.update((k, v) for k, v in held.items() if v is not None)

    def _at(self) -> np.ndarray:
        where = self._where
        if isinstance(where, tuple):
            return np.flatnonzero(where[0] == where[1])
        assert where is not None
        return where

    def _derived(self, field: str) -> np.ndarray | None:
        """Column ``field`` from the base list's or the parts' columns, None to read it from the rows.

        The start and duration of the base or parts are built for it (every analysis reads them of
        every kind); another field only where it is built already: a column the kind's list would not
        otherwise have would add to the peak what reading this list's rows costs in time."""
        base, parts = self._base, self._parts
        if base is not None and (field in _ALWAYS or field in base.__dict__):
            return _frozen(getattr(base, field)[self._at()])
        if parts is not None and (field in _ALWAYS or all(field in p.__dict__ for p in parts)):
            return _frozen(np.concatenate([getattr(p, field) for p in parts]))
        return None

    def _f8(self, get: attrgetter[float]) -> np.ndarray:
        got = self._derived(_FIELD[get])
        if got is not None:
            return got
        return _frozen(np.fromiter(map(get, self.events), np.float64, self.n))

    def _i8(self, get: attrgetter[int]) -> np.ndarray:
        got = self._derived(_FIELD[get])
        if got is not None:
            return got
        if is_table(self.events):
            # a field the table does not hold (device, stream; ext/corr where no event has one) is -1 for
            # every event: made only when asked for (4 such arrays are 32 bytes an event)
            return _frozen(np.full(self.n, -1, np.int64))
        return _frozen(np.fromiter(map(get, self.events), np.int64, self.n))

    @functools.cached_property
    def ts(self) -> np.ndarray:
        return self._f8(_ts)

    @functools.cached_property
    def dur(self) -> np.ndarray:
        return self._f8(_dur)

    @functools.cached_property
    def end(self) -> np.ndarray:
        return _frozen(self.ts + self.dur)  # as Event.end computes it: bit-identical

    @functools.cached_property
    def ext(self) -> np.ndarray:
        return self._i8(_ext)

    @functools.cached_property
    def corr(self) -> np.ndarray:
        return self._i8(_corr)

    @functools.cached_property
    def device(self) -> np.ndarray:
        return self._i8(_device)

    @functools.cached_property
    def stream(self) -> np.ndarray:
        return self._i8(_stream)

    @functools.cached_property
    def _name_table(self) -> tuple[np.ndarray, list[str]]:
        if self._base is not None:
            return _sub_table(self._base.name_code, self._base.names, self._at())
        codes: dict[str, int] = {}
        code = np.fromiter(map(codes.setdefault, map(_name, self.events), iter(codes.__len__, -1)), np.int64, self.n)
        return _frozen(code), list(codes)

    @property
    def name_code(self) -> np.ndarray:
        return self._name_table[0]

    @property
    def names(self) -> list[str]:
        return self._name_table[1]

    @functools.cached_property
    def _thread_table(self) -> tuple[np.ndarray, list[HostThread]]:
        if self._base is not None:
            return _sub_table(self._base.thread_code, self._base.threads, self._at())
        codes: dict[HostThread, int] = {}
        code = np.fromiter(map(codes.setdefault, map(_thread, self.events), iter(codes.__len__, -1)), np.int64, self.n)
        return _frozen(code), list(codes)

    @property
    def thread_code(self) -> np.ndarray:
        return self._thread_table[0]

    @property
    def threads(self) -> list[HostThread]:
        return self._thread_table[1]

    @functools.cached_property
    def by_thread(self) -> list[np.ndarray]:
        """Per entry of ``threads``, the indices of its events, in the list's order."""
        return group_indices(self.thread_code, len(self.threads))


_ALWAYS = frozenset({"ts", "dur"})
_FIELD = {_ts: "ts", _dur: "dur", _ext: "ext", _corr: "corr", _device: "device", _stream: "stream"}


def _sub_table(code: np.ndarray, values: list, at: np.ndarray) -> tuple[np.ndarray, list]:  # type: ignore[type-arg]
    """The code column of the events at ``at`` (in order) of a list with codes ``code`` into ``values``,
    renumbered as the list's own would be: values in order of first appearance among those events.

    The first event of a value among them is the first event of that value's class in the list whose
    value object it is, so the values are the same objects a walk over the events would keep."""
    sub = code[at]
    if not len(sub):
        return _frozen(np.zeros(0, np.int64)), []
    seen, first = np.unique(sub, return_index=True)
    rank = np.argsort(first, kind="stable")
    new_of_old = np.full(len(values), -1, np.int64)
    new_of_old[seen[rank]] = np.arange(len(rank), dtype=np.int64)
    return _frozen(new_of_old[sub]), [values[i] for i in seen[rank].tolist()]


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a``, read-only: the arrays are shared by every caller, so a write would be a bug."""
    a.flags.writeable = False
    return a


# id(trace) -> {id(list): Columns}; an entry goes when its trace is freed
_CACHE: dict[int, dict[int, Columns]] = {}


def _trace_cache(trace: Trace) -> dict[int, Columns]:
    got = _CACHE.get(id(trace))
    if got is None:
        got = _CACHE[id(trace)] = {}
        weakref.finalize(trace, _CACHE.pop, id(trace), None)
    return got


def subset_columns(trace: Trace, events: Sequence[Event], of: Sequence[Event], at: np.ndarray | tuple[np.ndarray, int]) -> None:
    """Say that ``events`` is ``[of[i] for i in at]`` (``at`` ascending; or ``(code, c)``: the positions
    where ``code == c``): its columns are then taken from ``of``'s shared columns by position (numpy),
    not read from the rows again."""
    base = columns(trace, of)
    _trace_cache(trace)[id(events)] = Columns(events, base=base, at=at)


def columns(trace: Trace, events: Sequence[Event]) -> Columns:
    """The columns of ``events``, one of ``trace``'s lists, built once per trace and list."""
    cache = _trace_cache(trace)
    got = cache.get(id(events))
    if got is None or got.events is not events or got.n != len(events):
        got = cache[id(events)] = Columns(events)
    return got


_GPU_KEY = -1  # no list has this id


def gpu_columns(trace: Trace) -> Columns:
    """Columns of ``list(trace.gpu_events())`` (kernels, then copies, then memsets)."""
    cache = _trace_cache(trace)
    n = len(trace.kernels) + len(trace.memcpys) + len(trace.memsets)
    got = cache.get(_GPU_KEY)
    if got is None or got.n != n:
        parts = [columns(trace, p) for p in (trace.kernels, trace.memcpys, trace.memsets)]
        got = cache[_GPU_KEY] = Columns(list(trace.gpu_events()), parts=parts)
    return got


def gpu_launch_positions(trace: Trace) -> np.ndarray:
    """Per event of :func:`gpu_columns` (kernels, then copies, then memsets), the position in
    ``trace.runtime`` of its launch: the last runtime call with its correlation id (as a
    ``{r.corr: r}`` dict of the calls keeps it), -1 if none."""
    rt = columns(trace, trace.runtime).corr
    gc = gpu_columns(trace)
    out = np.full(gc.n, -1, np.int64)
    at = np.flatnonzero(rt >= 0)
    if not len(at) or not gc.n:
        return out
    order = np.argsort(rt[at], kind="stable")
    keys, idx = rt[at][order], at[order]
    last = np.append(keys[1:] != keys[:-1], True)  # the last call of each id (the sort is stable)
    keys, idx = keys[last], idx[last]
    pos = np.minimum(np.searchsorted(keys, gc.corr), len(keys) - 1)
    hit = keys[pos] == gc.corr
    out[hit] = idx[pos[hit]]
    return out


def named(events: Sequence[Event], wanted: Callable[[str], object], trace: Trace | None = None) -> list[Event]:
    """The events whose name ``wanted`` accepts, in order: ``wanted`` is asked once per distinct name
    (a regex or a prefix test per event costs more than the rest of a rule). ``trace``: the trace
    ``events`` is a list of, to read names from its shared columns (:mod:`gpuprof.trace.columns`)."""
    if not events:
        return []
    if is_table(events):  # columns already: only the events asked for are made
        return events.named(wanted)
    if trace is not None:
        cols = columns(trace, events)
        ok = np.fromiter((bool(wanted(n)) for n in cols.names), bool, len(cols.names))
        if not ok.any():
            return []
        return list(compress(events, ok[cols.name_code].tolist()))
    hits = {n for n in set(map(name_of, events)) if wanted(n)}
    if not hits:
        return []
    return list(compress(events, map(hits.__contains__, map(name_of, events))))
