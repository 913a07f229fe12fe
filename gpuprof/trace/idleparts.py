"""The GPU's idle time split by name: which runtime calls, Python functions or operators held it.

The metric is defined in :mod:`gpuprof.trace.metrics` (**Idle parts**). The
idle breakdown there says *which kind* of host work ran while the main GPU was
idle; this module names the calls and functions, so a low-utilisation finding
can say what to look at even where no other rule applies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpuprof.trace.arrays import sorted_unique, start_order
from gpuprof.trace.columns import columns
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.stacks import is_user_frame
from gpuprof.trace.table import EventTable, group_indices
from gpuprof.trace.threads import on_thread, thread_keys
from gpuprof.trace.vocab import Kind, step_number

__all__ = ["IdlePart", "idle_parts", "NOTHING_RECORDED"]

PY = int(Kind.PYTHON_FUNCTION)

NOTHING_RECORDED = "nothing recorded on the main thread"


@dataclass(frozen=True)
class IdlePart:
    """One named part of the main GPU's idle time (µs summed over all steps)."""

    kind: str  # "runtime", "python", "operator" or "none"
    name: str  # the runtime call, the Python frame (``file.py(LINE): fn``), the operator, or NOTHING_RECORDED
    us: float


def idle_parts(m: TraceMetrics) -> list[IdlePart]:
    """The main GPU's idle time inside the steps, split by name, largest first (empty without a GPU).

    First match wins, per instant: a runtime call on the main thread (by its
    name); else the innermost user Python frame open on the main thread (the
    innermost frame when no user frame is open); else, in traces without
    Python stacks, the innermost operator; else nothing recorded.
    """
    if m.main_device is None or not m.windows or m.main_thread is None:
        return []
    busy = m.gpu_busy.get(m.main_device, Intervals.empty())
    idle = Intervals.from_pairs(m.windows).subtract(busy)
    if not idle:
        return []
    keys = thread_keys(m.main_thread)
    out: dict[tuple[str, str], float] = defaultdict(float)
    rest = idle
    rc = columns(m.trace, m.threads.runtime_on(keys))  # names in order of first call, as a loop would group them
    covered = Intervals.empty()
    for name, at in zip(rc.names, group_indices(rc.name_code, len(rc.names))):
        # union_of(the calls of name): the same set and arrays as rest.intersect(...), from the smaller side
        got = Intervals.from_spans(rc.ts[at], rc.dur[at]).intersect(rest)
        t = got.total()
        if t > 0:
            out[("runtime", name)] += t
            covered = covered.union(got)
    rest = rest.subtract(covered)
    groups = m.stacks.frames_on(keys)
    # one thread's frames are already in trace order; several spellings of it: take them in trace order
    python = groups[0] if len(groups) == 1 else EventTable.of(on_thread(m.trace.python, keys), PY) if groups else None
    spans: _Known  # starts, durations and name codes of the nested events, from columns
    if python:
        kind, prefer = "python", is_user_frame
        spans = (python.ts, python.dur, python.name_code, python.names)
    else:
        oc = columns(m.trace, m.threads.ops_on(keys))
        # step markers are no operators: per distinct name, once
        keep = np.fromiter((step_number(n) is None for n in oc.names), bool, len(oc.names))[oc.name_code]
        kind, prefer = "operator", None
        code = oc.name_code.astype(np.int32)
        spans = (oc.ts, oc.dur, code, oc.names) if keep.all() else (oc.ts[keep], oc.dur[keep], code[keep], oc.names)
    if len(spans[0]) and rest:
        rest = _add_nested(out, kind, spans, rest, prefer)
    if rest:
        out[("none", NOTHING_RECORDED)] += rest.total()
    parts = [IdlePart(kind, name, us) for (kind, name), us in out.items() if us > 0]
    parts.sort(key=lambda p: -p.us)
    return parts


def _add_nested(out: dict[tuple[str, str], float], kind: str, known: _Known, rest: Intervals,
                prefer: Callable[[str], bool] | None) -> Intervals:
    """Charge the idle time ``rest`` under one thread's nested events (``known``: their columns) to them
    (:func:`_add_overlapping`); return ``rest`` less the time under any of them.

    Each whole-thread array is dropped before the next one is made: this runs after loading and the
    metrics, so what it holds at once adds to the process's peak (issue 24: under the file's size).
    """
    ts, dur = known[0], known[1]  # shared columns, read-only: nothing below writes them
    under = Intervals.from_spans(ts, dur)
    idle = rest.intersect(under)
    rest = rest.subtract(under)
    del under
    if not idle:
        return rest
    hit = _overlapping(ts, dur, idle)
    if hit is None:
        return rest
    spans = [ts, dur] if hit is _ALL else [ts[hit], dur[hit]]
    del ts, dur  # handed over in spans: dropped there once used
    _add_overlapping(out, kind, spans, idle, prefer, (known[2] if hit is _ALL else known[2][hit], known[3]))
    return rest


_ALL = np.ones(0, bool)
"""What :func:`_overlapping` returns when every event overlaps idle time (no mask to hold)."""


def _overlapping(ts: np.ndarray, dur: np.ndarray, idle: Intervals) -> np.ndarray | None:
    """Which events overlap ``idle``: a mask, :data:`_ALL`, or None for none.

    Only those matter: an event open at an idle instant overlaps idle, and so does every event
    enclosing it (the stack there is intact).
    """
    i = np.searchsorted(idle.ends, ts, side="right")  # the first idle interval ending after the start
    hit = i < len(idle.starts)
    i = i[hit]
    hit[hit] = idle.starts[i] < ts[hit] + dur[hit]
    del i
    if hit.all():
        return _ALL
    return hit if hit.any() else None


_Known = tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]
"""Starts, durations and name codes (int32, into the names that follow) of one thread's events."""


def _add_overlapping(out: dict[tuple[str, str], float], kind: str, spans: list[np.ndarray], idle: Intervals,
                     prefer: Callable[[str], bool] | None, named: tuple[np.ndarray, list[str]]) -> None:
    """Add to ``out`` the idle time under each of one thread's nested events that overlap idle time,
    charged to the innermost open event (or the innermost one ``prefer`` accepts); time under none goes
    nowhere. ``spans``: their starts and durations in the thread's order, handed over in a list that this
    empties, so that they go once they are used; ``named``: their name codes and the names the codes index.

    The time line is cut at every start and end; each piece goes to the event on top of the stack of
    open events there (events in start order, longest first on ties; a child never outlives its
    parent). That is done in numpy (:func:`_innermost_stack`); events it cannot settle take the
    stack walk (:func:`_stack_pieces`). ``prefer`` is asked once per distinct name.
    """
    ts, dur = spans
    spans.clear()
    name_ids, names = named
    order = start_order(ts, dur)  # stable: ties keep the thread's order, as sorted() did
    if order is not None:
        ts, dur, name_ids = ts[order], dur[order], name_ids[order]
    del order
    pref = np.ones(len(names), bool) if prefer is None else np.fromiter(map(prefer, names), bool, len(names))
    sums = _Sums(len(names))
    stack = _innermost_stack(ts, dur, name_ids, pref[name_ids])
    if stack is None:
        lo, hi, seg = _stack_pieces(ts, dur, name_ids, pref[name_ids])
        del ts, dur, name_ids
        sums.add(seg, idle.per_segment(lo, hi))
        del lo, hi, seg
    else:
        del ts, dur, name_ids
        _add_pieces(sums, stack, idle)
    del stack
    # summed per name in time order (the float sums a loop over the pieces gives), names in order of first piece
    for code in sums.first_seen:
        out[(kind, names[code])] += float(sums.us[code])


class _Sums:
    """Idle time per name code, summed piece by piece in time order, and the codes in order of first piece.

    ``np.add.at`` adds in the order given, one addition at a time, as ``np.bincount`` does: blocks of
    pieces added in time order give the bincount of all pieces at once, to the last bit.
    """

    def __init__(self, n: int) -> None:
        self.us = np.zeros(n, np.float64)
        self.first_seen: list[int] = []
        self._seen = np.zeros(n, bool)

    def add(self, seg: np.ndarray, per: np.ndarray) -> None:
        """Add the pieces charged to ``seg`` with idle time ``per`` (those with none are left out)."""
        pos = per > 0
        seg, per = seg[pos], per[pos]
        if not len(seg):
            return
        np.add.at(self.us, seg, per)
        codes, first = np.unique(seg, return_index=True)
        new = ~self._seen[codes]
        self.first_seen += seg[np.sort(first[new])].tolist()
        self._seen[codes] = True


_Stack = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""What :func:`_innermost_stack` finds: the cuts of the time line (sorted, distinct), the time of
each open and close in order, the event on top of the stack after it (-1: none), and the name each
event's time is charged to."""

_PIECES_AT_ONCE = 1 << 16  # pieces looked up per block: bounds the temporaries of the last step


def _add_pieces(sums: _Sums, stack: _Stack, idle: Intervals) -> None:
    """Add to ``sums`` the idle time of each piece of the time line under an event, in time order.

    In blocks of pieces: every piece is looked up on its own (the same arithmetic as all at once), so
    no array of all the pieces is made.
    """
    cuts, when, top_after, charged = stack
    for a in range(0, len(cuts) - 1, _PIECES_AT_ONCE):
        hi = cuts[a + 1:a + 1 + _PIECES_AT_ONCE]
        lo = cuts[a:a + len(hi)]
        k = np.searchsorted(when, lo, side="right") - 1  # the last open/close at or before the piece's start
        top = np.where(k >= 0, top_after[np.maximum(k, 0)], -1)
        del k
        has = top >= 0
        sums.add(charged[top[has]], idle.per_segment(lo[has], hi[has]))


def _levels(depth: np.ndarray) -> list[np.ndarray]:
    """The indices at each depth (0, 1, ...), each in increasing order (``depth``'s dtype)."""
    if not len(depth):
        return []
    order = np.argsort(depth, kind="stable").astype(depth.dtype)
    bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
    return [order[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]


def _nesting(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per event of ``[s, e)`` (sorted by start, longest first on ties), the last event before it one
    level up (-1 at top level), and the events at each level (:func:`_levels`).

    The candidate parents and depths of :class:`~gpuprof.trace.attribution.Nesting`, in int32 and
    with one level at a time instead of its (depth, index) keys: fewer arrays held at once.
    """
    n = len(s)
    i4 = np.int32 if n < 2**31 else np.int64
    closed = np.searchsorted(np.sort(e), s, side="right")  # events ended by each start
    depth = np.arange(n, dtype=i4)
    np.subtract(depth, closed, out=depth, casting="same_kind")  # open when it starts: started before, less closed
    del closed
    np.maximum(depth, 0, out=depth)  # guards events that overlap without nesting
    levels = _levels(depth)
    del depth
    parent = np.full(n, -1, i4)
    for up, at in zip(levels, levels[1:]):
        p = np.searchsorted(up, at) - 1  # the last one a level up with a smaller index
        ok = p >= 0
        parent[at[ok]] = up[p[ok]]
    return parent, levels


def _charged(parent: np.ndarray, levels: list[np.ndarray], name_ids: np.ndarray, pref: np.ndarray) -> np.ndarray:
    """The name each event's time is charged to: the nearest preferred event among itself and its
    enclosing ones, else its own name (``levels``: the events at each depth, :func:`_levels`)."""
    charged: np.ndarray = name_ids.copy()
    if pref.all():
        return charged
    has = pref.copy()  # a preferred event encloses it (or is itself)
    for at in levels[1:]:  # parents before children
        at = at[~pref[at] & (parent[at] >= 0)]
        if not len(at):
            continue
        p = parent[at]
        inherit = has[p]
        charged[at[inherit]] = charged[p[inherit]]
        has[at] = inherit
    return charged


def _innermost_stack(ts: np.ndarray, dur: np.ndarray, name_ids: np.ndarray, pref: np.ndarray) -> _Stack | None:
    """The stack of open events along the time line, in numpy (None: not settled).

    Events sorted by start, longest first on ties. A zero-length event only cuts the time line: it is
    closed by the next event before any time passes under it. The ends, each clipped to its parent's
    (clipped) end as the stack walk does, are found by rounds of "find the parents, clip to them",
    and accepted only once they are a fixed point: ends that nest (:func:`_stack_tops`), each equal to
    ``min(own end, parent's end)``. Such ends are the stack walk's (by induction over the events in
    order: the same open events at each start, so the same parent and the same clip).
    """
    live = np.flatnonzero(dur > 0)
    if not len(live):
        return _EMPTY_STACK
    if len(live) == len(ts):  # no zero-length event: no copies
        s, raw, ids, prefs = ts, ts + dur, name_ids, pref
    else:
        s = ts[live]
        raw = s + dur[live]
        ids, prefs = name_ids[live], pref[live]
    del live
    ends = raw
    for _ in range(_CLIP_ROUNDS):
        parent, levels = _nesting(s, ends)
        clipped = ends.copy()
        for at in levels[1:]:  # parents first: a clip reaches the children
            at = at[parent[at] >= 0]
            if len(at):
                up = clipped[parent[at]]
                # a candidate already closed when the event starts is no parent (yet): no clip this round
                clipped[at] = np.where(up > s[at], np.minimum(raw[at], up), raw[at])
        if np.array_equal(clipped, ends) and bool((ends > s).all()):
            del clipped
            tops = _stack_tops(s, ends, parent)
            if tops is not None:
                break
            clipped = ends
        ends = clipped
        del clipped  # parent and levels: replaced next round
    else:
        return None
    del raw
    charged = _charged(parent, levels, ids, prefs)
    del parent, levels, ids, prefs
    del ends
    when = tops[0]
    # the cuts: every start and every (clipped) end (zero-length ends are starts), distinct and sorted;
    # ``when`` is the live ones sorted already
    if len(s) == len(ts) and len(when) and not np.isnan(when[-1]):
        keep = np.empty(len(when), bool)
        keep[0] = True
        np.not_equal(when[1:], when[:-1], out=keep[1:])
        cuts = when[keep]
    else:
        cuts = sorted_unique(np.concatenate((ts, when)))
    return cuts, when, tops[1], charged


_CLIP_ROUNDS = 8  # overlaps from clock rounding settle in one or two; the stack walk takes the rest


def _stack_tops(s: np.ndarray, e: np.ndarray, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """When the intervals ``[s, e)`` (sorted by start, longest first on ties, all non-empty) nest with
    these parents: the time of each open and close in order, and the event on top of the stack after
    it (-1: none). None when they do not nest.

    As a bracket sequence (at one time, closes before opens, the later-opened closing first), they
    nest iff each interval closes at the depth it opened at; then an open puts its event on top and
    a close its parent. (Indices and depths in int32: a thread has far fewer than 2**31 events.)
    """
    m = len(s)
    i4 = np.int32 if 2 * m < 2**31 else np.int64
    if m > 1 and not bool((s[1:] >= s[:-1]).all()):
        when, tok, opened = _tokens_sorted(s, e, i4)
    else:
        when, tok, opened = _tokens_merged(s, e, i4)
    # the depth after each open and close, by token (opens 0..m-1, closes m..2m-1)
    step = opened.astype(i4)  # +1 an open, -1 a close, summed in place: one array of them at a time
    step += step
    step -= 1
    np.cumsum(step, out=step)
    depth = np.empty(2 * m, i4)
    depth[tok] = step
    del step
    if not np.array_equal(depth[:m], depth[m:] + 1):
        return None
    if not bool((parent[depth[m:] == 0] == -1).all()):
        return None  # a close back to the top level must be of a top-level event
    del depth
    ev = tok  # the event of each open and close, in place
    ev[~opened] -= m
    top = parent[ev]
    top[opened] = ev[opened]
    return when, top


def _tokens_sorted(s: np.ndarray, e: np.ndarray, i4: type[np.signedinteger]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The opens and closes of :func:`_stack_tops` in order: their times, their tokens (open ``i``: ``i``,
    close ``i``: ``m + i``) and whether each opens. By time; at one time the closes first, the later-opened
    first among them, then the opens in index order."""
    m = len(s)
    when = np.concatenate((s, e))
    is_open = np.zeros(2 * m, bool)
    is_open[:m] = True
    tie = np.arange(m, dtype=i4)
    tie = np.concatenate((tie, -tie))
    tok = np.lexsort((tie, is_open, when)).astype(i4)
    del tie
    return when[tok], tok, is_open[tok]


def _tokens_merged(s: np.ndarray, e: np.ndarray, i4: type[np.signedinteger]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_tokens_sorted` for starts ``s`` in order (what the stack is given): the opens are in order
    already, so only the closes are sorted (half as many values, one key) and the opens merged in among
    them, each after the closes at or before its start. The same order (it is a total one), in less time
    and memory than sorting all of them on three keys: the peak of a with_stack trace's analysis (issue 44)."""
    m = len(s)
    # the closes by end, the later-opened first on ties: a stable sort of the ends in reverse
    close = np.argsort(e[::-1], kind="stable").astype(i4)
    np.subtract(i4(m - 1), close, out=close)
    close_at = e[close]
    at = np.searchsorted(close_at, s, side="right").astype(i4)  # closes before each open
    np.add(at, np.arange(m, dtype=i4), out=at)  # and the opens before it: its place
    opened = np.zeros(2 * m, bool)
    opened[at] = True
    when = np.empty(2 * m)
    when[at] = s
    closing = ~opened
    when[closing] = close_at
    del close_at
    tok = np.empty(2 * m, i4)
    tok[at] = np.arange(m, dtype=i4)
    del at
    close += i4(m)
    tok[closing] = close
    return when, tok, opened


def _stack_pieces(ts: np.ndarray, dur: np.ndarray, name_ids: np.ndarray,
                  pref: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_innermost_stack`'s pieces for events that overlap without nesting: the stack walk, a child
    clipped to its parent's end (clock rounding)."""
    segs_lo: list[float] = []
    segs_hi: list[float] = []
    names: list[int] = []
    # stack of (end, charged name, a preferred event is open at or under it)
    stack: list[tuple[float, int, bool]] = []
    t = float("-inf")

    def close_until(at: float) -> None:
        """Pop the entries that end by ``at``, giving each the time since the last boundary."""
        nonlocal t
        while stack and stack[-1][0] <= at:
            until = stack[-1][0]
            if until > t:
                segs_lo.append(t)
                segs_hi.append(until)
                names.append(stack[-1][1])
                t = until
            stack.pop()

    for start, length, name, own in zip(ts.tolist(), dur.tolist(), name_ids.tolist(), pref.tolist()):
        close_until(start)
        if stack and start > t:  # the innermost open entry runs until this event starts
            segs_lo.append(t)
            segs_hi.append(start)
            names.append(stack[-1][1])
        t = start
        end = start + length
        if stack and end > stack[-1][0]:
            end = stack[-1][0]  # a child never outlives its parent (clock rounding)
        if own or not stack:
            entry = (end, name, own)
        else:
            entry = (end, stack[-1][1], True) if stack[-1][2] else (end, name, False)
        stack.append(entry)
    close_until(float("inf"))
    return np.array(segs_lo, np.float64), np.array(segs_hi, np.float64), np.array(names, np.int64)


_EMPTY_STACK: _Stack = (np.zeros(0, np.float64), np.zeros(0, np.float64), np.zeros(0, np.int64), np.zeros(0, np.int64))
