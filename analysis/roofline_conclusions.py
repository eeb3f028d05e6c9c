"""What a run's placed figures (analysis.roofline.points) say in words: the Roofline page's
conclusion sentences, generated from the figures and never written by hand, and the time
models' fit judged on the same points (a summary per group and one warning for a misfit)."""

from __future__ import annotations

import math

import pandas as pd

from runner.cost import speculative as speculative_cost


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
        measured = case.iloc[0].get("speedup_vs_fp32")
        speedup = math.nan if measured is None else float(measured)
        parts.append(
            f"{kernel} weights work from {placed['level']} ({placed['regime']}, {percent(placed['roof_fraction'])} "
            f"of the roof) and run {speed_against(speedup, 'fp32')}"
        )
    if not parts:
        return None
    level = f" (fp32 from {baseline.iloc[0]['level']})" if not baseline.empty else ""
    return "; ".join(parts) + level + "."


def speed_against(speedup: float, other: str) -> str:
    """A speedup in words that hold either way: "1.86× as fast as fp32 (faster)"; a ratio below one
    read "0.81× faster than fp32" (a slowdown)."""
    if speedup != speedup:  # NaN: not measured
        return f"at a speed not measured against {other}"
    way = "faster" if speedup > 1 else "slower" if speedup < 1 else "the same"
    return f"{speedup:.2f}× as fast as {other} ({way})"


# Recorded only by runs placed after the loop's own costs were priced (roofline_placement.speculative).
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


# How the Roofline page names each of a pass's costs (runner.cost.speculative.PASS_COSTS).
PASS_COST_NAMES = {
    "verification": "the verification",
    "draft": "the draft",
    "loop_overhead": "the loop's own overhead",
    "cache_refill": "the cache refill",
}
assert tuple(PASS_COST_NAMES) == speculative_cost.PASS_COSTS


def _recorded(row: pd.Series, name: str) -> float | None:
    value = row.get(name)
    return None if value is None or pd.isna(value) else float(value)


def _deciding_cost(impl: str, predicted: pd.DataFrame, measured_wins: bool, machine: str) -> str:
    """The sentence for one impl whose cases the roofline priced with the loop's own costs."""
    best = predicted.sort_values("roofline_predicted_speedup").iloc[-1]
    # The verification was priced at the loop's mean draft length, rounded (speculative_timing).
    length = best.get("mean_draft_length")
    k = int(best["k"]) if length is None or pd.isna(length) else min(int(best["k"]), max(1, round(float(length))))
    # In the plain steps the speedup is over: the case's measured one (roofline_placement.LoopParts).
    measured_step = best.get("target_step_seconds")
    step = best["roofline_step_seconds"] if measured_step is None or pd.isna(measured_step) else measured_step
    calls = best.get("predicted_mean_draft_calls")
    calls = float(best["k"]) if calls is None or pd.isna(calls) else float(calls)
    costs = speculative_cost.pass_in_steps(
        step_seconds=step,
        verify_seconds=best["roofline_verify_seconds"],
        draft_calls_per_pass=calls,
        draft_call_seconds=best["roofline_draft_call_seconds"],
        # None in runs placed before turns were timed (each proposal then priced as a whole call)
        draft_turn_fixed_seconds=_recorded(best, "roofline_draft_turn_fixed_seconds") or 0.0,
        cache_refill_seconds=_recorded(best, "roofline_cache_refill_seconds"),  # None before the refill was priced
        loop_overhead_seconds=best["roofline_loop_overhead_fit_seconds"],
    )
    decider = PASS_COST_NAMES[speculative_cost.largest_cost(costs)]
    # A fitted overhead below zero is the parts priced above what the loop took, not a negative cost.
    listed = ", ".join(
        f"{PASS_COST_NAMES[name].removeprefix('the ')} {value:.2f}"
        + (" (below zero: the roof prices the other parts above what they took)" if value < 0 else "")
        for name, value in costs.items()
    )
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
    # The figure draws the roofline's predictions only: an overhead fit's misses are in the table.
    where = f'"{figure}"' if misfits["model"].eq("roofline").any() else f'the fit table (not drawn in "{figure}")'
    return (
        f"The time models do not fit {len(misfits)} of {len(summary)} groups in {where} ({groups}); "
        f"worst, the {worst['model']} model predicts the {worst['impl']} {worst['side']} "
        f"{_direction(float(worst['median_error']))} (median |error| {worst['median_abs_error']:.0%} over "
        f"{int(worst['points'])} points). Why it matters: the regimes and roof fractions of those points "
        "(here and on the Roofline page) come from the same model, so read them as rough; the measured times "
        "and speedups are unaffected. What to do: measure the roof with the machine idle (`decodelab machine "
        "profile`) and run the sweep again when nothing else loads it — other work stretches the measured "
        "times in a way the model cannot see."
    )
