"""The Compare page's lower half: one metric of one experiment across machines (the newest run
of each) or across runs, with bands where the metric has them, ratios to the first, and the
equality check for a deterministic metric. Cases are labelled by the parameters that vary."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from analysis.machines import band_of
from analysis.review import SUSPECT, tag_set
from dashboard import data, history_charts, ui
from dashboard.metrics import is_deterministic, opening_metric
from runner.labels import case_labels
from runner.metrics import EXPERIMENT_ORDER
from store.user_text import markdown_text

# The catalogue's experiments, kv_cache first: the figure the page opens on.
EXPERIMENTS = ["kv_cache", *(name for name in EXPERIMENT_ORDER if name != "kv_cache")]


def chosen_values(url: str, runs: pd.DataFrame, experiment: str, metric: str) -> pd.DataFrame:
    """The metric's values over the runs kept by the tag filters, with their band."""
    values = data.load_metric(url, experiment, metric)
    tags_of = runs.set_index("run_id")["tags"].to_dict()
    values["tags"] = values["run_id"].map(tags_of).fillna("")
    all_tags = sorted({tag for value in runs["tags"] for tag in tag_set(value)})
    left, right = st.columns(2)
    wanted_tags = left.multiselect(
        "Only runs tagged", all_tags, default=[t for t in st.query_params.get_all("tag") if t in all_tags]
    )
    st.query_params["tag"] = wanted_tags
    skip_suspect = right.checkbox("Leave out runs tagged suspect", value=True, key="compare_skip_suspect")
    kept = values["tags"].map(
        lambda value: set(wanted_tags) <= tag_set(value) and not (skip_suspect and SUSPECT in tag_set(value))
    )
    values = values[kept].copy()
    band = band_of(metric, data.load_metric_names(url, experiment))
    if band is not None:
        for name, column in zip(band, ("low", "high"), strict=True):
            extra = data.load_metric(url, experiment, name).set_index("case_id")["value"]
            values[column] = values["case_id"].map(extra)
    return values


def show(url: str, runs: pd.DataFrame) -> None:
    left, middle, right = st.columns(3)
    experiment = left.selectbox("Experiment", EXPERIMENTS, key="compare_experiment")
    metrics = data.load_metric_names(url, experiment)
    mode = right.radio("Compare", ["machines", "runs"], horizontal=True, key="compare_mode")
    if not metrics:
        st.info(f"No run recorded {experiment} yet.")
        return
    metric = middle.selectbox(
        "Metric", metrics, index=metrics.index(opening_metric(experiment, metrics)), key="compare_metric"
    )
    values = chosen_values(url, runs, experiment, metric)
    ui.old_name_note(values)
    if mode == "machines":
        machines = sorted(values["machine"].unique())
        wanted = [m for m in st.query_params.get_all("figure_machines") if m in machines] or machines[:4]
        chosen = st.multiselect("Machines (the newest run of each)", machines, default=wanted)
        st.query_params["figure_machines"] = chosen
        newest = values.groupby("machine")["run_id"].transform("max")
        values = values[(values["run_id"] == newest) & values["machine"].isin(chosen)].copy()
        values["series"] = values["machine"]
    else:
        run_ids = sorted(values["run_id"].unique().tolist(), reverse=True)
        asked = (ui.run_number(r) for r in st.query_params.get_all("runs"))
        wanted_runs = [run for run in asked if run is not None and run in run_ids]
        chosen_runs = st.multiselect("Runs", run_ids, default=wanted_runs or run_ids[:2])
        st.query_params["runs"] = [str(run) for run in chosen_runs]
        values = values[values["run_id"].isin(chosen_runs)].copy()
        tagged = values["tags"].map(lambda value: f" · {value}" if value else "")
        values["series"] = "run " + values["run_id"].astype(str) + " · " + values["machine"] + tagged
        chosen = [str(run) for run in chosen_runs]
    values["case"] = case_labels(values["params"].tolist())
    unit = values["unit"].iloc[0] if not values.empty else ""
    deterministic = is_deterministic(metric, unit)
    ui.chart(history_charts.compare_machines(values, "case", metric, series="series"))
    table = data.compare_table(values.assign(machine=values["series"]), ["case"], deterministic)
    if deterministic and "equal" in table and not bool(table["equal"].all()):
        models = values.groupby("series")["model_hash"].first()
        note = " (they used different models)" if models.nunique() > 1 else ""
        st.warning(f"{markdown_text(metric)} is deterministic for a model and seed, but differs between {mode}{note}.")
    elif deterministic and len(chosen) > 1:
        st.success(f"{markdown_text(metric)} is deterministic and equal on every one of the {mode} chosen.")
    ui.table(pd.DataFrame(table), "compare")
