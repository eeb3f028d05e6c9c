"""The machine's own speed while each case is timed: the harness reads a fixed reference loop
before the first sample of each timing and after every sample (runner.measure.reference), the
runner stores the median reading with the case, and a review widens a row's floor in proportion to
how far that reading moved between its two runs (analysis.review_host.case_phases), where it moved
beyond 10%."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pandas as pd

from analysis import review, review_charts, review_host
from runner.measure.reference import (
    REFERENCE_METRIC,
    reference_seconds,
    slow_cases,
    speed_line,
    steadiness_lines,
    steady,
)
from runner.measure.timing import Harness
from store.records import case_key
from tests.conftest import ROOT
from tests.test_verdicts import GRID, grid_runs, row

HELD_WHY = "but the machine ran at another speed"
PHASE_WHY = "the machine ran at another speed"


def with_readings(measurements: pd.DataFrame, run_id: int, seconds: dict[int, float]) -> pd.DataFrame:
    """``measurements`` with a reference reading for each case of the grid: ``seconds[i]`` for case
    i, 1 ms for the rest, as the runner stores it beside the case's own measurements."""
    readings = [
        row(run_id, experiment, params, REFERENCE_METRIC, seconds.get(index, 1e-3), 90000 + run_id * 100 + index)
        for index, (experiment, params) in enumerate(GRID)
    ]
    return pd.concat([measurements, pd.DataFrame(readings).assign(unit="seconds")], ignore_index=True)


def first_review(seed: int, slower_by: dict[int, float], run_seconds: dict[int, float]) -> pd.DataFrame:
    """A first review (ratios against the ±15% drift allowance) of the 28-case grid, case i's ratio
    ``slower_by[i]`` times slower, the run's reference reading at case i ``run_seconds[i]`` (the
    baseline's 1 ms everywhere)."""
    run, baseline, samples = grid_runs(seed, lambda index, params: slower_by.get(index, 1.0))
    return review.verdict_table(with_readings(run, 2, run_seconds), with_readings(baseline, 1, {}), samples)


def verdict_of(table: pd.DataFrame, index: int) -> dict[str, Any]:
    experiment, params = GRID[index]
    grid = pd.DataFrame([{"experiment": name, "params": case} for name, case in GRID])
    point = review.case_points(grid)[(experiment, case_key(params))]
    return dict(table[(table["experiment"] == experiment) & (table["point"] == point)].iloc[0])


def test_the_harness_reads_the_reference_loop_around_each_timing_where_asked() -> None:
    assert reference_seconds() > 0
    plain = Harness()
    plain.min_of(lambda: None, repeats=2)
    assert plain.take_reference_readings() == []
    harness = Harness(reference=True)
    harness.min_of(lambda: None, repeats=2)
    harness.paired(lambda: None, lambda: None, pairs=2)
    harness.alternating((lambda: None,), rounds=2, repeats=1)
    readings = harness.take_reference_readings()
    # One before each timing's first sample, one after each sample (or round).
    assert len(readings) == (1 + 2) + (1 + 2) + (1 + 1) and all(seconds > 0 for seconds in readings)
    assert harness.take_reference_readings() == []  # taken: the next case starts afresh
    # A harness made from another (the speculative costs' kernel clock) adds to the same readings.
    derived = harness.with_clock(harness.clock)
    derived.min_of(lambda: None, repeats=1)
    assert len(harness.take_reference_readings()) == 2


def test_a_case_timed_at_another_speed_of_the_machine_is_unknown_drift_within_that_speed() -> None:
    """Case 0's ratio 30% slower is regressed where the machine ran alike; with the reference loop
    40% slower around case 0 in the run, it is unknown drift and says why. Case 1, 2.5× slower with the
    same move, is beyond the widened floor and stays regressed; a 5% move widens nothing."""
    for seed in range(5):
        alike = first_review(seed, {0: 1.3, 1: 2.5}, {})
        assert verdict_of(alike, 0)["verdict"] == verdict_of(alike, 1)["verdict"] == "regressed", seed
        assert alike["phase_move"].isna().all() and review_host.phase_line(alike) is None
        slow = first_review(seed, {0: 1.3, 1: 2.5}, {0: 1.4e-3, 1: 1.4e-3})
        held, beyond = verdict_of(slow, 0), verdict_of(slow, 1)
        assert held["verdict"] == "unknown drift" and HELD_WHY in held["why"], seed
        assert "1.40 ms a reading in the run against 1.00 ms in the baseline (+40%)" in held["why"]
        assert beyond["verdict"] == "regressed" and PHASE_WHY in beyond["why"] and HELD_WHY not in beyond["why"]
        allowance = math.log(1.15) + review_host.RATIO_SENSITIVITY * math.log(1.4)
        assert held["detectable"] >= math.expm1(allowance) - 1e-12 and held["phase_move"] == math.log(1.4)
        assert f"would have seen ≥ {held['detectable']:.1%}" in held["why"], held["why"]
        # Only the two cases whose machine moved are touched.
        assert slow["phase_move"].notna().sum() == 2
        line = review_host.phase_line(slow)
        assert line is not None and line.startswith("2 timed rows were timed") and "(1 of them would" in line
        assert "moved +40% to +40%" in line, line
        # Two machines' readings say nothing of either one's speed (a review across machines).
        run, baseline, samples = grid_runs(seed, lambda index, params: 1.3 if index == 0 else 1.0)
        across = review.verdict_table(
            with_readings(run, 2, {0: 1.4e-3}), with_readings(baseline, 1, {}), samples, machine_speeds={}
        )
        assert verdict_of(across, 0)["verdict"] == "regressed" and across["phase_move"].isna().all()
        # Faster counts as much as slower: a ratio's two sides may feel the machine unequally.
        quick = first_review(seed, {0: 1.3}, {0: 0.7e-3})
        assert verdict_of(quick, 0)["verdict"] == "unknown drift", seed
        # A min-of-N time feels the machine's speed more than a ratio, whose two sides share it.
        phase = review_host.CasePhase(1.4e-3, 1e-3)
        assert phase.allowance(0.1, absolute=True) == 0.1 + review_host.ABSOLUTE_SENSITIVITY * math.log(1.4)
        assert phase.allowance(0.1, absolute=False) < phase.allowance(0.1, absolute=True)
        small = first_review(seed, {0: 1.3}, {0: 1.05e-3})
        assert verdict_of(small, 0)["verdict"] == "regressed" and small["phase_move"].isna().all(), seed


def test_runs_recorded_before_the_reading_are_judged_as_before() -> None:
    run, baseline, samples = grid_runs(2, lambda index, params: 1.3 if index == 0 else 1.0)
    before = review.verdict_table(run, baseline, samples)
    # Only the run holds readings: nothing to compare them with.
    one_sided = review.verdict_table(with_readings(run, 2, {0: 2e-3}), baseline, samples)
    pd.testing.assert_frame_equal(before, one_sided)
    assert review_host.case_phases(run, baseline) == {}


def test_a_full_review_shows_the_machines_speed_not_judged_and_says_why() -> None:
    run, baseline, samples = grid_runs(4, lambda index, params: 1.0)
    table = review.verdict_table(
        with_readings(run, 2, {0: 2e-3}), with_readings(baseline, 1, {}), samples, headline_only=False
    )
    speeds = table[table["metric"] == REFERENCE_METRIC]
    assert len(speeds) == len(GRID) and (speeds["verdict"] == "not judged").all()
    assert (speeds["why"] == review_host.REFERENCE_WHY).all()
    assert speeds["change"].notna().any()  # case 0's reading doubled: a change, which the chart leaves out
    spec = review_charts.timed_changes(table).to_dict()
    points = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    drawn = spec["datasets"][points["data"]["name"]]
    assert drawn and not any(REFERENCE_METRIC in row["row"] for row in drawn)


def test_a_run_that_ran_at_two_speeds_says_so_as_it_ends() -> None:
    one_speed = [0.55e-3 + 0.01e-3 * (index % 3) for index in range(80)]
    assert speed_line(one_speed) is None
    assert speed_line([1e-3, 2e-3]) is None  # too few cases to say
    two_speeds = one_speed[:60] + [0.8e-3] * 20
    line = speed_line(two_speeds)
    assert line is not None and "0.55–0.80 ms, 20 of 80 timed cases 10% or more above the quickest" in line
    assert speed_line(one_speed[:75] + [0.8e-3] * 5) is None  # fewer than one in ten
    assert (slow_cases(two_speeds), steady(two_speeds), steady(one_speed), steady([1e-3, 2e-3])) == (
        20,
        False,
        True,
        None,
    )
    assert slow_cases(one_speed[:72] + [0.8e-3] * 8) == 8 and steady(one_speed[:72] + [0.8e-3] * 8) is False
    # What a benchmark reading these runs prints about the host.
    figures = lambda lines: dict(line.split("=", 1) for line in lines if "=" in line)  # noqa: E731
    assert figures(steadiness_lines({1: one_speed, 2: one_speed}))["host_steady"] == "1"
    mixed = steadiness_lines({1: one_speed, 2: two_speeds, 3: [1e-3]})
    assert figures(mixed) == {
        "host_timed_cases_run_1": "80",
        "host_slow_cases_run_1": "0",
        "host_timed_cases_run_2": "80",
        "host_slow_cases_run_2": "20",
        "host_timed_cases_run_3": "1",
        "host_slow_cases_run_3": "0",
        "host_steady": "0",
    }
    assert any("not steady" in line and "20 of 80 in run 2" in line for line in mixed)
    assert any("too few reference readings" in line and "run 3" in line for line in mixed)
    assert "host_steady" not in figures(steadiness_lines({1: one_speed, 3: [1e-3]}))  # one run cannot say


def test_the_timing_noise_benchmark_says_how_steady_the_host_was_in_each_run_read(filled_store_url: str) -> None:
    """benchmarks/timing_noise.py on the session's real tiny run: its counts are the run's own
    readings', and a verdict on the host goes with them."""
    from store.store import Store

    store = Store(filled_store_url)
    readings = store.results.metric_values(1, REFERENCE_METRIC)
    store.close()
    assert len(readings) >= 10
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "timing_noise.py"), "--db", filled_store_url, "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    figures = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert figures["host_timed_cases_run_1"] == str(len(readings))
    assert figures["host_slow_cases_run_1"] == str(slow_cases(readings))
    assert figures["host_steady"] == ("1" if steady(readings) else "0")
    assert ("the host was not steady" in result.stdout) is (not steady(readings))
