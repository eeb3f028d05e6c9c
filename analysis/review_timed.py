"""How a timed row of a review is judged, once its two runs' log values are in hand: the floor
it must clear besides the test (between-run, drift allowance, or none yet for a min-of-N time),
the t test of its shift with its variance moderated towards its group's, the Benjamini–Hochberg
adjustment within its experiment · impl family, the verdict, what it could have seen and why.
analysis.review builds the verdict table around these."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.between_runs import SETTLED_HISTORY, FamilyFloor
from analysis.review_host import CasePhase, hold_for_phase, host_move
from analysis.review_samples import MATCHED_METHOD, ROUND_METHOD, is_absolute, is_matched
from analysis.statistics import (
    LogShiftTest,
    adjusted_p_values,
    log_shift_test,
    matched_variance,
    minimum_detectable_log,
    pooled_variance,
)

# The false discovery rate controlled within each experiment · impl family of timed tests.
ALPHA = 0.01
# The t test's variance: a row's own pooled variance of log values moderated towards its group's
# median one with PRIOR_FREEDOM degrees of freedom (empirical Bayes, as limma's moderated t).
PRIOR_FREEDOM = 4
# A row's minimum detectable effect is the shift it flags with this chance, moving alone.
MDE_POWER = 0.8
# The smallest change a timed row is flagged for, whatever its p and floor: 3%, below the 5% the
# review is built to see (issue 42). Each case's floor lets an unchanged case through about 1% of
# the time, so a 67-row review alerts somewhere in one review of eight or so, and those alerts are
# the smallest moves (on the Zen 5 EPYC's eight runs with 8-14 earlier ones, the one false alert
# of 469 verdicts was a 2.1% move past a 1.9% floor): a change too small to act on is not a verdict.
SMALLEST_CHANGE = 0.03


@dataclass(frozen=True)
class Floor:
    """What a timed row's shift must exceed besides the test (|log| scale), and what it rests on."""

    between: float | None  # the between-run floor, where MIN_EARLIER_RUNS earlier runs hold the case
    drift: float  # the drift a shift must exceed while ``between`` is unknown: ``unknown drift`` within it
    source: str

    @property
    def value(self) -> float | None:
        return self.between

    @property
    def threshold(self) -> float:
        """The shift below which the row cannot be regressed or improved, whatever its p."""
        return self.between if self.between is not None else self.drift


# Why a min-of-N row with too little history cannot be regressed on its own: its samples, taken
# back to back in one run, know nothing of how far the machine moves between runs, so the t test
# finds every run-to-run move significant and only a between-run floor can judge it (measured on the
# 2-core EPYC: all 13 false alerts of four quick runs were such rows, judged against a drift
# allowance). The review's paired ratios can still say that the whole run moved (``follows_run``).
NO_HISTORY = "an absolute time, judged only against two earlier runs of its case on this machine"


def row_floor(between: float | None, drift: float, method: str = "paired") -> Floor:
    """The floor of a timed row whose samples' statistic is ``method``. A min-of-N row (absolute
    seconds) without a between-run floor gets an infinite drift allowance, so it is at most
    ``unknown drift``, unless the caller says no drift is possible (``drift`` 0: an A/B session)."""
    if between is not None:
        return Floor(between, drift, "between earlier runs")
    # "min", or an A/B session's "min, per round" judged against a run of another session.
    if is_absolute(method) and drift > 0:
        return Floor(None, math.inf, NO_HISTORY)
    return Floor(None, drift, "drift allowance (fewer than two earlier runs)")


def seen(detectable: float, precision: str = ".0%") -> str:
    """What a row with this minimum detectable effect could have seen, in words: ``≥ 8%``, or
    ``no change`` where nothing could have been flagged (a min-of-N row without history)."""
    return "no change" if math.isinf(detectable) else f"≥ {detectable:{precision}}"


@dataclass(frozen=True)
class TimedTest:
    """One timed row's test, before its p-value is adjusted within its family."""

    test: LogShiftTest
    run_count: int
    baseline_count: int
    family: tuple[str, str]  # (experiment, impl): the p-values adjusted together
    direction: str
    floor: Floor
    per_round: bool = False  # an A/B session's rounds, not single samples, are the units
    matched: bool = False  # and paired round by round
    absolute: bool = False  # a min-of-N time (seconds), not a ratio of two sides timed together


def decided(p_value: float, shift: float, better: str, floor: float, drift: float | None = None) -> str:
    """The verdict of a tested timed row: within noise unless p < ALPHA and the shift is beyond
    the floor and SMALLEST_CHANGE; unknown drift if it is not beyond ``drift`` either (where that
    applies)."""
    size = abs(math.log1p(shift))
    # On the percent scale both ways: a 2.9% fall is below 3% though its |log| is above log(1.03).
    if p_value >= ALPHA or size <= floor or abs(shift) < SMALLEST_CHANGE:
        return "within noise"
    if drift is not None and size <= drift:
        return "unknown drift"
    worse = shift < 0 if better == "higher" else shift > 0
    return "regressed" if worse else "improved"


def detectable_log(test: TimedTest, family_size: int) -> float:
    """The row's minimum detectable effect (|log| scale): the shift it flags with MDE_POWER when
    it moves alone in its family (Benjamini–Hochberg then asks p < ALPHA / family size), and
    never below its floor, its drift allowance or SMALLEST_CHANGE."""
    statistical = minimum_detectable_log(
        test.test.standard_error, test.test.degrees_of_freedom, ALPHA / max(family_size, 1), MDE_POWER
    )
    return max(statistical, test.floor.threshold, math.log1p(SMALLEST_CHANGE))


Group = tuple[str, str, str]  # (experiment, impl, method)
GroupKey = tuple[str, str, str]  # (experiment, metric, impl): a group of cases whose level moves together

# A group's median shift speaks for it with at least this many rows that have a between-run floor,
# and at least GROUP_ROW_SHARE of the cases a run held where its floor was learned: a median of
# three quarters as many rows is at most √(4/3) ≈ 1.15 times as noisy (a run's history may hold a
# case its review does not test, such as a speculative A/A case).
GROUP_MIN_ROWS = 3
GROUP_ROW_SHARE = 0.75


@dataclass(frozen=True)
class GroupMove:
    """An experiment · metric · impl group whose rows moved together beyond its between-run floor."""

    shift: float  # the median log shift of its rows
    floor: float  # analysis.between_runs.family_floors: how far the group's level moves between runs
    rows: int


def group_moves(
    rows: list[dict[str, Any]], tests: Mapping[int, TimedTest], families: Mapping[GroupKey, FamilyFloor]
) -> dict[GroupKey, GroupMove]:
    """The groups of rows whose median shift, over GROUP_MIN_ROWS or more rows with a between-run
    floor, is beyond their group floor. A case's own floor must cover its own moves between runs as
    well as its group's; the median of a group averages the cases' own moves out, so a change that
    moves a whole group can be seen where no single case of it clears its own floor.

    Min-of-N times (absolute seconds) join only where their group floor was learned on
    SETTLED_HISTORY runs or more: the host's speed moves every absolute time of a group alike and in
    heavy-tailed steps, where a ratio's two sides cancel it. On eight runs of the Zen 5 EPYC they
    added 4 false alerts to 16 (docs/review-measurements.md); with 8-14 earlier runs none (0 of
    469), and a 10% change of the fast impl's overhead times went from 36% of its rows flagged to
    95%. One Xeon store warns that history is no guarantee: a group whose level deviated 0.5% from
    run to run over eight runs moved 3.8% in the ninth."""
    shifts: dict[GroupKey, list[float]] = {}
    for index, test in tests.items():
        key = (str(rows[index]["experiment"]), str(rows[index]["metric"]), test.family[1])
        settled = key in families and families[key].runs >= SETTLED_HISTORY
        if test.floor.between is not None and (settled or not test.absolute):
            shifts.setdefault(key, []).append(test.test.shift)
    moves = {
        key: GroupMove(statistics.median(values), families[key].floor, len(values))
        for key, values in shifts.items()
        if key in families and len(values) >= max(GROUP_MIN_ROWS, math.ceil(GROUP_ROW_SHARE * families[key].cases))
    }
    return {key: move for key, move in moves.items() if abs(move.shift) > move.floor}


# A paired ratio without a between-run floor yet (a first review's) is judged against the machine's
# drift allowance (±15% before it is known), which hides a 10% change of every case, and a noisy
# case's between-run floor can be as wide. A ratio's two sides are timed together, so a move of
# the host cancels in it, and the median over a review's paired ratios barely moves between runs
# of the same code (-1.5% to +0.6% in the first reviews of fourteen Zen 5 EPYC stores, at most
# 1.3% with a core kept busy, docs/review-measurements.md), where a change of the whole run moves
# it by the change itself. So where RUN_WIDE_MIN_ROWS or more such rows moved beyond
# RUN_WIDE_ALLOWANCE (their median), each row moving that way (a min-of-N time too) is judged
# against RUN_WIDE_ALLOWANCE where its own floor or drift allowance is wider.
RUN_WIDE_ALLOWANCE = math.log1p(0.05)
RUN_WIDE_MIN_ROWS = 20


@dataclass(frozen=True)
class RunWideMove:
    """The review's paired ratios, where their median moved beyond RUN_WIDE_ALLOWANCE: its whole
    run moved, not one family."""

    shift: float  # their median log shift, positive the better way (``toward_better``)
    rows: int


def speaks_for_run(test: TimedTest) -> bool:
    """Whether a row speaks in run_wide_move: a paired ratio (not a min-of-N time, whose samples
    carry the host's moves; not an A/B session's, which allows no drift and needs no such rule)."""
    return not test.absolute and 0 < test.floor.drift < math.inf


def follows_run(test: TimedTest) -> bool:
    """Whether a row is judged against RUN_WIDE_ALLOWANCE once its run moved (``run_wide_move``):
    every row that allows drift, the min-of-N times too. Those cannot say that a run moved (their
    samples carry the host's moves), but once its paired ratios have said so, an absolute time that
    moved the same way is no longer only the host's to explain. An A/B session's rows allow no drift."""
    return test.floor.drift > 0


def toward_better(test: TimedTest) -> float:
    """The row's log shift, positive where it moved the better way: a speedup up, seconds down."""
    return test.test.shift if test.direction == "higher" else -test.test.shift


def run_wide_move(tests: Mapping[int, TimedTest], outside: Sequence[float] = ()) -> RunWideMove | None:
    """The median shift (``toward_better``) of the review's rows that speak for its run
    (``speaks_for_run``), with ``outside`` (those shifts of such rows of the review that are not
    judged here), where RUN_WIDE_MIN_ROWS or more of them moved beyond RUN_WIDE_ALLOWANCE together."""
    shifts = [toward_better(test) for test in tests.values() if speaks_for_run(test)] + list(outside)
    if len(shifts) < RUN_WIDE_MIN_ROWS:
        return None
    median = statistics.median(shifts)
    return RunWideMove(median, len(shifts)) if abs(median) > RUN_WIDE_ALLOWANCE else None


def group_variances(tests: Mapping[int, tuple[Group, list[float], list[float]]]) -> dict[Group, float]:
    """Per (experiment, impl, method): the median pooled variance of its rows' log values, the
    prior each row's own variance is moderated towards."""
    pooled: dict[Group, list[float]] = {}
    for group, run_logs, baseline_logs in tests.values():
        matched = is_matched(group[2])
        variance, freedom = (matched_variance if matched else pooled_variance)(run_logs, baseline_logs)
        if freedom:
            pooled.setdefault(group, []).append(variance)
    return {group: statistics.median(values) for group, values in pooled.items()}


def judge_timed_rows(
    rows: list[dict[str, Any]],
    candidates: Mapping[int, tuple[Group, list[float], list[float]]],
    floors: Mapping[int, tuple[Floor, str]],
    families: Mapping[GroupKey, FamilyFloor] | None = None,
    run_wide_outside: Sequence[float] = (),
    absolute_outside: Sequence[tuple[str, float]] = (),
    phases: Mapping[int, CasePhase] | None = None,
) -> None:
    """Test each candidate row (``rows[index]``) against its group's prior variance, adjust the
    p-values within each experiment · impl family, and give each its verdict and why. A row of a
    group that moved together beyond its ``families`` floor (``group_moves``), moving the same
    way, is judged against that floor where it is the lower one; a row moving with the whole run
    (``run_wide_move`` over these rows' paired ratios and ``run_wide_outside``; ``follows_run``: a
    min-of-N time too), against RUN_WIDE_ALLOWANCE where its own floor or drift allowance is wider.
    Where the machine itself moved (review_host.host_move over these rows' min-of-N times and
    ``absolute_outside``, (impl, log shift) of the review's others), a row that moved within its widest
    absolute time is at most unknown drift. Where the machine ran at another speed around a row's
    case in one run than in the other (``phases``, by row: review_host.CasePhase), its floor widens
    by that move: a flagged row within it is at most unknown drift."""
    priors = group_variances(candidates)
    tests: dict[int, TimedTest] = {}
    for index, (group, run_logs, base_logs) in candidates.items():
        floor, direction = floors[index]
        matched = is_matched(group[2])
        shift_test = log_shift_test(run_logs, base_logs, priors.get(group, 0.0), PRIOR_FREEDOM, matched=matched)
        tests[index] = TimedTest(
            shift_test,
            len(run_logs),
            len(base_logs),
            (group[0], group[1]),
            direction,
            floor,
            per_round=group[2].endswith((ROUND_METHOD, MATCHED_METHOD)),
            matched=matched,
            absolute=is_absolute(group[2]),
        )
    moved = group_moves(rows, tests, families or {})
    whole_run = run_wide_move(tests, run_wide_outside)
    absolute = [(test.family[1], test.test.shift) for test in tests.values() if test.absolute and follows_run(test)]
    ratios = sum(speaks_for_run(test) for test in tests.values()) + len(run_wide_outside)
    host = host_move(absolute + list(absolute_outside), whole_run is None and ratios >= RUN_WIDE_MIN_ROWS)
    by_family: dict[tuple[str, str], list[int]] = {}
    for index, timed in tests.items():
        by_family.setdefault(timed.family, []).append(index)
    for members in by_family.values():
        adjusted = adjusted_p_values([tests[index].test.p_value for index in members])
        for index, adjusted_p in zip(members, adjusted, strict=True):
            entry, test = rows[index], tests[index]
            shift = math.expm1(test.test.shift)
            entry["change"], entry["p_value"], entry["adjusted_p"] = shift, test.test.p_value, adjusted_p
            entry["detectable"] = math.expm1(detectable_log(test, len(members)))
            stepped = host if host is not None and follows_run(test) else None
            entry["host_envelope"] = None if stepped is None else stepped.envelope
            if stepped is not None:  # a step of the machine hides any move within it
                entry["detectable"] = max(entry["detectable"], math.expm1(stepped.envelope))
            drift_rule = None if test.floor.between is not None else test.floor.drift
            speaks = speaks_for_run(test)
            # The log shift of a row that speaks for its run: review_lines.seen_line counts them, the
            # calibration's Injector hands them to a family judged alone (``run_wide_outside``).
            entry["run_wide_shift"] = toward_better(test) if speaks else None
            # A min-of-N time's log shift as measured (seconds: up is slower), which the calibration
            # hands to a family judged alone (``absolute_outside``) for review_host.host_move.
            entry["absolute_shift"] = test.test.shift if test.absolute and follows_run(test) else None
            run_wide = (
                whole_run
                if whole_run is not None
                and follows_run(test)
                and whole_run.shift * toward_better(test) > 0
                and test.floor.threshold > RUN_WIDE_ALLOWANCE
                else None
            )
            own_floor = test.floor.between or 0.0
            if run_wide is not None and drift_rule is not None:
                # Its noise_floor stays empty: a drift-judged row (calibration.drift_judged_moves reads it so).
                drift_rule = RUN_WIDE_ALLOWANCE
            elif run_wide is not None:
                own_floor = RUN_WIDE_ALLOWANCE
                entry["noise_floor"] = RUN_WIDE_ALLOWANCE  # the floor it was judged against
            move = moved.get((str(entry["experiment"]), str(entry["metric"]), test.family[1]))
            if (
                move is None
                or test.floor.between is None
                or move.floor >= own_floor
                or move.shift * test.test.shift <= 0
            ):
                move = None
            if move is not None:
                entry["noise_floor"] = move.floor  # the floor it was judged against
            entry["verdict"] = decided(
                adjusted_p, shift, test.direction, own_floor if move is None else move.floor, drift_rule
            )
            judged_floor = (
                move.floor if move is not None else own_floor if test.floor.between is not None else drift_rule or 0.0
            )
            phase = (phases or {}).get(index)
            widened = None
            if phase is not None and phase.moved and follows_run(test) and math.isfinite(judged_floor):
                widened = phase.allowance(judged_floor, test.absolute)  # it could have seen no less (the why says so)
                entry["detectable"] = max(entry["detectable"], math.expm1(widened))
            entry["why"] = explanation(entry, test, len(members), move, run_wide)
            if stepped is not None:
                held = entry["verdict"] in ("regressed", "improved") and abs(test.test.shift) <= stepped.envelope
                entry["verdict"] = "unknown drift" if held else entry["verdict"]
                entry["why"] += f"; {stepped.clause(held)}"
            if phase is not None and widened is not None:
                hold_for_phase(entry, test.test.shift, phase, widened)


# How a tested row of an A/B session (`decodelab ab`) names its units in its why.
ROUND_UNITS = "rounds (fresh processes each)"


def explanation(
    entry: Mapping[str, Any],
    test: TimedTest,
    family_size: int,
    move: GroupMove | None = None,
    run_wide: RunWideMove | None = None,
) -> str:
    """Why a tested timed row got its verdict: the test, the adjusted p, what it could have seen
    and the floor or drift allowance it had to clear (its group's, where it moved with its group)."""
    experiment, impl = test.family
    if move is not None:
        floor = (
            f"its {move.rows} cases of {experiment} · {entry['metric']} · {impl} moved {math.expm1(move.shift):+.1%} "
            f"together (median), beyond their group's between-run floor ±{math.expm1(move.floor):.1%}, which it "
            f"was judged against (its own ±{math.expm1(test.floor.between or 0.0):.1%})"
        )
    elif run_wide is not None:
        if test.floor.between is not None:
            own = f"its between-run floor ±{math.expm1(test.floor.between):.1%}"
        elif math.isinf(test.floor.drift):
            own = "an absolute time without two earlier runs of its case, else at most unknown drift"
        else:
            own = f"the drift allowance ±{math.expm1(test.floor.drift):.1%}"
        floor = (
            f"the review's {run_wide.rows} paired ratios moved {math.expm1(run_wide.shift):+.1%} together "
            f"(median), beyond ±{math.expm1(RUN_WIDE_ALLOWANCE):.0%}, which it was judged against ({own})"
        )
    elif test.floor.between is not None:
        floor = f"between-run floor ±{math.expm1(test.floor.between):.1%}"
    elif math.isinf(test.floor.drift):
        floor = f"{NO_HISTORY} (fewer so far): at most unknown drift"
    else:
        floor = f"drift allowance ±{math.expm1(test.floor.drift):.1%}"
    units = ROUND_UNITS if test.per_round else "samples"
    alone = " alone" if run_wide is not None else ""  # what it would have seen without its run's move
    if not test.matched:
        test_name = "t test on log values"
    elif test.per_round:
        test_name = "paired t test on log values, rounds matched in time"
    else:
        test_name = "paired t test on log values, pairs matched by their seeded text"
    return (
        f"{test_name}, {test.run_count} against {test.baseline_count} {units} "
        f"({test.test.degrees_of_freedom:.0f} df, moderated variance): p = {entry['p_value']:.2g}, adjusted within "
        f"{experiment} · {impl} ({family_size} tests, Benjamini–Hochberg) {entry['adjusted_p']:.2g} against "
        f"{ALPHA:g}; would have seen {seen(entry['detectable'], '.1%')}{alone}; {floor}; "
        f"a change under {SMALLEST_CHANGE:.0%} is never flagged"
    )
