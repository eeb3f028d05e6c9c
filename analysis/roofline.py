"""The Roofline page's data and chart, plain functions testable without a server: a machine's
roof as ceilings (bandwidth lines per cache level, compute ceilings per precision), roofs side
by side, a run's placed figures as points at their arithmetic intensity, and the chart. What the
points say in words is analysis.roofline_conclusions."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from analysis import theme
from runner import declarations
from runner.cost.roofline_model import LEVELS

REGIMES = ("memory-bound", "compute-bound", "overhead-bound")  # runner.cost.roofline_model.REGIMES, by stored index
# The stored cache_level codes (runner.experiments.parts.roofline_placement.LEVEL_CODES), inverted.
LEVEL_NAMES = dict(enumerate(LEVELS, start=1))
SIDES = {"": "cached step", "_no_cache": "no-cache step"}
WITHHELD_REASONS = (  # runner.cost.roofline_model.WITHHELD_REASONS, by stored index
    "no overhead fit yet",
    "an eager pass of several positions, which the overhead fit does not price",
    "the overhead fit misses its own points by more than 25%",
)
INTENSITIES = [10 ** (exponent / 4) for exponent in range(-8, 17)]  # flops per byte, 0.01 to 10,000


def placed_experiments() -> tuple[str, ...]:
    """The experiments whose timed cases are placed on the roof, in their order (each declares
    ``placed_on_roof``, runner.declarations)."""
    return tuple(declaration.name for declaration in declarations.ordered() if declaration.placed_on_roof)


def ceilings(figures: dict[str, Any], machine: str) -> pd.DataFrame:
    """One row per (ceiling, intensity): each level's one-thread bandwidth × intensity up to the
    highest compute peak, and each precision's peak as a flat line (the best repeats: the roof)."""
    peaks = {precision: rates["high"] for precision, rates in figures["peak_operations_per_second"].items()}
    top = max(peaks.values())
    rows = []
    for level, row in figures["bandwidth"].items():
        bandwidth = row["one_thread"]["high"]
        for intensity in INTENSITIES:
            rows.append(
                {
                    "machine": machine,
                    "ceiling": f"{level} {bandwidth / 1e9:.0f} GB/s",
                    "kind": "bandwidth",
                    "intensity": intensity,
                    "flops_per_second": min(bandwidth * intensity, top),
                }
            )
    for precision, peak in peaks.items():
        for intensity in (INTENSITIES[0], INTENSITIES[-1]):
            rows.append(
                {
                    "machine": machine,
                    "ceiling": f"{precision} {peak / 1e9:.0f} Gop/s",
                    "kind": "compute",
                    "intensity": intensity,
                    "flops_per_second": peak,
                }
            )
    return pd.DataFrame(rows)


def wide(measurements: pd.DataFrame) -> pd.DataFrame:
    """One row per case: its params as columns and one column per metric (as data.wide_cases,
    without the Streamlit import a report from the command line does not need)."""
    if measurements.empty:
        return pd.DataFrame()
    firsts = measurements.drop_duplicates("case_id").set_index("case_id")
    params = pd.DataFrame(list(firsts["params"]), index=firsts.index)
    values = measurements.pivot_table(index="case_id", columns="metric", values="value", aggfunc="first")
    return params.join(values).reset_index()


def roof_rows(roofs: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Machines' roofs side by side: one column per machine."""
    names = list(roofs)
    # The roof: each micro-kernel's best repeat.
    rows = [["instruction set", *(str(roofs[name]["instruction_set"]) for name in names)]]
    for precision in ("fp32", "bf16", "int8"):
        rows.append(
            [
                f"peak {precision} Gop/s (one core)",
                *(f"{roofs[name]['peak_operations_per_second'][precision]['high'] / 1e9:.0f}" for name in names),
            ]
        )
    for level in LEVELS:
        rows.append(
            [
                f"{level} read GB/s (one thread / all)",
                *(
                    f"{roofs[name]['bandwidth'][level]['one_thread']['high'] / 1e9:.1f} / "
                    f"{roofs[name]['bandwidth'][level]['all_threads']['high'] / 1e9:.1f}"
                    for name in names
                ),
            ]
        )
    return ["roof", *names], rows


def case_label(experiment: str, case: pd.Series) -> str:
    """What distinguishes a placed case within its experiment."""

    def value(name: str) -> Any:
        found = case.get(name)
        return None if found is None or (isinstance(found, float) and math.isnan(found)) else found

    impl = value("impl") or "static"
    if experiment == "quantization":
        return f"{value('kernel')} ({impl})"
    if experiment == "overhead":
        return f"{impl} d={int(value('d_model'))}"
    if experiment == "speculative":
        return f"{impl} {value('draft')} k={int(value('k'))}"
    width = value("d_model")
    return f"{impl} n={int(value('n'))}" + (f" d={int(width)}" if width is not None else "")


def points(cases: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Every placed figure of one experiment's wide cases (data.wide_cases): one row per timed
    side, at its intensity, with its regime, level, prediction and measured time."""
    rows = []
    for _, case in cases.iterrows():
        for suffix, side in SIDES.items():
            fraction = case.get(f"roof_fraction{suffix}")
            if fraction is None or pd.isna(fraction):
                continue
            # A withheld prediction (runner.cost.roofline_model.WITHHELD_REASONS) has no figure: NaN.
            predicted = case.get(f"roofline_predicted_seconds_per_token{suffix}", math.nan)
            error = case.get(f"roofline_prediction_error{suffix}", math.nan)
            withheld = case.get(f"roofline_prediction_withheld{suffix}")
            bytes_per_token, flops_per_token = case[f"bytes_per_token{suffix}"], case[f"flops_per_token{suffix}"]
            rows.append(
                {
                    "experiment": experiment,
                    "case": case_label(experiment, case),
                    "impl": case.get("impl") if isinstance(case.get("impl"), str) else "static",
                    "kernel": case.get("kernel") if isinstance(case.get("kernel"), str) else "float32",
                    "side": side,
                    "intensity": flops_per_token / bytes_per_token,
                    "bytes_per_token": bytes_per_token,
                    "flops_per_token": flops_per_token,
                    "achieved_flops_per_second": case[f"achieved_flops_per_second{suffix}"],
                    "achieved_bytes_per_second": case[f"achieved_bytes_per_second{suffix}"],
                    "working_set_bytes": case[f"working_set_bytes{suffix}"],
                    "level": LEVEL_NAMES[int(case[f"cache_level{suffix}"])],
                    "regime": REGIMES[int(case[f"regime{suffix}"])],
                    "roof_fraction": fraction,
                    "predicted_us_per_token": predicted * 1e6,
                    # The bytes counted over the rate achieved: the measured time, withheld or not.
                    "measured_us_per_token": bytes_per_token / case[f"achieved_bytes_per_second{suffix}"] * 1e6,
                    "prediction_error": error,
                    "withheld": WITHHELD_REASONS[int(withheld)]
                    if withheld is not None and not pd.isna(withheld)
                    else "",
                }
            )
    return pd.DataFrame(rows)


def _column(frame: pd.DataFrame, name: str) -> list[Any]:
    return frame[name].tolist() if name in frame.columns else []


# Each ceiling's colour by what it is, whatever its figure and on every machine (an overlaid
# machine's are the same colours, dashed): the cache levels in one set of hues, the precisions'
# peaks in another, none a regime's (the points' fills). Colours from a ceiling's text made two of
# seven alike on one machine (DRAM and bf16 both pink).
CEILING_COLORS = {
    "L1": "#76b7b2",
    "L2": "#59a14f",
    "L3": "#edc948",
    "DRAM": "#9c755f",
    "fp32": "#b07aa1",
    "bf16": "#ff9da7",
    "int8": "#b6992d",
}


def ceiling_scale(names: list[Any]) -> alt.Scale:
    """The ceilings' colour scale: CEILING_COLORS by a ceiling's first word ("L2 150 GB/s"), any
    other a colour of its own, never a regime's nor one of those."""
    shown = sorted({str(name) for name in names})
    others = [name for name in shown if name.split(" ")[0] not in CEILING_COLORS]
    avoid = [*theme.REGIME_COLORS.values(), *CEILING_COLORS.values()]
    fallback = theme.color_scale("ceiling", others, avoid=avoid)
    chosen = dict(zip(fallback.domain, fallback.range, strict=True)) if others else {}
    return alt.Scale(domain=shown, range=[CEILING_COLORS.get(name.split(" ")[0]) or chosen[name] for name in shown])


def roofline_chart(roofs: pd.DataFrame, placed: pd.DataFrame) -> alt.LayerChart:
    """Ceilings (a second machine's dashed) and the run's points coloured by regime, on log axes."""
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (flops per byte)")
    # SI prefixes (100G, 1T): d3's default wrote 100,000,000,000 beside 1e+12 on one axis.
    y = alt.Y("flops_per_second:Q", scale=alt.Scale(type="log"), title="flops per second", axis=alt.Axis(format="~s"))
    lines = (
        alt.Chart(roofs)
        .mark_line()
        .encode(
            x=x,
            y=y,
            # No ceiling's line in a regime's colour: an overhead-bound point in the L3 line's red
            # read as sitting on that ceiling.
            color=alt.Color(
                "ceiling:N", scale=ceiling_scale(_column(roofs, "ceiling")), legend=theme.legend("ceiling", columns=1)
            ),
            strokeDash=alt.StrokeDash("machine:N", title="machine"),
            detail="machine:N",
            tooltip=["machine", "ceiling"],
        )
    )
    regimes = theme.color_scale("regime", _column(placed, "regime"))
    dots = (
        alt.Chart(placed)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("achieved_flops_per_second:Q", scale=alt.Scale(type="log")),
            # One legend for both: the shape's scale over the fill's domain (two "regime" legends before).
            shape=alt.Shape("regime:N", title="regime", scale=alt.Scale(domain=regimes.domain)),
            fill=alt.Fill("regime:N", title="regime", scale=regimes),
            tooltip=[
                "experiment",
                "case",
                "side",
                "regime",
                "level",
                alt.Tooltip("roof_fraction:Q", format=".0%"),
                alt.Tooltip("measured_us_per_token:Q", format=".1f"),
                alt.Tooltip("predicted_us_per_token:Q", format=".1f"),
                alt.Tooltip("prediction_error:Q", format="+.0%"),
                alt.Tooltip("working_set_bytes:Q", format=",.0f"),
            ],
        )
    )
    title = "the roof: ceilings per cache level and precision, and every timed decode at its intensity"
    return alt.layer(lines, dots).resolve_scale(color="independent").properties(title=title)
