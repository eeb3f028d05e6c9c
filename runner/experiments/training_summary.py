"""The model the run used: its size, its losses, and the time of one cached decode.

The smallest experiment that goes through the whole path (spec → model → harness → store), and
the shape of one in a single module: its declaration, its fields, its plan and its one part,
which imports the decoding (and so torch) when it runs, not when the module is read.
"""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration
from runner.experiments.base import WHOLE, ExperimentContext, Part, PartsExperiment
from runner.fields import Field
from store.records import MeasurementRecord

DECLARATION = Declaration(
    name="training_summary",
    order=10,
    module=__name__,
    run_first=True,  # every other experiment's figures are read beside the model it describes
    headlines=("seconds_per_token", "val_loss", "parameter_count"),
    opening=("val_loss", "train_loss"),
)

FIELDS = {
    "new_tokens": Field("int", 64, 1, "context_length", help="tokens generated for the timing"),
    "repeats": Field("int", 3, 1, 50),
}


def summary(case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
    from runner.decoding.decode import generate  # here: the module is read without torch

    record = context.model_record
    prompt = context.prompt()
    new_tokens = min(case["new_tokens"], context.model.config.context_length - len(prompt))
    timing = context.harness.min_of(
        lambda: generate(context.model, prompt, new_tokens, temperature=0.0), repeats=case["repeats"], steady=True
    )
    return (
        MeasurementRecord("parameter_count", record.parameter_count, "parameters"),
        MeasurementRecord("weight_bytes", record.weight_bytes, "bytes"),
        MeasurementRecord("train_loss", record.train_loss, "nats"),
        MeasurementRecord("val_loss", record.val_loss, "nats"),
        MeasurementRecord("unigram_entropy", context.corpus.unigram_entropy_nats(), "nats"),
        timing.measurement("seconds_per_token", scale=1.0 / new_tokens),
    )


PARTS: dict[str, Part] = {WHOLE: summary}


class TrainingSummary(PartsExperiment):
    name = "training_summary"
    parts = PARTS
    title = "Training summary"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"new_tokens": params["new_tokens"], "repeats": params["repeats"]}]


EXPERIMENT = TrainingSummary()
