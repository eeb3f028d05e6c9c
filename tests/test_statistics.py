"""The review's statistics that skip scipy's argument handling (analysis.statistics: a calibration
makes thousands of these calls) give scipy's values exactly, so no verdict moves with the shortcut."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import false_discovery_control
from scipy.stats import t as student

from analysis.statistics import adjusted_p_values, log_shift_test, minimum_detectable_log, t_quantile


def p_value_lists(seed: int) -> list[list[float]]:
    """Seeded lists of p-values of every size a family has, with ties, zeros and ones among them."""
    rng = np.random.default_rng(seed)
    lists: list[list[float]] = [[], [0.3], [0.0, 0.0], [1.0, 1.0, 1.0], [0.01, 0.01, 0.5]]
    for _ in range(400):
        size = int(rng.integers(2, 40))
        values = [float(value) for value in rng.random(size) ** 3]
        if rng.random() < 0.3:
            values[0] = values[-1]  # a tie
        if rng.random() < 0.2:
            values[int(rng.integers(size))] = float(rng.choice([0.0, 1.0]))
        lists.append(values)
    return lists


def test_benjamini_hochberg_gives_scipys_values_exactly() -> None:
    for values in p_value_lists(seed=7):
        expected = [float(value) for value in false_discovery_control(values, method="bh")] if values else []
        assert adjusted_p_values(values) == expected, values


def test_benjamini_hochberg_refuses_what_is_no_p_value() -> None:
    for bad in ([0.2, 1.5], [-0.1, 0.3], [math.nan, 0.1]):
        with pytest.raises(ValueError, match="p-values must lie in"):
            adjusted_p_values(bad)


def test_the_t_tests_p_value_and_quantiles_are_scipys() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        run = [float(value) for value in rng.normal(0.05, 0.03, int(rng.integers(2, 8)))]
        baseline = [float(value) for value in rng.normal(0.0, 0.03, int(rng.integers(2, 8)))]
        prior, prior_freedom = float(rng.uniform(1e-5, 1e-3)), float(rng.choice([0.0, 4.0]))
        test = log_shift_test(run, baseline, prior, prior_freedom)
        expected = float(2 * student.sf(abs(test.shift) / test.standard_error, test.degrees_of_freedom))
        assert test.p_value == expected
        freedom = float(rng.uniform(1, 30))
        assert t_quantile(0.995, freedom) == float(student.ppf(0.995, freedom))
        expected_detectable = float((student.ppf(0.995, freedom) + student.ppf(0.8, freedom)) * test.standard_error)
        assert minimum_detectable_log(test.standard_error, freedom, 0.01, 0.8) == expected_detectable
    assert minimum_detectable_log(0.1, 0, 0.01, 0.8) == math.inf


def test_identical_values_give_a_p_value_of_one_and_any_shift_zero() -> None:
    assert log_shift_test([0.1, 0.1], [0.1, 0.1], 0.0, 0.0).p_value == 1.0
    assert log_shift_test([0.2, 0.2], [0.1, 0.1], 0.0, 0.0).p_value == 0.0
