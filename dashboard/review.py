"""A run against its baseline: which baseline, and for every headline metric a verdict.

Plain functions of DataFrames (no Streamlit), used by the Review page and `decodelab report run`.

Verdicts:
- deterministic metrics (counts, bytes, seeded acceptance, losses, equality checks; see
  dashboard.metrics) are ``unchanged`` or ``changed``: they must reproduce exactly;
- timed metrics are decided from the raw samples of both runs: per-pair ratios A/B for a paired
  speedup, the raw seconds for a min-of-N time. ``improved`` or ``regressed`` needs both a
  two-sided Mann–Whitney U p-value below ALPHA *and* a shift of the medians larger than the
  noise floor: the wider of the A/A floor (the widest |log ratio| of an A/A pair, both sides the
  same decode, in either run) and the between-run floor (how far the case's value moved over the
  earlier runs of the preset on the machine, where there are three); otherwise ``within noise``.
  Too few samples for the test ever to reach ALPHA says so;
- a metric with neither (fitted or derived values, benchmark lines) is ``not judged``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.metrics import RENAMED_METRICS, is_deterministic
from runner.labels import part_labels
from store.records import case_key as params_key

ALPHA = 0.01
# The between-run floor: as History's change points, 3·MAD over the newest 20 earlier runs.
OUTLIER_MADS = 3.0
HISTORY_WINDOW = 20
SUSPECT, PINNED = "suspect", "baseline"
# Regressions first: what a reviewer must look at, then what moved, then the rest.
VERDICT_ORDER = (
    "regressed",
    "changed",
    "improved",
    "within noise",
    "too few samples",
    "not judged",
    "only in run",
    "only in baseline",
    "unchanged",
)


@dataclass(frozen=True)
class Headline:
    """A metric a reviewer checks first; ``better`` is "higher" or "lower" for timed ones."""

    experiment: str
    metric: str
    better: str | None = None


HEADLINES = (
    Headline("training_summary", "seconds_per_token", "lower"),
    Headline("training_summary", "val_loss"),
    Headline("training_summary", "parameter_count"),
    Headline("kv_cache", "measured_speedup", "higher"),
    Headline("kv_cache", "speedup_vs_eager_no_cache", "higher"),
    Headline("kv_cache", "strings_identical"),
    Headline("kv_cache", "greedy_identical"),
    Headline("kv_cache", "max_logit_diff"),
    Headline("kv_cache", "counter_matches_closed_form"),
    Headline("kv_cache", "arithmetic_ratio"),
    Headline("kv_cache", "arithmetic_ratio_causal"),
    Headline("kv_cache", "kv_computations_no_cache"),
    Headline("kv_cache", "cache_bytes"),
    Headline("overhead", "seconds_per_token", "lower"),
    Headline("quantization", "speedup_vs_fp32", "higher"),
    Headline("quantization", "loss_increase"),
    Headline("quantization", "weight_bytes"),
    Headline("quantization", "divergence_position_greedy"),
    Headline("quantization", "divergence_position_sampled"),
    Headline("speculative", "speedup_median", "higher"),
    Headline("speculative", "acceptance_rate"),
    Headline("speculative", "chars_per_target_pass"),
    Headline("speculative", "target_passes"),
    Headline("speculative", "mean_accepted_length"),
    Headline("speculative", "distribution_check_passes"),
    Headline("speculative", "check_detects_accept_all"),
    Headline("context_cost", "quad_ratio"),
    Headline("context_cost", "linear_ratio"),
    Headline("context_cost", "crossover_n"),
    Headline("bench", "fast_us_per_token", "lower"),
    Headline("bench", "speedup_vs_transformers", "higher"),
)
# Case parts that calibrate the comparison instead of being compared: the A/A pairs.
NOISE_PARTS = {"aa"}
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
    "noise_floor",
    "unit",
    "kind",
]


# ---- which baseline ---------------------------------------------------------------------------


def tag_set(tags: Any) -> set[str]:
    """The tags of a runs-frame row (joined by ", ") as a set."""
    return {tag for tag in str(tags or "").split(", ") if tag}


def default_baseline(runs: pd.DataFrame, run_id: int) -> int | None:
    """The newest run pinned with the tag ``baseline``, else the previous done run, of the same
    preset on the same machine fingerprint, started before ``run_id``; suspect runs never."""
    if run_id not in set(runs["run_id"]):
        return None
    earlier = runs[runs["run_id"].isin(earlier_comparable_runs(runs, run_id))]
    same = earlier.sort_values(["started_at", "run_id"], ascending=False)
    pinned = same[same["tags"].map(lambda tags: PINNED in tag_set(tags))] if "tags" in same.columns else same.iloc[:0]
    chosen = pinned if not pinned.empty else same
    return None if chosen.empty else int(chosen["run_id"].iloc[0])


# ---- the comparison ---------------------------------------------------------------------------


def noise_floors(*measurements: pd.DataFrame) -> dict[str, float]:
    """How far the clock alone moves a ratio, per impl: the widest |log| of any A/A pair's ratio
    (both sides the same decode through that impl) in these runs. On a log scale, so that a
    ratio's halving and doubling are the same distance. Impls without an A/A case are absent."""
    floors: dict[str, float] = {}
    for frame in measurements:
        if frame.empty:
            continue
        parts = frame["params"].map(lambda params: params.get("part"))
        aa = frame[
            parts.isin(NOISE_PARTS) & frame["metric"].isin(["speedup_min", "speedup_max"]) & (frame["value"] > 0)
        ]
        for params, value in zip(aa["params"], aa["value"], strict=True):
            impl = params.get("impl", DEFAULT_IMPL)
            floors[impl] = max(floors.get(impl, 0.0), abs(math.log(value)))
    return floors


def between_run_floors(history: pd.DataFrame) -> dict[tuple[str, str, str], float]:
    """How far a timed value moves from run to run on its own: per (experiment, metric, params),
    OUTLIER_MADS · MAD (scaled to a standard deviation) of its log over ``history``, the earlier
    runs it may be judged against (the same preset on the same machine fingerprint, done, not
    suspect, the newest HISTORY_WINDOW), where there are at least three. Between-run drift (a
    shared VM slowing down for minutes) is invisible to the A/A pairs inside one run."""
    floors: dict[tuple[str, str, str], float] = {}
    if history.empty:
        return floors
    frame = history[history["value"] > 0].sort_values("started_at")
    keys = frame["params"].map(params_key)
    for (experiment, metric, key), group in frame.groupby([frame["experiment"], frame["metric"], keys]):
        logs = pd.Series([math.log(value) for value in group["value"].tail(HISTORY_WINDOW)])
        if len(logs) >= 3:
            floors[(str(experiment), str(metric), str(key))] = (
                OUTLIER_MADS * 1.4826 * float((logs - logs.median()).abs().median())
            )
    return floors


def earlier_comparable_runs(runs: pd.DataFrame, run_id: int) -> list[int]:
    """The runs a run's between-run floor is taken over: done, not suspect, of its preset on its
    machine fingerprint, started before it."""
    by_id = runs.set_index("run_id")
    run = by_id.loc[run_id]
    tags = runs["tags"].map(tag_set) if "tags" in runs.columns else pd.Series([set()] * len(runs), index=runs.index)
    chosen = runs[
        (runs["machine_fingerprint"] == run["machine_fingerprint"])
        & (runs["preset"].fillna("custom") == ("custom" if pd.isna(run["preset"]) else run["preset"]))
        & (runs["status"] == "done")
        & (runs["run_id"] != run_id)
        & (pd.to_datetime(runs["started_at"]) <= pd.to_datetime(run["started_at"]))
        & ~tags.map(lambda names: SUSPECT in names)
    ]
    return [int(value) for value in chosen["run_id"]]


def row_floor(row: Mapping[Any, Any], aa: dict[str, float], between: dict[tuple[str, str, str], float]) -> float | None:
    """A timed row's noise floor: the wider of its impl's A/A floor and its between-run floor."""
    key = row["params_key_run"] if isinstance(row["params_key_run"], str) else row["params_key_baseline"]
    known = [
        floor
        for floor in (aa.get(row["impl"]), between.get((row["experiment"], row["metric"], key)))
        if floor is not None
    ]
    return max(known) if known else None


def sample_statistic(samples: pd.DataFrame) -> list[float]:
    """What a timed measurement's samples say: per-pair ratios A/B for a paired measurement
    (sides A and B), the raw seconds for a min-of-N one (side A only)."""
    if samples.empty:
        return []
    sides = samples.pivot_table(index="pair_index", columns="side", values="seconds", aggfunc="first")
    if "B" in sides.columns and "A" in sides.columns:
        paired = sides.dropna(subset=["A", "B"])
        return [float(a / b) for a, b in zip(paired["A"], paired["B"], strict=True)]
    return [float(value) for value in samples["seconds"]]


def smallest_p_value(first: int, second: int) -> float:
    """The smallest two-sided p-value an exact Mann–Whitney U test of these sample sizes can give."""
    return min(1.0, 2.0 / math.comb(first + second, first))


def timed_verdict(
    run_values: list[float], baseline_values: list[float], better: str, floor: float | None
) -> tuple[str, float | None, float | None]:
    """(verdict, p-value, shift of the medians run/baseline − 1) for one timed metric."""
    from scipy.stats import mannwhitneyu

    if not run_values or not baseline_values:
        return "not judged", None, None
    shift = statistics.median(run_values) / statistics.median(baseline_values) - 1.0
    if smallest_p_value(len(run_values), len(baseline_values)) >= ALPHA:
        return "too few samples", None, shift
    p_value = float(mannwhitneyu(run_values, baseline_values, alternative="two-sided").pvalue)
    if p_value >= ALPHA or abs(math.log1p(shift)) <= (floor or 0.0):
        return "within noise", p_value, shift
    worse = shift < 0 if better == "higher" else shift > 0
    return ("regressed" if worse else "improved"), p_value, shift


def current_names(measurements: pd.DataFrame) -> pd.DataFrame:
    """The measurements without the A/A pairs (they calibrate, they are not compared), renamed
    metrics under their current names (so an old run's meet a new run's), with ``part`` and
    ``params_key`` columns."""
    frame = measurements.copy()
    frame["metric"] = frame["metric"].map(lambda metric: RENAMED_METRICS.get(metric, metric))
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


def compare(
    run: pd.DataFrame,
    baseline: pd.DataFrame,
    samples: pd.DataFrame,
    *,
    headline_only: bool = True,
    between_runs: dict[tuple[str, str, str], float] | None = None,
) -> pd.DataFrame:
    """Every (headline) metric of every case of both runs, side by side with its verdict,
    regressions first. ``run`` and ``baseline`` are store.frames.measurements of one run each;
    ``samples`` holds the raw samples of both (store.frames.samples); ``between_runs`` the
    between-run floors of ``between_run_floors``, where the store has them."""
    floors = noise_floors(run, baseline)
    between = between_runs or {}
    better = {(headline.experiment, headline.metric): headline.better for headline in HEADLINES}
    by_measurement = {key: group for key, group in samples.groupby("measurement_id")} if not samples.empty else {}
    points = case_points(run, baseline)
    merged = _keyed(run, headline_only, points).merge(
        _keyed(baseline, headline_only, points),
        on=["experiment", "point", "metric", "impl"],
        how="outer",
        suffixes=("_run", "_baseline"),
    )
    rows = []
    for row in merged.to_dict("records"):
        unit = row["unit_run"] if isinstance(row["unit_run"], str) else row["unit_baseline"]
        deterministic = is_deterministic(row["metric"], unit)
        entry = {
            "experiment": row["experiment"],
            "point": row["point"],
            "metric": row["metric"],
            "unit": unit,
            "kind": "deterministic" if deterministic else "timed",
            "baseline": row["value_baseline"],
            "run": row["value_run"],
            "change": None,
            "p_value": None,
            "noise_floor": None if deterministic else row_floor(row, floors, between),
        }
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
            run_samples = sample_statistic(by_measurement.get(row["measurement_id_run"], pd.DataFrame()))
            base_samples = sample_statistic(by_measurement.get(row["measurement_id_baseline"], pd.DataFrame()))
            direction = better.get((row["experiment"], row["metric"])) or "higher"
            if not run_samples or not base_samples:
                entry["verdict"] = "not judged"
                if row["value_baseline"]:
                    entry["change"] = row["value_run"] / row["value_baseline"] - 1.0
            else:
                entry["verdict"], entry["p_value"], entry["change"] = timed_verdict(
                    run_samples, base_samples, direction, entry["noise_floor"]
                )
        rows.append(entry)
    table = pd.DataFrame(rows, columns=COLUMNS)
    if table.empty:
        return table
    table["order"] = table["verdict"].map(VERDICT_ORDER.index)
    table["size"] = table["change"].astype(float).abs().fillna(0.0)
    table = table.sort_values(
        ["order", "size", "experiment", "metric", "point"], ascending=[True, False, True, True, True]
    )
    return table.drop(columns=["order", "size"]).reset_index(drop=True)


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many rows got each verdict, in VERDICT_ORDER, leaving out those with none."""
    counts = table["verdict"].value_counts().to_dict() if not table.empty else {}
    return {verdict: int(counts[verdict]) for verdict in VERDICT_ORDER if counts.get(verdict)}


def summary_line(table: pd.DataFrame) -> str:
    counts = verdict_counts(table)
    return ", ".join(f"{count} {verdict}" for verdict, count in counts.items()) or "nothing to compare"
