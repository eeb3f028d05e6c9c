"""Roofline: every timed figure of a run at its arithmetic intensity under its machine's measured
roof (bandwidth per cache level, compute per precision), coloured by regime, with the sentences
the figures support; another machine's roof overlaid when chosen (``?compare=NAME``, as the
Compare machines page links)."""

import streamlit as st

from analysis.roofline_report import TABLE_COLUMNS
from dashboard import data, ui
from store.user_text import markdown_text

st.title("Roofline")
opened = ui.open_store()
if opened:
    url = opened[0]
    run_id = ui.pick_run(url, "kv_cache", "KV cache")
    if run_id is not None:
        profiled = data.load_profiled_machines(url)
        wanted = [name for name in st.query_params.get_all("compare") if name in profiled]
        others = st.multiselect("Overlay another machine's roof", profiled, default=wanted, key="roofline_compare")
        st.query_params["compare"] = others
        report = data.load_roofline(url, run_id, tuple(others))
        if report.roof is None:
            st.info(f"{markdown_text(report.machine)} has no measured roof: run `decodelab machine profile` on it.")
            st.stop()
        if report.points.empty:
            st.info("This run recorded no placed figures (it predates the roofline): run the sweep again.")
        for sentence in report.conclusions():
            st.markdown(f"- {markdown_text(sentence)}")  # it names the machine and impls: the run's own text
        if not report.points.empty:
            ui.chart(report.chart())
            shown = report.points.rename(columns=TABLE_COLUMNS)
            regimes = sorted(shown["regime"].unique())
            chosen = st.multiselect("Regime", regimes, default=regimes, key="roofline_regimes")
            ui.table(shown[shown["regime"].isin(chosen)], "roofline_points", list(TABLE_COLUMNS.values()))
