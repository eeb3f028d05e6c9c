"""The Review page's and the run report's charts: pure functions of the verdict table and of the
two runs' cases (no Streamlit), so the page and `decodelab report run` draw the same figures."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from analysis import theme
from analysis.figures import Figure
from analysis.review import VERDICT_ORDER, better_way
from runner.labels import progress_label
from runner.measure.reference import REFERENCE_METRIC

VERDICT_COLORS = {
    "regressed": "#d62728",
    "changed": "#ff7f0e",
    "improved": "#2ca02c",
    "unknown drift": "#e377c2",
    "within noise": "#7f7f7f",
    "too few samples": "#bcbd22",
    "not judged": "#c7c7c7",
    "not measured": "#dbdb8d",
    "only in run": "#9467bd",
    "only in baseline": "#8c564b",
    "unchanged": "#aec7e8",
}
VERDICT_SCALE = alt.Scale(domain=list(VERDICT_ORDER), range=[VERDICT_COLORS[verdict] for verdict in VERDICT_ORDER])


def verdict_scale(verdicts: pd.Series) -> alt.Scale:
    """The verdicts present, in VERDICT_ORDER and their fixed colours: a legend of what is drawn,
    not of all eleven."""
    present = [verdict for verdict in VERDICT_ORDER if verdict in set(verdicts)]
    return (
        alt.Scale(domain=present, range=[VERDICT_COLORS[verdict] for verdict in present]) if present else VERDICT_SCALE
    )


REPORT_WIDTH, REPORT_HEIGHT = 480, 300
# Where a timed row's label breaks onto its second line.
ROW_BREAK = " | "
# Each timed row's height in the run-against-baseline chart (px), and the plot height below which
# the chart says it is small on purpose (a page's charts are at least 200 px tall otherwise).
ROW_PIXELS, READABLE_HEIGHT = 30, 200
# The timed rows drawn: the largest changes, so the chart stays readable on a big sweep.
MOST_ROWS = 40


def symmetric_domain(ratios: pd.Series, least: float = 1.05) -> list[float]:
    """A log axis centred on 1 that holds every ratio with a tenth to spare, at least ±5%: changes
    of a few percent sat in a sliver of the 0.1–10 that a niced log scale chose."""
    widest = max([least, *(max(ratio, 1.0 / ratio) * 1.1 for ratio in ratios if ratio > 0)])
    return [1.0 / widest, widest]


def better_factor(metric: str, ratio: float) -> float:
    """``ratio`` (run over baseline) turned so that above 1 is better, the way the verdicts take
    it (review.better_way): inverted where lower is better (a time per token), as it is else."""
    return 1.0 / ratio if ratio > 0 and better_way(metric) == "lower" else ratio


def timed_changes(table: pd.DataFrame) -> Figure:
    """Each timed metric's change against the baseline, turned so that right is better (a time's
    ratio inverted: speedups and times per token on one axis read the same way; the geometric
    means of the samples its test compared; log axis: ×2 and ÷2 are the same distance), coloured
    by verdict, the largest changes first."""
    # The machine's own speed (a full review's not-judged reference readings) is not the code's change.
    timed = table[(table["kind"] == "timed") & table["change"].notna() & (table["metric"] != REFERENCE_METRIC)].copy()
    timed["ratio"] = [
        better_factor(str(metric), 1.0 + change)
        for metric, change in zip(timed["metric"], timed["change"].astype(float), strict=True)
    ]
    # The floor is a |log|: as a change, ±expm1 of it (as the report writes it).
    floors = timed["noise_floor"] if "noise_floor" in timed.columns else pd.Series(math.nan, index=timed.index)
    timed["floor"] = floors.astype(float).replace(math.inf, math.nan).map(math.expm1)  # none yet: blank
    timed = timed[timed["ratio"] > 0]
    # The point's part is left out where it repeats its experiment (speculative's speculative part).
    timed["row"] = [
        progress_label(experiment, metric) + ROW_BREAK + point.removeprefix(experiment + " · ")
        for experiment, metric, point in zip(timed["experiment"], timed["metric"], timed["point"], strict=True)
    ]
    # The largest first on the axis's own log scale: ×2 and ÷2 are as large a change.
    timed = timed.reindex(timed["ratio"].map(lambda ratio: abs(math.log(ratio))).sort_values(ascending=False).index)
    tested_rows = len(timed)
    timed = timed.head(MOST_ROWS)
    title = "timed metrics: run against baseline"
    if tested_rows > len(timed):
        title += f" (the {len(timed)} largest changes of {tested_rows})"
    points = (
        alt.Chart(timed)
        .mark_point(filled=True, size=80)
        .encode(
            # Few log ticks, none overlapping ("0.40.5" ran together).
            x=alt.X(
                "ratio:Q",
                scale=alt.Scale(type="log", domain=symmetric_domain(timed["ratio"]), nice=False),
                title="run against baseline, × better → (a time's ratio inverted; geometric means of the samples)",
                axis=alt.Axis(tickCount=5, labelOverlap="greedy", format="~g"),
            ),
            # The longest rows (a speculative case with its schedule and temperature) run to ~100
            # characters: room for them whole, never cut.
            # Each label on two lines (experiment · metric, then the point): on one line the longest
            # took 760 px and left the plot under 300 px wide.
            y=alt.Y(
                "row:N",
                sort=None,
                title=None,
                axis=alt.Axis(labelLimit=760, labelExpr=f"split(datum.label, '{ROW_BREAK}')"),
            ),
            color=alt.Color("verdict:N", scale=verdict_scale(timed["verdict"])),
            # Typed: with no timed row the frame is empty and Altair could not infer a type (a warning each).
            tooltip=[
                "experiment:N",
                "metric:N",
                "point:N",
                alt.Tooltip("baseline:Q", format=",.4~r"),
                alt.Tooltip("run:Q", format=",.4~r"),
                alt.Tooltip("change:Q", format="+.1%"),
                alt.Tooltip("p_value:Q", title="p", format=".2~g"),
                alt.Tooltip("floor:Q", title="floor ±", format=".1%"),
                "verdict:N",
            ],
        )
    )
    one = alt.Chart(pd.DataFrame({"ratio": [1.0]})).mark_rule(color="black").encode(x="ratio:Q")
    figure: Figure = alt.layer(one, points).properties(title=title, height=alt.Step(ROW_PIXELS), width=REPORT_WIDTH)
    if 0 < len(timed) * ROW_PIXELS < READABLE_HEIGHT:  # an empty chart has no plot to excuse
        rows = f"{len(timed)} timed row{'s' if len(timed) != 1 else ''}"
        figure = theme.small_on_purpose(figure, f"one {ROW_PIXELS} px row per timed metric, {rows} here")
    return figure


def cases_side_by_side(frame: pd.DataFrame, case: str, value: str, title: str) -> Figure:
    """``value`` of each ``case`` (a row each) in the run and its baseline (``which``), two marks a
    row, with the 1× rule: cases that share a k but differ in schedule or temperature each get
    their own row, where a line over k joined them into a vertical stroke."""
    cases = frame[case].astype(str)
    one = alt.Chart(pd.DataFrame({value: [1.0]})).mark_rule(color=theme.REFERENCE_COLOR).encode(x=f"{value}:Q")
    points = (
        alt.Chart(frame)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X(f"{value}:Q", title=value.replace("_", " ")),
            y=alt.Y(f"{case}:N", sort=sorted(set(cases)), title=None, axis=alt.Axis(labelLimit=0)),
            color=theme.color("which", frame, "run"),
            shape=alt.Shape("which:N", legend=None),  # the colour's legend names them
            tooltip=["which:N", f"{case}:N", f"{value}:Q"],
        )
    )
    return alt.layer(one, points).properties(title=title, height=alt.Step(ROW_PIXELS), width=REPORT_WIDTH)


def side_by_side(frame: pd.DataFrame, x: str, value: str, color: str, title: str) -> Figure:
    """``value`` against a discrete ``x`` for the run and its baseline (``which``), one colour per
    ``color`` group: the two runs' lines over the same parameter points."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:O", title=x),
            y=alt.Y(f"{value}:Q", title=value.replace("_", " ")),
            color=theme.color(color, frame, color),
            # Run and baseline apart by shape as well as dash: a series of one point draws no dash.
            strokeDash=alt.StrokeDash("which:N", legend=theme.stroke_legend("run")),
            shape=alt.Shape("which:N", legend=theme.legend("run")),
            tooltip=["which:N", f"{color}:N", f"{x}:O", f"{value}:Q"],
        )
        # A size of its own: the report's charts are drawn outside a page that would stretch them.
        .properties(title=title, width=REPORT_WIDTH, height=REPORT_HEIGHT)
    )
