"""A run against its baseline: which baseline, and for every headline metric a verdict that
knows what it rests on and what it could have seen.

Plain functions of DataFrames (no Streamlit), used by the Review page, `decodelab report run`
and benchmarks/review_calibration.py.

Verdicts:
- deterministic metrics (kinds exact, numerical, sampled in runner.metrics) are ``unchanged`` or
  ``changed``: they must reproduce exactly on one machine;
- timed metrics are decided from the raw samples of both runs, on a log scale: per-pair ratios
  A/B for a paired speedup, the raw seconds for a min-of-N time; for the two runs of an A/B
  session (`decodelab ab`), one value per round, each round's own worker processes (the
  ``round_index`` of its samples). Where pair i of every run times the same seeded text (a
  speculative speedup: runner.metrics.has_seeded_pairs), the two runs' pairs are matched pair by
  pair, as an A/B session's rounds are, and the test is the paired one: the texts' own spread
  (acceptance varies with the text) cancels. Otherwise a two-sample t test of the
  shift of the mean log value, its variance moderated towards the typical variance of its
  experiment · impl · method group (so that three samples a side are enough: a U test cannot
  reach 0.01 below five); the p-values adjusted by Benjamini–Hochberg within each family of one
  experiment and impl (a single case can speak: it competes with its family, not with the whole
  review); and a shift beyond the between-run floor (analysis.between_runs: the case's
  run-to-run spread over the earlier runs of the preset on the machine, moderated towards its
  group's) where there are two such runs, or, for a ratio row moving the same way as its
  experiment · metric · impl group, beyond that group's floor where the group's median shift is
  (analysis.between_runs.family_floors, analysis.review_timed.group_moves: a change of a whole
  group, seen where no single case clears its own floor). With fewer earlier runs a paired
  ratio's shift within the machine's drift figure (else DEFAULT_DRIFT) is ``unknown drift``: the
  machine may have drifted between the two runs; a min-of-N time is at most ``unknown drift`` on
  its own (NO_HISTORY). Where the median of the review's paired ratios moved beyond
  RUN_WIDE_ALLOWANCE (a change of the whole run, analysis.review_timed.run_wide_move), a row
  moving with it (a min-of-N time too) is judged against that where its floor or drift allowance
  is wider. Every tested row carries its
  minimum detectable effect (``detectable``): the change it would have flagged with MDE_POWER
  moving alone, never below its floor or drift allowance; a review some of whose rows could not
  see UNDERPOWERED_CHANGE says it is underpowered (analysis.review_lines.power_line);
- a metric with neither (fitted or predicted values, benchmark lines without samples) is
  ``not judged``; fewer than MIN_SAMPLES samples a side is ``too few samples``.

Error rate controlled: the false discovery rate at ALPHA within each experiment · impl family.
When nothing changed, that is the chance of any false alert in the family, so a review of F
families has at most ALPHA · F expected false alerts from the test (the floors and the drift
allowance only remove alerts); benchmarks/review_calibration.py measures the real rates.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.between_runs import (
    DEFAULT_DRIFT,
    DEFAULT_IMPL,
    DRIFT_MIN_VALUES,
    DRIFT_QUANTILE,
    HISTORY_WINDOW,
    MIN_EARLIER_RUNS,
    SETTLED_HISTORY,
    FamilyFloor,
    between_run_floors,
    between_run_multiplier,
    drift_moves,
    drift_of,
    family_floors,
)
from analysis.review_host import REFERENCE_WHY, CasePhase, case_phases
from analysis.review_samples import (
    MATCHED_METHOD,
    ROUND_METHOD,
    SidesMemo,
    headline_per_sample,
    log_values,
    tested_values,
)
from analysis.review_timed import (
    ALPHA,
    MDE_POWER,
    NO_HISTORY,
    PRIOR_FREEDOM,
    SMALLEST_CHANGE,
    Floor,
    Group,
    TimedTest,
    judge_timed_rows,
    row_floor,
    seen,
)
from analysis.runs import PINNED, SUSPECT, default_baseline, earlier_comparable_runs, tag_set
from analysis.statistics import (
    smallest_p_value,
)
from runner.labels import part_labels
from runner.measure.reference import REFERENCE_METRIC
from runner.metrics import has_seeded_pairs, headlines, is_deterministic, lookup
from store.records import case_key as params_key

__all__ = [
    "ALPHA",
    "COLUMNS",
    "DEFAULT_DRIFT",
    "DEFAULT_IMPL",
    "DRIFT_MIN_VALUES",
    "DRIFT_QUANTILE",
    "HEADLINES",
    "HISTORY_WINDOW",
    "MDE_POWER",
    "MIN_EARLIER_RUNS",
    "SETTLED_HISTORY",
    "MIN_SAMPLES",
    "NO_HISTORY",
    "NOISE_PARTS",
    "PINNED",
    "PRIOR_FREEDOM",
    "SMALLEST_CHANGE",
    "SUSPECT",
    "UNDERPOWERED_CHANGE",
    "VERDICT_MEANINGS",
    "VERDICT_ORDER",
    "FamilyFloor",
    "Floor",
    "Headline",
    "TimedTest",
    "between_run_floors",
    "between_run_multiplier",
    "case_points",
    "current_names",
    "default_baseline",
    "drift_moves",
    "drift_of",
    "earlier_comparable_runs",
    "family_floors",
    "noise_floors",
    "params_key",
    "row_floor",
    "seen",
    "smallest_p_value",
    "tag_set",
    "verdict_table",
]

# Fewer samples a side than this: ``too few samples`` (a variance needs two).
MIN_SAMPLES = 2
# A review some of whose tested rows could not have seen this change says it is underpowered.
UNDERPOWERED_CHANGE = 0.25
# Regressions first: what a reviewer must look at, then what moved, then the rest.
VERDICT_ORDER = (
    "regressed",
    "changed",
    "improved",
    "unknown drift",
    "within noise",
    "too few samples",
    "not judged",
    "not measured",
    "only in run",
    "only in baseline",
    "unchanged",
)
# What each verdict word means, for the page's and the reports' explanations.
VERDICT_MEANINGS = {
    "regressed": (
        f"the t test's adjusted p is below {ALPHA:g} and the shift is beyond the floor and at least "
        f"{SMALLEST_CHANGE:.0%}, the worse way"
    ),
    "improved": (
        f"the t test's adjusted p is below {ALPHA:g} and the shift is beyond the floor and at least "
        f"{SMALLEST_CHANGE:.0%}, the better way"
    ),
    "changed": "a deterministic figure differs: it must reproduce exactly",
    "unknown drift": (
        "the shift is within what the machine may drift between runs: fewer than two earlier runs, or a step "
        "of the machine between these two (every impl's absolute times moved the same way)"
    ),
    "within noise": (
        f"the adjusted p is not below {ALPHA:g}, or the shift is within the between-run floor or under "
        f"{SMALLEST_CHANGE:.0%}; "
        "it says the smallest change it would have seen"
    ),
    "too few samples": "fewer than two samples on a side: no variance to test against",
    "not judged": "no raw samples (a fitted or predicted value)",
    "not measured": "the run could not measure this case (its reason beside it); never judged",
    "only in run": "the baseline has no such case",
    "only in baseline": "the run has no such case",
    "unchanged": "a deterministic figure, equal",
}


@dataclass(frozen=True)
class Headline:
    """A metric a reviewer checks first; ``better`` is "higher" or "lower" for timed ones."""

    experiment: str
    metric: str
    better: str | None = None


HEADLINES = tuple(
    Headline(experiment, metric.name, metric.better if metric.kind == "timed" else None)
    for experiment, metric in headlines()
)


@functools.lru_cache(maxsize=1024)
def better_way(metric: str) -> str:
    """Which way a timed metric is better: the metric catalogue's (a headline's is the same; a
    time per token: lower), else higher. The verdicts and the Review page's chart of the changes
    read it from here, so a dot coloured improved never sits on the worse side."""
    found = lookup(metric)
    return found.better if found is not None and found.better in ("higher", "lower") else "higher"


# Case parts that calibrate the comparison instead of being compared: the A/A pairs (their
# spread is reported beside the review; the t test measures each row's noise itself).
NOISE_PARTS = {"aa"}
# An A/A case's band (the speculative one's names, the others') and its ratio of minima.
AA_BAND_METRICS = frozenset({"speedup_min", "speedup_max", "aa_speedup_low", "aa_speedup_high"})
AA_MIN_METRIC = "aa_min_ratio"
COLUMNS = [
    "verdict",
    "experiment",
    "metric",
    "point",
    "baseline",
    "run",
    "change",
    "p_value",
    "adjusted_p",
    "noise_floor",
    "detectable",
    "unit",
    "kind",
    "why",
]
# The Review page's table, as a reader takes it: the verdict, what it is of, how far it moved and
# why, then the figures the test used (the reports keep COLUMNS' order).
PAGE_COLUMNS = [
    "verdict",
    "experiment",
    "point",
    "metric",
    "change",
    "why",
    "baseline",
    "run",
    "unit",
    "p_value",
    "adjusted_p",
    "noise_floor",
    "detectable",
    "kind",
]
# Kept beside COLUMNS, not shown as a column: the log shift, the better way up, of each row that
# speaks for its run (analysis.review_timed.speaks_for_run: its median is the whole run's move),
# empty on the others; each min-of-N time's log shift as measured (``absolute_shift``, seconds: up is
# slower) and, where the machine itself moved between the runs (analysis.review_host), how far it
# moved them (``host_envelope``, |log|); where the machine ran at another speed around a case's
# timings in one run than in the other (analysis.review_host.case_phases), the log ratio of its
# reference loop's readings (``phase_move``: up is slower in the run).
TABLE_COLUMNS = [*COLUMNS, "run_wide_shift", "absolute_shift", "host_envelope", "phase_move"]


# ---- the noise floors -------------------------------------------------------------------------


def noise_floors(*measurements: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """How far the clock alone moves a figure, per (experiment, impl, method) on a log scale (a
    ratio's halving and doubling are the same distance), from the A/A cases of these runs (both
    sides the same decode): method ``paired``, the widest |log| of an A/A pair's ratio; method
    ``min``, the |log| of the A/A ratio of minima. Experiments and impls without an A/A case are
    absent: their paired figures have no floor."""
    floors: dict[tuple[str, str, str], float] = {}
    for frame in measurements:
        if frame.empty:
            continue
        parts = frame["params"].map(lambda params: params.get("part"))
        aa = frame[parts.isin(NOISE_PARTS) & (frame["value"] > 0)]
        for experiment, params, metric, value in zip(
            aa["experiment"], aa["params"], aa["metric"], aa["value"], strict=True
        ):
            method = "paired" if metric in AA_BAND_METRICS else "min" if metric == AA_MIN_METRIC else None
            if method is None:
                continue
            key = (str(experiment), str(params.get("impl", DEFAULT_IMPL)), method)
            floors[key] = max(floors.get(key, 0.0), abs(math.log(value)))
    return floors


def current_names(measurements: pd.DataFrame) -> pd.DataFrame:
    """The measurements without the A/A pairs (they calibrate, they are not compared), with
    ``part`` and ``params_key`` columns. Renamed metrics already come under their current names
    from the store's read path (store.compatibility), so an old run's meet a new run's."""
    frame = measurements.copy()
    frame["part"] = frame["params"].map(lambda params: params.get("part"))
    frame["params_key"] = frame["params"].map(params_key)
    return frame[~frame["part"].isin(NOISE_PARTS)]


def case_points(*measurements: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(experiment, params key) → the case's label over the cases of every frame given."""
    return part_labels(
        (experiment, params)
        for frame in measurements
        for experiment, params in zip(frame["experiment"], frame["params"], strict=True)
    )


def _keyed(measurements: pd.DataFrame, headline_only: bool, points: dict[tuple[str, str], str]) -> pd.DataFrame:
    if measurements.empty:
        return pd.DataFrame(
            columns=["experiment", "point", "metric", "unit", "value", "measurement_id", "impl", "params_key"]
        )
    frame = current_names(measurements)
    if headline_only:
        wanted = {(headline.experiment, headline.metric) for headline in HEADLINES}
        frame = frame[[(row.experiment, row.metric) in wanted for row in frame.itertuples()]]
    frame["point"] = [points[key] for key in zip(frame["experiment"], frame["params_key"], strict=True)]
    frame["impl"] = frame["params"].map(lambda params: params.get("impl", DEFAULT_IMPL))
    return frame[["experiment", "point", "metric", "unit", "value", "measurement_id", "impl", "params_key"]]


def side_by_side(run: pd.DataFrame, baseline: pd.DataFrame, headline_only: bool = True) -> pd.DataFrame:
    """Each (headline) metric of each case, the run's and the baseline's value on one row, keyed
    by (experiment, point, metric, impl): what ``verdict_table`` judges. It depends on the two runs'
    measurements only, not on their samples, so a caller judging one pair against several
    sample sets (the calibration's slowed copies) makes it once."""
    points = case_points(run, baseline)
    return _keyed(run, headline_only, points).merge(
        _keyed(baseline, headline_only, points),
        on=["experiment", "point", "metric", "impl"],
        how="outer",
        suffixes=("_run", "_baseline"),
    )


def verdict_table(
    run: pd.DataFrame,
    baseline: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    headline_only: bool = True,
    between_runs: dict[tuple[str, str, str], float] | None = None,
    drift: float | None = None,
    paired_rows: pd.DataFrame | None = None,
    unmeasured: Mapping[tuple[str, str], str] | None = None,
    families: Mapping[tuple[str, str, str], FamilyFloor] | None = None,
    run_wide_outside: Sequence[float] = (),
    absolute_outside: Sequence[tuple[str, float]] = (),
    machine_speeds: Mapping[tuple[str, str], CasePhase] | None = None,
    by_measurement: Mapping[Any, pd.DataFrame] | None = None,
    memo: SidesMemo | None = None,
    ordered: bool = True,
) -> pd.DataFrame:
    """Every (headline) metric of every case of both runs, side by side with its verdict,
    regressions first (``ordered``; in the order judged where the caller only counts verdicts).
    ``run`` and ``baseline`` are store.frames.measurements of one run each;
    ``samples`` holds the raw samples of both (store.frames.samples); ``between_runs`` the
    between-run floors of ``between_run_floors``, where the store has them; ``drift`` the
    machine's drift figure (``drift_of``; DEFAULT_DRIFT where None). The timed rows' p-values
    are adjusted within their experiment · impl family before any verdict is given.
    ``paired_rows``: ``side_by_side(run, baseline, headline_only)`` where the caller has it already.
    ``unmeasured``: (experiment, params key) → reason, the run's cases it could not measure: their
    rows say so and are never judged. ``families``: ``family_floors`` of the same earlier runs, how
    far each experiment · metric · impl group moves together between runs. ``run_wide_outside``:
    where ``paired_rows`` holds only some of the review's rows (the calibration judges a family
    alone), the log shifts of the review's other rows that speak for its run
    (``review_timed.speaks_for_run``: ``run_wide_shift`` of the full table), so that the rule sees
    the whole review; ``absolute_outside`` likewise, (impl, ``absolute_shift``) of its other min-of-N
    times, so that review_host.host_move sees them all. ``machine_speeds``: review_host.case_phases
    of the two runs where the caller has it (none for two machines, whose readings do not compare),
    else made here. ``by_measurement``: ``samples`` already grouped by measurement id, where the
    caller judges the same samples many times (then ``samples`` is not read); ``memo``: what the
    samples say, kept across such calls for the same frames (review_samples.SidesMemo)."""
    between = between_runs or {}
    drift_floor = DEFAULT_DRIFT if drift is None else drift
    if by_measurement is None:
        by_measurement = dict(tuple(samples.groupby("measurement_id"))) if not samples.empty else {}
    memo = SidesMemo(base=by_measurement) if memo is None else memo
    merged = side_by_side(run, baseline, headline_only) if paired_rows is None else paired_rows
    case_speeds = case_phases(run, baseline) if machine_speeds is None else machine_speeds
    phases: dict[int, CasePhase] = {}  # per candidate, the machine's speed around its case in each run
    rows: list[dict[str, Any]] = []
    # Rows to test, by their index in ``rows``: (group, run logs, baseline logs), then their floors.
    candidates: dict[int, tuple[Group, list[float], list[float]]] = {}
    floors: dict[int, tuple[Floor, str]] = {}
    # Per candidate, (run, baseline): the headline's units per sample unit (tested_values).
    sample_units: dict[int, tuple[float, float]] = {}
    # A case's timed rows with the very same samples are one measurement: judged once, under the
    # first (kv_cache's speedup_vs_eager_no_cache is measured_speedup for the eager impls, whose
    # own no-cache path is the eager one); counted twice, one event made two false alerts.
    first_with_samples: dict[tuple[Any, ...], int] = {}
    same_samples: dict[int, list[str]] = {}
    for row in merged.to_dict("records"):
        entry = row_entry(row)
        rows.append(entry)
        to_test = verdict_without_test(entry, row, unmeasured or {}, by_measurement, memo)
        if to_test is None:
            continue
        run_logs, base_logs, method = to_test
        sample_key = (row["experiment"], row["point"], method, tuple(run_logs), tuple(base_logs))
        if sample_key in first_with_samples:
            rows.pop()
            same_samples.setdefault(first_with_samples[sample_key], []).append(str(row["metric"]))
            continue
        first_with_samples[sample_key] = len(rows) - 1
        key = row["params_key_run"] if isinstance(row["params_key_run"], str) else row["params_key_baseline"]
        floor = row_floor(between.get((row["experiment"], row["metric"], key)), drift_floor, method)
        entry["noise_floor"] = floor.value
        candidates[len(rows) - 1] = ((str(row["experiment"]), str(row["impl"]), method), run_logs, base_logs)
        sample_units[len(rows) - 1] = (
            headline_per_sample(row["value_run"], by_measurement.get(row["measurement_id_run"]), method),
            headline_per_sample(row["value_baseline"], by_measurement.get(row["measurement_id_baseline"]), method),
        )
        floors[len(rows) - 1] = (floor, better_way(str(row["metric"])))
        if (phase := case_speeds.get((str(row["experiment"]), str(key)))) is not None:
            phases[len(rows) - 1] = phase
    judge_timed_rows(rows, candidates, floors, families or {}, run_wide_outside, absolute_outside, phases)
    for index, (_, run_logs, base_logs) in candidates.items():
        tested_values(rows[index], run_logs, base_logs, sample_units[index])
    for index, metrics in same_samples.items():
        rows[index]["why"] += f" ({', '.join(metrics)}: the same samples, judged here once)"
    return ordered_table(rows) if ordered else verdict_frame(rows)


def row_entry(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A row of the verdict table for one ``side_by_side`` row, its verdict not yet given."""
    unit = row["unit_run"] if isinstance(row["unit_run"], str) else row["unit_baseline"]
    return {
        "experiment": row["experiment"],
        "point": row["point"],
        "metric": row["metric"],
        "unit": unit,
        "kind": "deterministic" if is_deterministic(row["metric"], unit) else "timed",
        "baseline": row["value_baseline"],
        "run": row["value_run"],
        "change": None,
        "p_value": None,
        "adjusted_p": None,
        "noise_floor": None,
        "detectable": None,
        "why": "",
    }


def verdict_without_test(
    entry: dict[str, Any],
    row: Mapping[Any, Any],
    unmeasured: Mapping[tuple[str, str], str],
    by_measurement: Mapping[Any, pd.DataFrame],
    memo: SidesMemo,
) -> tuple[list[float], list[float], str] | None:
    """Give ``entry`` the verdict that needs no test (a row on one side only, a case not
    measured, a deterministic row, a timed row without enough samples); for a timed row to test,
    give none and return (run logs, baseline logs, the samples' statistic)."""
    if pd.isna(row["value_baseline"]):
        entry["verdict"] = "only in run"
    elif pd.isna(row["value_run"]) and (row["experiment"], row["params_key_baseline"]) in unmeasured:
        entry["verdict"] = "not measured"
        entry["why"] = f"not measured ({unmeasured[(row['experiment'], row['params_key_baseline'])]})"
    elif pd.isna(row["value_run"]):
        entry["verdict"] = "only in baseline"
    elif entry["kind"] == "deterministic":
        same = row["value_run"] == row["value_baseline"]
        entry["verdict"] = "unchanged" if same else "changed"
        if not same and row["value_baseline"]:
            entry["change"] = row["value_run"] / row["value_baseline"] - 1.0
    else:
        return timed_logs(entry, row, by_measurement, memo)
    return None


def timed_logs(
    entry: dict[str, Any], row: Mapping[Any, Any], by_measurement: Mapping[Any, pd.DataFrame], memo: SidesMemo
) -> tuple[list[float], list[float], str] | None:
    """A timed row's log values on each side and their statistic, or None with the verdict given
    where a side has no samples (not judged) or too few (too few samples)."""
    run_samples, base_samples, method = memo.sides(
        row["measurement_id_run"], row["measurement_id_baseline"], has_seeded_pairs(str(row["metric"])), by_measurement
    )
    run_logs, base_logs = log_values(run_samples), log_values(base_samples)
    if not run_logs or not base_logs:
        entry["verdict"] = "not judged"
        entry["why"] = REFERENCE_WHY if row["metric"] == REFERENCE_METRIC else VERDICT_MEANINGS["not judged"]
        if row["value_baseline"]:
            entry["change"] = row["value_run"] / row["value_baseline"] - 1.0
        return None
    if min(len(run_logs), len(base_logs)) < MIN_SAMPLES:
        entry["verdict"] = "too few samples"
        entry["change"] = statistics.median(run_samples) / statistics.median(base_samples) - 1.0
        units = "rounds" if method.endswith((ROUND_METHOD, MATCHED_METHOD)) else "samples"
        entry["why"] = f"{len(run_logs)} against {len(base_logs)} {units}: the t test needs {MIN_SAMPLES} a side"
        return None
    return run_logs, base_logs, method


def verdict_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a verdict table, in the order they were judged."""
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if not table.empty:
        # The hidden figures are numbers, NaN where a row has none, whichever rows a table holds.
        hidden = TABLE_COLUMNS[len(COLUMNS) :]
        table[hidden] = table[hidden].astype(float)
    return table


def ordered_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as the verdict table: by verdict (regressions first), then the largest change."""
    table = verdict_frame(rows)
    if table.empty:
        return table
    table["order"] = table["verdict"].map(VERDICT_ORDER.index)
    table["size"] = table["change"].astype(float).abs().fillna(0.0)
    table = table.sort_values(
        ["order", "size", "experiment", "metric", "point"], ascending=[True, False, True, True, True]
    )
    return table.drop(columns=["order", "size"]).reset_index(drop=True)
