"""What the distribution check (runner.experiments.parts.distribution_check) can see: the power of its
joint Pearson chi-square test, per emitted position, by the noncentral approximation and by a
simulation of the same test. A power statement stands only where the simulation backs it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

SIGNIFICANCE = 1e-3  # the verdict's p-value threshold
POWER = 0.8
# Chi-square needs about five expected counts per bin: rarer characters share one bin.
MIN_EXPECTED_PER_BIN = 5.0


def detection_power(tv: float, samples: int, degrees_of_freedom: int, significance: float = SIGNIFICANCE) -> float:
    """The chance that the test rejects at ``significance`` when the first position's distribution
    is off by total variation ``tv`` in the least favourable way (noncentral chi-square, λ = 4·n·tv²)."""
    from scipy import stats

    critical = stats.chi2.isf(significance, degrees_of_freedom)
    return float(stats.ncx2.sf(critical, degrees_of_freedom, 4 * samples * tv * tv))


def detectable_tv(
    samples: int, degrees_of_freedom: int, power: float = POWER, significance: float = SIGNIFICANCE
) -> float:
    """The smallest TV detected with ``power`` (1 when the test has no freedom or no TV suffices)."""
    if degrees_of_freedom < 1 or detection_power(1.0, samples, degrees_of_freedom, significance) < power:
        return 1.0
    from scipy import optimize

    return float(
        optimize.brentq(
            lambda tv: detection_power(tv, samples, degrees_of_freedom, significance) - power, 1e-9, 1.0, xtol=1e-7
        )
    )


# The power statement's simulation: this many simulated tests per position, and how far below
# POWER their share of rejections may fall by chance before the statement counts as unbacked
# (two standard errors of a share of SIMULATION_TRIALS at POWER: 0.04).
SIMULATION_TRIALS = 400
SIMULATION_SLACK = 2 * math.sqrt(POWER * (1 - POWER) / SIMULATION_TRIALS)


def least_favourable_shift(shares: np.ndarray, tv: float) -> np.ndarray | None:
    """``shares`` moved by total variation ``tv`` in the way the test sees least: mass taken from
    one half of the bins and given to the other, each bin in proportion to its share (chi-square
    divergence tv²·(1/A + 1/B) with halves A and B, 4·tv² at equal halves). None when the lighter
    half holds less than ``tv``."""
    order = np.argsort(-shares)
    up = np.zeros(len(shares), dtype=bool)
    up_mass = down_mass = 0.0
    for index in order:  # heaviest first, each to the lighter half: halves as equal as bins allow
        if up_mass <= down_mass:
            up[index], up_mass = True, up_mass + float(shares[index])
        else:
            down_mass += float(shares[index])
    if min(up_mass, down_mass) < tv or tv <= 0:
        return None
    return np.where(up, shares * (1 + tv / up_mass), shares * (1 - tv / down_mass))


def simulated_power(
    shares: Sequence[np.ndarray],
    samples: Sequence[int],
    position: int,
    tv: float,
    seed: int,
    trials: int = SIMULATION_TRIALS,
) -> float:
    """The share of ``trials`` simulated checks that reject at SIGNIFICANCE when the emitted
    tokens at ``position`` (0-based) are off by ``tv`` in the least favourable way and every
    other position follows its expected bins: the same joint Pearson statistic over the same
    bins and freedom as chi_square. NaN where no such deviation exists (least_favourable_shift)."""
    from scipy import stats

    shifted = least_favourable_shift(shares[position], tv)
    if shifted is None:
        return math.nan
    freedom = sum(len(bins) for bins in shares) - len(shares)
    critical = float(stats.chi2.isf(SIGNIFICANCE, freedom))
    generator = np.random.default_rng(seed)
    statistic = np.zeros(trials)
    for index, (bins, count) in enumerate(zip(shares, samples, strict=True)):
        drawn = generator.multinomial(count, shifted if index == position else bins, size=trials)
        expected = count * bins
        statistic += ((drawn - expected) ** 2 / expected).sum(axis=1)
    return float((statistic > critical).mean())


@dataclass(frozen=True)
class PositionReach:
    """What the check can see at one emitted position (1-based): the passes that reached it, the
    share of its probability pooled into the rare bin (a deviation among those characters moves no
    bin: invisible, up to that TV), the TV the noncentral approximation says the joint test detects
    there with POWER, and how often simulated checks caught a deviation that large."""

    position: int
    samples: int
    pooled_share: float
    detectable_tv: float
    simulated_power: float

    @property
    def backed(self) -> bool:
        """The power statement holds where the simulation reached POWER (within its own noise)."""
        return self.detectable_tv < 1.0 and self.simulated_power >= POWER - SIMULATION_SLACK


def reach(observed: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], seed: int) -> list[PositionReach]:
    """Per position the correct rule emitted at, its PositionReach under the joint test the check
    runs (its bins: pooled_bins; its freedom: every position's bins less one each)."""
    positions: list[tuple[int, int, np.ndarray, float]] = []
    for number, (seen, due) in enumerate(zip(observed, expected, strict=True), 1):
        count = int(float(seen.sum()))
        if count == 0:
            continue
        due = due.double()
        common = due >= MIN_EXPECTED_PER_BIN
        rare = float(due[~common].sum())
        bins = np.array([*due[common].tolist(), *([rare] if rare > 0 else [])])
        positions.append((number, count, bins / bins.sum(), rare / float(due.sum())))
    shares = [bins for _, _, bins, _ in positions]
    samples = [count for _, count, _, _ in positions]
    freedom = sum(len(bins) for bins in shares) - len(shares)
    reached = []
    for index, (number, count, _, pooled) in enumerate(positions):
        tv = detectable_tv(count, freedom)
        power = simulated_power(shares, samples, index, tv, seed + index) if tv < 1.0 else math.nan
        reached.append(PositionReach(number, count, pooled, tv, power))
    return reached
