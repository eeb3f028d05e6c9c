"""One place for the statistics every verdict uses: the two-sample t test on log values with a
moderated variance and its minimum detectable effect, the Mann–Whitney U test and the smallest
p-value its sample sizes allow, robust spreads that cannot collapse on a few values, the
correction of many p-values taken together, and change points in a series."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# MAD · MAD_TO_SIGMA estimates a normal standard deviation.
MAD_TO_SIGMA = 1.4826
# The expected range of n normal values in standard deviations (d2 of quality-control tables):
# range / d2 estimates the standard deviation, and on three values it cannot collapse as MAD
# does when two of them agree.
RANGE_TO_SIGMA = {
    2: 1.128,
    3: 1.693,
    4: 2.059,
    5: 2.326,
    6: 2.534,
    7: 2.704,
    8: 2.847,
    9: 2.970,
    10: 3.078,
    11: 3.173,
    12: 3.258,
    13: 3.336,
    14: 3.407,
    15: 3.472,
    16: 3.532,
    17: 3.588,
    18: 3.640,
    19: 3.689,
    20: 3.735,
}


@dataclass(frozen=True)
class LogShiftTest:
    """A two-sample t test of the shift of mean log values, run against baseline."""

    shift: float  # mean log(run) − mean log(baseline)
    standard_error: float
    degrees_of_freedom: float
    p_value: float  # two-sided


def pooled_variance(first: Sequence[float], second: Sequence[float]) -> tuple[float, int]:
    """The two samples' pooled variance (each about its own mean) and its degrees of freedom."""
    freedom = len(first) + len(second) - 2
    if freedom < 1:
        return 0.0, 0
    squares = sum((value - statistics.fmean(values)) ** 2 for values in (first, second) for value in values)
    return squares / freedom, freedom


def matched_variance(first: Sequence[float], second: Sequence[float]) -> tuple[float, int]:
    """Half the variance of the matched differences ``first[i] − second[i]`` and its degrees of
    freedom: the per-value variance that gives a matched test's standard error through the same
    formula as a pooled one, sqrt(v · (1/n + 1/n)) = sqrt(var(differences) / n)."""
    differences = [a - b for a, b in zip(first, second, strict=True)]
    if len(differences) < 2:
        return 0.0, 0
    return statistics.variance(differences) / 2, len(differences) - 1


def moderated_variance(own: float, freedom: float, prior: float, prior_freedom: float) -> float:
    """A variance on ``freedom`` degrees of freedom moderated towards ``prior`` worth
    ``prior_freedom`` (empirical Bayes, as limma): (d0·s0² + d·s²)/(d0 + d); 0 with neither."""
    total_freedom = freedom + prior_freedom
    return (prior_freedom * prior + freedom * own) / total_freedom if total_freedom > 0 else 0.0


def log_shift_test(
    run_logs: Sequence[float],
    baseline_logs: Sequence[float],
    prior_variance: float,
    prior_freedom: float,
    matched: bool = False,
) -> LogShiftTest:
    """The t test of mean(run_logs) − mean(baseline_logs) on the pooled variance moderated
    towards ``prior_variance`` with ``prior_freedom`` degrees of freedom (an empirical-Bayes
    variance as in limma: (d0·s0² + d·s²)/(d0 + d) on d0 + d degrees of freedom). With three
    values a side a row's own variance is a guess on 4 degrees of freedom, and a row whose
    values happened to agree would alert on any shift; its group's typical variance steadies it.
    ``matched``: the two lists pair value by value (an A/B session's rounds, each side's round i
    measured together), and the test is the paired one, on their differences' variance
    (``matched_variance``): what the rounds share cancels."""
    # scipy.stats.t.sf is special.stdtr behind argument checks that cost 0.1 ms a call; a review
    # makes thousands of these tests (its calibration), on arguments the checks always pass.
    from scipy.special import stdtr

    shift = statistics.fmean(run_logs) - statistics.fmean(baseline_logs)
    own, freedom = (matched_variance if matched else pooled_variance)(run_logs, baseline_logs)
    total_freedom = freedom + prior_freedom
    variance = moderated_variance(own, freedom, prior_variance, prior_freedom)
    error = math.sqrt(variance * (1 / len(run_logs) + 1 / len(baseline_logs)))
    if error == 0:
        p_value = 1.0 if shift == 0 else 0.0
    else:
        p_value = float(2 * stdtr(total_freedom, -abs(shift) / error))
    return LogShiftTest(shift, error, total_freedom, p_value)


@functools.lru_cache(maxsize=4096)
def t_quantile(probability: float, freedom: float) -> float:
    """Student's t quantile for 0 < ``probability`` < 1, as scipy.stats.t.ppf gives it
    (special.stdtrit behind its argument checks, and behind a second of importing scipy.stats;
    at 0 stdtrit says +inf where ppf says −inf), kept: a review asks for the same few (level,
    degrees of freedom) thousands of times (its calibration)."""
    from scipy.special import stdtrit

    return float(stdtrit(freedom, probability))


def minimum_detectable_log(standard_error: float, freedom: float, alpha: float, power: float) -> float:
    """The smallest |log shift| a two-sided t test at level ``alpha`` detects with ``power``:
    (t_{1−α/2} + t_{power}) · SE on ``freedom`` degrees of freedom."""
    if freedom <= 0:
        return math.inf
    return (t_quantile(1 - alpha / 2, freedom) + t_quantile(power, freedom)) * standard_error


def smallest_p_value(first: int, second: int) -> float:
    """The smallest two-sided p-value an exact Mann–Whitney U test of these sample sizes can give."""
    return min(1.0, 2.0 / math.comb(first + second, first))


def mad_sigma(values: Sequence[float]) -> float:
    """MAD_TO_SIGMA · the median absolute deviation from the median."""
    if not values:
        return 0.0
    middle = statistics.median(values)
    return MAD_TO_SIGMA * statistics.median(abs(value - middle) for value in values)


def robust_sigma(values: Sequence[float]) -> float:
    """A standard deviation estimate that cannot collapse on a few values: the larger of the
    MAD-based and the range-based estimate (for 1.00, 1.01, 1.30 MAD says 0.015, the range 0.18)."""
    if len(values) < 2:
        return 0.0
    divisor = RANGE_TO_SIGMA.get(len(values), RANGE_TO_SIGMA[max(RANGE_TO_SIGMA)])
    return max(mad_sigma(values), (max(values) - min(values)) / divisor)


def adjusted_p_values(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values: compared with the same level, they keep the expected
    share of false discoveries among many tests at it. The arithmetic of
    scipy.stats.false_discovery_control(method="bh"), value for value (tests/test_statistics.py
    holds them equal), without its argument handling: 3 ms a call, and a review's calibration
    adjusts hundreds of families."""
    values = np.asarray(list(p_values), dtype=float)
    if not np.all((values >= 0.0) & (values <= 1.0)):
        raise ValueError(f"p-values must lie in [0, 1], got {p_values}")
    if values.size <= 1:
        return [float(value) for value in values]
    order = np.argsort(values)
    count = values.size
    # Sorted, each times m / rank, then each the least of itself and every larger one's.
    scaled = values[order] * (count / np.arange(1, count + 1, dtype=float))
    scaled = np.minimum.accumulate(scaled[::-1])[::-1]
    adjusted = np.empty_like(scaled)
    adjusted[order] = scaled
    return [float(value) for value in np.clip(adjusted, 0.0, 1.0)]


# Change points (History): PELT (ruptures) on the series standardised by its own run-to-run
# noise, a mean-shift (l2) cost, segments of one run upwards (so that the newest run can start
# one) and a penalty of CHANGE_PENALTY · log(n) per change (BIC-like, made stricter); series
# shorter than MIN_VALUES have none.
MIN_SEGMENT = 1
MIN_VALUES = 4
CHANGE_PENALTY = 3.0


def noise_sigma(values: Sequence[float]) -> float:
    """The run-to-run noise of a series, blind to its level shifts: MAD_TO_SIGMA times the median
    |consecutive difference|, over √2 (a difference of two values has √2 times their spread).
    About zero, not about the differences' median: a series alternating ±2.5% has differences
    near +1 and −1 whose spread about their median is near 0, and four of its eight runs were
    drawn as new levels."""
    differences = [after - before for before, after in zip(values, values[1:], strict=False)]
    sigma = (
        MAD_TO_SIGMA * statistics.median(abs(difference) for difference in differences) / math.sqrt(2)
        if differences
        else 0.0
    )
    if sigma == 0 and differences:
        sigma = statistics.pstdev(differences) / math.sqrt(2)
    return sigma


def change_points(values: Sequence[float]) -> list[int]:
    """The positions where a new level starts in ``values`` (oldest first), by PELT from the
    ruptures library; a constant series has none."""
    if len(values) < MIN_VALUES:
        return []
    sigma = noise_sigma(values)
    if sigma == 0:
        return []
    import numpy
    import ruptures

    signal = numpy.asarray(values, dtype=float).reshape(-1, 1) / sigma
    algorithm = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(signal)
    breaks = algorithm.predict(pen=CHANGE_PENALTY * math.log(len(values)))
    return [int(position) for position in breaks[:-1]]  # the last break is the series' end
