"""History: every run, and a key metric per machine over time with a band that flags outliers."""

import json

import streamlit as st

from dashboard import charts, data, ui

st.title("History")
opened = ui.open_store()
if opened:
    url = opened[0]
    runs = data.load_runs(url)
    if runs.empty:
        st.info(f"The store holds no run yet. Fill it with `{ui.FILL_COMMAND}` or launch a sweep from the sidebar.")
    else:
        left, middle, right = st.columns(3)
        machines = sorted(runs["machine"].unique())
        statuses = sorted(runs["status"].unique())
        chosen_machines = left.multiselect(
            "Machines", machines, default=[m for m in st.query_params.get_all("machine") if m in machines]
        )
        chosen_statuses = middle.multiselect(
            "Status", statuses, default=[s for s in st.query_params.get_all("status") if s in statuses]
        )
        presets = sorted(runs["preset"].fillna("custom").unique())
        chosen_presets = right.multiselect(
            "Preset", presets, default=[p for p in st.query_params.get_all("preset") if p in presets]
        )
        st.query_params["machine"] = chosen_machines
        st.query_params["status"] = chosen_statuses
        st.query_params["preset"] = chosen_presets
        shown = runs
        if chosen_machines:
            shown = shown[shown["machine"].isin(chosen_machines)]
        if chosen_statuses:
            shown = shown[shown["status"].isin(chosen_statuses)]
        if chosen_presets:
            shown = shown[shown["preset"].fillna("custom").isin(chosen_presets)]
        ui.chart(charts.runs_over_time(shown))
        ui.table(
            shown,
            "runs",
            [
                "run_id",
                "started_at",
                "machine",
                "preset",
                "status",
                "wall_seconds",
                "model_hash",
                "code_version",
                "error",
            ],
        )

        st.subheader("A key metric per machine over time")
        st.caption(
            f"Rule: a run is flagged when its value falls outside median ± {data.OUTLIER_MADS:g}·MAD "
            f"(scaled to a standard deviation) of the previous {data.HISTORY_WINDOW} runs on the same "
            "machine fingerprint; at least three earlier runs are needed."
        )
        experiments = ["bench", "training_summary", "kv_cache", "overhead", "quantization", "speculative"]
        left, right = st.columns(2)
        experiment = left.selectbox("Experiment", experiments, key="history_experiment")
        metrics = data.load_metric_names(url, experiment)
        if not metrics:
            st.info(f"No run recorded {experiment} yet.")
        else:
            preferred = ("fast_us_per_token", "seconds_per_token")
            default = next((name for name in preferred if name in metrics), metrics[0])
            metric = right.selectbox("Metric", metrics, index=metrics.index(default), key="history_metric")
            values = data.load_metric(url, experiment, metric)
            values["point"] = values["params"].map(lambda params: json.dumps(params, sort_keys=True))
            points = sorted(values["point"].unique())
            point = st.selectbox("Parameter point", points, key="history_point") if len(points) > 1 else points[0]
            flagged = data.flag_outliers(values[values["point"] == point])
            ui.chart(charts.history(flagged, metric))
            outliers = flagged[flagged["outlier"]]
            if outliers.empty:
                st.write("No run falls outside its machine's history.")
            else:
                st.warning(f"{len(outliers)} run(s) fall outside their machine's history.")
            ui.table(
                flagged, "history", ["run_id", "started_at", "machine", "value", "median", "low", "high", "outlier"]
            )
