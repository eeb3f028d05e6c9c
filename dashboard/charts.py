"""Altair chart builders: pure functions of DataFrames, testable without a server."""

from __future__ import annotations

import altair as alt
import pandas as pd

from runner.metrics import lookup

LOG = alt.Scale(type="log")
Figure = alt.Chart | alt.LayerChart | alt.FacetChart


def _base(frame: pd.DataFrame) -> alt.Chart:
    return alt.Chart(frame)


def _diagonal(top: float) -> alt.Chart:
    """The y = x reference line from 0 to ``top``."""
    return _base(pd.DataFrame({"x": [0.0, top], "y": [0.0, top]})).mark_line(color="gray").encode(x="x:Q", y="y:Q")


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
) -> Figure:
    """A median line with a shaded min–max band, one per ``color`` group."""
    if discrete_x:
        x_encoding = alt.X(f"{x}:O", title=x_title or x)
    else:
        # Ticks at the recorded values only: a length or width is a parameter point, not a continuum.
        ticks = sorted(frame[x].dropna().unique().tolist()) if x in frame.columns else alt.Undefined
        x_encoding = alt.X(
            f"{x}:Q", title=x_title or x, scale=LOG if log_x else alt.Undefined, axis=alt.Axis(values=ticks)
        )
    y_scale = LOG if log_y else alt.Undefined
    encodings = {"color": alt.Color(f"{color}:N")} if color else {}
    band = (
        _base(frame)
        .mark_area(opacity=0.25)
        .encode(x=x_encoding, y=alt.Y(f"{low}:Q", title=y_title, scale=y_scale), y2=f"{high}:Q", **encodings)
    )
    line = (
        _base(frame)
        .mark_line(point=True)
        .encode(x=x_encoding, y=alt.Y(f"{median}:Q", scale=y_scale), tooltip=[x, median, low, high], **encodings)
    )
    return alt.layer(band, line)


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
    )
    arithmetic = (
        _base(timing)
        .mark_line(strokeDash=[6, 3], color="gray", point=True)
        .encode(x=alt.X("n:Q", scale=LOG), y=alt.Y("arithmetic_ratio:Q", scale=LOG), tooltip=["n", "arithmetic_ratio"])
    )
    return alt.layer(measured, arithmetic).properties(title="measured speedup (band) vs arithmetic ratio (dashed)")


def received_fraction(frame: pd.DataFrame, x: str = "n") -> Figure:
    """Received fraction per point, one bar per impl side by side (never stacked)."""
    by_impl = {"color": alt.Color("impl:N"), "xOffset": "impl:N"} if "impl" in frame.columns else {}
    impl_tooltip = ["impl"] if by_impl else []
    return (
        _base(frame)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:O"),
            y=alt.Y("received_fraction:Q", axis=alt.Axis(format="%"), title="received fraction (dense count)"),
            tooltip=[x, *impl_tooltip, "received_fraction", "measured_speedup", "arithmetic_ratio"],
            **by_impl,
        )
    )


def seconds_against_n(timing: pd.DataFrame, fit: pd.DataFrame | None = None) -> Figure:
    """Time per generation for both modes on log–log axes, with each fitted power law drawn as
    a dashed line whose legend names its exponent and largest relative error."""
    impl = timing["impl"] if "impl" in timing.columns else pd.Series("static", index=timing.index)
    long = timing.assign(impl=impl).melt(
        id_vars=["n", "impl"], value_vars=["seconds_no_cache", "seconds_cache"], var_name="mode", value_name="seconds"
    )
    long["mode"] = long["mode"].str.removeprefix("seconds_") + " · " + long["impl"]
    points = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", scale=LOG), y=alt.Y("seconds:Q", scale=LOG), color="mode:N", tooltip=["n", "mode", "seconds"]
        )
    )
    if fit is None or fit.empty:
        return points
    lengths = sorted(long["n"].unique())
    rows = []
    for row in fit.to_dict("records"):
        for mode in ("no_cache", "cache"):
            label = (
                f"fit {mode} · {row.get('impl') or 'static'}: n^{row[f'slope_{mode}']:.2f} "
                f"(max error {row[f'max_fit_error_{mode}']:.0%})"
            )
            rows += [
                {"n": n, "seconds": row[f"fit_scale_{mode}"] * n ** row[f"slope_{mode}"], "fit": label} for n in lengths
            ]
    legend = alt.Legend(orient="bottom", columns=1, title="fitted: time ∝ n^slope")
    lines = (
        _base(pd.DataFrame(rows))
        .mark_line(color="gray")
        .encode(
            x=alt.X("n:Q", scale=LOG),
            y=alt.Y("seconds:Q", scale=LOG),
            strokeDash=alt.StrokeDash("fit:N", legend=legend),
            tooltip=["fit", "n", "seconds"],
        )
    )
    return alt.layer(points, lines)


def cache_bytes(memory: pd.DataFrame, weight_bytes: float) -> Figure:
    """Cache bytes against n for each kv-head count, with the weights as a reference line."""
    bytes_columns = [
        column for column in memory.columns if column.startswith("cache_bytes") and column != "cache_bytes_allocated"
    ]
    long = memory.melt(id_vars=["n"], value_vars=bytes_columns, var_name="layout", value_name="bytes")
    long["layout"] = (
        long["layout"].str.replace("cache_bytes_kv_heads_", "kv heads ").replace("cache_bytes", "all heads")
    )
    lines = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", title="tokens in cache"),
            y=alt.Y("bytes:Q", title="bytes"),
            color="layout:N",
            tooltip=["n", "layout", "bytes"],
        )
    )
    weights = (
        _base(pd.DataFrame({"weight_bytes": [weight_bytes]}))
        .mark_rule(color="red", strokeDash=[4, 4])
        .encode(y="weight_bytes:Q", tooltip=["weight_bytes"])
    )
    return alt.layer(lines, weights).properties(title="KV cache bytes vs weights (red)")


def bars(frame: pd.DataFrame, category: str, value: str, title: str | None = None, color: str | None = None) -> Figure:
    encodings = {"color": alt.Color(f"{color}:N")} if color else {}
    return (
        _base(frame)
        .mark_bar()
        .encode(
            x=alt.X(f"{category}:N", sort=None),
            y=alt.Y(f"{value}:Q", title=title or value),
            tooltip=[category, value],
            **encodings,
        )
    )


def lines_by(frame: pd.DataFrame, x: str, y: str, color: str, title: str | None = None) -> Figure:
    """``y`` against a discrete parameter ``x`` (k, n, impl), one line per ``color`` group."""
    return (
        _base(frame)
        .mark_line(point=True)
        .encode(x=alt.X(f"{x}:O"), y=alt.Y(f"{y}:Q", title=title or y), color=f"{color}:N", tooltip=[x, y, color])
    )


def speedup_bands(speculative: pd.DataFrame) -> Figure:
    chart = band_with_median(
        speculative,
        "k",
        "speedup_median",
        "speedup_min",
        "speedup_max",
        color="draft",
        x_title="draft length k",
        discrete_x=True,
    )
    parity = _base(pd.DataFrame({"y": [1.0]})).mark_rule(color="gray").encode(y="y:Q")
    return alt.layer(chart, parity).properties(title="measured speedup: median and min–max band (1 = baseline)")


# The models a measured speedup is set beside, by metric: what each is, in a legend's words.
# The speculative experiment's predicted speedups, labelled by the metric catalogue's help.
SPEEDUP_MODELS = {
    metric.name: metric.help
    for metric in map(lookup, ("predicted_speedup_a_priori", "writeup_formula_speedup", "component_model_speedup"))
    if metric is not None
}


def predicted_vs_measured(speculative: pd.DataFrame, models: list[str] | None = None) -> Figure:
    """Each model's speedup against the measured median, with the y = x line; ``models`` picks
    which of SPEEDUP_MODELS (default: every one the frame has)."""
    chosen = [model for model in (models or list(SPEEDUP_MODELS)) if model in speculative.columns]
    long = speculative.melt(
        id_vars=["draft", "k", "speedup_median"], value_vars=chosen, var_name="model", value_name="modelled"
    )
    long["model"] = long["model"].map(SPEEDUP_MODELS)
    points = (
        _base(long)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("modelled:Q", title="modelled speedup"),
            y=alt.Y("speedup_median:Q", title="measured median"),
            color=alt.Color("model:N", legend=alt.Legend(orient="bottom", columns=1)),
            shape="draft:N",
            tooltip=["draft", "k", "model", "modelled", "speedup_median"],
        )
    )
    top = float(max(long["modelled"].max(), long["speedup_median"].max(), 1.0)) * 1.05
    return alt.layer(_diagonal(top), points).properties(title="modelled vs measured (gray: y = x)")


def tvd(distribution: pd.DataFrame) -> Figure:
    long = distribution.melt(
        id_vars=["draft"], value_vars=["tvd", "tvd_direct"], var_name="sampler", value_name="total variation"
    )
    long["sampler"] = long["sampler"].map({"tvd": "speculative", "tvd_direct": "direct"})
    columns = (
        _base(long)
        .mark_bar()
        .encode(
            x=alt.X("draft:N"),
            xOffset="sampler:N",
            y="total variation:Q",
            color="sampler:N",
            tooltip=["draft", "sampler", "total variation"],
        )
    )
    bound = (
        _base(distribution)
        .mark_tick(color="red", thickness=2, size=30)
        .encode(x="draft:N", y="tvd_noise_bound:Q", tooltip=["tvd_noise_bound"])
    )
    return alt.layer(columns, bound).properties(title="TV distance to the target (red: 99.9% sampling-noise bound)")


def quad_vs_linear(table: pd.DataFrame, crossover: float | None) -> Figure:
    long = table.melt(id_vars=["n"], value_vars=["quad_mults", "linear_mults"], var_name="part", value_name="mults")
    lines = (
        _base(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("n:Q", scale=LOG),
            y=alt.Y("mults:Q", scale=LOG, title="multiplications"),
            color="part:N",
            tooltip=["n", "part", "mults"],
        )
    )
    layers: list[Figure] = [lines]
    if crossover is not None:
        layers.append(_base(pd.DataFrame({"n": [crossover]})).mark_rule(color="red").encode(x="n:Q", tooltip=["n"]))
    return alt.layer(*layers).properties(title="quadratic vs linear multiplications (red: crossover)")


# Time axes show dates: with one run on the axis Vega-Lite would otherwise label milliseconds.
WHEN = alt.X("started_at:T", title="started", axis=alt.Axis(format="%Y-%m-%d %H:%M", labelAngle=-30))


def history(points: pd.DataFrame, y_title: str, color: str = "machine") -> Figure:
    """A metric per ``color`` group over time with each level's band; change points
    (``change_point``) drawn as red diamonds that link to the Review page (``review`` column)
    when it is given."""
    tooltip = ["run_id", "machine", color, "value", "median", "started_at"] if color != "machine" else None
    tooltip = tooltip or ["run_id", "machine", "value", "median", "started_at"]
    band = (
        _base(points)
        .mark_area(opacity=0.2)
        .encode(x=WHEN, y=alt.Y("low:Q", title=y_title), y2="high:Q", color=f"{color}:N")
    )
    line = _base(points).mark_line(point=True).encode(x=WHEN, y="value:Q", color=f"{color}:N", tooltip=tooltip)
    flagged_encodings = {"href": "review:N"} if "review" in points.columns else {}
    flagged = (
        _base(points[points["change_point"]])
        .mark_point(color="red", size=140, shape="diamond", filled=True)
        .encode(x=WHEN, y="value:Q", tooltip=["run_id", "machine", "value", "median"], **flagged_encodings)
    )
    return alt.layer(band, line, flagged)


def compare_machines(frame: pd.DataFrame, x: str, metric: str, series: str = "machine") -> Figure:
    """Side-by-side values per parameter point; a min–max band where the metric has one."""
    # Cases in the order they ran, their labels whole (a case's label is short, never its JSON).
    axis = alt.X(f"{x}:N", sort=None, title=x, axis=alt.Axis(labelAngle=-30, labelLimit=400))
    columns = (
        _base(frame)
        .mark_bar()
        .encode(
            x=axis,
            xOffset=f"{series}:N",
            y=alt.Y("value:Q", title=metric),
            color=f"{series}:N",
            tooltip=[x, series, "value", "run_id"],
        )
    )
    if "low" not in frame.columns:
        return columns
    band = (
        _base(frame)
        .mark_rule(strokeWidth=2, color="black")
        .encode(x=axis, xOffset=f"{series}:N", y="low:Q", y2="high:Q", tooltip=[series, "low", "high"])
    )
    return alt.layer(columns, band)


def predicted_against_measured(frame: pd.DataFrame, measured: str, predicted: str, color: str = "impl") -> Figure:
    """Measured against predicted, with the y = x line."""
    top = float(max(frame[measured].max(), frame[predicted].max())) * 1.1
    points = (
        _base(frame)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X(f"{predicted}:Q", title=predicted.replace("_", " ")),
            y=alt.Y(f"{measured}:Q", title=measured.replace("_", " ")),
            color=f"{color}:N",
            tooltip=list(frame.columns),
        )
    )
    return alt.layer(_diagonal(top), points)
