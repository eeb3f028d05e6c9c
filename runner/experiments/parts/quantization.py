"""The quantization experiment's parts (runner.experiments.quantization): one (precision,
kernel) variant against float32, and the A/A case of float32 against itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runner.cost.roofline_model import Shape
from runner.decoding.decode import first_difference, generate
from runner.experiments.base import ExperimentContext, aa_measurements, placements_between_pairs
from runner.experiments.parts import roofline_placement as roofline
from runner.experiments.quantization import NO_IMPL_NAMED
from runner.model.gpt import CharGPT
from runner.model.quantize import quantize_model, weight_bytes
from runner.model.train import evaluate_loss
from store.records import MeasurementRecord


def aa(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    reference, prompt, tokens, impl = context.model, context.prompt(), case["timing_tokens"], case["impl"]
    return aa_measurements(
        context.harness,
        lambda: generate(reference, prompt, tokens, temperature=0.0, impl=impl),
        case["pairs"],
        impl,
        reference,
        steady=True,
    )


def variant(case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
    reference = context.model
    if case["precision"] == "fp32":
        model: CharGPT = reference
    else:
        model = quantize_model(
            reference,
            case["precision"],
            group_size=case["group_size"] or 32,
            kernel=case["kernel"],
            embeddings=case["embeddings_quantized"],
        )
    impl = case.get("impl", NO_IMPL_NAMED)
    _, validation = context.corpus.split()
    # An hf model was not trained here: its losses use the record's evaluation windows.
    recipe = context.model_record.config
    length = (recipe.get("train") or recipe["evaluation"])["sequence_length"]
    through: Callable[[CharGPT, torch.Tensor], torch.Tensor] | None = None
    if impl == "fast":
        from runner.decoding.fast import logits_through_fast_path

        through = logits_through_fast_path
    reference_loss = evaluate_loss(reference, validation, length, through)
    loss = evaluate_loss(model, validation, length, through)
    prompt = context.prompt()
    n = case["divergence_tokens"]
    greedy = [generate(m, prompt, n, temperature=0.0, impl=impl).tokens for m in (reference, model)]
    sampled = [generate(m, prompt, n, temperature=1.0, seed=context.seed, impl=impl).tokens for m in (reference, model)]
    timing_tokens = case["timing_tokens"]
    with placements_between_pairs(impl, reference, model) as between:
        paired = context.harness.paired(
            lambda: generate(reference, prompt, timing_tokens, temperature=0.0, impl=impl),
            lambda: generate(model, prompt, timing_tokens, temperature=0.0, impl=impl),
            pairs=case["pairs"],
            between=between,
            steady=True,  # greedy decodes: no state between calls
        )
    reference_bytes, quantized_bytes = weight_bytes(reference), weight_bytes(model)
    return (
        MeasurementRecord("weight_bytes", quantized_bytes, "bytes"),
        MeasurementRecord("weight_bytes_fp32", reference_bytes, "bytes"),
        MeasurementRecord("bytes_ratio_vs_fp32", quantized_bytes / reference_bytes, "ratio"),
        MeasurementRecord("val_loss", loss, "nats"),
        MeasurementRecord("loss_increase", loss - reference_loss, "nats"),
        MeasurementRecord("divergence_position_greedy", first_difference(*greedy), "tokens"),
        MeasurementRecord("divergence_position_sampled", first_difference(*sampled), "tokens"),
        MeasurementRecord("seconds_per_token", min(paired.candidate_seconds) / timing_tokens, "seconds"),
        MeasurementRecord("seconds_per_token_fp32", min(paired.baseline_seconds) / timing_tokens, "seconds"),
        *paired.measurements("speedup_vs_fp32"),
        *roofline.timed_generation(
            context,
            Shape.of(model.config),
            impl,
            roofline.PRECISION_OF_KERNEL.get(case["kernel"]),
            len(prompt),
            timing_tokens,
            {"": (True, min(paired.candidate_seconds) / timing_tokens)},
        ),
    )
