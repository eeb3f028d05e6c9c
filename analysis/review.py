"""A run against its baseline: which baseline, and for every headline metric a verdict that
knows what it rests on.

Plain functions of DataFrames (no Streamlit), used by the Review page, `decodelab report run`
and benchmarks/review_calibration.py.

Verdicts:
- deterministic metrics (kinds exact, numerical, sampled in runner.metrics) are ``unchanged`` or
  ``changed``: they must reproduce exactly on one machine;
- timed metrics are decided from the raw samples of both runs: per-pair ratios A/B for a paired
  speedup, the raw seconds for a min-of-N time. A two-sided Mann–Whitney U test per metric, its
  p-values adjusted together over the review (Benjamini–Hochberg), and a shift of the medians
  beyond the noise floor of the metric's own kind: for a paired ratio, the A/A floor of its
  experiment and impl (the widest |log ratio| of an A/A pair, the same decode on both sides, in
  either run); for a min-of-N time, the wider of its A/A min-ratio and the spread of its own
  samples; and the between-run floor (3 robust standard deviations of the case's log value over
  the earlier runs of the preset on the machine) where there are three such runs.
  Where none of the within-run floors exists the verdict is ``no floor``; with fewer than three
  earlier runs a shift within the machine's drift figure (else DEFAULT_DRIFT) is
  ``unknown drift``: the machine may have drifted between the two runs. Too few samples for the
  test ever to reach ALPHA says so;
- a metric with neither (fitted or predicted values, benchmark lines without samples) is
  ``not judged``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.runs import PINNED, SUSPECT, default_baseline, earlier_comparable_runs, tag_set
from analysis.statistics import adjusted_p_values, mann_whitney_p, robust_sigma, smallest_p_value
from runner.labels import part_labels
from runner.metrics import headlines, is_deterministic
from store.records import case_key as params_key

__all__ = [
    "ALPHA",
    "COLUMNS",
    "DEFAULT_DRIFT",
    "DEFAULT_IMPL",
    "HEADLINES",
    "HISTORY_WINDOW",
    "NOISE_PARTS",
    "OUTLIER_MADS",
    "PINNED",
    "SUSPECT",
    "VERDICT_MEANINGS",
    "VERDICT_ORDER",
    "Headline",
    "between_run_floors",
    "case_points",
    "compare",
    "current_names",
    "default_baseline",
    "drift_figure",
    "drift_moves",
    "drift_of",
    "earlier_comparable_runs",
    "noise_floors",
    "params_key",
    "sample_statistic",
    "shares_no_case",
    "smallest_p_value",
    "summary_line",
    "tag_set",
    "timed_verdict",
    "verdict_counts",
]

ALPHA = 0.01
# The between-run floor: OUTLIER_MADS robust standard deviations (analysis.statistics.robust_sigma)
# of the log value over the newest HISTORY_WINDOW earlier runs, where there are MIN_EARLIER_RUNS.
OUTLIER_MADS = 3.0
HISTORY_WINDOW = 20
MIN_EARLIER_RUNS = 3
# How far two runs of the same code on one machine may drift apart when the machine's own figure
# is not known yet (|log| of the ratio of medians): 10%. The calibration (README, Review) measured
# A/A shifts of the speculative speedups up to 8% on the 2-core development machine.
DEFAULT_DRIFT = math.log(1.10)
# The machine's drift figure: this quantile of |log ratio| of timed headline values between
# consecutive comparable runs, where there are at least DRIFT_MIN_VALUES of them.
DRIFT_QUANTILE = 0.95
DRIFT_MIN_VALUES = 20
# Regressions first: what a reviewer must look at, then what moved, then the rest.
VERDICT_ORDER = (
    "regressed",
    "changed",
    "improved",
    "unknown drift",
    "no floor",
    "within noise",
    "too few samples",
    "not judged",
    "only in run",
    "only in baseline",
    "unchanged",
)
# What each verdict word means, for the page's and the reports' explanations.
VERDICT_MEANINGS = {
    "regressed": f"the test's adjusted p is below {ALPHA:g} and the shift is beyond the noise floor, the worse way",
    "improved": f"the test's adjusted p is below {ALPHA:g} and the shift is beyond the noise floor, the better way",
    "changed": "a deterministic figure differs: it must reproduce exactly",
    "unknown drift": "fewer than three earlier runs: the shift is within what the machine may drift between runs",
    "no floor": "no A/A case or sample spread measures this metric's noise: not judged either way",
    "within noise": f"the adjusted p is not below {ALPHA:g}, or the shift is within the noise floor",
    "too few samples": f"the U test cannot reach p < {ALPHA:g} with so few samples",
    "not judged": "no raw samples (a fitted or predicted value)",
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
# Case parts that calibrate the comparison instead of being compared: the A/A pairs.
NOISE_PARTS = {"aa"}
# An A/A case's band (the speculative one's names, the others') and its ratio of minima.
AA_BAND_METRICS = frozenset({"speedup_min", "speedup_max", "aa_speedup_low", "aa_speedup_high"})
AA_MIN_METRIC = "aa_min_ratio"
# Cases without an impl parameter decode through eager PyTorch, the static impl.
DEFAULT_IMPL = "static"
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
    "unit",
    "kind",
    "why",
]


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


def between_run_floors(history: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """How far a timed value moves from run to run on its own: per (experiment, metric, params),
    OUTLIER_MADS robust standard deviations of its log over ``history``, the earlier runs it may
    be judged against (the same preset on the same machine fingerprint, done, not suspect, the
    newest HISTORY_WINDOW), where there are MIN_EARLIER_RUNS. The robust spread is the larger of
    the MAD-based and the range-based estimate, so that three runs of which two agree cannot
    make it collapse. Between-run drift (a shared VM slowing down for minutes) is invisible to
    the A/A pairs inside one run."""
    floors: dict[tuple[str, str, str], float] = {}
    if history.empty:
        return floors
    frame = history[history["value"] > 0].sort_values("started_at")
    keys = frame["params"].map(params_key)
    for (experiment, metric, key), group in frame.groupby([frame["experiment"], frame["metric"], keys]):
        logs = [math.log(value) for value in group["value"].tail(HISTORY_WINDOW)]
        if len(logs) >= MIN_EARLIER_RUNS:
            floors[(str(experiment), str(metric), str(key))] = OUTLIER_MADS * robust_sigma(logs)
    return floors


def drift_moves(history: pd.DataFrame) -> list[float]:
    """How far each timed headline value moved between consecutive comparable runs (|log| of
    their ratio), over ``history`` (run_id, started_at, preset, experiment, metric, params, value
    of one machine's done runs, any preset; ``preset`` may be a comparable key, so that custom
    runs move only against runs of their own spec)."""
    if history.empty:
        return []
    frame = history[history["value"] > 0].sort_values(["started_at", "run_id"])
    keys = frame["params"].map(params_key)
    moves: list[float] = []
    for _, group in frame.groupby([frame["preset"].fillna("custom"), frame["experiment"], frame["metric"], keys]):
        values = group["value"].tolist()
        moves += [abs(math.log(after / before)) for before, after in zip(values, values[1:], strict=False)]
    return moves


def drift_figure(history: pd.DataFrame) -> float | None:
    """The machine's drift figure: the DRIFT_QUANTILE quantile of ``drift_moves(history)``;
    None with fewer than DRIFT_MIN_VALUES moves."""
    return drift_of(drift_moves(history))


def drift_of(moves: Sequence[float]) -> float | None:
    if len(moves) < DRIFT_MIN_VALUES:
        return None
    return float(pd.Series(list(moves)).quantile(DRIFT_QUANTILE))


def sample_statistic(samples: pd.DataFrame) -> tuple[list[float], str]:
    """What a timed measurement's samples say, and by which method: per-pair ratios A/B for a
    paired measurement (sides A and B, method ``paired``), the raw seconds for a min-of-N one
    (side A only, method ``min``)."""
    if samples.empty:
        return [], "paired"
    # The first non-missing seconds of each side and pair, as pandas' pivot_table(aggfunc="first")
    # gives them, in plain Python: a review calls this for every timed row of every pair of runs it
    # compares, and a pivot table each time made the calibration the slowest part of a report.
    first: dict[str, dict[Any, float]] = {}
    for pair_index, side, seconds in zip(samples["pair_index"], samples["side"], samples["seconds"], strict=True):
        if pd.isna(pair_index) or pd.isna(seconds):
            continue
        first.setdefault(side, {}).setdefault(pair_index, seconds)
    if "A" in first and "B" in first:
        pairs = sorted(first["A"].keys() & first["B"].keys())
        return [float(first["A"][pair] / first["B"][pair]) for pair in pairs], "paired"
    return [float(value) for value in samples["seconds"]], "min"


def spread_floor(*sample_sets: Sequence[float]) -> float | None:
    """The unpaired floor of min-of-N seconds: the widest |log max/min| of either run's samples."""
    spreads = [math.log(max(values) / min(values)) for values in sample_sets if len(values) >= 2 and min(values) > 0]
    return max(spreads) if spreads else None


@dataclass(frozen=True)
class Floor:
    """A timed row's noise floor (|log| scale) and what it rests on, in words."""

    within: float | None  # the A/A or sample-spread floor; None: no floor of the row's kind
    between: float | None  # the between-run floor, where MIN_EARLIER_RUNS earlier runs hold the case
    drift: float  # the drift a shift must exceed while ``between`` is unknown
    source: str

    @property
    def value(self) -> float | None:
        known = [floor for floor in (self.within, self.between) if floor is not None]
        return max(known) if known else None


def row_floor(
    experiment: str,
    impl: str,
    method: str,
    samples: tuple[Sequence[float], Sequence[float]],
    aa: Mapping[tuple[str, str, str], float],
    between: float | None,
    drift: float,
) -> Floor:
    """The floor of one timed row, of its own kind: a paired ratio against its experiment's and
    impl's A/A pairs; min-of-N seconds against the wider of its A/A ratio of minima and the
    spread of its own samples."""
    paired = aa.get((experiment, impl, "paired"))
    if method == "paired":
        within, source = paired, f"A/A pairs of {experiment} · {impl}"
    else:
        candidates = [
            floor for floor in (aa.get((experiment, impl, "min")), spread_floor(*samples)) if floor is not None
        ]
        within = max(candidates) if candidates else None
        source = f"A/A minima and sample spread of {experiment} · {impl}"
    if within is None:
        source = f"no A/A case of {experiment} · {impl}"
    if between is not None:
        source += "; between earlier runs"
    return Floor(within, between, drift, source)


def timed_verdict(
    run_values: list[float], baseline_values: list[float], better: str, floor: float | None
) -> tuple[str, float | None, float | None]:
    """(verdict, p-value, shift of the medians run/baseline − 1) for one timed metric judged on
    its own (no correction for the other tests, no drift rule: ``compare`` adds both)."""
    if not run_values or not baseline_values:
        return "not judged", None, None
    shift = statistics.median(run_values) / statistics.median(baseline_values) - 1.0
    if smallest_p_value(len(run_values), len(baseline_values)) >= ALPHA:
        return "too few samples", None, shift
    if floor is None:
        return "no floor", None, shift
    p_value = mann_whitney_p(run_values, baseline_values)
    return decided(p_value, shift, better, floor), p_value, shift


def decided(p_value: float, shift: float, better: str, floor: float, drift: float | None = None) -> str:
    """The verdict of a tested timed row: within noise unless p < ALPHA and the shift is beyond
    the floor; unknown drift if it is not beyond ``drift`` either (where that applies)."""
    size = abs(math.log1p(shift))
    if p_value >= ALPHA or size <= floor:
        return "within noise"
    if drift is not None and size <= drift:
        return "unknown drift"
    worse = shift < 0 if better == "higher" else shift > 0
    return "regressed" if worse else "improved"


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
    by (experiment, point, metric, impl): what ``compare`` judges. It depends on the two runs'
    measurements only, not on their samples, so a caller judging one pair against several
    sample sets (the calibration's slowed copies) makes it once."""
    points = case_points(run, baseline)
    return _keyed(run, headline_only, points).merge(
        _keyed(baseline, headline_only, points),
        on=["experiment", "point", "metric", "impl"],
        how="outer",
        suffixes=("_run", "_baseline"),
    )


def compare(
    run: pd.DataFrame,
    baseline: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    headline_only: bool = True,
    between_runs: dict[tuple[str, str, str], float] | None = None,
    drift: float | None = None,
    paired_rows: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Every (headline) metric of every case of both runs, side by side with its verdict,
    regressions first. ``run`` and ``baseline`` are store.frames.measurements of one run each;
    ``samples`` holds the raw samples of both (store.frames.samples); ``between_runs`` the
    between-run floors of ``between_run_floors``, where the store has them; ``drift`` the
    machine's drift figure (``drift_figure``; DEFAULT_DRIFT where None). The timed rows' p-values
    are adjusted together before any verdict is given. ``paired_rows``: ``side_by_side(run,
    baseline, headline_only)`` where the caller has it already."""
    floors = noise_floors(run, baseline)
    between = between_runs or {}
    drift_floor = DEFAULT_DRIFT if drift is None else drift
    better = {(headline.experiment, headline.metric): headline.better for headline in HEADLINES}
    by_measurement = {key: group for key, group in samples.groupby("measurement_id")} if not samples.empty else {}
    merged = side_by_side(run, baseline, headline_only) if paired_rows is None else paired_rows
    rows: list[dict[str, Any]] = []
    tested: list[tuple[dict[str, Any], float, str, Floor]] = []  # rows whose verdict waits for the adjusted p
    for row in merged.to_dict("records"):
        unit = row["unit_run"] if isinstance(row["unit_run"], str) else row["unit_baseline"]
        deterministic = is_deterministic(row["metric"], unit)
        entry: dict[str, Any] = {
            "experiment": row["experiment"],
            "point": row["point"],
            "metric": row["metric"],
            "unit": unit,
            "kind": "deterministic" if deterministic else "timed",
            "baseline": row["value_baseline"],
            "run": row["value_run"],
            "change": None,
            "p_value": None,
            "adjusted_p": None,
            "noise_floor": None,
            "why": "",
        }
        rows.append(entry)
        if pd.isna(row["value_baseline"]):
            entry["verdict"] = "only in run"
        elif pd.isna(row["value_run"]):
            entry["verdict"] = "only in baseline"
        elif deterministic:
            same = row["value_run"] == row["value_baseline"]
            entry["verdict"] = "unchanged" if same else "changed"
            if not same and row["value_baseline"]:
                entry["change"] = row["value_run"] / row["value_baseline"] - 1.0
        else:
            run_samples, method = sample_statistic(by_measurement.get(row["measurement_id_run"], pd.DataFrame()))
            base_samples, _ = sample_statistic(by_measurement.get(row["measurement_id_baseline"], pd.DataFrame()))
            direction = better.get((row["experiment"], row["metric"])) or "higher"
            if not run_samples or not base_samples:
                entry["verdict"] = "not judged"
                entry["why"] = VERDICT_MEANINGS["not judged"]
                if row["value_baseline"]:
                    entry["change"] = row["value_run"] / row["value_baseline"] - 1.0
                continue
            key = row["params_key_run"] if isinstance(row["params_key_run"], str) else row["params_key_baseline"]
            floor = row_floor(
                row["experiment"],
                row["impl"],
                method,
                (run_samples, base_samples),
                floors,
                between.get((row["experiment"], row["metric"], key)),
                drift_floor,
            )
            entry["noise_floor"] = floor.value
            verdict, p_value, shift = timed_verdict(run_samples, base_samples, direction, floor.value)
            entry["verdict"], entry["p_value"], entry["change"] = verdict, p_value, shift
            if verdict == "too few samples":
                smallest = smallest_p_value(len(run_samples), len(base_samples))
                entry["why"] = (
                    f"{len(run_samples)} against {len(base_samples)} samples: the U test's smallest p is "
                    f"{smallest:.2g}, not below {ALPHA:g}"
                )
            elif verdict == "no floor":
                entry["why"] = f"{floor.source}: {VERDICT_MEANINGS['no floor']}"
            elif p_value is not None and shift is not None:
                tested.append((entry, shift, direction, floor))
    adjusted = adjusted_p_values([entry["p_value"] for entry, *_ in tested])
    for (entry, shift, direction, floor), adjusted_p in zip(tested, adjusted, strict=True):
        entry["adjusted_p"] = adjusted_p
        assert floor.value is not None  # a row without a floor is not tested
        entry["verdict"] = decided(adjusted_p, shift, direction, floor.value, None if floor.between else floor.drift)
        entry["why"] = explanation(entry, floor, len(tested))
    table = pd.DataFrame(rows, columns=COLUMNS)
    if table.empty:
        return table
    table["order"] = table["verdict"].map(VERDICT_ORDER.index)
    table["size"] = table["change"].astype(float).abs().fillna(0.0)
    table = table.sort_values(
        ["order", "size", "experiment", "metric", "point"], ascending=[True, False, True, True, True]
    )
    return table.drop(columns=["order", "size"]).reset_index(drop=True)


def explanation(entry: Mapping[str, Any], floor: Floor, tests: int) -> str:
    """Why a tested timed row got its verdict: the test, the adjusted p, the floor and its source."""
    bound = f"±{math.expm1(floor.value or 0.0):.1%} ({floor.source})"
    drift = "" if floor.between is not None else f"; drift allowance ±{math.expm1(floor.drift):.1%}"
    return (
        f"Mann–Whitney U p = {entry['p_value']:.2g}, adjusted over {tests} timed tests (Benjamini–Hochberg) "
        f"{entry['adjusted_p']:.2g} against {ALPHA:g}; noise floor {bound}{drift}"
    )


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many rows got each verdict, in VERDICT_ORDER, leaving out those with none."""
    counts = table["verdict"].value_counts().to_dict() if not table.empty else {}
    return {verdict: int(counts[verdict]) for verdict in VERDICT_ORDER if counts.get(verdict)}


def shares_no_case(table: pd.DataFrame) -> bool:
    """Whether the two runs compared hold no case in common (every row only in one of them)."""
    return not table.empty and bool(table["verdict"].isin(["only in run", "only in baseline"]).all())


def summary_line(table: pd.DataFrame) -> str:
    counts = verdict_counts(table)
    if shares_no_case(table):
        return (
            f"the two runs share no case ({counts.get('only in run', 0)} figures only in the run, "
            f"{counts.get('only in baseline', 0)} only in the baseline): nothing to compare"
        )
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items()) or "nothing to compare"
