"""Weight quantization (docs/experiments.md): exact bytes, held-out loss, where generation
diverges from float32, and what it does to time per token.

One case per (precision, kernel); float32 is the baseline case every other one is compared
with. Time is paired against float32 in the same case, so drift cancels in the ratio. The fast
path's own kernels (fast_int8, fast_bf16) are measured through that path (case param ``impl``):
loss from its logits, divergence and time against float32 through the same fast path. One A/A
case (part ``aa``) per impl times float32 against itself: the floor of the speedups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runner.cost.roofline_model import Shape
from runner.decoding.decode import first_difference, generate
from runner.errors import InputError
from runner.experiments import roofline_placement as roofline
from runner.experiments.base import AA_PART, WHOLE, ExperimentContext, Part, PartsExperiment, aa_measurements
from runner.fields import Field
from runner.model.gpt import CharGPT
from runner.model.quantize import KERNEL_PRECISIONS, quantize_model, weight_bytes
from runner.model.train import evaluate_loss
from store.records import MeasurementRecord

# A variant case names its impl only where its kernel needs one (the fast_* kernels): every
# other runs the static impl, today as in old runs (so its case key stays as recorded).
NO_IMPL_NAMED = "static"

FIELDS = {
    "precisions": Field("str_list", ["int8", "int4"], choices=("int8", "int4", "bf16")),
    "kernels": Field("str_list", ["fake", "dynamic_int8"], choices=tuple(KERNEL_PRECISIONS)),
    "group_size": Field("int", 32, 2, 2048, help="4-bit values per scale; must divide d_model"),
    "quantize_embeddings": Field("bool", True, help="also quantize token/position embeddings (fake kernel)"),
    "divergence_tokens": Field("int", 200, 1, "context_length"),
    "timing_tokens": Field("int", 128, 1, "context_length"),
    "pairs": Field("int", 5, 3, 50),
}


def aa(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    reference, prompt, tokens, impl = context.model, context.prompt(), case["timing_tokens"], case["impl"]
    return aa_measurements(
        context.harness,
        lambda: generate(reference, prompt, tokens, temperature=0.0, impl=impl),
        case["pairs"],
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
    paired = context.harness.paired(
        lambda: generate(reference, prompt, timing_tokens, temperature=0.0, impl=impl),
        lambda: generate(model, prompt, timing_tokens, temperature=0.0, impl=impl),
        pairs=case["pairs"],
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


PARTS: dict[str, Part] = {WHOLE: variant, AA_PART: aa}


class QuantizationExperiment(PartsExperiment):
    name = "quantization"
    parts = PARTS
    title = "Quantization"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        if model["d_model"] % params["group_size"]:
            raise InputError(
                f"experiments.quantization.group_size: {params['group_size']} does not divide d_model "
                f"{model['d_model']} (allowed: a divisor of d_model)"
            )
        shared = {
            "d_model": model["d_model"],
            "n_layer": model["n_layer"],
            "divergence_tokens": params["divergence_tokens"],
            "timing_tokens": params["timing_tokens"],
            "pairs": params["pairs"],
        }
        cases = [
            {"precision": "fp32", "kernel": "float32", "group_size": None, "embeddings_quantized": False, **shared}
        ]
        for precision in params["precisions"]:
            for kernel in params["kernels"]:
                if precision not in KERNEL_PRECISIONS[kernel]:
                    continue  # e.g. PyTorch's dynamic kernel is int8 only
                embeddings = params["quantize_embeddings"] and kernel == "fake"
                group = params["group_size"] if precision == "int4" else None
                case: dict[str, Any] = {
                    "precision": precision,
                    "kernel": kernel,
                    "group_size": group,
                    "embeddings_quantized": embeddings,
                }
                if kernel.startswith("fast_"):
                    case["impl"] = "fast"
                cases.append({**case, **shared})
        # The A/A case per impl timed here: float32 against itself, the floor of the speedups.
        impls = sorted({case.get("impl", NO_IMPL_NAMED) for case in cases})
        cases += [{"part": AA_PART, "precision": "fp32", "kernel": "float32", "impl": impl, **shared} for impl in impls]
        return cases


EXPERIMENT = QuantizationExperiment()
