"""The dashboard's queries: plain functions of a Store (testable without a server) and their
cached wrappers keyed by the store URL (the engine lives in ``st.cache_resource``)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from runner.cost.overhead_fit import OverheadFit
from store import frames
from store.compatibility import renamed_in
from store.results import ENDED_RUN_STATUSES
from store.store import Store

if TYPE_CHECKING:
    from analysis.machines_report import MachinesReport
    from analysis.report import RunReport
    from analysis.roofline_report import RooflineReport

RUNS_TTL_SECONDS = 5
RESULTS_TTL_SECONDS = 30
# A review is keyed by the state of the runs table (review_state), so it is kept while nothing it
# reads changed, not rebuilt every 30 s: a cold Review page took 10 s on a 2-core machine, most of
# it the calibration over the store's A/A pairs.
REVIEW_TTL_SECONDS = 3600
REVIEWS_KEPT = 16


def store_url() -> str:
    from store.engine import resolve_url

    return resolve_url(os.environ.get("DECODELAB_DB"))


@st.cache_resource(show_spinner=False)
def store_for(url: str) -> Store:
    # The dashboard never writes the schema: `decodelab dashboard` upgrades before it starts.
    # Read-only (--read-only) is the connection's, not only the pages': nothing can write.
    return Store(url, upgrade=False, read_only=os.environ.get("DECODELAB_READ_ONLY") == "1")


# ---- plain functions -----------------------------------------------------------------------


def wide_cases(measurements: pd.DataFrame) -> pd.DataFrame:
    """One row per case: its params as columns, one column per metric."""
    if measurements.empty:
        return pd.DataFrame()
    params = (
        measurements.drop_duplicates("case_id")
        .set_index("case_id")["params"]
        .apply(lambda value: pd.Series(value, dtype=object))
    )
    values = measurements.pivot_table(index="case_id", columns="metric", values="value", aggfunc="first")
    frame = params.join(values).reset_index()
    meta = measurements.drop_duplicates("case_id").set_index("case_id")[["run_id", "machine"]]
    frame = frame.join(meta, on="case_id")
    for column in frame.columns:
        if frame[column].dtype == object:
            converted = pd.to_numeric(frame[column], errors="coerce")
            if converted.notna().sum() == frame[column].notna().sum():
                frame[column] = converted
    return frame


def part(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    if frame.empty or "part" not in frame.columns:
        return pd.DataFrame()
    return frame[frame["part"] == name].dropna(axis=1, how="all").reset_index(drop=True)


def with_no_cache_path(timing: pd.DataFrame) -> pd.DataFrame:
    """KV timing rows with ``baseline``, how a reader should take their measured_speedup: the
    no-cache side ran through ``no_cache_impl``. Only old runs differ from the impl (their
    no-cache side was the eager forward whatever the impl, store.compatibility), so a compiled
    impl's speedup there mixes the compiler's gain with the cache's."""
    if timing.empty:
        return timing
    frame = timing.copy()
    same = frame["no_cache_impl"] == frame["impl"]
    frame["baseline"] = "no cache, same impl"
    frame.loc[~same, "baseline"] = "eager no cache (old definition, before per-impl baselines)"
    return frame


def best_speedup_by_impl(speculative: pd.DataFrame) -> pd.DataFrame:
    """Per target impl, the case with the best measured median speedup, with its band and the
    baseline's time per token (a speedup over a slow baseline is not a fast decoder)."""
    if speculative.empty:
        return pd.DataFrame()
    best = speculative.loc[speculative.groupby("impl")["speedup_median"].idxmax()]
    if "target_step_seconds" in best.columns:
        best = best.assign(baseline_us_per_token=best["target_step_seconds"] * 1e6)
    columns = [
        "impl",
        "draft",
        "k",
        "speedup_median",
        "speedup_min",
        "speedup_max",
        "verify_cost_ratio",
        "baseline_us_per_token",
    ]
    return best[[column for column in columns if column in best.columns]].reset_index(drop=True)


def distribution_verdicts(distribution: pd.DataFrame) -> pd.DataFrame:
    """Each draft's distribution check in words: outside the noise bound, within it, or within it
    with no power (a broken accept-everything rule passes as well, so passing shows nothing)."""
    frame = distribution.copy()
    has_control = "check_detects_broken_rule" in frame.columns
    verdicts = []
    for row in frame.to_dict("records"):
        power = row["check_detects_broken_rule"] if has_control else None
        if row["within_sampling_noise"] != 1:
            verdicts.append("❌ outside the sampling-noise bound")
        elif power is None or pd.isna(power):
            verdicts.append("✅ within noise (power unknown: recorded before the broken-rule control)")
        elif power == 1:
            verdicts.append("✅ within noise; a broken rule would have been caught")
        else:
            verdicts.append("no power: a broken accept rule passes too")
    return frame.assign(verdict=verdicts)


def compare_table(frame: pd.DataFrame, key: list[str], deterministic: bool) -> pd.DataFrame:
    """Per parameter point, each machine's value side by side and the ratio to the first one.
    For deterministic metrics (counts, seeded acceptance) differing values are flagged."""
    if frame.empty:
        return frame
    wide = frame.pivot_table(index=key, columns="machine", values="value", aggfunc="median")
    machines = list(wide.columns)
    for machine in machines[1:]:
        wide[f"{machine} / {machines[0]}"] = wide[machine] / wide[machines[0]]
    if deterministic:
        wide["equal"] = wide[machines].nunique(axis=1) <= 1
    return wide.reset_index()


def filter_runs(
    runs: pd.DataFrame, machines: list[str], statuses: list[str], presets: list[str], tags: list[str]
) -> pd.DataFrame:
    """The runs on any of ``machines``, with any of ``statuses`` and ``presets`` (what a run ran:
    a preset's name, or a custom run's label, analysis.runs.sweep_label) and every one of
    ``tags``; an empty list keeps everything."""
    from analysis.review import tag_set
    from analysis.runs import sweep_labels

    shown = runs
    if machines:
        shown = shown[shown["machine"].isin(machines)]
    if statuses:
        shown = shown[shown["status"].isin(statuses)]
    if presets:
        shown = shown[sweep_labels(shown).isin(presets)]
    if tags:
        shown = shown[shown["tags"].map(lambda value: set(tags) <= tag_set(value))]
    return shown


# ---- cached wrappers --------------------------------------------------------------------------


@st.cache_data(ttl=RUNS_TTL_SECONDS, show_spinner=False)
def load_runs(url: str) -> pd.DataFrame:
    """Every run, with its launch estimate's error against its wall time (+0.5: it said 50 % more)."""
    runs = frames.runs(store_for(url))
    errors = [estimate_error(*pair) for pair in zip(runs["estimated_seconds"], runs["wall_seconds"], strict=True)]
    return runs.assign(estimate_error=pd.Series(errors, index=runs.index, dtype=float))


def estimate_error(estimated_seconds: Any, wall_seconds: Any) -> float | None:
    """The estimate against the time taken: +0.5 is 50 % too long, −0.5 half the time taken."""
    try:
        estimated, taken = float(estimated_seconds), float(wall_seconds)
    except (TypeError, ValueError):
        return None
    if not taken > 0 or estimated != estimated:
        return None
    return estimated / taken - 1.0


@st.cache_data(ttl=RUNS_TTL_SECONDS, show_spinner=False)
def load_experiment_runs(url: str, experiment: str) -> pd.DataFrame:
    return frames.runs(store_for(url), experiment=experiment)


@st.cache_data(ttl=RESULTS_TTL_SECONDS, show_spinner=False)
def load_cases(url: str, run_id: int, experiment: str) -> pd.DataFrame:
    return wide_cases(frames.measurements(store_for(url), run_id, experiment))


@st.cache_data(ttl=RESULTS_TTL_SECONDS, show_spinner=False)
def load_renamed(url: str, run_id: int, experiment: str) -> dict[str, str]:
    """The old metric names a run recorded ``experiment`` under, each with its current name."""
    return renamed_in(frames.measurements(store_for(url), run_id, experiment))


@st.cache_data(ttl=RESULTS_TTL_SECONDS, show_spinner=False)
def load_metric(url: str, experiment: str, metric: str) -> pd.DataFrame:
    return frames.metric_across_runs(store_for(url), experiment, metric)


def review_state(runs: pd.DataFrame, run_id: int, baseline_id: int, now: float | None = None) -> str:
    """What a review of ``run_id`` against ``baseline_id`` reads from the runs table (``load_runs``):
    every run's status, finish, tags and note (a tag moves baselines and history, a finished run
    adds an A/A pair); while either run is unfinished, also the current RESULTS_TTL_SECONDS
    window, as its samples still arrive."""
    columns = ["run_id", "status", "finished_at", "tags", "note"]
    digest = hashlib.sha256(runs.reindex(columns=columns).astype(str).to_csv(index=False).encode("utf-8"))
    statuses = runs.set_index("run_id")["status"] if not runs.empty else pd.Series(dtype=str)
    if any(statuses.get(run) not in ENDED_RUN_STATUSES for run in (run_id, baseline_id)):
        digest.update(str(int((time.time() if now is None else now) // RESULTS_TTL_SECONDS)).encode())
    return digest.hexdigest()


@st.cache_resource(ttl=REVIEW_TTL_SECONDS, max_entries=REVIEWS_KEPT, show_spinner="Comparing the two runs…")
def load_report(url: str, run_id: int, baseline_id: int, headline_only: bool, state: str) -> RunReport:
    """The Review page's comparison, without its calibration line (``load_calibration``: the slow
    part, which the page draws last); shared, not copied: the page only reads it. ``state``:
    review_state's, the cache key's part that changes with what the review reads."""
    from analysis.report import build_report

    return build_report(store_for(url), run_id, baseline_id, headline_only=headline_only, calibrated=False)


@st.cache_data(ttl=REVIEW_TTL_SECONDS, max_entries=REVIEWS_KEPT, show_spinner=False)
def load_calibration(url: str, run_id: int, state: str) -> str:
    """The calibration line of a review of ``run_id`` (analysis.report.calibration_line): seconds on
    a 2-core machine, most of a cold Review page's time, so kept apart from ``load_report``."""
    from analysis.report import calibration_line

    runs = frames.runs(store_for(url))
    run = runs.set_index("run_id", drop=False).loc[run_id].to_dict()
    return calibration_line(store_for(url), {str(key): value for key, value in run.items()})


def calibrated(report: RunReport, line: str) -> RunReport:
    """``report`` with its calibration line, as analysis.report.build_report makes it."""
    return dataclasses.replace(report, calibration=line)


@st.cache_resource(ttl=REVIEW_TTL_SECONDS, max_entries=REVIEWS_KEPT, show_spinner="Writing the HTML report…")
def load_report_html(url: str, run_id: int, baseline_id: int, headline_only: bool, state: str) -> str:
    """The Review page's HTML report, drawn once per comparison and held as the download's data
    (the charts to SVG take seconds). Built on the page, not on click: a file Streamlit generates
    for a click belongs to no element and is collected two script runs later (the jobs panel
    reruns every 2 seconds), so a browser slower than that to ask for it saw the download cancelled."""
    from analysis.report_render import to_html

    report = load_report(url, run_id, baseline_id, headline_only, state)
    return to_html(calibrated(report, load_calibration(url, run_id, state)))


@st.cache_resource(ttl=RESULTS_TTL_SECONDS, show_spinner="Comparing the machines…")
def load_machines_report(
    url: str, preset: str, machines: tuple[str, ...], reference: str, pinned: tuple[tuple[str, int], ...]
) -> MachinesReport:
    """The Compare page's matrix, fingerprints and audit (shared, not copied: the page only reads it)."""
    from analysis.machines_report import build_machines_report

    return build_machines_report(store_for(url), preset, machines, reference=reference, pinned=dict(pinned))


@st.cache_data(ttl=RUNS_TTL_SECONDS, show_spinner=False)
def load_profiled_machines(url: str) -> list[str]:
    """Machines with a measured roof, by name."""
    return sorted(store_for(url).profiles.by_machine_name())


@st.cache_resource(ttl=RESULTS_TTL_SECONDS, show_spinner="Placing the run on its roof…")
def load_roofline(url: str, run_id: int, others: tuple[str, ...]) -> RooflineReport:
    """The Roofline page's parts (shared, not copied: the page only reads them)."""
    from analysis.roofline_report import build

    return build(store_for(url), run_id, others)


def forget_runs() -> None:
    """After a write to runs (tags, notes): read them afresh on the next rerun."""
    load_runs.clear()
    load_experiment_runs.clear()
    # The reviews are keyed by the runs' state (review_state): a new tag or note gives a new key.
    load_machines_report.clear()
    load_headline.clear()


@st.cache_data(ttl=RUNS_TTL_SECONDS, show_spinner=False)
def load_headline(url: str, name: str) -> pd.DataFrame:
    from dashboard import history_series

    series = next(series for series in history_series.SERIES if series.name == name)
    return history_series.series_history(store_for(url), series)


@st.cache_data(ttl=RESULTS_TTL_SECONDS, show_spinner=False)
def load_metric_names(url: str, experiment: str) -> list[str]:
    return frames.metric_names(store_for(url), experiment)


def calibrated_prediction(timing: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """Predicted times for each KV timing point from the overhead fit (seconds per token =
    a + b·mults): the cached side with its impl's fit, the uncached side with the fit of the
    impl its no-cache path ran through."""
    if timing.empty or fits.empty or "mults_cache_with_lm_head" not in timing.columns:
        return pd.DataFrame()
    by_impl = {row["impl"]: OverheadFit.of(row) for row in fits.to_dict("records")}
    rows = []
    for row in with_no_cache_path(timing).to_dict("records"):
        if row["impl"] not in by_impl or row["no_cache_impl"] not in by_impl:
            continue
        cached, eager = by_impl[row["impl"]], by_impl[row["no_cache_impl"]]
        n = row["n"]
        predicted_cache = cached.seconds(n, row["mults_cache_with_lm_head"])
        predicted_no_cache = eager.seconds(n, row["mults_no_cache_with_lm_head"])
        rows.append(
            {
                "impl": row["impl"],
                "n": n,
                "d_model": row["d_model"],
                "seconds_cache": row["seconds_cache"],
                "predicted_seconds_cache": predicted_cache,
                "seconds_no_cache": row["seconds_no_cache"],
                "predicted_seconds_no_cache": predicted_no_cache,
                "measured_speedup": row["measured_speedup"],
                "predicted_speedup": predicted_no_cache / predicted_cache,
                "arithmetic_ratio": row["arithmetic_ratio"],
            }
        )
    return pd.DataFrame(rows)
