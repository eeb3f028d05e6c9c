"""Compare machines (or runs): one experiment and metric side by side, with bands where the
metric has them and ratios to the first; deterministic metrics must agree and are flagged
when they do not."""

import json

import pandas as pd
import streamlit as st

from dashboard import charts, data, ui
from dashboard.metrics import is_deterministic
from dashboard.review import SUSPECT, tag_set

BAND_NAMES = {"speedup_median": ("speedup_min", "speedup_max")}


def band_of(metric: str, known: list[str]) -> tuple[str, str] | None:
    low, high = BAND_NAMES.get(metric, (f"{metric}_low", f"{metric}_high"))
    return (low, high) if low in known and high in known else None


st.title("Compare machines")
opened = ui.open_store()
if opened:
    url = opened[0]
    runs = data.load_runs(url)
    if runs.empty:
        st.info(f"The store holds no run yet. Fill it with `{ui.FILL_COMMAND}`.")
    else:
        left, middle, right = st.columns(3)
        experiments = [
            "kv_cache",
            "overhead",
            "quantization",
            "speculative",
            "bench",
            "training_summary",
            "context_cost",
        ]
        experiment = left.selectbox("Experiment", experiments, key="compare_experiment")
        metrics = data.load_metric_names(url, experiment)
        mode = right.radio("Compare", ["machines", "runs"], horizontal=True, key="compare_mode")
        if not metrics:
            st.info(f"No run recorded {experiment} yet.")
        else:
            metric = middle.selectbox("Metric", metrics, key="compare_metric")
            ui.old_name_note(metric)
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
            values = values[kept]
            band = band_of(metric, metrics)
            if band is not None:
                for name, column in zip(band, ("low", "high"), strict=True):
                    extra = data.load_metric(url, experiment, name).set_index("case_id")["value"]
                    values[column] = values["case_id"].map(extra)
            if mode == "machines":
                machines = sorted(values["machine"].unique())
                wanted = [m for m in st.query_params.get_all("machines") if m in machines] or machines[:4]
                chosen = st.multiselect("Machines (the newest run of each)", machines, default=wanted)
                st.query_params["machines"] = chosen
                newest = values.groupby("machine")["run_id"].transform("max")
                values = values[(values["run_id"] == newest) & values["machine"].isin(chosen)].copy()
                values["series"] = values["machine"]
            else:
                run_ids = sorted(values["run_id"].unique().tolist(), reverse=True)
                wanted_runs = [int(r) for r in st.query_params.get_all("runs") if r.isdigit() and int(r) in run_ids]
                chosen_runs = st.multiselect("Runs", run_ids, default=wanted_runs or run_ids[:2])
                st.query_params["runs"] = [str(run) for run in chosen_runs]
                values = values[values["run_id"].isin(chosen_runs)].copy()
                tagged = values["tags"].map(lambda value: f" · {value}" if value else "")
                values["series"] = "run " + values["run_id"].astype(str) + " · " + values["machine"] + tagged
                chosen = chosen_runs
            values["point"] = values["params"].map(lambda params: json.dumps(params, sort_keys=True))
            unit = values["unit"].iloc[0] if not values.empty else ""
            deterministic = is_deterministic(metric, unit)
            ui.chart(charts.compare_machines(values, "point", metric, series="series"))
            table = data.compare_table(values.assign(machine=values["series"]), ["point"], deterministic)
            if deterministic and "equal" in table and not bool(table["equal"].all()):
                models = values.groupby("series")["model_hash"].first()
                note = " (they used different models)" if models.nunique() > 1 else ""
                st.warning(f"{metric} is deterministic for a model and seed, but differs between {mode}{note}.")
            elif deterministic and len(chosen) > 1:
                st.success(f"{metric} is deterministic and equal on every one of the {mode} chosen.")
            ui.table(pd.DataFrame(table), "compare")
