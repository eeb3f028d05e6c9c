"""One chart style for the whole dashboard and the reports: one colour per thing everywhere (an
impl, a draft, a precision, a machine, a run reads the same on every page and in every report),
legends and axis titles that are never cut off, a title on every chart, and axes fitted to the
data.

The colours are defined once, here (``colour_of``): impls, drafts and precisions have fixed
colours; any other value (a machine, a run, a History series, a ceiling) takes a colour from its
own text, never from which other values a chart happens to show, so "laptop" is the same colour
in every chart. Every chart builder (dashboard/charts.py, dashboard/history_charts.py,
analysis/review_charts.py, analysis/roofline.py, dashboard/speculative_figures.py) colours its
series through ``color``; every page draws through ``dashboard.ui.chart``, which calls ``finish``.
"""

from __future__ import annotations

import zlib
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
# A roofline point's regime: fixed, so that its ceilings' lines can keep clear of them.
REGIME_COLORS = {
    "memory-bound": "#4e79a7",
    "compute-bound": "#f28e2b",
    "overhead-bound": "#e15759",
}
# Context cost's two parts, far apart: from their names they came out two pinks.
COST_PART_COLORS = {"quadratic (attention)": "#e15759", "linear (per position)": "#4e79a7"}
KNOWN_COLORS = {
    "impl": IMPL_COLORS,
    "draft": DRAFT_COLORS,
    "precision": PRECISION_COLORS,
    "regime": REGIME_COLORS,
    "cost_part": COST_PART_COLORS,
}
# A review's two sides (``which``: "run 4", "baseline 3") by their first word, far apart: colours
# from their whole names came out a light blue and a light teal.
WHICH_COLORS = {"run": "#4e79a7", "baseline": "#f28e2b"}
# The domains a colour means one thing in; a chart's field names its domain through ``key``
# where the column is called otherwise (a ``series`` of impls).
DOMAINS = ("impl", "draft", "precision", "machine", "run")
# Colours for every other value (Tableau 20 without its grays): wide, so two names seldom share one.
SPARE_PALETTE = (
    *PALETTE,
    "#a0cbe8",
    "#ffbe7d",
    "#8cd17d",
    "#b6992d",
    "#f1ce63",
    "#499894",
    "#86bcb6",
    "#ff9d9a",
    "#d37295",
    "#fabfd2",
    "#d4a6c8",
    "#9d7660",
    "#d7b5a6",
)


def colour_of(domain: str, value: Any) -> str:
    """The one colour of ``value`` in ``domain``: an impl's, draft's or precision's fixed colour;
    an impl's series ("static · n=256") its impl's; run N the palette's N-th; a review's run or
    baseline side (``which``) WHICH_COLORS'; any other
    value a colour from its own text (crc32), the same in every chart whatever else the chart shows."""
    text = str(value)
    fixed = KNOWN_COLORS.get(domain, {})
    if text in fixed:
        return fixed[text]
    if domain == "impl" and text.split(" · ")[0] in fixed:  # a series of an impl: "static · n=256"
        return fixed[text.split(" · ")[0]]
    if domain == "run" and text.isdigit():
        return PALETTE[int(text) % len(PALETTE)]
    if domain == "which" and text.split(" ")[0] in WHICH_COLORS:
        return WHICH_COLORS[text.split(" ")[0]]
    return SPARE_PALETTE[zlib.crc32(text.encode("utf-8")) % len(SPARE_PALETTE)]


# Legends go below the plot: at the side, in a page's half-width column, they left the plot
# under 300 px wide.
LEGEND_ORIENT = "bottom"


def legend(title: str | None = None, *, columns: int | None = None, orient: str = LEGEND_ORIENT) -> alt.Legend:
    """A legend whose labels and title are never truncated and whose swatches are opaque (a
    band drawn at 25 % opacity would otherwise give a washed-out swatch)."""
    # symbolLimit 0: every series in the legend (Vega's default stops a long one at "…N entries").
    options: dict[str, Any] = {"labelLimit": 0, "titleLimit": 0, "symbolOpacity": 1, "orient": orient, "symbolLimit": 0}
    # Below the plot a legend wraps after two entries: in a row it ran past a column's edge.
    if columns is None and orient == "bottom":
        columns = 2
    if columns is not None:
        options["columns"] = columns
    return alt.Legend(title=title, **options)


def stroke_legend(title: str | None = None, *, columns: int | None = None) -> alt.Legend:
    """A legend of line styles (a dash, an opacity) drawn as strokes, so each entry shows its own
    dash and no two entries are the same dot."""
    base = legend(title, columns=columns)
    return alt.Legend(**{**base.to_dict(), "symbolType": "stroke", "symbolStrokeColor": REFERENCE_COLOR})


def dashed_lines_with_points(base: alt.Chart, dash: alt.StrokeDash) -> alt.LayerChart:
    """``base``'s lines styled by ``dash`` with a point at each value: the lines carry the dash
    legend and the points none. A line mark with ``point=True`` drew its legend from the filled
    point, stroke transparent, and every entry of a stroke legend came out blank."""
    points_dash = dash.legend(None)
    lines = base.mark_line().encode(strokeDash=dash)
    return alt.LayerChart(layer=[lines, base.mark_point(filled=True).encode(strokeDash=points_dash)])


def color_scale(field: str, values: Iterable[Any], avoid: Iterable[str] = ()) -> alt.Scale:
    """The colour scale of ``field`` (a domain of DOMAINS, or any other field) over ``values``:
    each value's ``colour_of``. Only where two values of one chart would share a colour does the
    later (in sorted order, fixed names first) take the next free one, so a chart never draws two
    series alike; ``avoid`` holds the colours a second scale of the same chart already uses."""
    shown = sorted({str(value) for value in values if value is not None and value == value})
    known = KNOWN_COLORS.get(field, {})
    avoided = set(avoid)
    taken = set(avoided)
    chosen: dict[str, str] = {}
    for value in sorted(shown, key=lambda value: (value not in known, value)):
        colour = colour_of(field, value)
        if colour in taken:
            start = SPARE_PALETTE.index(colour) if colour in SPARE_PALETTE else 0
            free = [SPARE_PALETTE[(start + step) % len(SPARE_PALETTE)] for step in range(len(SPARE_PALETTE))]
            # With every colour taken two series share one, never one that is avoided.
            colour = next(
                (each for each in free if each not in taken), next(each for each in free if each not in avoided)
            )
        chosen[value] = colour
        taken.add(colour)
    return alt.Scale(domain=shown, range=[chosen[value] for value in shown])


def color(
    field: str,
    frame: pd.DataFrame,
    title: str | None = None,
    *,
    columns: int | None = None,
    orient: str = LEGEND_ORIENT,
    key: str | None = None,
    avoid: Iterable[str] = (),
) -> alt.Color:
    """The colour encoding of ``field`` in ``frame``; ``key`` names the family whose fixed
    colours apply when the column's name is not the family's (a ``series`` of impls); ``avoid``
    as in ``color_scale``."""
    values = frame[field].tolist() if field in frame.columns else []
    return alt.Color(
        f"{field}:N",
        scale=color_scale(key or field, values, avoid),
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


TOOLTIP_NUMBERS = ",.6~r"  # six significant digits, never an exponent (113,760, not 1.138e+5)
TOOLTIP_TIME = "%Y-%m-%d %H:%M"


def finish(figure: Figure) -> Figure:
    """The one place every chart passes through before it is drawn: legends and axis titles
    and labels without a length limit (0 means none), opaque legend swatches, and a check
    that the chart has a title (a chart without one is a bug of its builder)."""
    if not has_title(figure):
        raise ValueError("every chart has a title: give the builder's chart .properties(title=...)")
    # fit-x: the chart fills the page's width, and its height is the plot's own. Streamlit's
    # default ("fit") holds the whole chart to the height, so a tall legend or rotated labels
    # squeezed the plot to 20 px.
    figure = figure.properties(autosize=alt.AutoSizeParams(type="fit-x", contains="padding"))
    # Tooltips to six significant digits and the minute (29.6649, not 29.6648752359; a run's time,
    # not only its day), where a tooltip field gives no format of its own. configure() first: it
    # replaces the config the two calls after it add to.
    figure = figure.configure(tooltipFormat=alt.FormatConfig(numberFormat=TOOLTIP_NUMBERS, timeFormat=TOOLTIP_TIME))
    return figure.configure_legend(labelLimit=0, titleLimit=0, symbolOpacity=1, symbolLimit=0).configure_axis(
        labelLimit=0, titleLimit=0
    )


# A chart whose plot is smaller than a page's minimum (300x200 px) on purpose says why in its
# subtitle, starting with this: a person reads the reason, and the browser test checks it is there.
SMALL_ON_PURPOSE = "small on purpose: "


def small_on_purpose(figure: Figure, reason: str) -> Figure:
    """``figure`` with ``reason`` as its subtitle (``small on purpose: one 30 px row per timed
    metric``): the stated reason a plot under 300x200 px is meant to be that small."""
    if not reason.strip():
        raise ValueError("reason: say why the chart is small (allowed: a non-empty sentence)")
    if not has_title(figure):
        raise ValueError("every chart has a title: give the builder's chart .properties(title=...)")
    title = figure.title
    params = title if isinstance(title, alt.TitleParams) else alt.TitleParams(text=title)
    return figure.properties(title=alt.TitleParams(**{**params.to_dict(), "subtitle": SMALL_ON_PURPOSE + reason}))


def has_title(figure: Figure) -> bool:
    title = getattr(figure, "title", alt.Undefined)
    if isinstance(title, alt.TitleParams):
        title = title.text
    return title is not alt.Undefined and bool(title)
