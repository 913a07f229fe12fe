"""Interval maths against a brute-force model on a fine grid."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.trace.intervals import Intervals, first_cover_per_window

# intervals on an integer grid, empty ones (length 0) included on purpose
spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)
cut_lists = st.lists(st.integers(0, 80), min_size=2, max_size=8, unique=True)


def _cells(a):
    return {x for s, e in a for x in range(int(s), int(e))}


def _normal(x: Intervals) -> bool:
    pairs = list(x)
    return all(s < e for s, e in pairs) and all(pairs[i][1] < pairs[i + 1][0] for i in range(len(pairs) - 1))


@settings(max_examples=300, deadline=None)
@given(spans, spans)
def test_set_operations_match_brute_force(a, b):
    ma, mb = Intervals.from_pairs(a), Intervals.from_pairs(b)
    assert _cells(ma) == _cells(a)
    assert _normal(ma)
    for got, want in (
        (ma.union(mb), _cells(a) | _cells(b)),
        (ma.intersect(mb), _cells(a) & _cells(b)),
        (ma.subtract(mb), _cells(a) - _cells(b)),
    ):
        assert _cells(got) == want
        assert _normal(got)
    assert ma.total() == len(_cells(a))


# real-valued ends (not on the grid), so that equal sets from both sides would show any difference in the bits
real_spans = st.lists(st.tuples(st.floats(0, 100, allow_subnormal=False), st.floats(0, 5, allow_subnormal=False))
                      .map(lambda t: (t[0], t[0] + t[1])), max_size=15)


def _looked_up(one: Intervals, two: Intervals) -> tuple[bytes, bytes]:
    """The intersection found by looking each interval of ``one`` up in ``two`` (whatever their sizes)."""
    pieces = [(max(s, x), min(e, y)) for s, e in one for x, y in two if max(s, x) < min(e, y)]
    return np.array([p[0] for p in pieces], np.float64).tobytes(), np.array([p[1] for p in pieces], np.float64).tobytes()


@settings(max_examples=300, deadline=None)
@given(real_spans, real_spans)
def test_intersect_gives_the_same_arrays_either_way_round(a, b):
    # intersect looks the fewer intervals up in the others: which side has fewer must not change a bit
    ma, mb = Intervals.from_pairs(a), Intervals.from_pairs(b)
    ab = ma.intersect(mb)
    got = (ab.starts.tobytes(), ab.ends.tobytes())
    assert got == _looked_up(ma, mb) == _looked_up(mb, ma)
    assert _normal(ab)
    for s, e in ab:  # each piece lies in an interval of each side
        assert any(x <= s and e <= y for x, y in ma) and any(x <= s and e <= y for x, y in mb)


@settings(max_examples=200, deadline=None)
@given(spans, cut_lists)
def test_per_window_and_clip(a, cuts):
    cuts = sorted(cuts)
    windows = list(zip(cuts, cuts[1:]))  # touching windows, as steps tile the timeline
    ma = Intervals.from_pairs(a)
    got = ma.per_window(windows)
    cells = _cells(a)
    for (lo, hi), value in zip(windows, got):
        assert value == len({x for x in cells if lo <= x < hi})
        assert ma.clip(lo, hi).total() == value


@settings(max_examples=200, deadline=None)
@given(st.lists(spans, min_size=1, max_size=4), cut_lists)
def test_first_cover_gives_each_instant_to_the_first_active_layer(layers, cuts):
    cuts = sorted(cuts)
    windows = list(zip(cuts, cuts[1:]))
    got = first_cover_per_window(windows, [Intervals.from_pairs(layer) for layer in layers])
    cell_sets = [_cells(layer) for layer in layers]
    for w, (lo, hi) in enumerate(windows):
        want = [0] * (len(layers) + 1)
        for x in range(lo, hi):
            owner = next((k for k, cells in enumerate(cell_sets) if x in cells), len(layers))
            want[owner] += 1
        assert got[w].tolist() == want
        assert sum(got[w]) == hi - lo


def test_covering_and_next_start():
    x = Intervals.from_pairs([(10, 20), (30, 40)])
    assert x.covering(15) == 0 and x.covering(20) == 0 and x.covering(25) is None and x.covering(5) is None
    assert x.next_start(21) == 1 and x.next_start(41) == 2 and x.next_start(0) == 0
    ts = np.array([5, 10, 15, 20, 25, 30, 40, 41], dtype=np.float64)
    assert x.covers(ts).tolist() == [x.covering(float(t)) is not None for t in ts]  # the many-times version agrees
    assert Intervals.empty().covers(ts).tolist() == [False] * len(ts)


def test_unsorted_and_float_input():
    x = Intervals.from_pairs([(5.5, 6.25), (1.0, 2.0), (1.5, 3.0), (3.0, 4.0)])
    assert list(x) == [(1.0, 4.0), (5.5, 6.25)]  # overlapping and touching intervals fuse
    assert Intervals.from_pairs([]).total() == 0.0 and not Intervals.empty()
    assert Intervals.from_pairs([]).per_window([(0, 1)]) == [0.0]
