"""overhead: the per-step fit seconds = a + b · multiplications, per impl."""

from __future__ import annotations

from runner.declarations import Declaration

DECLARATION = Declaration(
    name="overhead",
    order=30,
    module="runner.experiments.overhead",
    # Before the experiments whose roofline placements add its fitted per-pass overhead (a
    # kv_cache case placed before it would take the machine's stored overhead, or none on a
    # first run, and miss the measured time by ×10).
    run_first=True,
    headlines=("seconds_per_token",),
    opening=("overhead_seconds_per_token", "seconds_per_mult"),
    cpu_only={"impls": ("fast",)},  # the compiled fast path
)
