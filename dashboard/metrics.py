"""What kind of number a metric is: the pages and the determinism checks ask here.

A deterministic metric does not depend on the clock: with the same model, seed and code on the
same machine it reproduces exactly (counts, bytes, seeded acceptance, losses, equality checks).
Everything else is timed, or fitted or decided from timings, and carries noise.
"""

from __future__ import annotations

# Units that only counters, byte sizes, seeded sampling or equality checks produce.
DETERMINISTIC_UNITS = frozenset(
    {
        "multiplications",
        "pairs",
        "tokens",
        "passes",
        "bytes",
        "bool",
        "chars",
        "parameters",
        "probability",
        "nats",
        "count",
        "computations",  # K/V projections counted
        "elements",  # cache elements counted from shapes
        "logit",  # logit differences of seeded, single-process forwards
        "value",
    }
)
# Ratios of deterministic quantities (the unit "ratio" alone does not say).
DETERMINISTIC_RATIOS = frozenset(
    {
        "acceptance_rate",
        "acceptance_per_decided",
        "one_minus_mean_tv",
        "arithmetic_ratio",
        "arithmetic_ratio_causal",
        "arithmetic_ratio_with_lm_head",
        "arithmetic_ratio_writeup_model",
        "bytes_ratio_vs_fp32",
        "cache_to_weight_ratio",
        "quad_ratio",
        "linear_ratio",
        "system_efficiency",  # counted speculative passes
        "a_priori_chars_per_pass_error",  # seeded simulation against seeded counts
    }
)
# Per draft position, counted or simulated with seeds.
DETERMINISTIC_RATIO_PREFIXES = (
    "cache_to_weight_ratio",
    "acceptance_rate_at_position_",
    "predicted_acceptance_rate_at_position_",
)


def is_deterministic(metric: str, unit: str) -> bool:
    """Whether ``metric`` must reproduce exactly in a second identical run on one machine."""
    if unit in DETERMINISTIC_UNITS:
        return True
    return unit == "ratio" and (metric in DETERMINISTIC_RATIOS or metric.startswith(DETERMINISTIC_RATIO_PREFIXES))


# Metrics renamed when their name claimed more than they measure: old name → current name.
# Old runs keep the names they were recorded under; pages show them under the current name
# and say so.
RENAMED_METRICS = {
    "predicted_speedup": "writeup_formula_speedup",
    "predicted_relative_error": "writeup_formula_relative_error",
    "predicted_speedup_refined": "component_model_speedup",
    "predicted_refined_relative_error": "component_model_relative_error",
}
