"""stack_parents_of (numpy, binary lifting) gives the stack walk's answer on any ops in time order."""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.trace.threads import _stack_walk, stack_parents, stack_parents_of

# small integer times: many ties and touching ends (end == next start), where the pop rule matters
_times = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), max_size=80)


@given(_times)
@settings(max_examples=300, deadline=None)
def test_matches_the_stack_walk(spans: list[tuple[int, int]]) -> None:
    spans.sort(key=lambda p: p[0])
    starts = [float(s) for s, _ in spans]
    ends = [float(s + d) for s, d in spans]
    want = _stack_walk(starts, ends)
    assert stack_parents_of(np.array(starts, np.float64), np.array(ends, np.float64)).tolist() == want
    assert stack_parents(starts, ends) == want


def test_overlapping_ops_that_do_not_nest() -> None:
    # op 1 starts inside op 0 and outlives it; op 2 starts after op 0 ended, inside op 1
    starts, ends = [0.0, 5.0, 12.0, 13.0], [10.0, 20.0, 14.0, 30.0]
    assert stack_parents(starts, ends) == [-1, 0, 1, 2] == _stack_walk(starts, ends)


def test_out_of_order_or_nan_falls_back_to_the_walk() -> None:
    for starts, ends in (([3.0, 1.0, 2.0], [5.0, 4.0, 3.0]), ([0.0, 1.0, 2.0], [9.0, float("nan"), 3.0])):
        assert stack_parents(starts, ends) == _stack_walk(starts, ends)


def test_long_random_thread() -> None:
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 10_000, 5000)).astype(np.float64)
    ends = starts + rng.integers(0, 300, 5000)
    assert stack_parents_of(starts, ends).tolist() == _stack_walk(starts.tolist(), ends.tolist())


def test_the_block_maxima_held_at_once_are_about_half_the_levels() -> None:
    # issue 44: the binary lifting's levels (one float per op each, ~17 for a 100k-op thread) were the peak of a
    # whole analysis; only the even ones are kept (the odd one made again on the way down), so what the call
    # allocates at its peak is ~12 arrays of n floats, not ~19 (numpy's arrays are traced by tracemalloc)
    n = 1 << 16
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, 10 * n, n)).astype(np.float64)
    ends = starts + rng.integers(0, 50, n)
    tracemalloc.start()
    try:
        got = stack_parents_of(starts, ends)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.tolist() == _stack_walk(starts.tolist(), ends.tolist())
    assert peak < 14 * 8 * n
