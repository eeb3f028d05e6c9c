"""quantization: int8, int4 and bf16 weights against float32 — loss, bytes, divergence, speed."""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration, StepSeconds


def case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float:
    """The tokens its timed pairs and divergence runs generate, three decode steps each (a rough
    model)."""
    tokens = 2 * (case["pairs"] + 1) * case["timing_tokens"] + 4 * case["divergence_tokens"]
    return 3 * tokens * step(model["d_model"], model["n_layer"])


DECLARATION = Declaration(
    name="quantization",
    order=40,
    module="runner.experiments.quantization",
    headlines=(
        "speedup_vs_fp32",
        "loss_increase",
        "weight_bytes",
        "divergence_position_greedy",
        "divergence_position_sampled",
    ),
    opening=("seconds_per_token", "speedup_vs_fp32"),
    # The compiled fast path's kernels and PyTorch's dynamic int8 kernel.
    cpu_only={"kernels": ("dynamic_int8", "fast_int8", "fast_bf16")},
    launch_fields=("pairs",),
    case_seconds=case_seconds,
)
