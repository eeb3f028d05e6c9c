"""How far a timed value moves from one run to the next on one machine: the between-run floor a
review's shift must clear once two earlier runs are known, and the machine's drift figure
that stands in for it before.

A case's run-to-run spread is a guess on n − 1 degrees of freedom, two on three earlier runs, so
a floor from that alone must be t(0.995, 2) · √2 = 14 of its standard deviations wide, and no
single case's change below about 100% can clear it. The floor therefore moderates each case's
variance towards the median one of its experiment · metric · impl group (empirical Bayes, as the
within-run t test does): (d0·s0² + d·s²)/(d0 + d) on d0 + d degrees of freedom. On the 2-core
EPYC the cases of one group spread 0.004–0.13 (speculative) in run-to-run log standard deviation,
so the prior is given two degrees of freedom (BETWEEN_PRIOR_FREEDOM): a case noisier than its
group keeps much of its own spread. On three runs the floor is t(0.995, 4) · √2 = 6.5 moderated
standard deviations wide.

A case in a group of fewer than MIN_PRIOR_CASES cases (the quick preset's two fast
quantization cases, its training summary) borrows the next wider pool's median: its experiment ·
metric over every impl, else every case of the history. Alone, three runs gave it a floor of
t(0.995, 2) · √2 = 14 deviations, which hid a 25% change of those cases on the Xeon's quiet stores;
simulated, a borrowed floor is crossed as often as a grouped one where the lone case is drawn like
the rest (0.75% on three runs), 2.1% where it is three times noisier (docs/review-measurements.md).

The floor is centred on the baseline (√2: both runs vary), not on the mean of the earlier runs
(a prediction interval, √(1 + 1/n)). The mean would narrow it by a fifth where the earlier runs
share the baseline's code, which a CI store running each commit once never has, and it assumes
the run is drawn like the earlier ones: on the Xeon's quick runs it gave 5–8 points more recall
at 10% in the calibration, but 3 false alerts of 225 where one core was kept busy (1 centred on
the baseline), against the 0.01 target (docs/review-measurements.md).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from analysis.statistics import moderated_variance, robust_sigma, t_quantile
from store.records import case_key

# The chance an unchanged case's shift crosses its floor, where its run-to-run spread is normal.
FLOOR_ALPHA = 0.01
# The floor is learned from the newest HISTORY_WINDOW earlier runs, once there are MIN_EARLIER_RUNS.
HISTORY_WINDOW = 20
MIN_EARLIER_RUNS = 2
# The prior's weight, in degrees of freedom, where the group has MIN_PRIOR_CASES cases with a
# spread of their own (fewer: the experiment · metric over every impl, then every case of the
# history; fewer than that in all, each case stands alone). Simulated with run-to-run spreads as
# unequal as the EPYC's (log-uniform over 0.004–0.13 in a group of 14), three earlier runs: an A/A
# move crosses the floor 0.7% of the time with 2, 1.3% with 3, 1.8% with 4 (the within-run
# test's), with the mean variance as the prior in place of the median 0.1–0.3% but 2× as wide;
# on two earlier runs (one degree of freedom a case) 1.6–1.8% with 2 (three seeds) (tests/test_between_runs.py).
# Two earlier runs are enough to start: with fewer, a paired ratio is judged against the machine's
# drift figure, one quantile of all cases' moves, which the noisiest families' A/A moves cross
# more often than 1% (at the 95th, 12 false alerts of 75 verdicts on the Xeon, docs/review-measurements.md).
BETWEEN_PRIOR_FREEDOM = 2
MIN_PRIOR_CASES = 3
# How far two runs of the same code on one machine may drift apart when the machine's own figure
# is not known yet (|log| of the ratio of medians): 15%. On the Xeon VM (docs/review-measurements.md),
# three of four four-run stores met first-review A/A moves past 10%: the eager int8 paths' up to
# 23% (their heap's placement, since fixed: runner.model.quantize.dequantize_buffer), the fast
# table drafts' speculative speedups 12-14% (their plain side reads its weights from the L3 the
# host shares), kv_cache · fast 11% with a core busy. At 10% those were 10 false alerts in 900
# verdicts over the four stores, at 15% 3: the false-alert target holds; one case at 10% on the
# quietest store falls from 58% to 44%. The other sources remain, so the allowance stays.
DEFAULT_DRIFT = math.log(1.15)
# The machine's drift figure: this quantile of |log ratio| of timed headline values between
# consecutive comparable runs, where there are at least DRIFT_MIN_VALUES of them. A paired ratio
# beyond it (and significant) is an alert, so it is the 99th: at the 95th, the moves of the
# machine's noisiest families crossed it in 12 of 75 verdicts of a quiet Xeon A/A review.
DRIFT_QUANTILE = 0.99
DRIFT_MIN_VALUES = 20
# Earlier runs after which a review's floors have seen how the machine moves between runs. A
# group's level (its cases' median) moves as one value a run, so n earlier runs give it n − 1
# degrees of freedom however many cases it holds, and a machine that steps now and then (a
# whole family of the Zen 5 EPYC's cases moved 4-7% between runs minutes apart) crosses floors
# learned from a few quiet runs. Measured there (docs/review-measurements.md, tenth session):
# reviews with 1-3 earlier runs, 9 false alerts in 201 verdicts; with 8-14, none in 469. Fewer
# than this, the review says so.
SETTLED_HISTORY = 8
# Cases without an impl parameter decode through eager PyTorch, the static impl.
DEFAULT_IMPL = "static"

FloorKey = tuple[str, str, str]  # (experiment, metric, case key)


def between_run_multiplier(earlier_runs: int, prior_freedom: float = 0.0) -> float:
    """How many run-to-run standard deviations a shift against the baseline must exceed, given
    that spread was estimated from ``earlier_runs`` runs and a prior worth ``prior_freedom``
    degrees of freedom: the two-sided 1 − FLOOR_ALPHA quantile of Student's t on
    earlier_runs − 1 + prior_freedom degrees of freedom, times √2 (both the run and its baseline
    vary). Infinite below two runs."""
    if earlier_runs < 2:
        return math.inf
    return t_quantile(1 - FLOOR_ALPHA / 2, earlier_runs - 1 + prior_freedom) * math.sqrt(2)


def case_spreads(history: pd.DataFrame) -> dict[FloorKey, tuple[int, float, str]]:
    """Per (experiment, metric, case key) with MIN_EARLIER_RUNS values among the newest
    HISTORY_WINDOW: (runs, robust standard deviation of the log value, impl). The robust spread is
    the larger of the MAD-based and the range-based estimate, so that three runs of which two
    agree cannot make it collapse."""
    spreads: dict[FloorKey, tuple[int, float, str]] = {}
    if history.empty:
        return spreads
    frame = history[history["value"] > 0].sort_values("started_at")
    keys = frame["params"].map(case_key)
    for (experiment, metric, key), group in frame.groupby([frame["experiment"], frame["metric"], keys]):
        logs = [math.log(value) for value in group["value"].tail(HISTORY_WINDOW)]
        if len(logs) >= MIN_EARLIER_RUNS:
            impl = str(group["params"].iloc[-1].get("impl", DEFAULT_IMPL))
            spreads[(str(experiment), str(metric), str(key))] = (len(logs), robust_sigma(logs), impl)
    return spreads


def prior_pools(experiment: str, metric: str, impl: str) -> tuple[tuple[str, ...], ...]:
    """Where a case's prior comes from, the first with MIN_PRIOR_CASES cases: its experiment ·
    metric · impl group, its experiment · metric over every impl, every case of the history."""
    return ((experiment, metric, impl), (experiment, metric), ())


def between_run_floors(history: pd.DataFrame) -> dict[FloorKey, float]:
    """How far a timed value moves from run to run on its own: per (experiment, metric, case
    key), ``between_run_multiplier`` moderated run-to-run standard deviations of its log over
    ``history``, the earlier runs it may be judged against (the same preset on the same machine
    fingerprint, done, not suspect), where there are MIN_EARLIER_RUNS. Between-run drift (a
    shared VM slowing down for minutes, a process's own speed) is invisible to the pairs inside
    one run."""
    spreads = case_spreads(history)
    spreads_by_pool: dict[tuple[str, ...], list[float]] = {}
    for (experiment, metric, _), (_, sigma, impl) in spreads.items():
        for pool in prior_pools(experiment, metric, impl):
            spreads_by_pool.setdefault(pool, []).append(sigma**2)
    priors = {
        pool: statistics.median(variances)
        for pool, variances in spreads_by_pool.items()
        if len(variances) >= MIN_PRIOR_CASES
    }
    floors: dict[FloorKey, float] = {}
    for (experiment, metric, key), (runs, sigma, impl) in spreads.items():
        prior = next((priors[pool] for pool in prior_pools(experiment, metric, impl) if pool in priors), None)
        floor = moderated_floor(sigma, runs, prior)
        if floor is not None:
            floors[(experiment, metric, key)] = floor
    return floors


def moderated_floor(sigma: float, runs: int, prior: float | None) -> float | None:
    """``between_run_multiplier`` standard deviations of a spread ``sigma`` seen over ``runs`` runs,
    its variance moderated towards ``prior`` with BETWEEN_PRIOR_FREEDOM degrees of freedom (none
    without a prior). None where the moderated variance is 0: earlier values all equal and nothing
    to learn from, where a zero floor would let the in-run test alone judge a move between runs."""
    prior_freedom = 0.0 if prior is None else float(BETWEEN_PRIOR_FREEDOM)
    variance = moderated_variance(sigma**2, runs - 1, prior or 0.0, prior_freedom)
    if variance <= 0.0:
        return None
    return between_run_multiplier(runs, prior_freedom) * math.sqrt(variance)


FamilyKey = tuple[str, str, str]  # (experiment, metric, impl)


class FamilyFloor(NamedTuple):
    """How far a group's level moves between runs, and over how many cases a run it was learned."""

    floor: float  # |log|: the group's median shift must exceed it
    cases: int  # the median over its runs of the cases a run held: a median of fewer is noisier
    runs: int = 0  # the runs it was learned on


def family_floors(history: pd.DataFrame) -> dict[FamilyKey, FamilyFloor]:
    """How far a whole experiment · metric · impl group of cases moves together from run to run:
    per group with MIN_PRIOR_CASES cases in each of MIN_EARLIER_RUNS or more of ``history``'s runs
    (the newest HISTORY_WINDOW), ``between_run_multiplier`` robust standard deviations of the
    group's level, each run's median over its cases of the case's log value less the case's mean,
    moderated towards the median group's with BETWEEN_PRIOR_FREEDOM degrees of freedom where there
    are MIN_PRIOR_CASES groups. A case's own floor must cover its own moves; the median of a group
    averages them out, so a group moving together can be seen where none of its cases alone could
    (analysis.review_timed: a row moving with its group is judged against this floor)."""
    if history.empty:
        return {}
    frame = history[history["value"] > 0].sort_values(["started_at", "run_id"])
    frame = frame.assign(
        key=frame["params"].map(case_key),
        impl=frame["params"].map(lambda params: str(params.get("impl", DEFAULT_IMPL))),
        log=frame["value"].map(math.log),
    )
    spreads: dict[FamilyKey, tuple[int, float, int]] = {}
    for (experiment, metric, impl), group in frame.groupby(["experiment", "metric", "impl"]):
        newest = list(dict.fromkeys(group["run_id"]))[-HISTORY_WINDOW:]
        table = group.pivot_table(index="key", columns="run_id", values="log")[newest]
        # A case with one value is 0 once centred and would pull every run's median towards 0.
        table = table[table.count(axis=1) >= MIN_EARLIER_RUNS]
        table = table.loc[:, table.count() >= MIN_PRIOR_CASES]
        if table.shape[1] < MIN_EARLIER_RUNS:
            continue
        levels = table.sub(table.mean(axis=1), axis=0).median()
        cases = int(statistics.median(table.count().tolist()))
        spreads[(str(experiment), str(metric), str(impl))] = (table.shape[1], robust_sigma(levels.tolist()), cases)
    variances = [sigma**2 for _, sigma, _ in spreads.values()]
    prior = statistics.median(variances) if len(variances) >= MIN_PRIOR_CASES else None
    floors: dict[FamilyKey, FamilyFloor] = {}
    for family, (runs, sigma, cases) in spreads.items():
        floor = moderated_floor(sigma, runs, prior)
        if floor is not None:
            floors[family] = FamilyFloor(floor, cases, runs)
    return floors


def drift_moves(history: pd.DataFrame) -> list[float]:
    """How far each timed headline value moved between consecutive comparable runs (|log| of
    their ratio), over ``history`` (run_id, started_at, preset, experiment, metric, params, value
    of one machine's done runs, any preset; ``preset`` may be a comparable key, so that custom
    runs move only against runs of their own spec)."""
    if history.empty:
        return []
    frame = history[history["value"] > 0].sort_values(["started_at", "run_id"])
    keys = frame["params"].map(case_key)
    moves: list[float] = []
    for _, group in frame.groupby([frame["preset"].fillna("custom"), frame["experiment"], frame["metric"], keys]):
        values = group["value"].tolist()
        moves += [abs(math.log(after / before)) for before, after in zip(values, values[1:], strict=False)]
    return moves


def drift_of(moves: Sequence[float]) -> float | None:
    """The machine's drift figure: the DRIFT_QUANTILE quantile of its ``drift_moves``; None with
    fewer than DRIFT_MIN_VALUES moves."""
    if len(moves) < DRIFT_MIN_VALUES:
        return None
    return float(pd.Series(list(moves)).quantile(DRIFT_QUANTILE))
