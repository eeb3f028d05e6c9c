"""The Roofline page's parts, plain functions testable without a server: a machine's roof as
ceilings (bandwidth lines per cache level, compute ceilings per precision), a run's placed
figures as points at their arithmetic intensity, the chart, and the conclusion sentences the
points support (generated from the figures, never written by hand)."""

from __future__ import annotations

import math
from typing import Any

import altair as alt
import pandas as pd

from analysis import theme
from runner import declarations

REGIMES = ("memory-bound", "compute-bound", "overhead-bound")  # runner.cost.roofline_model.REGIMES, by stored index
LEVELS = {1: "L1", 2: "L2", 3: "L3", 4: "DRAM"}  # runner.experiments.parts.roofline_placement.LEVEL_CODES, inverted
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
    for level in ("L1", "L2", "L3", "DRAM"):
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
                    "level": LEVELS[int(case[f"cache_level{suffix}"])],
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


def roofline_chart(roofs: pd.DataFrame, placed: pd.DataFrame) -> alt.LayerChart:
    """Ceilings (a second machine's dashed) and the run's points coloured by regime, on log axes."""
    x = alt.X("intensity:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (flops per byte)")
    y = alt.Y("flops_per_second:Q", scale=alt.Scale(type="log"), title="flops per second")
    lines = (
        alt.Chart(roofs)
        .mark_line()
        .encode(
            x=x,
            y=y,
            color=theme.color("ceiling", roofs, "ceiling", columns=1),
            strokeDash=alt.StrokeDash("machine:N", title="machine"),
            detail="machine:N",
            tooltip=["machine", "ceiling"],
        )
    )
    dots = (
        alt.Chart(placed)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("achieved_flops_per_second:Q", scale=alt.Scale(type="log")),
            shape=alt.Shape("regime:N", title="regime"),
            fill=alt.Fill("regime:N", title="regime", scale=theme.color_scale("regime", _column(placed, "regime"))),
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


def percent(value: float) -> str:
    return f"{value:.0%}"


def step_sentence(placed: pd.DataFrame, machine: str) -> str | None:
    """The fast fp32 cached step's regime, level and roof fraction (the longest generation timed)."""
    fast = placed[(placed["impl"] == "fast") & (placed["side"] == "cached step") & (placed["kernel"] == "float32")]
    if fast.empty:
        return None
    row = fast.sort_values("bytes_per_token").iloc[-1]
    error = row["prediction_error"]
    return (
        f"On {machine} the fast fp32 step ({row['experiment']}, {row['case']}) is {row['regime']}, its "
        f"{row['working_set_bytes'] / 1e6:.2f} MB working set in {row['level']}, at {percent(row['roof_fraction'])} "
        f"of the roof; the roofline predicted {row['predicted_us_per_token']:.1f} µs per token, "
        f"{percent(abs(error))} {'above' if error > 0 else 'below'} the measured {row['measured_us_per_token']:.1f}."
    )


def quantization_sentence(quantized: pd.DataFrame, cases: pd.DataFrame) -> str | None:
    """How the fast path's int8 and bf16 weights place against fp32, measured and predicted."""
    if quantized.empty:
        return None
    baseline = quantized[(quantized["kernel"] == "float32")]
    parts = []
    for kernel in ("fast_int8", "fast_bf16"):
        row = quantized[quantized["kernel"] == kernel]
        case = cases[cases.get("kernel", pd.Series(dtype=object)) == kernel] if "kernel" in cases else pd.DataFrame()
        if row.empty or case.empty:
            continue
        placed = row.iloc[0]
        speedup = case.iloc[0].get("speedup_vs_fp32")
        parts.append(
            f"{kernel} weights work from {placed['level']} ({placed['regime']}, {percent(placed['roof_fraction'])} "
            f"of the roof) and run {speedup:.2f}× faster than fp32"
        )
    if not parts:
        return None
    level = f" (fp32 from {baseline.iloc[0]['level']})" if not baseline.empty else ""
    return "; ".join(parts) + level + "."


LOOP_COSTS = ("roofline_step_seconds", "roofline_verify_seconds", "roofline_draft_call_seconds")


def speculative_sentence(cases: pd.DataFrame, machine: str = "this machine") -> str | None:
    """Per impl, which cost decides speculative decoding on this machine (the verification, the
    draft calls or the loop's own overhead, in plain steps a pass) and the acceptance drafts need
    to win, from the case the roofline predicts fastest; the roofline's verdict beside the
    measured one. Runs placed before the loop's costs were priced get the verification alone."""
    if cases.empty or "roofline_predicted_verify_cost_ratio" not in cases.columns:
        return None
    placed = cases.dropna(subset=["roofline_predicted_verify_cost_ratio"])
    priced = all(name in placed.columns for name in (*LOOP_COSTS, "roofline_loop_overhead_fit_seconds"))
    sentences = []
    for impl, group in placed.groupby("impl"):
        verdict_rows = group.dropna(subset=["speedup_median"])
        measured_wins = (verdict_rows["speedup_median"] > 1).any()
        predicted = group.dropna(subset=["roofline_predicted_speedup"])
        if priced and not predicted.empty:
            sentences.append(_deciding_cost(str(impl), predicted, bool(measured_wins), machine))
            continue
        widest = group.sort_values("k").iloc[-1]
        k = int(widest["k"])
        predicted_wins = (group["roofline_predicted_speedup"] > 1).any()
        sentences.append(
            f"On the {impl} impl a {k + 1}-position verification costs {widest['verify_cost_ratio']:.2f} steps "
            f"(the roofline says {widest['roofline_predicted_verify_cost_ratio']:.2f}), so at k={k} drafts need an "
            f"acceptance above {widest['roofline_break_even_acceptance']:.2f} to win; the roofline says speculative "
            f"decoding {'wins' if predicted_wins else 'loses'} with some draft here, measured it "
            f"{'wins' if measured_wins else 'loses'}."
        )
    if "roofline_speculative_withheld" in cases.columns:
        eager = cases[cases["roofline_speculative_withheld"] == 0]
        for impl in sorted(set(eager.get("impl", pd.Series(dtype=object)).dropna())):
            sentences.append(
                f"On the {impl} impl the roofline predicts no speculative speedup: an eager verification of several "
                "positions is priced neither by the roof nor by the overhead fit."
            )
    return " ".join(sentences) or None


def _deciding_cost(impl: str, predicted: pd.DataFrame, measured_wins: bool, machine: str) -> str:
    """The sentence for one impl whose cases the roofline priced with the loop's own costs."""
    best = predicted.sort_values("roofline_predicted_speedup").iloc[-1]
    # The verification was priced at the loop's mean draft length, rounded (speculative_timing).
    length = best.get("mean_draft_length")
    k = int(best["k"]) if length is None or pd.isna(length) else min(int(best["k"]), max(1, round(float(length))))
    step = best["roofline_step_seconds"]
    calls = best.get("predicted_mean_draft_calls")
    calls = float(best["k"]) if calls is None or pd.isna(calls) else float(calls)
    costs = {
        "the verification": best["roofline_verify_seconds"] / step,
        "the draft calls": calls * best["roofline_draft_call_seconds"] / step,
        "the loop's own overhead": best["roofline_loop_overhead_fit_seconds"] / step,
    }
    refill = best.get("roofline_cache_refill_seconds")
    if refill is not None and not pd.isna(refill):  # runs placed before the refill was priced have none
        costs["the cache refill"] = float(refill) / step
    decider = max(costs, key=lambda name: costs[name])
    listed = ", ".join(f"{name.removeprefix('the ')} {value:.2f}" for name, value in costs.items())
    break_even = best["roofline_break_even_acceptance"]
    need = (
        "no acceptance wins at this cost"
        if break_even >= 1.0
        else f"drafts need an acceptance above {break_even:.2f} to win (k={k}, each proposal kept alike)"
    )
    predicted_wins = bool((predicted["roofline_predicted_speedup"] > 1).any())
    return (
        f"On {machine}'s {impl} impl a speculative pass with its best draft ({best['draft']}, k={k}) "
        f"costs {sum(costs.values()):.2f} plain steps ({listed}): {decider} decides, and {need}; the roofline "
        f"says speculative decoding {'wins' if predicted_wins else 'loses'} here "
        f"(best {best['roofline_predicted_speedup']:.2f}×), measured it {'wins' if measured_wins else 'loses'}."
    )


def error_sentence(placed: pd.DataFrame) -> str | None:
    """How far the roofline's predictions are, per impl, as the median |error|."""
    if placed.empty:
        return None
    predicted = placed.dropna(subset=["prediction_error"])
    errors = predicted.assign(magnitude=predicted["prediction_error"].abs()).groupby("impl")["magnitude"].median()
    listed = ", ".join(f"{impl} {percent(value)}" for impl, value in errors.items())
    withheld = placed[placed["prediction_error"].isna()]
    held = "; ".join(
        f"{impl}: {len(group)} withheld ({', '.join(sorted(set(group['withheld'])))})"
        for impl, group in withheld.groupby("impl")
    )
    if not listed:
        return f"No placed figure has a prediction ({held})." if held else None
    return f"Median |prediction error| per impl over every placed figure: {listed}" + (
        f"; no prediction where the model cannot make one, {held}." if held else "."
    )


def conclusions(
    placed: pd.DataFrame, quantization_cases: pd.DataFrame, speculative_cases: pd.DataFrame, machine: str
) -> list[str]:
    """The sentences the run's placed figures support."""
    sentences = [
        step_sentence(placed, machine) if not placed.empty else None,
        quantization_sentence(placed[placed["experiment"] == "quantization"], quantization_cases)
        if not placed.empty
        else None,
        speculative_sentence(speculative_cases, machine),
        error_sentence(placed),
    ]
    return [sentence for sentence in sentences if sentence]


FIT_LIMIT = 0.25  # a model whose median |error| is above this does not fit (the target)


def overhead_model_errors(calibrated: pd.DataFrame) -> pd.DataFrame:
    """The overhead calibration's errors on the same points (data.calibrated_prediction), long."""
    if calibrated.empty:
        return pd.DataFrame(columns=["impl", "side", "model", "prediction_error"])
    rows = []
    for row in calibrated.to_dict("records"):
        for suffix, side in (("cache", "cached step"), ("no_cache", "no-cache step")):
            measured = row[f"seconds_{suffix}"]
            rows.append(
                {
                    "impl": row["impl"],
                    "side": side,
                    "model": "overhead a + b·mults",
                    "prediction_error": (row[f"predicted_seconds_{suffix}"] - measured) / measured,
                }
            )
    return pd.DataFrame(rows)


def fit_summary(placed: pd.DataFrame, calibrated: pd.DataFrame) -> pd.DataFrame:
    """Median |error| per impl, side and model (the roofline and, where fitted, the overhead
    calibration) over the same points, with whether it fits (≤ FIT_LIMIT). ``withheld``: the
    points a model made no prediction for (runner.cost.roofline_model.WITHHELD_REASONS), left out
    of its medians; a group with none predicted has no median and no verdict (``fits`` None)."""
    roof = placed[["impl", "side", "prediction_error"]].assign(model="roofline")
    both = pd.concat([roof, overhead_model_errors(calibrated)], ignore_index=True)
    both["absolute_error"] = both["prediction_error"].abs()
    both["withheld"] = both["prediction_error"].isna().astype(int)
    summary = both.groupby(["model", "impl", "side"], as_index=False).agg(
        median_abs_error=("absolute_error", "median"),
        median_error=("prediction_error", "median"),
        points=("impl", "size"),
        withheld=("withheld", "sum"),
    )
    summary["fits"] = [None if pd.isna(error) else bool(error <= FIT_LIMIT) for error in summary["median_abs_error"]]
    return summary


def _direction(median_error: float) -> str:
    factor = 1 + median_error
    return f"{factor:.1f}× too slow" if factor > 1 else f"{1 / factor:.1f}× too fast" if factor > 0 else "wrongly"


def misfit_warning(summary: pd.DataFrame, figure: str) -> str | None:
    """One warning for every model that does not fit (None when all fit): which ``figure`` it
    concerns and its worst group, why that matters, and what to do; a page shows it once."""
    misfits = summary[summary["fits"].eq(False)]  # None: all withheld, no verdict
    if misfits.empty:
        return None
    worst = misfits.sort_values("median_abs_error").iloc[-1]
    groups = ", ".join(f"{row['model']}: {row['impl']} {row['side']}" for row in misfits.to_dict("records"))
    return (
        f'The time models do not fit {len(misfits)} of {len(summary)} groups in "{figure}" ({groups}); '
        f"worst, the {worst['model']} model predicts the {worst['impl']} {worst['side']} "
        f"{_direction(float(worst['median_error']))} (median |error| {worst['median_abs_error']:.0%} over "
        f"{int(worst['points'])} points). Why it matters: the regimes and roof fractions of those points "
        "(here and on the Roofline page) come from the same model, so read them as rough; the measured times "
        "and speedups are unaffected. What to do: measure the roof with the machine idle (`decodelab machine "
        "profile`) and run the sweep again when nothing else loads it — other work stretches the measured "
        "times in a way the model cannot see."
    )
