"""Compare machines: the same experiment and metric side by side, with ratios; deterministic
metrics must agree and are flagged when they do not."""

import json

import pandas as pd
import streamlit as st

from dashboard import charts, data, ui

# Metrics that do not depend on the clock: with the same model and seed they must be equal.
DETERMINISTIC_UNITS = {"multiplications", "pairs", "tokens", "passes", "bytes", "bool", "chars", "parameters"}
DETERMINISTIC_METRICS = {
    "acceptance_rate",
    "acceptance_per_decided",
    "arithmetic_ratio",
    "tvd",
    "tvd_direct",
    "val_loss",
    "loss_increase",
    "bytes_ratio_vs_fp32",
}

st.title("Compare machines")
opened = ui.open_store()
if opened:
    url = opened[0]
    runs = data.load_runs(url)
    if runs.empty:
        st.info(f"The store holds no run yet. Fill it with `{ui.FILL_COMMAND}`.")
    else:
        left, right = st.columns(2)
        experiments = ["kv_cache", "quantization", "speculative", "training_summary", "context_cost"]
        experiment = left.selectbox("Experiment", experiments, key="compare_experiment")
        metrics = data.load_metric_names(url, experiment)
        if not metrics:
            st.info(f"No run recorded {experiment} yet.")
        else:
            metric = right.selectbox("Metric", metrics, key="compare_metric")
            values = data.load_metric(url, experiment, metric)
            machines = sorted(values["machine"].unique())
            wanted = [m for m in st.query_params.get_all("machines") if m in machines] or machines[:4]
            chosen = st.multiselect("Machines (the newest run of each)", machines, default=wanted)
            st.query_params["machines"] = chosen
            newest = values.groupby("machine")["run_id"].transform("max")
            values = values[(values["run_id"] == newest) & values["machine"].isin(chosen)].copy()
            values["point"] = values["params"].map(lambda params: json.dumps(params, sort_keys=True))
            unit = values["unit"].iloc[0] if not values.empty else ""
            deterministic = unit in DETERMINISTIC_UNITS or metric in DETERMINISTIC_METRICS
            ui.chart(charts.compare_machines(values, "point", metric))
            table = data.compare_table(values, ["point"], deterministic)
            if deterministic and "equal" in table and not bool(table["equal"].all()):
                models = values.groupby("machine")["model_hash"].first()
                note = " (the machines used different models)" if models.nunique() > 1 else ""
                st.warning(f"{metric} is deterministic for a model and seed, but differs between machines{note}.")
            elif deterministic and len(chosen) > 1:
                st.success(f"{metric} is deterministic and equal on every machine.")
            ui.table(pd.DataFrame(table), "compare")
