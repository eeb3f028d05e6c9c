"""A run against its baseline gathered for a review file: the verdict table, the A/A spread, the
warnings that make the comparison weaker than it looks, the drift and calibration lines and the
key charts' figures (RunReport, from build_report). Reads the store; writes no text format.

analysis.report_render writes a RunReport as Markdown or HTML.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import calibration, review, review_charts, review_host, review_inputs, review_lines, review_timed
from analysis.figures import Figure
from analysis.runs import baseline_after, sweep_label
from store.compatibility import renamed_in
from store.drift import DriftRecord
from store.store import Store
from store.user_text import markdown_text


@dataclass
class RunReport:
    run: dict[str, Any]
    baseline: dict[str, Any]
    table: pd.DataFrame
    floors: dict[tuple[str, str, str], float]  # (experiment, impl, method) → widest A/A |log ratio|
    warnings: list[str]
    earlier_runs: int  # how many the between-run floors were taken over
    drift: float | None = None  # the machine's drift figure, where its earlier runs hold one
    calibration: str = ""  # the measured error rates of the verdicts on this machine and preset
    machine_drift: str = ""  # the machine's drift figure as kept with it, and the one this review used
    charts: list[Figure] = field(default_factory=list)


def warnings_for(run: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """What makes a comparison weaker than it looks."""
    found = []
    # First: it turns what every verdict means around.
    later = baseline_after(run["run_id"], run.get("started_at"), baseline["run_id"], baseline.get("started_at"))
    if later is not None:
        found.append(later)
    if run["machine_fingerprint"] != baseline["machine_fingerprint"]:
        found.append("the runs ran on different machines (fingerprints differ): timed verdicts compare machines too")
    if run["model_hash"] != baseline["model_hash"]:
        found.append("the runs used different model weights: deterministic metrics are expected to change")
    if review.SUSPECT in review.tag_set(baseline.get("tags")):
        found.append("the baseline is tagged suspect")
    return found


def chart_frames(measurements: pd.DataFrame, which: str) -> dict[str, pd.DataFrame]:
    """The key charts' points of one run: KV-cache speedup against n, speculative speedup against k."""
    if measurements.empty:
        return {}
    frame = measurements.copy()
    params = frame["params"]
    frame["part"] = params.map(lambda value: value.get("part"))
    frame["impl"] = params.map(lambda value: value.get("impl", review.DEFAULT_IMPL))
    kv = frame[
        (frame["experiment"] == "kv_cache") & (frame["part"] == "timing") & (frame["metric"] == "measured_speedup")
    ]
    speculative = frame[
        (frame["experiment"] == "speculative")
        & (frame["part"] == "speculative")
        & (frame["metric"] == "speedup_median")
    ]
    return {
        "kv": kv.assign(n=kv["params"].map(lambda value: value["n"]), measured_speedup=kv["value"], which=which),
        "speculative": speculative.assign(
            k=speculative["params"].map(lambda value: value["k"]),
            series=speculative["params"].map(lambda value: f"{value['draft']} · {value.get('impl', 'static')}"),
            speedup_median=speculative["value"],
            which=which,
        ),
    }


# The calibration line of a report written with `report run --no-calibration`.
CALIBRATION_LEFT_OUT = (
    "left out of this report (`--no-calibration`); without it the report measures this machine's error rates"
)


def calibration_line(store: Store, run: Mapping[str, Any]) -> str:
    """The measured error rates of the verdicts for the run's machine and preset, over the A/A
    pairs the run could have known (analysis.calibration): Markdown, the store's text escaped. The
    slow part of a report (seconds), so the Review page draws it last."""
    preset = str(run["preset"]) if isinstance(run["preset"], str) else "custom"
    return calibration.calibrate(
        store,
        preset,
        fingerprint=str(run["machine_fingerprint"]),
        newest=calibration.PAGE_PAIRS,
        up_to=int(run["run_id"]),
    ).line(markdown_text)


def build_report(
    store: Store, run_id: int, baseline_id: int, *, headline_only: bool = True, calibrated: bool = True
) -> RunReport:
    """The review of ``run_id`` against ``baseline_id``; ``calibrated``: with the measured error
    rates of the verdicts for the run's machine and preset (analysis.calibration)."""
    inputs = review_inputs.read_inputs(store, run_id, baseline_id)
    run, baseline = inputs.run, inputs.baseline
    run_measurements, baseline_measurements = inputs.run_measurements, inputs.baseline_measurements
    table = review_inputs.judge(inputs, headline_only=headline_only)
    # The warnings and the calibration line are Markdown, the run's own text in them escaped
    # (markdown_text); the HTML report takes the escapes out again before escaping for HTML.
    warnings = warnings_for(run, baseline)
    for which, measured in (("run", run_measurements), ("baseline", baseline_measurements)):
        old = renamed_in(measured)
        if old:
            renamed = ", ".join(f"{markdown_text(name)} → {current}" for name, current in old.items())
            warnings.append(
                f"the {which} recorded metrics under their old names, shown under the current ones: {renamed}"
            )
    timed = table[table["kind"] == "timed"]
    sweep = markdown_text(sweep_label(run.get("preset"), run.get("spec")))  # by name, never "nan"; escaped
    if not timed.empty and not inputs.between and not inputs.interleaved:
        drift = review.DEFAULT_DRIFT if inputs.drift is None else inputs.drift
        learned = "this machine's drift figure" if inputs.drift is not None else "the default drift allowance"
        run_wide = math.expm1(review_timed.RUN_WIDE_ALLOWANCE)
        moved = f"({review_timed.RUN_WIDE_MIN_ROWS} or more paired ratios moving beyond ±{run_wide:.0%} together)"
        whole_run = (
            f"only a change of the whole run {moved} is judged against ±{run_wide:.0%} instead, the min-of-N "
            "times moving with it too"
            if drift > review_timed.RUN_WIDE_ALLOWANCE
            else f"a change of the whole run {moved} is judged against ±{run_wide:.0%} on the min-of-N times "
            "moving with it"
        )
        warnings.append(
            f"fewer than two earlier done runs of {sweep} on this machine: how far a timing "
            f"moves between runs is not known for these cases, so a paired ratio's shift within {learned} "
            f"(±{math.expm1(drift):.1%}) and a min-of-N time's shift of any size on its own are `unknown drift`, "
            f"not a regression; {whole_run} (run the preset again to learn it)"
        )
    elif not timed.empty and not inputs.interleaved and inputs.floor_runs < review.SETTLED_HISTORY:
        warnings.append(
            f"the between-run floors rest on at most {inputs.floor_runs} earlier done runs of {sweep} on this "
            "machine: a group of cases that moves together between runs is known from at most "
            f"{inputs.floor_runs - 1} of its moves however many cases it holds, so a step of the machine can "
            f"read as a change of a whole group until about {review.SETTLED_HISTORY} runs are known; rerun "
            "before believing rows of one experiment that all moved the same way"
        )
    if waiting := review_lines.waiting_line(table):
        warnings.append(waiting)
    if stepped := review_host.host_line(table):
        warnings.append(stepped)
    if phased := review_host.phase_line(table):
        warnings.append(phased)
    report = RunReport(
        run,
        baseline,
        table,
        review.noise_floors(run_measurements, baseline_measurements),
        warnings,
        len(inputs.earlier),
        drift=inputs.drift,
    )
    report.machine_drift = (
        ab_line(run, baseline)
        if inputs.interleaved
        else drift_line(store.drift.of_fingerprint(str(run["machine_fingerprint"])), inputs.drift, int(run["run_id"]))
    )
    if calibrated:
        report.calibration = calibration_line(store, run)
    if (table["kind"] == "timed").any():
        report.charts.append(review_charts.timed_changes(table))
    ours, theirs = (
        chart_frames(run_measurements, f"run {run_id}"),
        chart_frames(baseline_measurements, f"baseline {baseline_id}"),
    )
    kv = pd.concat([ours.get("kv", pd.DataFrame()), theirs.get("kv", pd.DataFrame())])
    if not kv.empty:
        report.charts.append(
            review_charts.side_by_side(kv, "n", "measured_speedup", "impl", "KV cache: measured speedup (same impl)")
        )
    speculative = pd.concat([ours.get("speculative", pd.DataFrame()), theirs.get("speculative", pd.DataFrame())])
    if not speculative.empty:
        points = review.case_points(speculative)
        cases = [
            points[("speculative", review.params_key(params))].removeprefix("speculative · ")
            for params in speculative["params"]
        ]
        report.charts.append(
            review_charts.cases_side_by_side(
                speculative.assign(case=cases), "case", "speedup_median", "speculative: measured speedup, each case"
            )
        )
    return report


def ab_line(run: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    """What an A/B pair's review rests on instead of a drift allowance."""
    return (
        f"no drift allowance is needed: run {run['run_id']} ({run['code_version']}) and baseline "
        f"{baseline['run_id']} ({baseline['code_version']}) are one A/B session (`decodelab ab`), each timed "
        "case's rounds alternating the two revisions on this machine, so whatever the machine did hit both alike"
    )


def drift_line(kept: DriftRecord | None, used: float | None, run_id: int) -> str:
    """The machine's drift figure as the store keeps it, and the allowance this review used (learned
    from the runs before ``run_id`` only: a run's own shifts must not widen its allowance)."""
    if kept is None:
        stored = "not kept yet (no run has finished on this machine since the store kept drift figures)"
    elif kept.log_ratio is None:
        stored = (
            f"not learned yet: {kept.moves} of the {review.DRIFT_MIN_VALUES} moves between its runs it needs "
            f"(kept after run {kept.run_id})"
        )
    else:
        stored = (
            f"±{math.expm1(kept.log_ratio):.1%} ({kept.quantile:.0%} of {kept.moves} moves of a timed headline "
            f"value between its consecutive runs stay within it; kept after run {kept.run_id})"
        )
    allowance = (
        f"±{math.expm1(used):.1%}, learned from the runs before run {run_id}"
        if used is not None
        else f"the default ±{math.expm1(review.DEFAULT_DRIFT):.0%} (too few moves before run {run_id})"
    )
    machine = kept.machine if kept else "this machine"
    return f"{machine}'s drift figure: {stored}; this review's drift allowance: {allowance}"
