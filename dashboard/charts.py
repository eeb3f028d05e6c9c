"""The experiments' Altair charts, each drawn from one run's cases, and the building blocks every
dashboard chart shares (the charts over runs and machines, in dashboard/history_charts.py, use
them). Pure functions of DataFrames, testable without a server. Colours, legends and scales come
from analysis.theme, so a series reads the same on every page; every builder titles its chart."""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from analysis import tables, theme
from analysis.theme import REFERENCE_COLOR, Figure, fitted_scale
from runner.metrics import lookup

BINARY_UNITS = ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))


def base_chart(frame: pd.DataFrame) -> alt.Chart:
    """Every chart's start, here and in dashboard/history_charts.py: one place to change them all."""
    return alt.Chart(frame)


def _diagonal(bottom: float, top: float) -> alt.Chart:
    """The y = x reference line from ``bottom`` to ``top``."""
    line = pd.DataFrame({"x": [bottom, top], "y": [bottom, top]})
    return base_chart(line).mark_line(color=REFERENCE_COLOR, strokeDash=[2, 2]).encode(x="x:Q", y="y:Q")


def axis_values(frame: pd.DataFrame, *columns: str) -> list[float]:
    """Every present value of ``columns`` in ``frame``: what a fitted axis spans."""
    found: list[float] = []
    for column in columns:
        if column in frame.columns:
            found += pd.to_numeric(frame[column], errors="coerce").dropna().tolist()
    return found


def discrete_axis(title: str | None, label_angle: int = 0) -> alt.Axis:
    """Every category labelled, whole (a bar without its label says nothing)."""
    return alt.Axis(title=title, labelOverlap=False, labelLimit=0, labelAngle=label_angle)


def band_with_median(
    frame: pd.DataFrame,
    x: str,
    median: str,
    low: str,
    high: str,
    color: str | None = None,
    x_title: str | None = None,
    y_title: str = "speedup (×)",
    log_x: bool = False,
    log_y: bool = False,
    discrete_x: bool = False,
    extra_y: tuple[str, ...] = (),
    y_includes: tuple[float, ...] = (),
) -> Figure:
    """A median line with a shaded min–max band, one per ``color`` group; the y axis spans the
    band, ``extra_y`` (columns drawn on the same axis by a layer over it) and ``y_includes``."""
    if discrete_x:
        x_encoding = alt.X(f"{x}:O", title=x_title or x, axis=discrete_axis(x_title or x))
    else:
        # Ticks at the recorded values only: a length or width is a parameter point, not a continuum.
        ticks = sorted(frame[x].dropna().unique().tolist()) if x in frame.columns else alt.Undefined
        x_encoding = alt.X(
            f"{x}:Q",
            title=x_title or x,
            scale=fitted_scale(axis_values(frame, x), log=log_x),
            axis=alt.Axis(values=ticks),
        )
    y_scale = fitted_scale(axis_values(frame, median, low, high, *extra_y) + list(y_includes), log=log_y)
    encodings = {"color": theme.color(color, frame)} if color else {}
    # A group with one point (a draft at the one k timed) has no width for an area: its band is a bar.
    single = discrete_x and x in frame.columns and most_values_a_group(frame, x, color) <= 1
    band = (
        base_chart(frame).mark_rule(strokeWidth=6, opacity=0.4) if single else base_chart(frame).mark_area(opacity=0.25)
    ).encode(x=x_encoding, y=alt.Y(f"{low}:Q", title=y_title, scale=y_scale), y2=f"{high}:Q", **encodings)
    line = (
        base_chart(frame)
        .mark_line(point=True)
        .encode(x=x_encoding, y=alt.Y(f"{median}:Q", scale=y_scale), tooltip=[x, median, low, high], **encodings)
    )
    return alt.layer(band, line)


def most_values_a_group(frame: pd.DataFrame, x: str, color: str | None) -> int:
    """The most distinct ``x`` values any ``color`` group holds (the whole frame's without one)."""
    if frame.empty:
        return 0
    if color is None or color not in frame.columns:
        return int(frame[x].nunique())
    counts = frame.groupby(color, dropna=False)[x].nunique()
    return int(counts.max()) if not counts.empty else 0


def kv_speedup(timing: pd.DataFrame) -> Figure:
    """Measured speedup (median, band) per impl against the arithmetic ratio, both on log axes."""
    measured = band_with_median(
        timing,
        "n",
        "measured_speedup",
        "measured_speedup_low",
        "measured_speedup_high",
        color="impl" if "impl" in timing.columns else None,
        x_title="generated tokens n",
        log_x=True,
        log_y=True,
        extra_y=("arithmetic_ratio",),
    )
    arithmetic = (
        base_chart(timing)
        .mark_line(strokeDash=[6, 3], color=REFERENCE_COLOR, point=True)
        .encode(
            x=alt.X("n:Q", scale=fitted_scale(axis_values(timing, "n"), log=True)),
            y=alt.Y(
                "arithmetic_ratio:Q",
                scale=fitted_scale(
                    axis_values(
                        timing, "measured_speedup", "measured_speedup_low", "measured_speedup_high", "arithmetic_ratio"
                    ),
                    log=True,
                ),
            ),
            tooltip=["n", "arithmetic_ratio"],
        )
    )
    return alt.layer(measured, arithmetic).properties(title="measured speedup (band) vs arithmetic ratio (dashed)")


def received_fraction(frame: pd.DataFrame, x: str = "n") -> Figure:
    """Received fraction per point, one bar per impl side by side (never stacked)."""
    by_impl = {"color": theme.color("impl", frame), "xOffset": "impl:N"} if "impl" in frame.columns else {}
    impl_tooltip = ["impl"] if by_impl else []
    return (
        base_chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:O", axis=discrete_axis(x)),
            y=alt.Y("received_fraction:Q", axis=alt.Axis(format="%"), title="received fraction (dense count)"),
            tooltip=[x, *impl_tooltip, "received_fraction", "measured_speedup", "arithmetic_ratio"],
            **by_impl,
        )
        .properties(title=f"received fraction of the arithmetic promise, per {x}")
    )


def seconds_against_n(timing: pd.DataFrame, fit: pd.DataFrame | None = None) -> Figure:
    """Time per generation for both modes on log–log axes, with each fitted power law drawn thin
    in its impl's colour and its mode's dash (its exponent and largest relative error in its
    tooltip; the page's fit table lists them)."""
    impl = timing["impl"] if "impl" in timing.columns else pd.Series("static", index=timing.index)
    long = timing.assign(impl=impl).melt(
        id_vars=["n", "impl"], value_vars=["seconds_no_cache", "seconds_cache"], var_name="mode", value_name="seconds"
    )
    long["mode"] = long["mode"].str.removeprefix("seconds_").str.replace("_", " ")
    title = "seconds per generation against n (log–log)"
    x_axis = alt.X("n:Q", title="generated tokens n", scale=fitted_scale(long["n"], log=True))
    points = theme.dashed_lines_with_points(
        base_chart(long).encode(
            x=x_axis,
            y=alt.Y("seconds:Q", title="seconds per generation", scale=fitted_scale(long["seconds"], log=True)),
            color=theme.color("impl", long),
            tooltip=["n", "impl", "mode", "seconds"],
        ),
        # Drawn as line strokes in the legend: "cache" and "no cache" as two dots looked alike.
        alt.StrokeDash("mode:N", legend=theme.stroke_legend("cache")),
    )
    if fit is None or fit.empty:
        return points.properties(title=title)
    lengths = sorted(long["n"].unique())
    rows = []
    for row in fit.to_dict("records"):
        for mode in ("no_cache", "cache"):
            label = (
                f"fit {mode.replace('_', ' ')} · {row.get('impl') or 'static'}: n^{row[f'slope_{mode}']:.2f} "
                f"(max error {row[f'max_fit_error_{mode}']:.0%})"
            )
            rows += [
                {
                    "n": n,
                    "seconds": row[f"fit_scale_{mode}"] * n ** row[f"slope_{mode}"],
                    "impl": row.get("impl") or "static",
                    "mode": mode.replace("_", " "),
                    "fit": label,
                }
                for n in lengths
            ]
    # Each fit thin and faint in its impl's colour and its mode's dash, beside the points it fits:
    # six gray lines told apart by their opacity alone could not be told apart. Their exponents
    # are in the tooltip and the fit table below the chart.
    fits = pd.DataFrame(rows)
    lines = (
        base_chart(fits)
        .mark_line(opacity=0.45, strokeWidth=1.5)
        .encode(
            x="n:Q",
            y="seconds:Q",
            color=alt.Color("impl:N", scale=theme.color_scale("impl", long["impl"]), legend=None),
            strokeDash=alt.StrokeDash("mode:N", legend=None),
            detail="fit:N",
            tooltip=["fit", "n", "seconds"],
        )
    )
    return alt.layer(points, lines).properties(title=f"{title}; thin: time ∝ n^slope fitted")


def cache_bytes(memory: pd.DataFrame, weight_bytes: float) -> Figure:
    """Cache bytes against n for each kv-head count, with the weights as a reference line."""
    bytes_columns = [
        column for column in memory.columns if column.startswith("cache_bytes") and column != "cache_bytes_allocated"
    ]
    long = memory.melt(id_vars=["n"], value_vars=bytes_columns, var_name="layout", value_name="bytes")
    long["layout"] = (
        long["layout"].str.replace("cache_bytes_kv_heads_", "kv heads ").replace("cache_bytes", "all heads")
    )
    # One binary unit for the axis, the largest the values reach (a tiny model's cache is KiB).
    largest = max([weight_bytes, *long["bytes"].dropna().tolist()])
    scale, unit = next((size, name) for size, name in BINARY_UNITS if largest >= size or size == 1)
    long["size"] = long["bytes"] / scale
    lines = (
        base_chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", title="tokens in cache"),
            y=alt.Y("size:Q", title=unit),
            color=theme.color("layout", long, "cache layout"),
            tooltip=["n", "layout", alt.Tooltip("bytes:Q", format=",d")],
        )
    )
    weights = (
        base_chart(pd.DataFrame({"size": [weight_bytes / scale], "weight_bytes": [weight_bytes]}))
        .mark_rule(color=REFERENCE_COLOR, strokeDash=[4, 4])
        .encode(y="size:Q", tooltip=[alt.Tooltip("weight_bytes:Q", format=",d")])
    )
    return alt.layer(lines, weights).properties(title="KV cache size vs the weights (gray dashed line)")


def bars(
    frame: pd.DataFrame,
    category: str,
    value: str,
    title: str | None = None,
    color: str | None = None,
    chart_title: str | None = None,
) -> Figure:
    """One bar per ``category`` (each labelled), coloured by ``color`` where given, its value
    written over it: a handful of bars is read for their numbers, not their heights."""
    encodings = {"color": theme.color(color, frame)} if color else {}
    drawn = base_chart(frame).mark_bar().encode(tooltip=[category, value], **encodings)
    written = (
        base_chart(frame)
        .mark_text(baseline="bottom", dy=-3)
        .encode(text=alt.Text(f"{value}:Q", format=value_format(frame[value])))
    )
    return (
        alt.layer(drawn, written)
        .encode(
            x=alt.X(f"{category}:N", sort=None, axis=discrete_axis(category, label_angle=-30)),
            y=alt.Y(f"{value}:Q", title=title or value, scale=headroom_scale(frame[value])),
        )
        .properties(title=chart_title or title or value)
    )


def headroom_scale(values: pd.Series) -> alt.Scale:
    """A bar chart's value scale from zero with room beyond the longest bar for its written value
    (a label over the tallest bar sat outside the plot)."""
    shown = finite(values)
    if shown.empty:
        return alt.Scale(zero=True)
    low, high = min(0.0, float(shown.min())), max(0.0, float(shown.max()))
    if low == high:  # every bar zero: a unit axis rather than none
        return alt.Scale(domain=[0.0, 1.0])
    room = 0.15 * (high - low)
    return alt.Scale(domain=[low - room if low < 0 else low, high + room if high > 0 else high])


def finite(values: pd.Series) -> pd.Series:
    """The finite numbers of ``values``: no NaN, no infinity, nothing that is not a number."""
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers[numbers.map(lambda number: math.isfinite(number))]


def value_format(values: pd.Series) -> str:
    """A d3 format for the bars' written values: whole numbers with thousands separators, others
    with the decimals that give the largest three significant figures, the same for every bar
    (0.0691 and 0.0204; 1.00 and 0.62), so that a tiny value reads as the bar shows it and no label
    runs into its neighbour's."""
    shown = finite(values)
    if shown.empty:
        return ",.3~r"
    if bool((shown == shown.round()).all()) and bool((shown.abs() >= 1).all()):
        return ",d"
    largest = float(shown.abs().max())
    decimals = 2 if largest == 0 else max(0, 2 - math.floor(math.log10(largest)))
    return f",.{decimals}f"


def divergence(frame: pd.DataFrame, category: str, position: str, generated: str) -> Figure:
    """Where each variant's greedy text first differs from float32's: a bar up to that index, and
    "never diverged" written (no bar) where it matched over all ``generated`` tokens."""
    shown = frame.assign(diverged=frame[position] < frame[generated])
    shown["note"] = shown["diverged"].map({True: "", False: "never diverged"})
    shown["index"] = shown[position].where(shown["diverged"])
    axis = alt.X(f"{category}:N", sort=None, axis=discrete_axis(category, label_angle=-30))
    tokens = int(shown[generated].max()) if not shown.empty else 0
    # The axis spans the tokens generated, whole indexes: with no bar it read "0.000000" alone.
    index_axis = alt.Axis(format="d", tickMinStep=1)
    columns = (
        base_chart(shown)
        .mark_bar()
        .encode(
            x=axis,
            y=alt.Y(
                "index:Q",
                title="first differing index (0-based)",
                scale=alt.Scale(domain=[0, max(tokens, 1)]),
                axis=index_axis,
            ),
            color=theme.color("precision", shown) if "precision" in shown.columns else alt.Undefined,
            tooltip=[category, position, generated],
        )
    )
    never = (
        base_chart(shown[~shown["diverged"]])
        .mark_text(angle=270, align="left", dx=-4, color=REFERENCE_COLOR)
        .encode(x=axis, y=alt.datum(0), text="note:N")
    )
    return alt.layer(columns, never).properties(title=f"greedy text against float32's, over {tokens} tokens")


def lines_by(frame: pd.DataFrame, x: str, y: str, color: str, title: str | None = None) -> Figure:
    """``y`` against a discrete parameter ``x`` (k, n, impl), one line per ``color`` group."""
    return (
        base_chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:O", axis=discrete_axis(x)),
            y=alt.Y(f"{y}:Q", title=title or y, scale=fitted_scale(axis_values(frame, y))),
            color=theme.color(color, frame),
            tooltip=[x, y, color],
        )
        .properties(title=f"{title or y} against {x}")
    )


def speedup_bands(speculative: pd.DataFrame, x: str = "k", shown: str = "") -> Figure:
    """Each draft's median speedup and min–max band against ``x`` (k; the draft itself where the
    run timed one k); ``shown`` says which cases (an impl, a temperature) in the title."""
    chart = band_with_median(
        speculative,
        x,
        "speedup_median",
        "speedup_min",
        "speedup_max",
        color="draft",
        x_title="draft length k" if x == "k" else x,
        discrete_x=True,
        y_includes=(1.0,),
    )
    parity = base_chart(pd.DataFrame({"y": [1.0]})).mark_rule(color=REFERENCE_COLOR).encode(y="y:Q")
    suffix = f", {shown}" if shown else ""
    return alt.layer(chart, parity).properties(
        title=f"measured speedup{suffix}: median and min–max band (1 = baseline)"
    )


# The models a measured speedup is set beside, by metric: what each is, in a legend's words.
# The speculative experiment's predicted speedups, labelled by the metric catalogue's help.
SPEEDUP_MODELS = {
    metric.name: metric.help
    for metric in map(lookup, ("predicted_speedup_a_priori", "writeup_formula_speedup", "component_model_speedup"))
    if metric is not None
}


def predicted_vs_measured(
    speculative: pd.DataFrame, models: list[str] | None = None, title: str = "modelled vs measured"
) -> Figure:
    """Each model's speedup against the measured median, with the y = x line; ``models`` picks
    which of SPEEDUP_MODELS (default: every one the frame has)."""
    chosen = [model for model in (models or list(SPEEDUP_MODELS)) if model in speculative.columns]
    long = speculative.melt(
        id_vars=["draft", "k", "speedup_median"], value_vars=chosen, var_name="model", value_name="modelled"
    )
    long["model"] = long["model"].map(SPEEDUP_MODELS)
    span = axis_values(long, "modelled", "speedup_median") or [1.0]
    points = (
        base_chart(long)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("modelled:Q", title="modelled speedup", scale=fitted_scale(span)),
            y=alt.Y("speedup_median:Q", title="measured median", scale=fitted_scale(span)),
            color=theme.color("model", long, "model", columns=1, orient="bottom"),
            shape=alt.Shape("draft:N", legend=theme.legend("draft")),
            tooltip=["draft", "k", "model", "modelled", "speedup_median"],
        )
    )
    return alt.layer(_diagonal(min(span), max(span)), points).properties(title=f"{title} (dotted: y = x)")


def tvd(distribution: pd.DataFrame) -> Figure:
    long = distribution.melt(
        id_vars=["draft"], value_vars=["tvd", "tvd_direct"], var_name="sampler", value_name="total variation"
    )
    long["sampler"] = long["sampler"].map({"tvd": "speculative", "tvd_direct": "direct"})
    # The axis reaches the highest bar and the highest bound: a tick is never drawn off the chart.
    top = max(axis_values(long, "total variation") + axis_values(distribution, "tvd_noise_bound") + [1e-9]) * 1.1
    columns = (
        base_chart(long)
        .mark_bar()
        .encode(
            x=alt.X("draft:N"),
            xOffset="sampler:N",
            y=alt.Y("total variation:Q", scale=alt.Scale(domain=[0, top], nice=False)),
            color=theme.color("sampler", long),
            tooltip=["draft", "sampler", "total variation"],
        )
    )
    bound = (
        base_chart(distribution)
        .mark_tick(color=theme.BOUND_COLOR, thickness=2, size=30)
        .encode(x=alt.X("draft:N", axis=discrete_axis("draft")), y="tvd_noise_bound:Q", tooltip=["tvd_noise_bound"])
    )
    return alt.layer(columns, bound).properties(
        title="TV distance to the target (black tick: 99.9% sampling-noise bound)"
    )


def quad_vs_linear(table: pd.DataFrame, crossover: float | None) -> Figure:
    long = table.melt(id_vars=["n"], value_vars=["quad_mults", "linear_mults"], var_name="part", value_name="mults")
    quadratic, linear = theme.COST_PART_COLORS  # the parts' names, each with its fixed colour
    long["part"] = long["part"].map({"quad_mults": quadratic, "linear_mults": linear})
    # The crossover widens the n axis when it lies beyond the lengths counted: drawn, never off the chart.
    lengths = axis_values(long, "n") + ([crossover] if crossover is not None else [])
    lines = (
        base_chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", scale=fitted_scale(lengths, log=True), title="context length n"),
            y=alt.Y("mults:Q", scale=fitted_scale(long["mults"], log=True), title="multiplications"),
            color=theme.color("part", long, key="cost_part"),
            tooltip=["n", "part", alt.Tooltip("mults:Q", format=",d")],  # exact counts
        )
    )
    layers: list[Figure] = [lines]
    if crossover is not None:
        rule = base_chart(pd.DataFrame({"n": [crossover]})).mark_rule(color=REFERENCE_COLOR, strokeDash=[4, 4])
        layers.append(rule.encode(x="n:Q", tooltip=["n"]))
    return alt.layer(*layers).properties(title="quadratic vs linear multiplications (dashed: crossover)")


def predicted_against_measured(frame: pd.DataFrame, measured: str, predicted: str, color: str = "impl") -> Figure:
    """Measured against predicted, with the y = x line; the axes span the points drawn (a point
    without a prediction, such as a no-cache time, is not drawn and stretched them to 3,600 µs)."""
    drawn = frame.dropna(subset=[measured, predicted]) if {measured, predicted} <= set(frame.columns) else frame
    span = axis_values(drawn, measured, predicted) or [1.0]
    points = (
        base_chart(drawn)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X(f"{predicted}:Q", title=tables.header(predicted), scale=fitted_scale(span)),
            y=alt.Y(f"{measured}:Q", title=tables.header(measured), scale=fitted_scale(span)),
            color=theme.color(color, drawn),
            tooltip=list(drawn.columns),
        )
    )
    title = f"{tables.header(measured)} against {tables.header(predicted)} (dotted: y = x)"
    return alt.layer(_diagonal(min(span), max(span)), points).properties(title=title)
