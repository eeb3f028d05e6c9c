"""The speculative experiment's summary parts, from the cases the run already recorded.

- choice, per (impl, temperature): the (draft, schedule, k or p_min) the a-priori prediction
  picks, the measured best, and the regret (the speedup lost by following the prediction) as
  measured, with its noise band from the pairs and whether it lies within it. The regret is never
  rounded: a pick that measured slower than the best keeps its loss, however noisy.
- accuracy, per impl: how close the a-priori prediction came over every case of the impl
  (``a_priori_error_median``, ``a_priori_within_10pct``).

The picks are decisions taken from timings (unit ``choice``): they may differ between runs.
"""

from __future__ import annotations

import statistics
from typing import Any

from runner.decoding.choices import SCHEDULES
from runner.errors import Unmeasured
from runner.experiments.base import ExperimentContext
from runner.experiments.speculative import NAME  # the experiment whose cases these parts summarise
from store.records import MeasurementRecord

WITHIN = 0.10  # the accuracy target's band: |a-priori error| at most 10%
# A candidate: draft, schedule, k (fixed: every pass; heuristic: the first; confidence: the most)
# and p_min (confidence only, else 0).
Candidate = tuple[str, str, int, float]


def candidate_of(params: dict[str, Any]) -> Candidate:
    """A timed case's candidate (old runs' params are completed by store.compatibility)."""
    return (params["draft"], params["schedule"], int(params["k"]), float(params.get("p_min") or 0.0))


def describe(candidate: Candidate) -> str:
    draft, schedule, k, p_min = candidate
    if schedule == "fixed":
        return f"{draft}, fixed k = {k}"
    if schedule == "heuristic":
        return f"{draft}, heuristic from k = {k}"
    return f"{draft}, confidence p_min = {p_min:g} (at most {k})"


def speculative_values(context: ExperimentContext, impl: str, temperature: float) -> dict[Candidate, dict[str, float]]:
    """Every metric of the run's speculative cases of ``impl`` at ``temperature``, per candidate:
    the measurements this run just made (ExperimentContext.earlier), not read back from the store."""
    values: dict[Candidate, dict[str, float]] = {}
    for row in context.earlier(NAME):
        params = row.params
        if params.get("part") != "speculative" or params.get("impl") != impl:
            continue
        if params["temperature"] != temperature:
            continue
        values.setdefault(candidate_of(params), {})[row.metric] = row.value
    return values


def regret_with_band(chosen: dict[str, float], best: dict[str, float]) -> tuple[float, float]:
    """The measured regret and its noise band: the chosen case's band above its median plus the
    best case's below its median (a regret within it: the two cases' pair bands overlap)."""
    regret = best["speedup_median"] - chosen["speedup_median"]
    band = (chosen["speedup_max"] - chosen["speedup_median"]) + (best["speedup_median"] - best["speedup_min"])
    return regret, band


def choice(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    values = speculative_values(context, case["impl"], case["temperature"])
    wanted = {"predicted_speedup_a_priori", "speedup_median", "speedup_min", "speedup_max"}
    candidates = {key: value for key, value in values.items() if wanted <= set(value)}
    if not candidates:
        raise Unmeasured(
            f"no speculative case of impl {case['impl']} at temperature {case['temperature']} recorded a prediction "
            "and a speedup"
        )
    chosen = max(candidates, key=lambda key: candidates[key]["predicted_speedup_a_priori"])
    best = max(candidates, key=lambda key: candidates[key]["speedup_median"])
    regret, band = regret_with_band(candidates[chosen], candidates[best])
    drafts = list(case["drafts"])
    records = []
    for prefix, picked in (("a_priori_choice", chosen), ("measured_best", best)):
        draft, schedule, k, p_min = picked
        records += [
            MeasurementRecord(f"{prefix}_draft_index", drafts.index(draft), "choice"),
            MeasurementRecord(f"{prefix}_schedule_index", SCHEDULES.index(schedule), "choice"),
            MeasurementRecord(f"{prefix}_k", k, "choice"),
            MeasurementRecord(f"{prefix}_p_min", p_min, "choice"),
            MeasurementRecord(f"{prefix}_speedup", candidates[picked]["speedup_median"], "ratio"),
            MeasurementRecord(f"{prefix}_predicted_speedup", candidates[picked]["predicted_speedup_a_priori"], "ratio"),
        ]
    within = regret <= band
    return [
        *records,
        MeasurementRecord("a_priori_regret_measured", regret, "ratio"),
        MeasurementRecord("a_priori_regret_noise_band", band, "ratio"),
        MeasurementRecord("a_priori_regret_within_noise", within, "choice"),
        MeasurementRecord("a_priori_chose_best", chosen == best, "choice"),
    ]


def accuracy(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    errors = [
        abs(row.value)
        for row in context.earlier(NAME)
        if row.params.get("part") == "speculative"
        and row.params.get("impl") == case["impl"]
        and row.metric == "a_priori_relative_error"
    ]
    if not errors:
        raise Unmeasured(f"no speculative case of impl {case['impl']} recorded an a-priori error")
    return [
        MeasurementRecord("a_priori_error_median", statistics.median(errors), "ratio"),
        MeasurementRecord("a_priori_within_10pct", sum(error <= WITHIN for error in errors) / len(errors), "ratio"),
        MeasurementRecord("a_priori_cases", len(errors), "count"),
    ]
