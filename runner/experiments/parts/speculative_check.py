"""The speculative experiment's distribution part: does the output keep the target's distribution,
through each impl's production verification, and what would the check have caught
(runner.experiments.parts.distribution_check says how)."""

from __future__ import annotations

import math
from typing import Any

from runner.experiments.base import ExperimentContext
from runner.experiments.parts.distribution_check import BUG_VARIANTS, check_passes
from runner.experiments.parts.speculative_drafts import make_draft
from store.records import MeasurementRecord


def distribution(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    prompt = context.prompt(case["context_chars"])
    check = check_passes(
        context.model,
        case["impl"],
        make_draft(case, context),
        prompt,
        case["k"],
        case["samples"],
        case["temperature"],
        seed=context.seed,
    )
    correct = check.correct.chi_square
    records = [
        MeasurementRecord("chi2_pvalue", correct.pvalue, "probability"),
        MeasurementRecord("chi2_degrees_of_freedom", correct.degrees_of_freedom, "count"),
        MeasurementRecord("distribution_check_passes", check.passes, "bool"),
        MeasurementRecord("draft_target_tvd", check.draft_target_tvd, "probability"),
        MeasurementRecord("tvd", check.tvd, "probability"),
        MeasurementRecord("tvd_direct", check.tvd_direct, "probability"),
        MeasurementRecord("tvd_noise_bound", check.tvd_noise_bound, "probability"),
    ]
    # The reach per emitted position; a power statement (detectable_tv) only where a simulation
    # of the same test backs it.
    for position in check.reach:
        number = position.position
        records += [
            MeasurementRecord(f"samples_at_position_{number}", position.samples, "count"),
            MeasurementRecord(f"pooled_share_at_position_{number}", position.pooled_share, "probability"),
        ]
        if not math.isnan(position.simulated_power):
            records.append(
                MeasurementRecord(f"simulated_power_at_position_{number}", position.simulated_power, "probability")
            )
        if position.backed:
            records.append(
                MeasurementRecord(f"detectable_tv_at_position_{number}", position.detectable_tv, "probability")
            )
    if check.reach[0].backed:
        records.append(MeasurementRecord("detectable_tv", check.detectable_tv, "probability"))
    for variant in BUG_VARIANTS:
        result = check.variants[variant]
        due = check.must_detect(variant)
        records += [
            MeasurementRecord(f"check_detects_{variant}", result.detected, "bool"),
            MeasurementRecord(f"chi2_pvalue_{variant}", result.chi_square.pvalue, "probability"),
            MeasurementRecord(f"effect_tv_{variant}", result.effect_tv, "probability"),
            MeasurementRecord(f"check_due_{variant}", due, "bool"),
        ]
        if due:
            # A backed power statement covers this variant: did the check keep it (catch it)?
            records.append(MeasurementRecord(f"check_keeps_its_power_{variant}", result.detected, "bool"))
    return records
