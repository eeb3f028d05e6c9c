"""History: the headline numbers per machine over time with their change points, every run with
its tags and note, and any metric's history on request."""

import streamlit as st

from analysis import tables
from analysis.review import tag_set
from analysis.runs import sweep_labels
from dashboard import data, history_charts, history_series, ui
from dashboard.metrics import opening_metric
from runner.labels import case_labels
from runner.metrics import EXPERIMENT_ORDER
from store.user_text import markdown_text

st.title("History")
opened = ui.open_store()
if opened:
    url = opened[0]
    runs = data.load_runs(url)
    if runs.empty:
        st.info(f"The store holds no run yet. Fill it with `{ui.FILL_COMMAND}` or launch a sweep from the sidebar.")
    else:
        st.caption(
            "Change points: every run where a series (one machine fingerprint, sweep and impl) moves to a new "
            "level is marked (red diamond, a link to its review against the run before it), found by PELT from the "
            "ruptures library on the series standardised by its own run-to-run noise (docs/dashboard.md, History); the "
            "band is each level's median ± 3 times that noise. Runs tagged suspect are shown but neither marked "
            "nor counted. The review a change point links to judges that run against the one before it, case by "
            "case, with its own test: it may call the same move `unknown drift` where the run's readings of the "
            "machine's speed moved too, or `within noise` where one run alone cannot tell it from noise."
        )
        columns = st.columns(2)
        for index, series in enumerate(history_series.SERIES):
            with columns[index % 2]:
                st.markdown(f"#### {series.name}")
                history = data.load_headline(url, series.name)
                if history.empty:
                    st.info(f"No run recorded it yet: `{ui.FILL_COMMAND}` does.")
                    continue
                st.caption(series.method)
                # Legend below: in half the page's width a legend at the side left the plot under 300 px.
                figure = history_charts.history(
                    history,
                    f"{series.name} ({series.unit})",
                    color=history_charts.line_field(history),
                    legend="bottom",
                )
                ui.chart(figure)
                changes = history[history["change_point"]]
                if not changes.empty:
                    st.warning(
                        "Change points: "
                        + ", ".join(
                            f"[run {run} ({markdown_text(series)})]({link})"
                            for run, series, link in zip(
                                changes["run_id"], changes["series"], changes["review"], strict=True
                            )
                        )
                    )

        st.subheader("Runs")
        left, middle, right, last = st.columns(4)
        machines = sorted(runs["machine"].unique())
        statuses = sorted(runs["status"].unique())
        runs = runs.assign(sweep=sweep_labels(runs))  # "quick", or "quick, kv_cache only" for a custom launch
        presets = sorted(runs["sweep"].unique())
        tags = sorted({tag for value in runs["tags"] for tag in tag_set(value)})
        chosen_machines = left.multiselect(
            "Machines", machines, default=[m for m in st.query_params.get_all("machine") if m in machines]
        )
        chosen_statuses = middle.multiselect(
            "Status", statuses, default=[s for s in st.query_params.get_all("status") if s in statuses]
        )
        chosen_presets = right.multiselect(
            "Preset", presets, default=[p for p in st.query_params.get_all("preset") if p in presets]
        )
        chosen_tags = last.multiselect("Tags", tags, default=[t for t in st.query_params.get_all("tag") if t in tags])
        st.query_params["machine"] = chosen_machines
        st.query_params["status"] = chosen_statuses
        st.query_params["preset"] = chosen_presets
        st.query_params["tag"] = chosen_tags
        shown = data.filter_runs(runs, chosen_machines, chosen_statuses, chosen_presets, chosen_tags)
        ui.table(
            shown.assign(review="review?run=" + shown["run_id"].astype(str)),
            "runs",
            [
                "run_id",
                "review",  # beside the run: after the 64-character model hash it was off-screen
                "started_at",
                "machine",
                "sweep",
                "status",
                "tags",
                "note",
                "wall_seconds",
                "estimated_seconds",
                "estimate_error",
                "model_hash",
                "code_version",
                "error",
            ],
            links={"review": "review"},
            notes={
                "estimate_error": "The launch's estimate against the time the run took: +50% said half again as "
                "long, −50% half as long. The estimate is the cost model's, scaled by this machine's earlier runs "
                "once there are any."
            },
        )

        st.subheader("Any metric over time")
        # bench first (`decodelab bench` records only it); context_cost is closed-form counts, flat over time.
        experiments = ["bench", *(name for name in EXPERIMENT_ORDER if name not in ("bench", "context_cost"))]
        left, right = st.columns(2)
        # Opens on the first experiment the store holds (bench is recorded only by `decodelab bench`).
        recorded = [index for index, name in enumerate(experiments) if data.load_metric_names(url, name)]
        experiment = left.selectbox(
            "Experiment", experiments, index=recorded[0] if recorded else 0, key="history_experiment"
        )
        metrics = data.load_metric_names(url, experiment)
        if not metrics:
            command = "decodelab bench" if experiment == "bench" else ui.FILL_COMMAND
            st.info(f"No run recorded {experiment} yet: `{command}` does.")
        else:
            default = opening_metric(experiment, metrics)
            metric = right.selectbox("Metric", metrics, index=metrics.index(default), key="history_metric")
            values = data.load_metric(url, experiment, metric)
            ui.old_name_note(values)
            values["point"] = case_labels(values["params"].tolist())
            points = list(dict.fromkeys(values["point"]))
            point = st.selectbox("Parameter point", points, key="history_point") if len(points) > 1 else points[0]
            flagged = history_series.change_points(values[values["point"] == point], runs)
            ui.chart(history_charts.history(flagged, tables.axis_title(metric)))
            if flagged.empty or not flagged["change_point"].any():
                st.write("No change point: every machine's series stays at one level.")
            else:
                moved = int(flagged["change_point"].sum())
                st.warning(f"{moved} change point(s): runs where a machine's series moved to a new level.")
            ui.table(
                flagged,
                "history",
                ["run_id", "started_at", "machine", "value", "median", "low", "high", "change_point", "review"],
                links={"review": "review"},
            )
