"""The write-ups' figures beside a run's: what reproduces exactly, what depends on the model,
what on the machine (the same rows as `decodelab report seeds`)."""

import pandas as pd
import streamlit as st

from analysis.writeups import PAGE_COLUMNS, SOURCES, summary, writeup_rows
from dashboard import data, ui

st.title("The write-ups, reproduced")
st.markdown(
    "**The write-ups** are the five articles this project set out to check by measuring: on the KV cache "
    "(measured, counted and explained), on speculative decoding and quantization, and on what context length "
    "costs. The `writeup` column names the part a figure comes from. Every figure they state is kept, with "
    "where a run records its counterpart, in `analysis/data/writeup_figures.toml`; `decodelab run --preset seed` "
    "reruns their own tables and `decodelab report seeds` writes this page's table."
)
st.caption(
    "One row per figure the five write-ups state. Exact figures (counts, closed-form ratios, bytes, the context-cost "
    "and explainer numbers) must agree within the precision the write-up printed; sampled ones within their noise "
    "bound; figures of another model or another machine are shown beside the write-up's, not judged. The source "
    "column says what produced each value: measured (timed, counted or compared on this run's model), computed "
    "(a closed form or arithmetic on fixed sizes: the same for any run) or identity (true by construction). The "
    "count above the table agrees over measured rows only; the computed and identity rows are counted beside it."
)
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "kv_cache", "KV cache") if opened else None
if opened and run_id is not None:
    records = writeup_rows(data.store_for(opened[0]).results, run_id)
    st.write(summary(records))
    rows = pd.DataFrame(records)
    if rows["run_value"].isna().any():
        st.info("Some figures are not in this run: `decodelab run --preset seed` records every one.")
    kinds = st.multiselect("Kinds", ["exact", "sampling", "model", "machine"], default=[], key="seeds_kinds")
    sources = st.multiselect("Sources", list(SOURCES), default=[], key="seeds_sources")
    shown = rows[rows["kind"].isin(kinds)] if kinds else rows
    shown = shown[shown["source"].isin(sources)] if sources else shown
    ui.table(shown, "seed_report", PAGE_COLUMNS)
