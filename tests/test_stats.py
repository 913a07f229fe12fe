"""gpuprof.stats: the robust statistics the phases, the history, diff and try share, against plain computations."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from gpuprof.stats import (
    MAD_TO_SD,
    least_absolute_split,
    least_squares_split,
    noise_band,
    robust_sigma,
    running_median,
    segments,
    step_noise,
)


def test_robust_sigma_is_the_scaled_mad_and_ignores_one_outlier() -> None:
    xs = [10.0, 11.0, 9.0, 10.5, 9.5]
    assert robust_sigma(xs) == pytest.approx(MAD_TO_SD * 0.5)
    assert robust_sigma([*xs, 1e6]) == pytest.approx(MAD_TO_SD * 0.75)  # an outlier moves it by a rank, not 1e6
    assert noise_band([1.0], xs) is None


def test_step_noise_ignores_a_level_shift() -> None:
    rng = np.random.default_rng(1)
    noise = rng.normal(0.0, 1.0, 4000)
    shifted = noise + np.where(np.arange(4000) >= 2000, 100.0, 0.0)
    assert step_noise(shifted) == pytest.approx(step_noise(noise), rel=1e-2)
    assert step_noise(noise) == pytest.approx(1.0, rel=0.1)  # a standard deviation for normal noise
    assert statistics.stdev(shifted) > 40  # what a plain spread would call noise
    assert step_noise([3.0]) == 0.0 and step_noise([]) == 0.0


def test_segments_split_each_part_until_the_split_declines() -> None:
    level = np.repeat([0.0, 5.0, 1.0], [30, 40, 30])
    got = segments(len(level), least_squares_split(level, min_len=5, penalty=1.0))
    assert got == [(0, 30), (30, 70), (70, 100)]
    assert segments(len(level), least_squares_split(level, min_len=5, penalty=1.0), max_segments=2) == [(0, 30), (30, 100)]
    assert segments(4, lambda a, b: None) == [(0, 4)]


def test_least_absolute_split_is_robust_to_an_outlier_run() -> None:
    xs = [1.0, 1.0, 50.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0]
    assert least_absolute_split(xs, 2) == 5
    assert least_absolute_split([1.0, 2.0, 3.0], 2) is None


def test_running_median_is_the_centred_window_median() -> None:
    y = np.array([5.0, 1.0, 9.0, 2.0, 7.0, 3.0])
    got = running_median(y, 3)
    padded = [5.0, *y, 3.0]
    assert got.tolist() == [statistics.median(padded[i:i + 3]) for i in range(len(y))]
    assert running_median(y[:2], 3).tolist() == [5.0, 1.0]
    assert not math.isnan(float(running_median(y, 5).sum()))
