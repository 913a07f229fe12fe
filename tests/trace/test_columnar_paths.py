"""The numpy paths of the hot metrics agree with the plain loops they replaced, to the last bit.

* idle parts: the pieces of :func:`gpuprof.trace.idleparts._innermost_stack` (rounds of
  clipping in numpy) against :func:`_stack_pieces` (the stack walk), on
  random threads of nested events, with overruns (a child ending after its
  parent, as clock rounding makes them), zero-length events and ties;
* :func:`gpuprof.trace.threads.on_thread` against a look-up of each event's
  ``(pid, tid)``, and :func:`gpuprof.rules.common.named` against a test per event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.trace import idleparts
from gpuprof.trace.columns import named
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.model import Event
from gpuprof.trace.threads import on_thread, thread_keys


@st.composite
def _threads(draw: st.DrawFn) -> list[tuple[float, float]]:
    """(start, duration) of one thread's events, mostly nested, sometimes overrunning their parent."""
    out: list[tuple[float, float]] = []

    def fill(lo: float, hi: float, depth: int) -> None:
        t = lo
        while t < hi and depth < 5 and len(out) < 60:
            start = t + draw(st.sampled_from([0.0, 0.5, 1.0, 2.0]))
            if start > hi:
                return
            end = min(hi, start + draw(st.sampled_from([0.0, 0.0, 1.0, 3.0, 7.0])))
            if draw(st.integers(0, 9)) == 0:
                end += draw(st.sampled_from([0.5, 1.0, 2.0]))  # overruns its parent
            out.append((start, end - start))
            if end > start and draw(st.booleans()):
                fill(start, end, depth + 1)
            t = end + draw(st.sampled_from([0.0, 0.5, 1.0]))

    fill(0.0, 100.0, 0)
    return out


def _sorted_arrays(spans: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    ts = np.array([s for s, _ in spans], np.float64)
    dur = np.array([d for _, d in spans], np.float64)
    order = np.lexsort((-dur, ts))
    return ts[order], dur[order]


def _innermost_pieces(ts: np.ndarray, dur: np.ndarray, name_ids: np.ndarray,
                      pref: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The pieces of the time line under an event and the name each is charged to, from
    :func:`idleparts._innermost_stack` (None: not settled), all pieces at once."""
    stack = idleparts._innermost_stack(ts, dur, name_ids, pref)
    if stack is None:
        return None
    cuts, when, top_after, charged = stack
    lo, hi = cuts[:-1], cuts[1:]
    k = np.searchsorted(when, lo, side="right") - 1  # the last open/close at or before the piece's start
    top = np.where(k >= 0, top_after[np.maximum(k, 0)], -1)
    has = top >= 0
    return lo[has], hi[has], charged[top[has]]


@pytest.mark.slow  # walks every stack of real traces twice (about 2 s)
@settings(max_examples=120, deadline=None)
@given(spans=_threads(), prefer_every=st.integers(1, 4), seed=st.integers(0, 3))
def test_innermost_pieces_equal_the_stack_walk(spans: list[tuple[float, float]], prefer_every: int, seed: int) -> None:
    ts, dur = _sorted_arrays(spans)
    names = (np.arange(len(ts)) * 7 + seed) % 5
    pref = names % prefer_every == 0
    got = _innermost_pieces(ts, dur, names, pref)
    want = idleparts._stack_pieces(ts, dur, names, pref)
    assert got is not None  # these few overruns settle within the rounds
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(st.tuples(st.sampled_from([-0.0, 0.0, 1.0, 2.0, 3.5]), st.sampled_from([0.5, 1.0, 2.0, float("inf")])),
                      min_size=1, max_size=40))
def test_merged_tokens_are_the_three_key_sort(spans: list[tuple[float, float]]) -> None:
    # issue 44: _stack_tops merges the opens (in order) in among the sorted closes instead of sorting them all on
    # (time, close before open, later-opened close first / open in index order): the same order, bit for bit
    ts, dur = _sorted_arrays(spans)
    ends = ts + dur
    for i4 in (np.int32, np.int64):
        want = idleparts._tokens_sorted(ts, ends, i4)
        got = idleparts._tokens_merged(ts, ends, i4)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.array_equal(np.signbit(got[0]), np.signbit(want[0]))  # -0.0 where the sort puts it


def _add_innermost(out: defaultdict[tuple[str, str], float], kind: str, events: list[Event], ts: np.ndarray,
                   dur: np.ndarray, idle: Intervals, prefer: Callable[[str], bool] | None) -> None:
    """One thread's nested ``events`` charged as idle_parts charges them: those overlapping idle time
    (:func:`idleparts._overlapping`), each name coded in order of first event."""
    hit = idleparts._overlapping(ts, dur, idle)
    if hit is None:
        return
    codes: dict[str, int] = {}
    ids = np.array([codes.setdefault(e.name, len(codes)) for e in events], np.int32)
    if hit is not idleparts._ALL:
        ts, dur, ids = ts[hit], dur[hit], ids[hit]
    idleparts._add_overlapping(out, kind, [ts, dur], idle, prefer, (ids, list(codes)))


def test_add_innermost_charges_the_innermost_preferred_frame() -> None:
    # outer user frame [0, 10) > library frame [2, 8) > user frame [4, 6); idle everywhere
    spans = [(0.0, 10.0), (2.0, 6.0), (4.0, 2.0)]
    names = ["train.py(1): main", "lib.py(3): helper", "model.py(9): fwd"]
    events = [Event(kind=0, name=n, ts=s, dur=d, pid=1, tid=1) for (s, d), n in zip(spans, names)]
    ts, dur = _sorted_arrays(spans)
    out: defaultdict[tuple[str, str], float] = defaultdict(float)
    idle = Intervals.from_pairs([(0.0, 10.0)])
    _add_innermost(out, "python", events, ts, dur, idle, prefer=lambda n: not n.startswith("lib"))
    assert dict(out) == {("python", "train.py(1): main"): 8.0, ("python", "model.py(9): fwd"): 2.0}



_SCALE = 0.7071067811865476  # 1/sqrt(2): few sums of scaled times are exact

@settings(max_examples=80, deadline=None)
@given(spans=_threads(), gaps=st.lists(st.tuples(st.floats(0, 100), st.floats(0, 60)), min_size=1, max_size=6),
       block=st.integers(2, 9))
@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_add_innermost_in_blocks_sums_as_one_bincount(spans: list[tuple[float, float]],
                                                      gaps: list[tuple[float, float]], block: int) -> None:
    """The pieces looked up a few at a time and added as they come (np.add.at) give the sums of one
    bincount over all the pieces, to the bit, names in order of first piece (the code before issue 24's
    memory work): no piece lost or counted twice at a block's edge."""
    spans = [(s * _SCALE, d * _SCALE) for s, d in spans]  # inexact times: sums that depend on their order
    names = [f"f{i % 2}" for i in range(len(spans))]
    events = [Event(kind=0, name=n, ts=s, dur=d, pid=1, tid=1) for (s, d), n in zip(spans, names)]
    idle = Intervals.from_pairs([(a * _SCALE, (a + w) * _SCALE) for a, w in gaps])
    ts = np.array([s for s, _ in spans], np.float64)
    dur = np.array([d for _, d in spans], np.float64)
    # the reference: every piece at once, from the stack walk over the events that overlap idle time
    # (as idle_parts picks them: an event's own end, before any clip to its parent's)
    hit = np.array([any(a < s + d and s < b for a, b in idle) for s, d in spans], bool)
    events = [e for e, h in zip(events, hit.tolist()) if h]
    names = [n for n, h in zip(names, hit.tolist()) if h]
    ts, dur = ts[hit], dur[hit]
    order = np.lexsort((-dur, ts))
    codes = {n: i for i, n in enumerate(dict.fromkeys(names[j] for j in order.tolist()))}
    ids = np.array([codes[names[j]] for j in order.tolist()], np.int64)
    lo, hi, seg = idleparts._stack_pieces(ts[order], dur[order], ids, np.ones(len(codes), bool)[ids])
    per = idle.per_segment(lo, hi)
    seg, per = seg[per > 0], per[per > 0]
    want: dict[tuple[str, str], float] = {}
    if len(seg):
        sums = np.bincount(seg, weights=per, minlength=len(codes))
        by_code = list(codes)
        for j in np.sort(np.unique(seg, return_index=True)[1]).tolist():
            want[("python", by_code[int(seg[j])])] = float(sums[int(seg[j])])
    out: defaultdict[tuple[str, str], float] = defaultdict(float)
    saved = idleparts._PIECES_AT_ONCE
    idleparts._PIECES_AT_ONCE = block
    try:
        _add_innermost(out, "python", events, ts, dur, idle, prefer=None)
    finally:
        idleparts._PIECES_AT_ONCE = saved
    assert list(out.items()) == list(want.items())


@settings(max_examples=80, deadline=None)
@given(pairs=st.lists(st.tuples(st.sampled_from([1, "1", 2]), st.sampled_from([5, "5", 7])), max_size=40),
       main=st.tuples(st.sampled_from([1, "1", 2]), st.sampled_from([5, "5", 7])))
def test_on_thread_is_the_pair_lookup(pairs: list[tuple[int | str, int | str]], main: tuple[int | str, int | str]) -> None:
    events = [Event(kind=0, name="x", ts=float(i), dur=1.0, pid=p, tid=t) for i, (p, t) in enumerate(pairs)]
    keys = thread_keys(main)
    want = [e for e in events if (e.pid, e.tid) in keys]
    assert [id(e) for e in on_thread(events, keys)] == [id(e) for e in want]


@settings(max_examples=80, deadline=None)
@given(names=st.lists(st.sampled_from(["a", "bb", "abc", "c"]), max_size=30))
def test_named_asks_once_per_distinct_name(names: list[str]) -> None:
    events = [Event(kind=0, name=n, ts=float(i), dur=1.0, pid=1, tid=1) for i, n in enumerate(names)]
    asked: list[str] = []

    def wanted(name: str) -> bool:
        asked.append(name)
        return name.startswith("a")

    got = named(events, wanted)
    assert [id(e) for e in got] == [id(e) for e in events if e.name.startswith("a")]
    assert sorted(asked) == sorted(set(names))
