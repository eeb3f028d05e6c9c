"""The Altair charts over runs and machines, not within one run: a metric over time with its
change points (the History page) and one metric side by side across machines or runs (the
Compare page). Built from dashboard/charts.py's shared pieces, in analysis.theme's style."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from analysis import theme
from analysis.theme import Figure, fitted_scale
from dashboard.charts import axis_values, base_chart, discrete_axis


def when(started_at: pd.Series) -> alt.X:
    """The time axis: dates (with one run Vega-Lite would otherwise label milliseconds), spanning
    the runs plus a margin, an hour either side of a single run."""
    times = pd.to_datetime(started_at.dropna())
    axis = alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30)
    if times.empty:
        return alt.X("started_at:T", title="started", axis=axis)
    first, last = times.min(), times.max()
    margin = max((last - first) * 0.05, pd.Timedelta(hours=1) if first == last else pd.Timedelta(0))
    domain = [(first - margin).isoformat(), (last + margin).isoformat()]
    return alt.X("started_at:T", title="started", axis=axis, scale=alt.Scale(domain=domain))


def line_field(points: pd.DataFrame) -> str:
    """What tells a headline series' lines apart (history_series.series_history): the impl where
    every point is of one machine and one sweep and every line is an impl's ("fast", "static ·
    n=256"), so each keeps its impl's colour of every other page; else the whole ``series`` label
    (machine · sweep · impl), as for the sweep's wall time, whose lines are its parts."""
    if not {"machine", "sweep", "impl"} <= set(points.columns):
        return "series"
    if len(points[["machine", "sweep"]].drop_duplicates()) > 1:
        return "series"
    impls = {str(value).split(" · ")[0] for value in points["impl"]}
    return "impl" if impls <= set(theme.IMPL_COLORS) else "series"


def history(
    points: pd.DataFrame, y_title: str, color: str = "machine", title: str | None = None, legend: str = "bottom"
) -> Figure:
    """A metric per ``color`` group over time with each level's band; change points
    (``change_point``) drawn as red diamonds that link to the Review page (``review`` column)
    when it is given."""
    tooltip = ["run_id", "machine", color, "value", "median", "started_at"] if color != "machine" else None
    tooltip = tooltip or ["run_id", "machine", "value", "median", "started_at"]
    x_axis = when(points["started_at"]) if "started_at" in points.columns else alt.X("started_at:T")
    y_scale = fitted_scale(axis_values(points, "value", "low", "high"))
    colour = theme.color(color, points, columns=1 if legend == "bottom" else None, orient=legend)
    band = (
        base_chart(points)
        .mark_area(opacity=0.2)
        .encode(x=x_axis, y=alt.Y("low:Q", title=y_title, scale=y_scale), y2="high:Q", color=colour)
    )
    shape: dict[str, Any] = {}
    if color in points.columns and points[color].nunique() > 1:
        # Series that agree (naive's and static's received fraction) draw on one another: a point
        # shape each, outlined, keeps every one in sight (the legend shows it beside the colour).
        shape = {"shape": alt.Shape(f"{color}:N", legend=None)}
    line = base_chart(points).mark_line().encode(x=x_axis, y="value:Q", color=colour)
    dots = (
        base_chart(points)
        .mark_point(filled=not shape, size=40)
        .encode(x=x_axis, y="value:Q", color=colour, tooltip=tooltip, **shape)
    )
    flagged_encodings = {"href": "review:N"} if "review" in points.columns else {}
    flagged = (
        base_chart(points[points["change_point"]])
        .mark_point(color="red", size=140, shape="diamond", filled=True)
        .encode(x=x_axis, y="value:Q", tooltip=["run_id", "machine", "value", "median"], **flagged_encodings)
    )
    return alt.layer(band, line, dots, flagged).properties(title=title or f"{y_title} over time")


def compare_machines(frame: pd.DataFrame, x: str, metric: str, series: str = "machine") -> Figure:
    """Side-by-side values per parameter point; a min–max band where the metric has one."""
    # Cases in the order they ran, their labels whole (a case's label is short, never its JSON).
    # No axis title: under the long slanted labels Vega set it on the last one, and the chart's
    # title says what the axis holds ("… per case").
    axis = alt.X(f"{x}:N", sort=None, axis=discrete_axis(None, label_angle=-30))
    title = f"{metric} per {x}, side by side per {series}"
    columns = (
        base_chart(frame)
        .mark_bar()
        .encode(
            x=axis,
            xOffset=f"{series}:N",
            y=alt.Y("value:Q", title=metric),
            color=theme.color(series, frame),
            tooltip=[x, series, "value", "run_id"],
        )
    )
    if "low" not in frame.columns:
        return columns.properties(title=title)
    band = (
        base_chart(frame)
        .mark_rule(strokeWidth=2, color="black")
        .encode(x=axis, xOffset=f"{series}:N", y="low:Q", y2="high:Q", tooltip=[series, "low", "high"])
    )
    return alt.layer(columns, band).properties(title=f"{title} (black: min–max band)")
