"""One chart style for the whole dashboard: a fixed colour per impl, draft and precision (the
same series reads the same on every page), legends and axis titles that are never cut off, a
title on every chart, and axes fitted to the data.

Every chart builder colours its series through ``color`` and every page draws through
``dashboard.ui.chart``, which calls ``finish``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import altair as alt
import pandas as pd

from analysis.figures import Figure

# Reference lines (y = x, parity, the weights, a crossover) are drawn in this, never in a series colour.
REFERENCE_COLOR = "#444444"
# A bound or limit drawn over a series (the sampling-noise bound): black, thick, not a series colour.
BOUND_COLOR = "#000000"

# Series colours (Tableau 10 without its gray, which is the reference lines').
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")

# The names an impl, a draft or a precision can have, each with its colour everywhere.
IMPL_COLORS = {
    "static": "#4e79a7",
    "fast": "#f28e2b",
    "naive": "#9c755f",
    "compiled": "#59a14f",
}
DRAFT_COLORS = {
    "bigram": "#76b7b2",
    "ngram": "#edc948",
    "int8": "#e15759",
    "int4": "#b07aa1",
    "small": "#59a14f",
    "fast_int8": "#ff9da7",
}
PRECISION_COLORS = {
    "fp32": "#4e79a7",
    "bf16": "#f28e2b",
    "int8": "#e15759",
    "int4": "#b07aa1",
}
KNOWN_COLORS = {"impl": IMPL_COLORS, "draft": DRAFT_COLORS, "precision": PRECISION_COLORS}


def legend(title: str | None = None, *, columns: int | None = None, orient: str = "right") -> alt.Legend:
    """A legend whose labels and title are never truncated and whose swatches are opaque (a
    band drawn at 25 % opacity would otherwise give a washed-out swatch)."""
    options: dict[str, Any] = {"labelLimit": 0, "titleLimit": 0, "symbolOpacity": 1, "orient": orient}
    if columns is not None:
        options["columns"] = columns
    return alt.Legend(title=title, **options)


def color_scale(field: str, values: Iterable[Any]) -> alt.Scale:
    """The colour scale for ``field``: an impl, draft or precision keeps its own colour whatever
    else is shown; any other field takes the palette in the sorted order of its values, so a
    series keeps its colour between two charts of the same values."""
    shown = sorted({str(value) for value in values if value is not None and value == value})
    known = KNOWN_COLORS.get(field, {})
    spare = [colour for colour in PALETTE if colour not in {known.get(value) for value in shown}]
    range_: list[str] = []
    for value in shown:
        if value in known:
            range_.append(known[value])
        else:
            range_.append(spare.pop(0) if spare else PALETTE[len(range_) % len(PALETTE)])
    return alt.Scale(domain=shown, range=range_)


def color(
    field: str,
    frame: pd.DataFrame,
    title: str | None = None,
    *,
    columns: int | None = None,
    orient: str = "right",
    key: str | None = None,
) -> alt.Color:
    """The colour encoding of ``field`` in ``frame``; ``key`` names the family whose fixed
    colours apply when the column's name is not the family's (a ``series`` of impls)."""
    values = frame[field].tolist() if field in frame.columns else []
    return alt.Color(
        f"{field}:N",
        scale=color_scale(key or field, values),
        legend=legend(title if title is not None else field.replace("_", " "), columns=columns, orient=orient),
    )


def fitted_scale(values: Iterable[Any], *, log: bool = False, padding: float = 0.05) -> alt.Scale:
    """A scale over the data's own range (not from zero, no rounding out to whole decades on a
    log axis), padded a little so no point sits on the frame."""
    numbers = [float(value) for value in values if value is not None and value == value]
    if log:
        numbers = [value for value in numbers if value > 0]
    if not numbers:
        return alt.Scale(type="log") if log else alt.Scale(zero=False)
    low, high = min(numbers), max(numbers)
    if log:
        return alt.Scale(type="log", domain=[low / (1 + padding), high * (1 + padding)], nice=False)
    margin = (high - low) * padding or abs(high) * padding or 1.0
    return alt.Scale(zero=False, domain=[low - margin, high + margin], nice=False)


def finish(figure: Figure) -> Figure:
    """The one place every chart passes through before it is drawn: legends and axis titles
    and labels without a length limit (0 means none), opaque legend swatches, and a check
    that the chart has a title (a chart without one is a bug of its builder)."""
    if not has_title(figure):
        raise ValueError("every chart has a title: give the builder's chart .properties(title=...)")
    return figure.configure_legend(labelLimit=0, titleLimit=0, symbolOpacity=1).configure_axis(
        labelLimit=0, titleLimit=0
    )


def has_title(figure: Figure) -> bool:
    title = getattr(figure, "title", alt.Undefined)
    if isinstance(title, alt.TitleParams):
        title = title.text
    return title is not alt.Undefined and bool(title)
