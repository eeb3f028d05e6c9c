"""One table formatter for every page and report: flags as yes/no, a missing value as "–", whole
numbers with thousands separators, byte counts in binary units, times in µs/ms/s, dates to the
second, internal columns (case_id, params) hidden. A metric column is formatted by its unit in
the metric catalogue (runner.metrics), never by how its name begins (``bytes_ratio_vs_fp32`` is
a ratio). Display only: the numbers underneath stay numbers where they can (a column sorts by
value; see ``display``), and the CSV download keeps the raw values."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from functools import partial
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from runner.metrics import lookup

MISSING = "–"
# Columns that identify rows for the code, not for a reader.
HIDDEN_COLUMNS = frozenset({"case_id", "params", "machine_id", "model_id", "measurement_id", "spec", "run_uid"})
# Words in a column's name that make a 0/1 column a flag: "strings_identical", "exceeds_tolerance".
FLAG_WORDS = ("identical", "matches", "exceeds", "quantized", "outlier", "differs", "holds", "distilled", "detects")
# Columns that are not metrics but hold a flag: a case's ``cache`` parameter, the machines' ``differs``.
FLAG_COLUMNS = frozenset({"cache", "differs", "use_cache", "outlier", "suspect"})
BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
# A time's text: below a millisecond in µs, below a second in ms, else in s.
SECONDS_PER_UNIT = {"seconds": 1.0, "microseconds": 1e-6}
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
# Relative changes (run over baseline − 1), written as the report writes them: +12.3%.
# "error": the Roofline page's prediction_error, renamed (analysis.roofline_report.TABLE_COLUMNS).
PERCENT_COLUMNS = frozenset({"change", "estimate_error", "prediction_error", "median_error", "error"})
# Columns whose rows each carry their own unit (in a ``unit`` column): row_unit_texts.
ROW_UNIT_COLUMNS = ("baseline", "run")
# Shares and sizes of changes (0.08 is 8%), written unsigned: 8.0%. Not the review's noise_floor:
# a |log| (report_render writes it as ±expm1).
SHARE_COLUMNS = frozenset(
    {
        "median_abs_error",
        "roof_fraction",
        "roof fraction",
        "detectable",
        "a_priori_error_median",
        "a_priori_within_10pct",
        "received_fraction",
        "received_fraction_causal",
    }
)


# Headers a reader would not guess from the column's name; any other: its words (``header``).
HEADERS = {
    "run_id": "run",
    "p_value": "p",
    "adjusted_p": "adjusted p",
    "val_loss": "held-out loss",
    "started_at": "started",
    "finished_at": "finished",
    "seconds_per_token": "time per token",
    "wall_seconds": "wall time",
    "estimated_seconds": "estimated time",
}


def header(name: str) -> str:
    """A column's header on a page: HEADERS', else its name in words (``noise_floor`` → noise
    floor), ``…_seconds`` and ``…_us`` as a time (its cells say the unit: 81.3 s, 7.0 µs).
    Display only: the frame and its CSV keep the names."""
    if name in HEADERS:
        return HEADERS[name]
    words = str(name)
    for suffix in ("_seconds", "_us"):
        if words.endswith(suffix) and words != suffix.lstrip("_"):
            words = words.removesuffix(suffix) + " time"
    if words.startswith("seconds_"):  # seconds_no_cache: the time without a cache
        words = "time " + words.removeprefix("seconds_")
    return words.replace("_us_per_", "_µs_per_").replace("_", " ")


def axis_title(metric: str) -> str:
    """A metric's name in words with its catalogue unit, for an axis that plots its raw values:
    held-out loss (nats), time per token (seconds); a ratio's unit goes without saying."""
    found = lookup(metric)
    unit = found.unit if found is not None else None
    return header(metric) + (f" ({unit})" if unit and unit not in ("ratio", "bool") else "")


def is_missing(value: Any) -> bool:
    """No value to write: None or NaN (a cell's MISSING)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def is_identifier(name: str) -> bool:
    """Ids and seeds read as names, not quantities: no thousands separator in them."""
    return name == "id" or name.endswith("_id") or name in {"seed", "pid"}


def unit_of(name: str) -> str | None:
    """The unit of a column: the catalogue's for a metric; for a column the catalogue does not
    know, the unit its name ends in (``…_bytes``, ``…_seconds``, ``…_us``); None otherwise."""
    metric = lookup(name)
    if metric is not None:
        return metric.unit
    if name == "bytes" or name.endswith("_bytes"):
        return "bytes"
    if name == "seconds" or name.endswith("_seconds"):
        return "seconds"
    if name.endswith("_us"):
        return "microseconds"
    return None


def is_bytes(name: str) -> bool:
    return unit_of(name) == "bytes"


def is_date(name: str) -> bool:
    return name.endswith("_at")


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
    said = name in FLAG_COLUMNS or unit_of(name) == "bool" or any(word in name for word in FLAG_WORDS)
    return values <= {0.0, 1.0} and said


def yes_no(value: Any) -> str:
    if is_missing(value):
        return MISSING
    return "yes" if bool(value) else "no"


def binary_bytes(value: Any) -> str:
    """1536 → "1.50 KiB"; below 1 KiB the count itself."""
    if is_missing(value):
        return MISSING
    size = float(value)
    unit = 0
    while abs(size) >= 1024 and unit < len(BINARY_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{int(size):,} B" if unit == 0 else f"{size:,.2f} {BINARY_UNITS[unit]}"


def duration(value: Any, unit: str = "seconds") -> str:
    """A time in ``unit`` (seconds or microseconds) as a person reads it: 0.000123 s → "123 µs",
    0.0123 → "12.3 ms", 1976.4 → "1,976 s"; four significant figures."""
    if is_missing(value):
        return MISSING
    seconds = float(value) * SECONDS_PER_UNIT.get(unit, 1.0)
    size = abs(seconds)
    if size == 0:
        return "0 s"
    if size < 1e-3:
        return f"{seconds * 1e6:.4g} µs"
    if size < 1:
        return f"{seconds * 1e3:.4g} ms"
    return f"{seconds:,.0f} s" if size >= 1000 else f"{seconds:.4g} s"


def date(value: Any) -> str:
    """A date to the second (no microseconds, no time zone suffix)."""
    if is_missing(value):
        return MISSING
    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError):
        return str(value)
    return MISSING if pd.isna(stamp) else f"{stamp:{DATE_FORMAT}}"


def percent(value: Any) -> str:
    if is_missing(value):
        return MISSING
    return f"{float(value):+.1%}"


def share(value: Any) -> str:
    if is_missing(value):
        return MISSING
    return f"{float(value):.1%}"


def value_text(value: Any, unit: str | None) -> str:
    """One value in ``unit`` (the catalogue's), as every table writes it."""
    if unit == "bool" and not is_missing(value):
        try:
            if float(value) in (0.0, 1.0):
                return yes_no(value)
        except (TypeError, ValueError):
            return str(value)
    if unit == "bytes":
        return binary_bytes(value)
    if unit in SECONDS_PER_UNIT:
        return duration(value, unit)
    return number(value)


def number(value: Any) -> str:
    """Whole numbers with separators (12,345), others to four significant figures."""
    if is_missing(value):
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
    if is_missing(value):
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
        unit = unit_of(name)
        if is_flag(series):
            chosen[column] = yes_no
        elif pd.api.types.is_datetime64_any_dtype(series) or is_date(name):
            chosen[column] = date
        elif pd.api.types.is_numeric_dtype(series):
            if is_identifier(name):
                chosen[column] = plain
            elif name in PERCENT_COLUMNS:
                chosen[column] = percent
            elif name in SHARE_COLUMNS:
                chosen[column] = share
            elif unit == "bytes":
                chosen[column] = binary_bytes
            elif unit in SECONDS_PER_UNIT:
                chosen[column] = partial(duration, unit=unit)
            else:
                chosen[column] = number
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
    # Dates too: Streamlit draws a datetime column with its own format (to the microsecond).
    as_text = [column for column in shown.columns if chosen.get(column) in (yes_no, date) or shown[column].isna().any()]
    for column in as_text:
        underneath[column] = shown[column].map(chosen.get(column, plain)).astype(object)
    for column, texts in row_unit_texts(shown).items():
        underneath[column] = texts
        as_text.append(column)
    return underneath.style.format({column: chosen[column] for column in chosen if column not in as_text})


def row_unit_texts(frame: pd.DataFrame) -> dict[str, pd.Series]:
    """Columns whose rows hold values of different units (a review's ``baseline`` and ``run``:
    a speedup on one row, seconds on the next), each cell written in its row's ``unit``
    (4.965 µs, not 4.965e-06); none where the frame has no ``unit`` column."""
    if "unit" not in frame.columns:
        return {}
    units = [unit if isinstance(unit, str) else None for unit in frame["unit"]]
    return {
        column: pd.Series(
            [value_text(value, unit) for value, unit in zip(frame[column], units, strict=True)],
            index=frame.index,
            dtype=object,
        )
        for column in ROW_UNIT_COLUMNS
        if column in frame.columns
    }


def cell_texts(frame: pd.DataFrame) -> pd.DataFrame:
    """The text of each shown cell (what ``display`` renders), as a frame of strings: what the
    tests read where a page shows the table."""
    shown = frame[shown_columns(frame)]
    chosen = formatters(shown)
    texts = {column: shown[column].map(chosen.get(column, plain)) for column in shown.columns}
    return pd.DataFrame({**texts, **row_unit_texts(shown)})
