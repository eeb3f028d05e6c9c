"""The model the run used: its size, its losses, and the time of one cached decode.

The smallest experiment that goes through the whole path (spec → model → harness → store).
"""

from __future__ import annotations

from typing import Any

from runner.decoding.decode import generate
from runner.experiments.base import WHOLE, ExperimentContext, Part, PartsExperiment
from runner.fields import Field
from store.records import MeasurementRecord

FIELDS = {
    "new_tokens": Field("int", 64, 1, "context_length", help="tokens generated for the timing"),
    "repeats": Field("int", 3, 1, 50),
}


def summary(case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
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
