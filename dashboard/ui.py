"""Small pieces every page uses: the store, the run picker, tables with CSV downloads, and
charts drawn in the app's one style (analysis.theme) and tables in its one format
(analysis.tables)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from analysis import tables, theme
from analysis.runs import sweep_label
from dashboard import data
from runner.model.data_folder import DEFAULT_DATA_DIR
from store.compatibility import renamed_in
from store.errors import StoreError
from store.store import Store
from store.user_text import csv_safe, markdown_text

FILL_COMMAND = "decodelab run --preset quick"


def read_only() -> bool:
    """`decodelab dashboard --read-only` (DECODELAB_READ_ONLY=1): no launch form, no tags or
    notes, nothing written. Read at every script run, not once per process."""
    return os.environ.get("DECODELAB_READ_ONLY") == "1"


def data_dir() -> Path:
    """`decodelab dashboard --data-dir DIR` (DECODELAB_DATA_DIR): the only folder whose files a
    launch from this dashboard may train on (runner/model/data_folder.py)."""
    return Path(os.environ.get("DECODELAB_DATA_DIR") or DEFAULT_DATA_DIR).resolve()


def open_store() -> tuple[str, Store] | None:
    """The store this dashboard reads, or None after showing why it cannot be opened."""
    url = data.store_url()
    try:
        return url, data.store_for(url)
    except StoreError as error:
        st.error(str(error))
        return None


def absent(what: str, command: str = FILL_COMMAND) -> None:
    """One line where a section of the chosen run has no data: what is missing, what records it."""
    st.info(f"This run recorded no {what}: `{command}` records it.")


def old_name_note(values: pd.DataFrame) -> None:
    """Say so when some runs recorded the metric shown under a name since retired (the store's
    read path shows them under the current name: store.compatibility)."""
    for old, new in renamed_in(values).items():
        runs = sorted(values.loc[values["recorded_metric"] == old, "run_id"].unique())
        st.caption(
            f"Run(s) {', '.join(str(run) for run in runs)} recorded {markdown_text(new)} under its old name "
            f"{markdown_text(old)} (renamed "
            "because the old name claimed more than it measured); shown here under the new name."
        )


def run_number(text: str) -> int | None:
    """A run id typed in an address (``?pin=vm:3``, ``?runs=3``), or None: ASCII digits only and
    at most 18 of them (``int`` refuses more than 4,300 digits with a ValueError, and ``isdigit``
    accepts digits ``int`` cannot read, such as ``²``)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def query_int(name: str) -> int | None:
    value = st.query_params.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def pick_run(url: str, experiment: str, title: str) -> int | None:
    """A run that recorded ``experiment`` (default: the newest; ``?run=`` selects one)."""
    runs = data.load_experiment_runs(url, experiment)
    if runs.empty:
        st.info(
            f"No run has recorded the {title} experiment yet. Fill it with `{FILL_COMMAND}` "
            "or launch a sweep from the sidebar."
        )
        return None
    options = runs["run_id"].tolist()
    wanted = query_int("run")
    index = options.index(wanted) if wanted in options else 0
    labels = {
        row["run_id"]: f"run {row['run_id']} · {row['model']} · {row['machine']} · "
        f"{sweep_label(row['preset'], row.get('spec'))} · "
        f"{row['status']} · {pd.Timestamp(row['started_at']):%Y-%m-%d %H:%M}"
        for row in runs.to_dict("records")
    }
    run_id = st.selectbox("Run", options, index=index, format_func=lambda value: labels[value], key="run_picker")
    st.query_params["run"] = str(run_id)
    return int(run_id)


def text_unit(url: str, run_id: int) -> str:
    """ "tokens" for a run of an hf checkpoint, "characters" for decodelab's own model."""
    runs = data.load_runs(url)
    chosen = runs[runs["run_id"] == run_id]
    return str(chosen["text_unit"].iloc[0]) if not chosen.empty else "characters"


def singular(unit: str) -> str:
    return unit.removesuffix("s")


def table(
    frame: pd.DataFrame,
    name: str,
    columns: list[str] | None = None,
    links: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
) -> None:
    """A table in the one format (analysis.tables) with its CSV download of the raw values;
    ``links`` shows those columns (relative URLs) as links with the given text; ``notes`` gives
    columns a tooltip on their header (what a sign means, say)."""
    shown = frame[[column for column in columns if column in frame.columns]] if columns else frame
    # Headers in words (tables.header); the frame underneath and the CSV keep the column names.
    config: dict[str, Any] = {
        column: st.column_config.Column(tables.header(column), help=(notes or {}).get(column))
        for column in tables.shown_columns(shown)
    }
    for column, text in (links or {}).items():
        config[column] = st.column_config.LinkColumn(tables.header(column), display_text=text)
    st.dataframe(tables.display(shown.reset_index(drop=True)), hide_index=True, column_config=config)
    st.download_button(
        f"Download {name} (CSV)",
        csv_safe(shown).to_csv(index=False).encode("utf-8"),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"download-{name}",
    )


def chart(figure: theme.Figure) -> None:
    st.altair_chart(theme.finish(figure), width="stretch")
