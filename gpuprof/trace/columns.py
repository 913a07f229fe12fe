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

Cost, measured (bench/README.md, "shared event columns"): a field costs about 2 ms per 50k events;
the thread codes (a tuple and a dict look-up per event, then a sort) cost twice
:func:`~gpuprof.trace.threads.group_by_thread`, so the hot paths group events with the
``ThreadIndex`` lists and ask for the columns of each group (``columns(trace, group)``: any list
the caller keeps alive is cached the same way).
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

__all__ = ["Columns", "columns", "gpu_columns", "gpu_launch_positions", "named"]

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

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.n = len(events)
        if is_table(events):  # loaded as columns (Python frames): nothing to read, the same arrays
            held = dict(ts=events.ts, dur=events.dur, ext=events.ext, corr=events.corr,
                        _name_table=(events.name_code, events.names), _thread_table=(events.thread_code, events.threads))
            self.__dict__.update((k, v) for k, v in held.items() if v is not None)

    def _f8(self, get: attrgetter[float]) -> np.ndarray:
        return _frozen(np.fromiter(map(get, self.events), np.float64, self.n))

    def _i8(self, get: attrgetter[int]) -> np.ndarray:
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
        got = cache[_GPU_KEY] = Columns(list(trace.gpu_events()))
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
