"""The rough speed of 2 CPU cores that every cost estimate before a launch assumes (the sweep's
limits in runner.cost.cost_model, a Hugging Face checkpoint's price in runner.spec.hf): one rough
model, not a measurement, kept apart so that neither imports the other for it."""

from __future__ import annotations

# Seconds per decode step (dispatch overhead), and arithmetic throughput.
STEP_OVERHEAD_SECONDS = 6e-4
FLOPS_PER_SECOND = 1.5e10
