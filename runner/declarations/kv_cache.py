"""kv_cache: cache against no cache — exactness, counted arithmetic, timing, memory."""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration, StepSeconds


def case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float | None:
    """A timed case: pairs + 1 rounds of n uncached steps of growing length and n cached ones;
    the other parts at the flat price."""
    if case.get("part") not in ("timing", "width"):
        return None
    n, width, layers = case["n"], case["d_model"], model["n_layer"]
    uncached = sum(step(width, layers, t, cache=False) for t in range(1, n + 1))
    return (case["pairs"] + 1) * (uncached + n * step(width, layers, n))


DECLARATION = Declaration(
    name="kv_cache",
    order=20,
    module="runner.experiments.kv_cache",
    headlines=(
        "measured_speedup",
        "speedup_vs_eager_no_cache",
        "strings_identical",
        "greedy_identical",
        "max_logit_diff",
        "counter_matches_closed_form",
        "arithmetic_ratio",
        "arithmetic_ratio_causal",
        "kv_computations_no_cache",
        "cache_bytes",
    ),
    opening=("measured_speedup", "seconds_cache"),
    cpu_only={"impls": ("fast",)},  # the compiled fast path
    launch_fields=("lengths", "pairs"),
    case_seconds=case_seconds,
)
