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
        "flops",  # multiply-adds × 2 counted from the model shape (runner.cost_model)
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
    }
)


def is_deterministic(metric: str, unit: str) -> bool:
    """Whether ``metric`` must reproduce exactly in a second identical run on one machine."""
    if unit in DETERMINISTIC_UNITS:
        return True
    return unit == "ratio" and (metric in DETERMINISTIC_RATIOS or metric.startswith("cache_to_weight_ratio"))


# Metrics renamed when their name claimed more than they measure: old name → current name.
# Old runs keep the names they were recorded under; pages show them under the current name
# and say so.
RENAMED_METRICS = {
    "predicted_speedup": "writeup_formula_speedup",
    "predicted_relative_error": "writeup_formula_relative_error",
    "predicted_speedup_refined": "component_model_speedup",
    "predicted_refined_relative_error": "component_model_relative_error",
}

# The metric a page opens on for each experiment: one that varies and that a reader asks about
# first (not a closed-form constant such as arithmetic_ratio).
OPENING_METRICS = {
    "kv_cache": ("measured_speedup", "seconds_cache"),
    "overhead": ("overhead_seconds_per_token", "seconds_per_mult"),
    "quantization": ("seconds_per_token", "speedup_vs_fp32"),
    "speculative": ("speedup_median", "acceptance_rate"),
    "bench": ("fast_us_per_token", "seconds_per_token", "benchmark_seconds"),
    "training_summary": ("val_loss", "train_loss"),
    "context_cost": ("total_mults", "quad_mults"),
}


def opening_metric(experiment: str, metrics: list[str]) -> str:
    """The metric a picker of ``experiment``'s ``metrics`` starts on."""
    return next((name for name in OPENING_METRICS.get(experiment, ()) if name in metrics), metrics[0])
