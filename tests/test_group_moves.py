"""A group of cases moving together: its level's between-run floor (analysis.between_runs.family_floors)
and the review judging a row that moved with its group against it (analysis.review_timed.group_moves),
so that a change of a whole experiment · impl is seen where no single case clears its own floor."""

from __future__ import annotations

import math
import random

import pandas as pd

from analysis import between_runs, review
from analysis.between_runs import FamilyFloor
from analysis.review_timed import Floor, GroupMove, TimedTest, group_moves
from analysis.statistics import LogShiftTest
from tests.test_between_runs import history
from tests.test_verdicts import case_rows, steady

GROUP = [
    ("speculative", {"part": "speculative", "draft": draft, "k": k, "impl": "fast"})
    for draft in ("bigram", "ngram", "small")
    for k in (2, 4)
]
METRIC = "speedup_median"
OWN_FLOOR = math.log(1.15)  # each case's own between-run floor: its own moves are wide
GROUP_FLOOR = math.log(1.03)  # the group's level moves little: the cases' own moves average out


def grouped_review(factors: list[float], families: bool = True, own_floor: float = OWN_FLOOR) -> pd.DataFrame:
    """The six cases of GROUP at ratio 1.5 in a baseline and at 1.5 / factor in a run, each with
    ``own_floor`` as its between-run floor and, if ``families``, GROUP_FLOOR as its group's."""
    baseline, baseline_samples = case_rows(1, [(e, p, steady(1.5, i)) for i, (e, p) in enumerate(GROUP)], {})
    run_cases = [
        (e, p, steady(1.5 / factor, i + 50)) for i, ((e, p), factor) in enumerate(zip(GROUP, factors, strict=True))
    ]
    run, run_samples = case_rows(2, run_cases, {})
    floors = {(experiment, METRIC, review.params_key(params)): own_floor for experiment, params in GROUP}
    table = review.verdict_table(
        run,
        baseline,
        pd.DataFrame(run_samples + baseline_samples),
        between_runs=floors,
        families={("speculative", METRIC, "fast"): FamilyFloor(GROUP_FLOOR, len(GROUP))} if families else None,
    )
    return table[table["kind"] == "timed"]


def test_a_group_slowed_10_percent_together_is_regressed_against_its_group_floor() -> None:
    """Every case 10% slower: each is within its own 15% floor, but the group's median moved
    beyond the group's 3%, so each row is regressed, and says why."""
    table = grouped_review([1.10] * len(GROUP))
    assert (table["verdict"] == "regressed").all(), table[["point", "verdict", "why"]]
    assert table["why"].str.contains("moved -9.1% together").all(), table["why"].iloc[0]
    assert table["why"].str.contains("group's between-run floor ±3.0%").all()
    assert (table["noise_floor"] == GROUP_FLOOR).all(), "the floor shown is the one it was judged against"
    alone = grouped_review([1.10] * len(GROUP), families=False)
    assert (alone["verdict"] == "within noise").all(), "without the group floor each case keeps its own"


def test_a_single_case_or_a_small_common_drift_keeps_each_row_to_its_own_floor() -> None:
    """One case 10% slower leaves the group's median where it was; every case 2% slower is a move
    within the group's floor: neither is an alert."""
    single = grouped_review([1.10] + [1.0] * (len(GROUP) - 1))
    assert (single["verdict"] == "within noise").all(), single[["point", "verdict"]]
    drift = grouped_review([1.02] * len(GROUP))
    assert not drift["verdict"].isin(["regressed", "improved"]).any(), drift[["point", "verdict"]]
    assert not drift["why"].str.contains("together").any()


def test_a_row_moving_against_its_group_is_not_judged_by_the_group() -> None:
    """Five cases 10% slower and one 10% faster: the five are regressed with their group, the one
    moving the other way keeps its own floor (within noise), not 'improved' on the group's account."""
    table = grouped_review([1.10] * (len(GROUP) - 1) + [1 / 1.10])
    verdicts = table.set_index("point")["verdict"]
    assert (verdicts == "regressed").sum() == len(GROUP) - 1 and (verdicts == "within noise").sum() == 1


def test_a_row_whose_own_floor_is_the_lower_keeps_it() -> None:
    """The group floor only ever lowers what a row must clear: where a case's own floor (2%) is
    below its group's (3%), a group 10% slower is regressed on the case's own account."""
    table = grouped_review([1.10] * len(GROUP), own_floor=math.log(1.02))
    assert (table["verdict"] == "regressed").all()
    assert not table["why"].str.contains("together").any() and (table["noise_floor"] == math.log(1.02)).all()


def timed(shift: float, absolute: bool) -> TimedTest:
    floor = Floor(OWN_FLOOR, 0.0, "between earlier runs")
    return TimedTest(
        LogShiftTest(shift, 0.001, 8, 1e-9), 3, 3, ("overhead", "static"), "lower", floor, absolute=absolute
    )


def test_min_of_n_times_move_a_group_only_once_its_floor_has_seen_settled_history() -> None:
    """Absolute times move with the host's speed, every case of a group alike and in steps a few
    runs do not show: their median is not taken as a group's move while the group floor rests on
    fewer than SETTLED_HISTORY runs, however far it went; ratios of the same shifts are. From
    SETTLED_HISTORY runs on, the times move a group too."""
    rows = [{"experiment": "overhead", "metric": "seconds_per_token"} for _ in range(6)]
    key = ("overhead", "seconds_per_token", "static")
    young = {key: FamilyFloor(GROUP_FLOOR, 6, between_runs.SETTLED_HISTORY - 1)}
    assert group_moves(rows, {i: timed(0.1, absolute=True) for i in range(6)}, young) == {}
    moved = group_moves(rows, {i: timed(0.1, absolute=False) for i in range(6)}, young)
    assert moved == {key: GroupMove(0.1, GROUP_FLOOR, 6)}
    settled = {key: FamilyFloor(GROUP_FLOOR, 6, between_runs.SETTLED_HISTORY)}
    assert group_moves(rows, {i: timed(0.1, absolute=True) for i in range(6)}, settled) == moved


def test_a_group_floor_knows_the_runs_it_was_learned_on() -> None:
    generator = random.Random(5)
    cases = [[generator.gauss(0.0, 0.03) for _ in range(9)] for _ in range(6)]
    assert between_runs.family_floors(history(cases))[("speculative", METRIC, "fast")].runs == 9


def test_a_groups_level_floor_is_narrower_than_its_cases_own_floors() -> None:
    """Fifteen cases (a quick run's speculative cases of one impl) whose own run-to-run moves are
    wide (σ 0.05) around a level that moves little (σ 0.005): the median of fifteen averages the
    cases' own moves out, so the group's floor is under half the median case's (three such groups,
    so that each is moderated as in a review); with fewer than MIN_PRIOR_CASES cases a group has none."""
    generator = random.Random(4)
    groups = []
    for impl in ("fast", "static", "naive"):
        levels = [generator.gauss(0.0, 0.005) for _ in range(4)]
        cases = [[level + generator.gauss(0.0, 0.05) for level in levels] for _ in range(15)]
        groups.append(history(cases, impl=impl))
    frame = pd.concat(groups, ignore_index=True)
    case_floors = sorted(between_runs.between_run_floors(frame).values())
    group_floor = between_runs.family_floors(frame)[("speculative", METRIC, "fast")].floor
    assert group_floor < 0.5 * case_floors[len(case_floors) // 2], (group_floor, case_floors)
    assert between_runs.family_floors(history(cases[:2])) == {}
    assert between_runs.family_floors(history([logs[:1] for logs in cases])) == {}, "one run: no spread yet"


def test_a_case_with_one_earlier_value_does_not_narrow_its_groups_floor() -> None:
    """A case new in the newest run is 0 once centred: kept, it would pull that run's median to 0."""
    generator = random.Random(9)
    cases = [[generator.gauss(0.0, 0.03) for _ in range(4)] for _ in range(6)]
    new_cases = [[math.nan, math.nan, math.nan, generator.gauss(0.0, 0.03)] for _ in range(5)]
    frame = history(cases)
    with_new = history(cases + new_cases)
    with_new = with_new[with_new["value"].map(math.isfinite)]
    key = ("speculative", METRIC, "fast")
    assert between_runs.family_floors(with_new)[key] == between_runs.family_floors(frame)[key]


def test_a_group_needs_most_of_the_cases_its_floor_was_learned_over() -> None:
    """A median of six rows is noisier than the median of fifteen a run held when the floor was
    learned: a review holding fewer than three quarters of them leaves each row to its own floor."""
    rows = [{"experiment": "overhead", "metric": "seconds_per_token"} for _ in range(6)]
    tests = {i: timed(0.1, absolute=False) for i in range(6)}
    key = ("overhead", "seconds_per_token", "static")
    assert group_moves(rows, tests, {key: FamilyFloor(GROUP_FLOOR, 15)}) == {}
    assert key in group_moves(rows, tests, {key: FamilyFloor(GROUP_FLOOR, 8)})


def test_group_floors_from_a_stores_history_reach_the_verdicts() -> None:
    """From earlier runs' values to a verdict: the keys family_floors builds from the history's
    params (with an impl, and without one: the default impl) are the ones the review looks up.
    Six cases of each of three groups whose own values move 1% from run to run around a level that
    moves 0.2%: every case of a group 10% slower is regressed as its group's, and with no group floors
    none is."""
    generator = random.Random(21)
    kinds = [
        ("speculative", METRIC, [{"part": "speculative", "k": k, "impl": impl} for k in range(6)])
        for impl in ("fast", "static")
    ] + [("kv_cache", "measured_speedup", [{"part": "timing", "n": 16 * (k + 1)} for k in range(6)])]
    records = []
    for run_index in range(3):
        level = generator.gauss(0.0, 0.002)
        for experiment, metric, params_list in kinds:
            for params in params_list:
                value = 1.5 * math.exp(level + generator.gauss(0.0, 0.01))
                records.append(
                    {
                        "run_id": run_index + 1,
                        "started_at": pd.Timestamp("2026-12-01") + pd.Timedelta(hours=run_index),
                        "experiment": experiment,
                        "metric": metric,
                        "params": params,
                        "value": value,
                    }
                )
    earlier = pd.DataFrame(records)
    families = between_runs.family_floors(earlier)
    assert set(families) >= {("speculative", METRIC, "fast"), ("kv_cache", "measured_speedup", "static")}
    cases = [(experiment, params) for experiment, _, params_list in kinds for params in params_list]
    baseline, baseline_samples = case_rows(1, [(e, p, steady(1.5, i)) for i, (e, p) in enumerate(cases)], {})
    slowed, slowed_samples = case_rows(2, [(e, p, steady(1.5 / 1.10, i + 50)) for i, (e, p) in enumerate(cases)], {})
    samples = pd.DataFrame(slowed_samples + baseline_samples)
    own = {key: math.log(1.3) for key in between_runs.between_run_floors(earlier)}
    with_groups = review.verdict_table(slowed, baseline, samples, between_runs=own, families=families)
    without = review.verdict_table(slowed, baseline, samples, between_runs=own)
    timed_rows = with_groups[with_groups["kind"] == "timed"]
    assert len(timed_rows) == len(cases) and (timed_rows["verdict"] == "regressed").all(), timed_rows[
        ["point", "verdict"]
    ]
    assert (without[without["kind"] == "timed"]["verdict"] == "within noise").all()
