"""What kind of number a metric is: a lookup in the metric catalogue (runner/metrics.py), kept
under this name for the pages that ask here."""

from __future__ import annotations

from runner.metrics import is_deterministic, kind_of, lookup

__all__ = ["is_deterministic", "kind_of", "lookup"]

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
