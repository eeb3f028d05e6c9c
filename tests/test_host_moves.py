"""A step of the machine between a review's two runs (analysis.review_host): every impl's
min-of-N times moved the same way while the paired ratios held. A row that moved within the
widest absolute time is then at most unknown drift; one that moved further is judged as before."""

from __future__ import annotations

import math

import pandas as pd

from analysis import calibration, review, review_host, review_inputs, review_lines
from tests.test_verdicts import OVERHEAD_WIDTHS, grid_runs, noisy_ratios, row

IMPLS = ("naive", "static", "fast")
STEP_WHY = "the machine itself moved"
HELD_WHY = "but the machine itself moved"


def impl_points(run_id: int, seed: int, slower_by: dict[str, float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The overhead experiment's points of every impl as a run stores them: min-of-N times
    (seconds, lower better) in realistic noise, each impl ``slower_by[impl]`` times slower."""
    records, samples = [], []
    for impl_index, impl in enumerate(IMPLS):
        for index, d_model in enumerate(OVERHEAD_WIDTHS):
            seconds = [
                1e-4 * d_model * slower_by.get(impl, 1.0) * ratio
                for ratio in noisy_ratios(1.0, seed * 1000 + impl_index * 100 + index, pairs=3)
            ]
            ident = run_id * 10000 + 7000 + impl_index * 100 + index
            params = {"part": "point", "impl": impl, "d_model": d_model}
            records.append(
                {**row(run_id, "overhead", params, "seconds_per_token", min(seconds) / 64, ident), "unit": "seconds"}
            )
            samples += [
                {"measurement_id": ident, "pair_index": pair, "side": "A", "seconds": value}
                for pair, value in enumerate(seconds)
            ]
    return pd.DataFrame(records), pd.DataFrame(samples)


def first_review(seed: int, case_factors: dict[int, float], impl_factors: dict[str, float]) -> pd.DataFrame:
    """A first review (no history: ratios against the ±15% drift allowance) of the 28-case grid,
    case i's ratio ``case_factors[i]`` times slower, beside overhead points of three impls, each
    ``impl_factors[impl]`` times slower."""
    run, baseline, samples = grid_runs(seed, lambda index, params: case_factors.get(index, 1.0))
    run_points, run_point_samples = impl_points(2, seed * 2 + 1, impl_factors)
    base_points, base_point_samples = impl_points(1, seed * 2, {})
    return review.verdict_table(
        pd.concat([run, run_points], ignore_index=True),
        pd.concat([baseline, base_points], ignore_index=True),
        pd.concat([samples, run_point_samples, base_point_samples], ignore_index=True),
    )


def test_a_step_of_the_machine_needs_every_impl_moving_the_same_way_and_the_ratios_holding() -> None:
    step = [("naive", 0.40)] * 6 + [("static", 0.45)] * 6 + [("fast", 0.38)] * 5 + [("fast", -0.02)]
    moved = review_host.host_move(step, ratios_held=True)
    assert moved is not None and moved.rows == 18
    assert moved.envelope == 0.45 and moved.impl_shifts["fast"] == 0.38
    assert "naive +49%" in moved.clause(held=True) and "between -36% and +57%" in moved.clause(held=True)
    assert moved.clause(held=True).startswith("but ") and not moved.clause(held=False).startswith("but ")
    # One case's own change cannot widen the envelope alone: nine in ten of the times bound it.
    widened = review_host.host_move([*step, ("fast", 2.0)], ratios_held=True)
    assert widened is not None and widened.envelope == 0.45
    # The paired ratios moved too (or there are too few to say): not this rule's to judge.
    assert review_host.host_move(step, ratios_held=False) is None
    # One impl steady, or far less moved than another: that impl's change (or the others').
    eager_only = [("naive", 0.40)] * 6 + [("static", 0.45)] * 6 + [("fast", 0.01)] * 6
    assert review_host.host_move(eager_only, ratios_held=True) is None
    fast_only = [("naive", 0.06)] * 6 + [("static", 0.06)] * 6 + [("fast", 0.40)] * 6
    assert review_host.host_move(fast_only, ratios_held=True) is None
    # Every impl the same way, none beyond 10%; or the other way for one: no step.
    assert review_host.host_move([(impl, 0.07) for impl in IMPLS for _ in range(6)], True) is None
    assert review_host.host_move([("naive", 0.3)] * 6 + [("fast", -0.3)] * 6, True) is None
    # An impl with two times does not count: one impl alone is not the machine.
    assert review_host.host_move([("naive", 0.3)] * 6 + [("fast", 0.3)] * 2, True) is None
    assert review_host.host_move([("naive", -0.3)] * 3 + [("fast", -0.2)] * 3, True) is not None
    # A time that could not be read says nothing.
    assert review_host.host_move([*step, ("naive", math.nan)], True) == moved


def test_a_ratio_within_the_machines_step_is_unknown_drift_and_one_beyond_it_is_still_judged() -> None:
    """Case 0's ratio 30% slower (beyond the ±15% allowance) is regressed on a steady machine; with
    every impl's points 50% slower beside it, it is unknown drift and says why, while case 1's,
    2× slower (beyond the widest point), stays regressed. The points themselves are never flagged."""
    stepped_rows, steady_rows = 0, 0
    for seed in range(5):
        steady = first_review(seed, {0: 1.3, 1: 2.0}, {})
        stepped = first_review(seed, {0: 1.3, 1: 2.0}, dict.fromkeys(IMPLS, 1.5))
        ratios = steady[steady["experiment"] == "speculative"]
        assert (ratios["verdict"] == "regressed").sum() == 2, seed
        assert steady["host_envelope"].isna().all() and review_host.host_line(steady) is None
        # Only the eager impls' points slower: not a step of the machine.
        eager = first_review(seed, {0: 1.3, 1: 2.0}, {"naive": 1.5, "static": 1.5})
        assert (eager[eager["experiment"] == "speculative"]["verdict"] == "regressed").sum() == 2, seed
        judged = stepped[stepped["experiment"] == "speculative"].sort_values("change")
        held, beyond = judged.iloc[1], judged.iloc[0]  # 30% and 2× slower: the two lowest ratios
        assert held["verdict"] == "unknown drift" and HELD_WHY in held["why"], seed
        # Beyond the step it is judged as before, and says what the step would have hidden.
        assert beyond["verdict"] == "regressed" and HELD_WHY not in beyond["why"] and STEP_WHY in beyond["why"], seed
        envelope = float(stepped["host_envelope"].dropna().iloc[0])
        assert math.log1p(0.4) < envelope < math.log1p(0.7), envelope
        # Every row that allows drift could have seen no less than the step.
        timed = stepped[stepped["p_value"].notna()]
        assert (timed["detectable"] >= math.expm1(envelope) - 1e-12).all(), seed
        points = stepped[stepped["experiment"] == "overhead"]
        assert points["verdict"].isin(("unknown drift", "within noise")).all(), seed
        line = review_host.host_line(stepped)
        assert line is not None and "(1 such row would otherwise have been flagged)" in line, line
        assert f"and {math.expm1(envelope):+.0%}" in line
        stepped_rows += int((stepped["verdict"] == "unknown drift").sum())
        steady_rows += int((steady["verdict"] == "unknown drift").sum())
        # The summary counts the held row as unknown drift, not as a regression.
        assert review_lines.verdict_counts(stepped).get("regressed", 0) == 1, seed
    assert stepped_rows > steady_rows


def test_a_family_judged_alone_sees_the_step_the_full_review_sees() -> None:
    """The calibration judges a family alone (calibration.Injector), handing it the review's other
    min-of-N times: a case of speculative · fast slowed 25% within a step of the machine gets the
    verdict and why it gets in the full review, the step's."""
    run, baseline, samples = grid_runs(3, lambda index, params: 1.0)
    run_points, run_point_samples = impl_points(2, 7, dict.fromkeys(IMPLS, 1.5))
    base_points, base_point_samples = impl_points(1, 6, {})
    inputs = review_inputs.ReviewInputs(
        {},
        {},
        pd.concat([run, run_points], ignore_index=True),
        pd.concat([baseline, base_points], ignore_index=True),
        pd.concat([samples, run_point_samples, base_point_samples], ignore_index=True),
        earlier=[],
        between={},
        drift=None,
    )
    injector = calibration.Injector(inputs, review_inputs.judge(inputs))
    family = injector.rows[(injector.rows["impl"] == "fast") & (injector.rows["experiment"] == "speculative")]
    ids = {int(family["measurement_id_run"].iloc[0])}
    alone = injector.judged(family, ids, 1.25).sort_values("point").reset_index(drop=True)
    full = review_inputs.judge(inputs, samples=injector.samples(ids, 1.25))
    full = full[full["point"].isin(alone["point"])].sort_values("point").reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, full)
    assert alone["host_envelope"].notna().all()
    assert alone["why"].str.contains(STEP_WHY).all() and alone["why"].str.contains(HELD_WHY).sum() == 1
    assert (alone["verdict"] == "unknown drift").sum() == 1
