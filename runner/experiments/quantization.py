"""Weight quantization (docs/experiments.md): exact bytes, held-out loss, where generation
diverges from float32, and what it does to time per token.

One case per (precision, kernel); float32 is the baseline case every other one is compared
with. Time is paired against float32 in the same case, so drift cancels in the ratio. The fast
path's own kernels (fast_int8, fast_bf16) are measured through that path (case param ``impl``):
loss from its logits, divergence and time against float32 through the same fast path. One A/A
case (part ``aa``) per impl times float32 against itself: the floor of the speedups.
"""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration, StepSeconds
from runner.errors import InputError
from runner.experiments.base import AA_PART, WHOLE, Part, PartAt, PartsExperiment
from runner.fields import Field
from runner.model.choices import KERNEL_PRECISIONS


def case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float:
    """The tokens its timed pairs and divergence runs generate, three decode steps each (a rough
    model)."""
    tokens = 2 * (case["pairs"] + 1) * case["timing_tokens"] + 4 * case["divergence_tokens"]
    return 3 * tokens * step(model["d_model"], model["n_layer"])


DECLARATION = Declaration(
    name="quantization",
    order=40,
    module=__name__,
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
    pages=(("quantization", "Quantization"),),
    placed_on_roof=True,
)

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

# Measured in runner/experiments/parts/quantization.py, imported when a case first runs.
PARTS: dict[str, Part] = {
    WHOLE: PartAt("runner.experiments.parts.quantization", "variant"),
    AA_PART: PartAt("runner.experiments.parts.quantization", "aa"),
}


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
