"""The straggler group search (gpuprof.distributed.arrivals._consistent) is linear in ranks after one sort;
it must pick exactly the group the plain definition picks: the fewest ranks (at most half), in falling order
of total wait caused, whose smallest total is positive and at least MIN_DOMINANCE times the largest of the
rest, each above the floor in its median step and in MIN_STEP_SHARE of the steps (at least 2)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpuprof.distributed.arrivals import MIN_DOMINANCE, MIN_STEP_SHARE, _consistent


def _plain(in_step: np.ndarray, floor: float, steps: int) -> list[int]:
    """The definition, group by group (quadratic in ranks: what the search did before)."""
    n = len(in_step)
    median = np.median(in_step, axis=1) if n else np.zeros(0)
    total = in_step.sum(axis=1)
    order = sorted(range(n), key=lambda k: -total[k])
    for c in range(1, n // 2 + 1):
        slow, rest = order[:c], order[c:]
        smallest = min(float(total[k]) for k in slow)
        largest_rest = max((float(total[k]) for k in rest), default=0.0)
        if smallest <= 0 or smallest < MIN_DOMINANCE * largest_rest:
            continue
        if all(median[k] >= floor and (in_step[k] >= floor).sum() >= max(2, MIN_STEP_SHARE * steps) for k in slow):
            return sorted(slow)
    return []


waits = st.sampled_from([0.0, 50.0, 100.0, 400.0, 2000.0, 5000.0])


@given(hnp.arrays(np.float64, st.tuples(st.integers(0, 12), st.integers(1, 6)), elements=waits),
       st.sampled_from([0.0, 100.0, 500.0]))
@example(np.array([[2000.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4]), 100.0)  # one straggler
@example(np.array([[2000.0] * 4, [2000.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4]), 100.0)  # two together
@example(np.array([[2000.0, 0.0, 0.0, 0.0], [0.0] * 4, [0.0] * 4]), 100.0)  # once only: not consistent
@example(np.array([[2000.0] * 4, [700.0] * 4, [700.0] * 4, [0.0] * 4, [0.0] * 4]), 100.0)  # no group dominates
def test_the_group_search_picks_what_the_definition_picks(in_step: np.ndarray, floor: float) -> None:
    steps = in_step.shape[1]
    median = np.median(in_step, axis=1) if len(in_step) else np.zeros(0)
    assert _consistent(in_step, median, floor, steps) == _plain(in_step, floor, steps)


def test_the_examples_mean_what_they_say() -> None:
    one = np.array([[2000.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4])
    two = np.array([[0.0] * 4, [2000.0] * 4, [0.0] * 4, [2000.0] * 4, [0.0] * 4])
    close = np.array([[2000.0] * 4, [700.0] * 4, [700.0] * 4, [0.0] * 4, [0.0] * 4])
    for m, want in ((one, [0]), (two, [1, 3]), (close, [])):
        assert _consistent(m, np.median(m, axis=1), 100.0, 4) == want


def test_many_ranks_with_one_straggler() -> None:
    """4,096 ranks (the old search took about a second here, all of it in per-group min/max)."""
    in_step = np.zeros((4096, 5))
    in_step[1234] = 3000.0
    assert _consistent(in_step, np.median(in_step, axis=1), 100.0, 5) == [1234]
    in_step[:] = 10.0  # everyone a little: no group stands out, every group size is looked at
    assert _consistent(in_step, np.median(in_step, axis=1), 100.0, 5) == []
