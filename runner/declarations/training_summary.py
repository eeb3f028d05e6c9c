"""training_summary: the trained model's losses, size and plain decoding speed."""

from __future__ import annotations

from runner.declarations import Declaration

DECLARATION = Declaration(
    name="training_summary",
    order=10,
    module="runner.experiments.training_summary",
    run_first=True,  # every other experiment's figures are read beside the model it describes
    headlines=("seconds_per_token", "val_loss", "parameter_count"),
    opening=("val_loss", "train_loss"),
)
