"""speculative: drafts, schedules and impls — acceptance, the distribution check, the speedup."""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration, StepSeconds


def case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float | None:
    """A timed case and its A/A pair: 3 · (pairs + 1) · new_tokens decode steps of k + 1
    positions; the other parts at the flat price."""
    if case.get("part") not in ("speculative", "aa"):
        return None
    return 3 * (case["pairs"] + 1) * case["new_tokens"] * step(model["d_model"], model["n_layer"]) * (1 + case["k"])


DECLARATION = Declaration(
    name="speculative",
    order=50,
    module="runner.experiments.speculative",
    headlines=(
        "speedup_median",
        "acceptance_rate",
        "chars_per_target_pass",
        "target_passes",
        "mean_accepted_length",
        "distribution_check_passes",
        "check_detects_accept_all",
    ),
    opening=("speedup_median", "acceptance_rate"),
    # The compiled fast path, and the draft that proposes through it.
    cpu_only={"impls": ("fast",), "drafts": ("fast_int8",)},
    launch_fields=("ks", "pairs"),
    case_seconds=case_seconds,
)
