"""One place for the statistics every verdict uses: the Mann–Whitney U test and the smallest
p-value its sample sizes allow, robust spreads that cannot collapse on a few values, the
correction of many p-values taken together, and change points in a series."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

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


def mann_whitney_p(first: Sequence[float], second: Sequence[float]) -> float:
    """The two-sided Mann–Whitney U test's p-value (scipy: exact for small samples without ties)."""
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(list(first), list(second), alternative="two-sided").pvalue)


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
    """Benjamini–Hochberg adjusted p-values (scipy.stats.false_discovery_control): compared with
    the same level, they keep the expected share of false discoveries among many tests at it."""
    if not p_values:
        return []
    from scipy.stats import false_discovery_control

    return [float(value) for value in false_discovery_control(list(p_values), method="bh")]


# Change points (History): PELT (ruptures) on the series standardised by its own run-to-run
# noise, a mean-shift (l2) cost, segments of one run upwards (so that the newest run can start
# one) and a penalty of CHANGE_PENALTY · log(n) per change (BIC-like, made stricter); series
# shorter than MIN_VALUES have none.
MIN_SEGMENT = 1
MIN_VALUES = 4
CHANGE_PENALTY = 3.0


def noise_sigma(values: Sequence[float]) -> float:
    """The run-to-run noise of a series, blind to its level shifts: the MAD-based spread of its
    consecutive differences over √2 (a difference of two values has √2 times their spread)."""
    differences = [after - before for before, after in zip(values, values[1:], strict=False)]
    sigma = mad_sigma(differences) / math.sqrt(2)
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
