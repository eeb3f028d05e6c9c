"""One table formatter for every page: flags as yes/no, a missing value as "–", whole numbers
with thousands separators, byte counts in binary units, internal columns (case_id, params)
hidden. Display only: the numbers underneath stay numbers where they can (a column sorts by
value; see ``display``), and the CSV download keeps the raw values."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

MISSING = "–"
# Columns that identify rows for the code, not for a reader.
HIDDEN_COLUMNS = frozenset({"case_id", "params", "machine_id", "model_id", "measurement_id", "spec", "run_uid"})
# Words in a column's name that make a 0/1 column a flag: "strings_identical", "exceeds_tolerance".
FLAG_WORDS = ("identical", "matches", "exceeds", "quantized", "outlier", "differs", "holds", "distilled", "detects")
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def is_identifier(name: str) -> bool:
    """Ids and seeds read as names, not quantities: no thousands separator in them."""
    return name == "id" or name.endswith("_id") or name in {"seed", "pid"}


def is_bytes(name: str) -> bool:
    return name == "bytes" or name.endswith("_bytes") or name.startswith(("bytes_", "cache_bytes"))


def is_flag(series: pd.Series) -> bool:
    """A boolean column, or a 0/1 column whose name says it is one (measurements are stored as numbers)."""
    present = series.dropna()
    if present.empty:
        return False
    if pd.api.types.is_bool_dtype(series) or all(isinstance(value, bool) for value in present):
        return True
    name = str(series.name)
    try:
        values = {float(value) for value in present}
    except (TypeError, ValueError):
        return False
    return values <= {0.0, 1.0} and any(word in name for word in FLAG_WORDS)


def yes_no(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return "yes" if bool(value) else "no"


def binary_bytes(value: Any) -> str:
    """1536 → "1.50 KiB"; below 1 KiB the count itself."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    size = float(value)
    unit = 0
    while abs(size) >= 1024 and unit < len(BINARY_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{int(size):,} B" if unit == 0 else f"{size:,.2f} {BINARY_UNITS[unit]}"


def number(value: Any) -> str:
    """Whole numbers with separators (12,345), others to four significant figures."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return yes_no(value)
    if not isinstance(value, numbers.Real):
        return str(value)
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def plain(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return str(value)


def shown_columns(frame: pd.DataFrame) -> list[str]:
    return [column for column in frame.columns if column not in HIDDEN_COLUMNS]


def formatters(frame: pd.DataFrame) -> dict[Any, Callable[[Any], str]]:
    """The formatter of each column of ``frame``."""
    chosen: dict[Any, Callable[[Any], str]] = {}
    for column in frame.columns:
        series = frame[column]
        name = str(column)
        if is_flag(series):
            chosen[column] = yes_no
        elif pd.api.types.is_datetime64_any_dtype(series):
            continue  # the dataframe's own date display
        elif pd.api.types.is_numeric_dtype(series):
            chosen[column] = plain if is_identifier(name) else binary_bytes if is_bytes(name) else number
        else:
            chosen[column] = plain
    return chosen


def display(frame: pd.DataFrame) -> Styler:
    """``frame`` as every page shows it: internal columns dropped, each cell formatted.

    Streamlit's table draws a missing cell as its own grey "None" and a boolean column as
    checkboxes whatever the style says, so flags and every column with a missing value hold their
    texts underneath (such a column sorts as text); the others keep their numbers (sorted by value)
    and are formatted by the style."""
    shown = frame[shown_columns(frame)]
    chosen: dict[Any, Any] = formatters(shown)
    underneath = shown.copy()
    as_text = [column for column in shown.columns if chosen.get(column) is yes_no or shown[column].isna().any()]
    for column in as_text:
        underneath[column] = shown[column].map(chosen.get(column, plain)).astype(object)
    return underneath.style.format({column: chosen[column] for column in chosen if column not in as_text})


def cell_texts(frame: pd.DataFrame) -> pd.DataFrame:
    """The text of each shown cell (what ``display`` renders): for tests and plain-text exports."""
    shown = frame[shown_columns(frame)]
    chosen = formatters(shown)
    return pd.DataFrame({column: shown[column].map(chosen.get(column, plain)) for column in shown.columns})
