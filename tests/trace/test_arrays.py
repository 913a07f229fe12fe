"""gpuprof.trace.arrays gives numpy's own results (np.unique, np.median) without importing numpy.ma, and
start_order np.lexsort's order (None only where that order is the identity)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpuprof.trace.arrays import median, sorted_unique, start_order

REPO = Path(__file__).resolve().parents[2]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, dtype, shape, NaN places and signs of zero: bit for bit, not only ==."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


EDGE_CASES = [
    np.array([], np.float64), np.array([], np.int64), np.array([3, 1, 2, 3, 1]), np.array([1.5]),
    np.array([np.nan, 1.0, np.nan, 0.0, -0.0, 2.0]), np.array([np.nan, np.nan]), np.array([0.0, -0.0, 0.0]),
    np.array([1 + 1j, np.nan + 0j, 1 + np.nan * 1j, 0j]), np.arange(12).reshape(3, 4) % 5,
    np.array([True, False, True]), np.array(["b", "a", "b"]), np.array([np.inf, -np.inf, 1.0, np.inf]),
]


@pytest.mark.parametrize("values", EDGE_CASES, ids=range(len(EDGE_CASES)))
def test_sorted_unique_is_np_unique_on_edge_cases(values: np.ndarray) -> None:
    assert _same(sorted_unique(values), np.unique(values))


@given(hnp.arrays(st.sampled_from([np.float64, np.float32, np.int64, np.int32]), st.integers(0, 60)))
def test_sorted_unique_is_np_unique(values: np.ndarray) -> None:
    # hypothesis draws repeats, NaNs, infinities and both zeros into the float arrays
    assert _same(sorted_unique(values), np.unique(values))


def _check_start_order(ts: np.ndarray, dur: np.ndarray) -> None:
    want = np.lexsort((-dur, ts))
    got = start_order(ts, dur)
    if got is None:
        assert np.array_equal(want, np.arange(len(ts)))
    else:
        assert np.array_equal(got, want)


# few distinct values: ties in start (and in duration) are common, as in a trace's nested events
_TIMES = st.sampled_from([0.0, 1.0, 2.0, 2.5, np.nan, -0.0, np.inf])


@given(st.lists(st.tuples(_TIMES, _TIMES), max_size=30))
def test_start_order_is_lexsort_by_start_longest_first(pairs: list[tuple[float, float]]) -> None:
    ts = np.array([p[0] for p in pairs], np.float64)
    dur = np.array([p[1] for p in pairs], np.float64)
    _check_start_order(ts, dur)
    order = np.lexsort((-dur, ts))
    _check_start_order(ts[order], dur[order])  # sorted already: the identity, whichever way it says so


def test_start_order_says_none_only_for_events_in_order() -> None:
    ts = np.array([0.0, 0.0, 1.0, 1.0, 3.0])
    dur = np.array([5.0, 2.0, 1.0, 1.0, 0.0])  # a parent before the child it starts with; equal ones stay
    assert start_order(ts, dur) is None
    assert start_order(ts[:1], dur[:1]) is None and start_order(ts[:0], dur[:0]) is None
    swapped = np.array([1, 0, 2, 3, 4])  # the child first: sorted back
    assert np.array_equal(start_order(ts[swapped], dur[swapped]), swapped)  # its own inverse
    later = np.array([0.0, 2.0, 1.0])
    assert np.array_equal(start_order(later, np.ones(3)), [0, 2, 1])


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=40))
@example([-0.0])  # signed zeros: numpy's median of [-0.0] is +0.0 (a mean, not the middle value itself)
@example([-0.0, -0.0, 1.0])
@example([-0.0, -0.0])
@example([0.0, -0.0, -0.0, 0.0])
def test_median_is_np_median(xs: list[float]) -> None:
    values = np.array(xs, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inf - inf in a mean: numpy warns the same for both
        want, got = float(np.median(values)), median(values)
    assert np.float64(got).tobytes() == np.float64(want).tobytes() or (np.isnan(got) and np.isnan(want))


def test_median_falls_back_to_numpy() -> None:
    with pytest.warns(RuntimeWarning):
        assert np.isnan(median(np.array([], np.float64)))
    assert np.isnan(median(np.array([1.0, np.nan, 2.0])))
    assert median(np.array([4.0, 1.0, 3.0, 2.0])) == 2.5 and median(np.array([5.0, 1.0, 3.0])) == 3.0


def test_neither_imports_numpy_ma() -> None:
    """In a fresh interpreter: numpy's own np.unique and np.median import numpy.ma, these do not."""
    code = ("import sys, numpy as np; from gpuprof.trace.arrays import median, sorted_unique; "
            "sorted_unique(np.array([3.0, 1.0, 3.0])); median(np.array([1.0, 2.0, 5.0, 7.0])); "
            "print('numpy.ma' in sys.modules); np.median(np.array([1.0, 2.0])); print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO))).stdout.split()
    assert out == ["False", "True"]
