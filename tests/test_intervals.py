"""Interval maths against a brute-force model on a fine grid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprof.trace import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)


def _cells(a):
    return {x for s, e in a for x in range(s, e)}


@settings(max_examples=200, deadline=None)
@given(spans, spans)
def test_set_operations_match_brute_force(a, b):
    ma, mb = iv.merge(sorted(a)), iv.merge(sorted(b))
    assert _cells(ma) == _cells(a)
    assert all(s < e for s, e in ma) and all(ma[i][1] < ma[i + 1][0] for i in range(len(ma) - 1))
    assert _cells(iv.union(ma, mb)) == _cells(a) | _cells(b)
    assert _cells(iv.intersect(ma, mb)) == _cells(a) & _cells(b)
    assert _cells(iv.subtract(ma, mb)) == _cells(a) - _cells(b)
    assert iv.total(ma) == len(_cells(a))


@settings(max_examples=200, deadline=None)
@given(spans, st.lists(st.integers(0, 80), min_size=2, max_size=8, unique=True))
def test_per_window_and_clip(a, cuts):
    cuts = sorted(cuts)
    windows = list(zip(cuts, cuts[1:]))
    ma = iv.merge(sorted(a))
    got = iv.per_window(ma, windows)
    cells = _cells(a)
    for (lo, hi), value in zip(windows, got):
        assert value == len({x for x in cells if lo <= x < hi})
        assert iv.total(iv.clip(ma, lo, hi)) == value
