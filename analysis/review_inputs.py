"""A review's inputs read from a store once (both runs' measurements and samples, the earlier
runs' history, the machine's drift figure) and judged: by the report, the CI gate and the
calibration, which also judges them again with the run's samples slowed on purpose."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import review, review_host
from analysis import runs as runs_module
from analysis.review_samples import SidesMemo
from store import frames
from store.records import case_key
from store.store import Store

# The drift allowance of an A/B pair: none (review.verdict_table's unknown-drift rule never applies).
NO_DRIFT = 0.0
NO_DRIFT_WORDS = "no drift allowance: an A/B pair measured interleaved in one session"


@dataclass
class ReviewInputs:
    run: dict[str, Any]
    baseline: dict[str, Any]
    run_measurements: pd.DataFrame
    baseline_measurements: pd.DataFrame
    samples: pd.DataFrame
    earlier: list[int]  # the runs the between-run floors were taken over
    between: dict[tuple[str, str, str], float]
    drift: float | None  # the machine's drift figure, None where too few earlier runs hold one
    # An A/B pair (analysis.runs.interleaved_pair): both runs measured interleaved in one session,
    # so drift between runs cannot separate them: no between-run floor, no drift allowance.
    interleaved: bool = False
    # (experiment, params key) → reason: the run's cases it could not measure (store.results.unmeasured_cases)
    unmeasured: dict[tuple[str, str], str] = field(default_factory=dict)
    # review.family_floors over the same earlier runs: how far each experiment · metric · impl group
    # moves together between runs.
    families: dict[tuple[str, str, str], review.FamilyFloor] = field(default_factory=dict)
    # How many of ``earlier`` hold timed headline values the floors were learned on (the newest
    # HISTORY_WINDOW of them at most).
    floor_runs: int = 0
    # review.side_by_side of the two runs, by headline_only: made once however often they are judged
    # (the calibration judges a pair five times; labelling and keying every case was most of that).
    _side_by_side: dict[bool, pd.DataFrame] = field(default_factory=dict, repr=False)

    @functools.cached_property
    def machine_speeds(self) -> dict[tuple[str, str], review_host.CasePhase]:
        """review_host.case_phases of the two runs, made once however often they are judged; none
        where they ran on two machine fingerprints (a review may compare two, with a warning), whose
        reference readings say nothing of either machine's speed."""
        if self.run.get("machine_fingerprint") != self.baseline.get("machine_fingerprint"):
            return {}
        return review_host.case_phases(self.run_measurements, self.baseline_measurements)

    def side_by_side(self, headline_only: bool) -> pd.DataFrame:
        if headline_only not in self._side_by_side:
            self._side_by_side[headline_only] = review.side_by_side(
                self.run_measurements, self.baseline_measurements, headline_only
            )
        return self._side_by_side[headline_only]


def timed_headline_history(store: Store, present: set[tuple[str, str]]) -> pd.DataFrame:
    """The timed headline metrics among ``present`` (experiment, metric) over every run."""
    wanted = [
        headline
        for headline in review.HEADLINES
        if headline.better and (headline.experiment, headline.metric) in present
    ]
    pieces = [frames.metric_across_runs(store, headline.experiment, headline.metric) for headline in wanted]
    pieces = [piece for piece in pieces if not piece.empty]
    return pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame()


def read_inputs(store: Store, run_id: int, baseline_id: int, runs: pd.DataFrame | None = None) -> ReviewInputs:
    runs = frames.runs(store) if runs is None else runs
    by_id = runs.set_index("run_id", drop=False)
    run: dict[str, Any] = {str(key): value for key, value in by_id.loc[run_id].to_dict().items()}
    baseline: dict[str, Any] = {str(key): value for key, value in by_id.loc[baseline_id].to_dict().items()}
    run_measurements = frames.measurements(store, run_id)
    baseline_measurements = frames.measurements(store, baseline_id)
    ids = [
        int(value) for value in pd.concat([run_measurements["measurement_id"], baseline_measurements["measurement_id"]])
    ]
    interleaved = runs_module.interleaved_pair(runs, run_id, baseline_id)
    earlier = [] if interleaved else review.earlier_comparable_runs(runs, run_id)
    present = set(zip(run_measurements["experiment"], run_measurements["metric"], strict=True))
    history = timed_headline_history(store, present) if not run_measurements.empty else pd.DataFrame()
    between: dict[tuple[str, str, str], float] = {}
    families: dict[tuple[str, str, str], review.FamilyFloor] = {}
    drift = None
    floor_runs = 0
    if not history.empty and not interleaved:
        earlier_history = history[history["run_id"].isin(earlier)]
        floor_runs = min(int(earlier_history["run_id"].nunique()), review.HISTORY_WINDOW)
        between = review.between_run_floors(earlier_history)
        families = review.family_floors(earlier_history)
        drift = review.drift_of(machine_moves(history, runs, runs_module.machine_runs_before(runs, run_id)))
    return ReviewInputs(
        run,
        baseline,
        run_measurements,
        baseline_measurements,
        frames.samples(store, ids),
        earlier,
        between,
        NO_DRIFT if interleaved else drift,
        interleaved,
        {(experiment, case_key(params)): why for experiment, params, why in store.results.unmeasured_cases(run_id)},
        families,
        floor_runs,
    )


def machine_moves(history: pd.DataFrame, runs: pd.DataFrame, run_ids: list[int]) -> list[float]:
    """``review.drift_moves`` over the timed headline ``history`` of ``run_ids`` (one machine's),
    each run compared only with runs like it (analysis.runs.comparable_key)."""
    machine = history[history["run_id"].isin(run_ids)]
    sweeps = pd.Series(runs_module.comparable_keys(runs).to_numpy(), index=runs["run_id"])
    return review.drift_moves(machine.assign(preset=machine["run_id"].map(sweeps)))


def record_machine_drift(store: Store, run_id: int) -> float | None:
    """Learn the drift figure of ``run_id``'s machine over its done, not suspect runs up to and
    including this one and keep it with the machine (store.drift): called as a run finishes."""
    runs = frames.runs(store)
    chosen = [*runs_module.machine_runs_before(runs, run_id), run_id]
    history = timed_headline_history(store, {(headline.experiment, headline.metric) for headline in review.HEADLINES})
    moves = machine_moves(history, runs, chosen) if not history.empty else []
    figure = review.drift_of(moves)
    store.drift.save(run_id, figure, len(moves), review.DRIFT_QUANTILE)
    return figure


def measured_sides(samples: pd.DataFrame) -> pd.Series:
    """Which samples time the measured side of their measurement: the candidate, B, of a paired
    ratio; the one side, A, of a min-of-N time."""
    if samples.empty:
        return pd.Series(dtype=bool)
    paired = samples.groupby("measurement_id")["side"].transform(lambda sides: (sides == "B").any())
    return (paired & (samples["side"] == "B")) | (~paired & (samples["side"] == "A"))


def injected(
    samples: pd.DataFrame, measurement_ids: set[int], slower_by: float, measured: pd.Series | None = None
) -> pd.DataFrame:
    """A regression injected into real samples: every sample of the measured side of
    ``measurement_ids`` (``measured_sides``; given, where the caller injects into the same samples
    many times) ``slower_by`` times as long. Each pair keeps its own noise: the per-pair log
    values move by log(slower_by) together, their spread is the run's own."""
    samples = samples.copy()
    if samples.empty:
        return samples
    sides = measured_sides(samples) if measured is None else measured
    chosen = sides & samples["measurement_id"].isin(measurement_ids)
    samples.loc[chosen, "seconds"] = samples.loc[chosen, "seconds"] * slower_by
    return samples


def judge(
    inputs: ReviewInputs,
    *,
    headline_only: bool = True,
    samples: pd.DataFrame | None = None,
    rows: pd.DataFrame | None = None,
    run_wide_outside: Sequence[float] = (),
    absolute_outside: Sequence[tuple[str, float]] = (),
    by_measurement: Mapping[Any, pd.DataFrame] | None = None,
    memo: SidesMemo | None = None,
    ordered: bool = True,
) -> pd.DataFrame:
    """The verdict table of the review (``samples`` in place of the stored ones, if given, or
    ``by_measurement``, samples grouped by measurement, with a ``memo`` of what they say; only
    ``rows`` of its side_by_side, if given: whole experiment · impl families are judged exactly
    as in the full review, whose tests and adjustments stay within a family, given the log shifts
    of the other rows that speak for the run, ``run_wide_outside``, and (impl, log shift) of its
    other min-of-N times, ``absolute_outside``)."""
    table = review.verdict_table(
        inputs.run_measurements,
        inputs.baseline_measurements,
        inputs.samples if samples is None else samples,
        headline_only=headline_only,
        between_runs=inputs.between,
        drift=inputs.drift,
        paired_rows=inputs.side_by_side(headline_only) if rows is None else rows,
        unmeasured=inputs.unmeasured,
        families=inputs.families,
        run_wide_outside=run_wide_outside,
        absolute_outside=absolute_outside,
        machine_speeds=inputs.machine_speeds,
        by_measurement=by_measurement,
        memo=memo,
        ordered=ordered,
    )
    if inputs.interleaved and not table.empty:
        allowance = f"; drift allowance ±{0.0:.1%}"
        table["why"] = table["why"].map(lambda why: why.replace(allowance, f"; {NO_DRIFT_WORDS}"))
    return table
