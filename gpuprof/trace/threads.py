"""Host threads: operators and runtime calls grouped by ``(pid, tid)``.

No metric is defined here; the step, breakdown, copy/sync and operator
modules use this index to find what a host thread was doing at a moment.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Union

import numpy as np

from gpuprof.trace.columns import columns, subset_columns
from gpuprof.trace.model import Event, Trace, dur_of, ts_of
from gpuprof.trace.table import group_indices, is_table

__all__ = ["HostThread", "ThreadIndex", "thread_keys", "on_thread", "group_by_thread", "grouped_by_thread", "stack_parents",
           "stack_parents_of"]

HostThread = tuple[Union[int, str], Union[int, str]]


@dataclass
class ThreadIndex:
    """Host operators and runtime calls grouped by host thread ``(pid, tid)``, each group in time order.

    ``*_starts`` hold the start times of each group, for bisecting a moment to
    the events around it. ``parents(key)[i]`` is the index of the operator
    that directly encloses operator ``i`` on its thread (-1 at top level).
    """

    ops: dict[HostThread, list[Event]]
    op_starts: dict[HostThread, list[float]]
    op_parent: dict[HostThread, np.ndarray]
    runtime: dict[HostThread, list[Event]]
    runtime_starts: dict[HostThread, list[float]]

    @classmethod
    def build(cls, trace: Trace) -> "ThreadIndex":
        # grouped by the shared columns' thread codes (which the analysis reads anyway), so that each
        # group's columns are taken from its kind's by position, not read from its rows again
        ops = grouped_by_thread(trace, trace.ops)
        runtime = grouped_by_thread(trace, trace.runtime)
        return cls(
            ops=ops,
            op_starts=_Starts(ops),
            op_parent={},  # filled on demand by parents()
            runtime=runtime,
            runtime_starts=_Starts(runtime),
        )

    def parents(self, key: HostThread, starts: np.ndarray | None = None, ends: np.ndarray | None = None) -> np.ndarray:
        """``op_parent[key]``, computed on first use (:func:`stack_parents_of`); ``starts``/``ends``: the
        thread's operator starts and ends when the caller has them as columns already."""
        got = self.op_parent.get(key)
        if got is None:
            if starts is None or ends is None:
                ops = self.ops.get(key, [])
                starts = np.fromiter(map(ts_of, ops), np.float64, len(ops))
                ends = starts + np.fromiter(map(dur_of, ops), np.float64, len(ops))
            got = self.op_parent[key] = stack_parents_of(starts, ends)
        return got

    def runtime_on(self, keys: frozenset[HostThread]) -> list[Event]:
        return _merged_in_time([self.runtime[k] for k in keys if k in self.runtime])

    def ops_on(self, keys: frozenset[HostThread]) -> list[Event]:
        return _merged_in_time([self.ops[k] for k in keys if k in self.ops])


class _Starts(dict[HostThread, list[float]]):
    """The start times of each group of ``groups``, each list made on its first look-up: only the
    threads with sync points or copies are looked up, so most are never made."""

    def __init__(self, groups: dict[HostThread, list[Event]]) -> None:
        super().__init__()
        self._groups = groups

    def __missing__(self, key: HostThread) -> list[float]:
        # KeyError for a thread with no group; the events' own float objects (a list from the shared
        # start column would make new ones: ~24 bytes an event more at the peak)
        got = self[key] = list(map(ts_of, self._groups[key]))
        return got


def stack_parents(starts: list[float], ends: list[float]) -> list[int]:
    """Per op (one thread's, in time order, given by start and end), the op on top of the stack
    of open ops when it starts, after those that ended are popped (-1 if none)."""
    parents: list[int] = stack_parents_of(np.asarray(starts, np.float64), np.asarray(ends, np.float64)).tolist()
    return parents


def stack_parents_of(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """:func:`stack_parents` of float64 arrays, as an int64 array, in numpy.

    With starts in order, the op on top of the stack when op ``i`` starts is
    the last op ``j < i`` with ``ends[j] > starts[i]``: an op is popped only
    once an op starts at or after its end, so that ``j`` is still on the
    stack, and every op pushed after it ended at or before ``starts[i]``, so
    it was popped. That "last greater before" is found for all ops at once by
    binary lifting over running maxima of the ends (blocks of 1, 2, 4, ...
    ops). Starts out of order or a NaN: the stack walk itself.
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.int64)
    if np.isnan(ends).any() or np.isnan(starts).any() or (n > 1 and bool((starts[1:] < starts[:-1]).any())):
        return np.asarray(_stack_walk(starts.tolist(), ends.tolist()), np.int64)
    # position 0: a sentinel op that never ends (the "no parent" answer); op j is at j + 1
    e = np.empty(n + 1)
    e[0] = np.inf
    e[1:] = ends
    par = np.arange(-1, n - 1, dtype=np.int64)  # most often the op just before encloses it
    q = np.flatnonzero(ends[:-1] <= starts[1:]) + 1  # the others: op q's previous op ended by its start
    if not len(q):
        par[0] = -1
        return par
    # level k, p: the latest end among positions p - 2**k + 1 .. p (inf where that reaches before 0). Only the
    # even levels are kept (an odd one is made again from the one below when the walk reaches it): the levels
    # are one array of n floats each, ~17 for a 100k-op thread, the peak of a whole analysis (issue 44)
    even = [e]  # levels 0, 2, 4, ...
    top, level = 0, e
    while 2 << top <= n:  # 2 ** (top + 1): the next block width
        level = _block_max_up(level, 1 << top)
        top += 1
        if top % 2 == 0:
            even.append(level)
    del level
    pos = q.copy()  # op i's search starts at op i - 1 (position i)
    t = starts[q]
    for k in range(top, -1, -1):  # skip every block that ended at or before the start
        block_max = even[k // 2] if k % 2 == 0 else _block_max_up(even[k // 2], 1 << (k - 1))
        skip = block_max[pos] <= t
        del block_max
        pos -= skip.astype(np.int64) << k
    par[q] = pos - 1
    return par


def _block_max_up(prev: np.ndarray, width: int) -> np.ndarray:
    """The next level of :func:`stack_parents_of`'s block maxima: blocks of ``2 * width`` from those of ``width``."""
    cur = np.empty_like(prev)
    cur[:width] = np.inf
    np.maximum(prev[width:], prev[:-width], out=cur[width:])
    return cur


def _stack_walk(starts: list[float], ends: list[float]) -> list[int]:
    parents = [-1] * len(starts)
    stack: list[tuple[float, int]] = []
    pop, push = stack.pop, stack.append
    for i, (ts, end) in enumerate(zip(starts, ends)):
        while stack and stack[-1][0] <= ts:
            pop()
        if stack:
            parents[i] = stack[-1][1]
        push((end, i))
    return parents


def group_by_thread(events: list[Event]) -> dict[HostThread, list[Event]]:
    """``events`` grouped by ``(pid, tid)``: groups in order of first appearance, each in the events' order.

    (A dict append per event: measured faster than a sort of pid/tid codes, which needs as many
    look-ups to build the codes.)
    """
    by: defaultdict[HostThread, list[Event]] = defaultdict(list)
    for e in events:
        by[(e.pid, e.tid)].append(e)
    return dict(by)


_group_by_thread = group_by_thread


def grouped_by_thread(trace: Trace, events: list[Event]) -> dict[HostThread, list[Event]]:
    """:func:`group_by_thread` of one of ``trace``'s lists, from its shared thread codes: the same groups
    (same keys, same order, each in the events' order), each of whose columns
    (:func:`gpuprof.trace.columns.columns`) are its list's, taken by position."""
    if not events:
        return {}
    cols = columns(trace, events)
    out: dict[HostThread, list[Event]] = {}
    n = len(events)
    code = cols.thread_code
    # the events picked by an object array (a pointer an event), not by a list of their positions (a new
    # int object each, ~32 bytes an event at this point of the analysis)
    rows = np.empty(n, dtype=object)
    rows[:] = events
    few = len(cols.threads) <= _FEW_THREADS
    for c, (key, at) in enumerate(zip(cols.threads, group_indices(code, len(cols.threads)))):
        group = out[key] = rows[at].tolist()
        # a few threads: each group's positions found again when a column is taken (a comparison of
        # the codes), so none are held; many: held as int32 (4 bytes an event)
        subset_columns(trace, group, events, (code, c) if few else at.astype(np.int32) if n < 2**31 else at)
    return out


_FEW_THREADS = 16


def _merged_in_time(groups: list[list[Event]]) -> list[Event]:
    if len(groups) == 1:
        return groups[0]
    return sorted((e for g in groups for e in g), key=ts_of)


def on_thread(events: Sequence[Event], keys: frozenset[HostThread]) -> Sequence[Event]:
    """The events of ``events`` whose ``(pid, tid)`` is one of ``keys`` (a :func:`thread_keys` set), in order.

    Each distinct ``(pid, tid)`` pair is looked up once (a table indexed by the codes of the
    distinct pids and tids), not each event's pair. An EventTable gives an EventTable.
    """
    n = len(events)
    if not n or not keys:
        return []
    if is_table(events):
        return events.on_threads(keys)
    pids = list(map(_pid_of, events))
    tids = list(map(_tid_of, events))
    upids, utids = list(dict.fromkeys(pids)), list(dict.fromkeys(tids))
    table = np.array([[(p, t) in keys for t in utids] for p in upids], bool)
    if not table.any():
        return []
    if table.all():
        return list(events)
    pcode = {p: i for i, p in enumerate(upids)}
    tcode = {t: i for i, t in enumerate(utids)}
    pc = np.fromiter(map(pcode.__getitem__, pids), np.int64, n)
    tc = np.fromiter(map(tcode.__getitem__, tids), np.int64, n)
    return list(map(events.__getitem__, np.flatnonzero(table[pc, tc]).tolist()))


_pid_of = attrgetter("pid")
_tid_of = attrgetter("tid")


def thread_keys(t: HostThread | None) -> frozenset[HostThread]:
    """The spellings of one host thread's (pid, tid): 2021 traces mix int and str tids."""
    if t is None:
        return frozenset()
    keys = {t, (str(t[0]), str(t[1]))}
    for a in (t[0], str(t[0])):
        for b in (t[1], str(t[1])):
            keys.add((a, b))
    try:
        keys.add((int(t[0]), int(t[1])))
        keys.add((t[0], int(t[1])))
        keys.add((int(t[0]), t[1]))
    except (TypeError, ValueError):
        pass
    return frozenset(keys)
