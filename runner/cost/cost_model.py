"""What a sweep will cost before it runs: its wall time (a sum of per-case estimates, plus
training) and its peak memory (parameters, optimizer state, a training batch's activations,
caches), and the combined limits the one validator (runner.spec.sweeps.validate) holds every spec
to: at most the machine's available memory, at most the spec's ``max_hours``.

Rough models for refusing the impossible and for asking before a long launch, not
measurements: times assume 2 CPU cores; memory counts float32 tensors and the largest
buffers only (an estimate that is low by a factor of two still refuses a spec that needs
terabytes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runner import declarations
from runner.cost import counts
from runner.cost.cpu_speed import FLOPS_PER_SECOND, STEP_OVERHEAD_SECONDS
from runner.errors import InputError

if TYPE_CHECKING:
    from runner.spec.sweeps import SweepSpec

FLOAT_BYTES = 4
# Parameters, their gradients and AdamW's two moments: four float32 tensors per parameter.
TRAINING_BYTES_PER_PARAMETER = 4 * FLOAT_BYTES
# A character corpus's vocabulary is not known before it is read; this bounds ordinary text.
VOCABULARY_ESTIMATE = 256
SECONDS_PER_YEAR = 365.25 * 24 * 3600
# A case whose experiment's declaration does not price it (runner.declarations: case_seconds).
FLAT_CASE_SECONDS = 0.5


def _step_seconds(d_model: int, n_layer: int, t: int = 1, cache: bool = True) -> float:
    """One decode step over t positions: the overhead plus two flops per multiplication."""
    return STEP_OVERHEAD_SECONDS + 2 * n_layer * counts.block_step_mults(t, d_model, cache) / FLOPS_PER_SECOND


def training_seconds(spec: SweepSpec) -> float:
    return training_seconds_of(spec.raw["model"], spec.raw["train"])


def training_seconds_of(model: dict[str, Any], train: dict[str, Any]) -> float:
    """Training's time from a spec's model and train sections: steps × model size × batch."""
    parameters = model["n_layer"] * counts.projection_mults(1, model["d_model"])  # one mult per linear weight
    return train["steps"] * 6 * parameters * train["batch_size"] * train["sequence_length"] / FLOPS_PER_SECOND


def case_seconds(experiment: str, case: dict[str, Any], model: dict[str, Any]) -> float:
    """One case's wall time: its experiment's declaration prices it in decode steps
    (``_step_seconds``), else the flat price."""
    declaration = declarations.find(experiment)
    priced = None
    if declaration is not None and declaration.case_seconds is not None:
        priced = declaration.case_seconds(case, model, _step_seconds)
    return FLAT_CASE_SECONDS if priced is None else priced


def estimate_seconds(spec: SweepSpec, model_stored: bool = False) -> float:
    """A character model's sweep's wall time: training (unless its model is stored) plus every
    case's (a local Hugging Face checkpoint's: runner.spec.hf.estimate, which
    runner.spec.calibrated_estimate.estimate takes for one)."""
    model = spec.raw["model"]
    total = 0.0 if model_stored else training_seconds(spec)
    return total + sum(case_seconds(experiment.name, case, model) for experiment, case in spec.plan())


def parameter_count(model: dict[str, Any], vocabulary: int = VOCABULARY_ESTIMATE) -> int:
    """The model's parameters (runner.model.gpt.CharGPT): token and position embeddings, each
    block's linear layers and norms, the final norm; the head shares the token embedding."""
    d, layers, context = model["d_model"], model["n_layer"], model["context_length"]
    block = counts.projection_mults(1, d) + 13 * d  # weights, biases (9d) and two norms (4d)
    return vocabulary * d + context * d + layers * block + 2 * d


def peak_memory_bytes(spec: SweepSpec) -> int:
    """Training's peak (parameters with gradients and optimizer state, a batch's activations
    kept for the backward pass, its logits) plus the caches the experiments fill (a full
    context's keys and values, one full attention matrix)."""
    model, train = spec.raw["model"], spec.raw["train"]
    d, layers, heads, context = model["d_model"], model["n_layer"], model["n_head"], model["context_length"]
    batch, length = train["batch_size"], train["sequence_length"]
    weights = parameter_count(model) * TRAINING_BYTES_PER_PARAMETER
    # Per position and layer: about 16·d values (norms, q/k/v, projections, the 4·d MLP twice)
    # and, per head, a row of attention scores and of their softmax.
    per_position = layers * (16 * d + 2 * heads * length) + 3 * VOCABULARY_ESTIMATE + 2 * d
    activations = batch * length * per_position * FLOAT_BYTES
    caches = (2 * layers * context * d + heads * context * context) * FLOAT_BYTES
    return weights + activations + caches


def available_memory_bytes() -> int:
    """The memory this machine can give a new process now (MemAvailable), else its total."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    from runner.measure.machine import memory_bytes

    return memory_bytes()


def readable_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024 or unit == "PiB":
            return f"{count:,.1f} {unit}" if unit != "B" else f"{count:,.0f} B"
        count /= 1024
    raise AssertionError("unreachable")


def readable_hours(seconds: float) -> str:
    hours = seconds / 3600
    if seconds >= SECONDS_PER_YEAR:
        return f"{hours:,.0f} hours (~{seconds / SECONDS_PER_YEAR:,.0f} years)"
    return f"{hours:,.2f} hours"


def check_limits(spec: SweepSpec, available_bytes: int | None = None) -> None:
    """Refuse, in one line naming the estimate, a spec whose peak memory exceeds the machine's
    available memory or whose estimated wall time exceeds its ``max_hours``."""
    available = available_memory_bytes() if available_bytes is None else available_bytes
    peak = peak_memory_bytes(spec)
    if available > 0 and peak > available:
        raise InputError(
            f"spec: estimated peak memory {readable_bytes(peak)} (parameters {parameter_count(spec.raw['model']):,} "
            f"with optimizer state, a batch of {spec.raw['train']['batch_size']}×"
            f"{spec.raw['train']['sequence_length']} positions, caches) is above this machine's available memory "
            f"{readable_bytes(available)} (allowed: at most the available memory; lower train.batch_size, "
            "train.sequence_length or the model)"
        )
    seconds = estimate_seconds(spec)
    max_hours = float(spec.raw["max_hours"])
    if seconds > max_hours * 3600:
        raise InputError(
            f"max_hours: estimated wall time {readable_hours(seconds)} for {spec.cases_total()} cases and "
            f"training is above max_hours {max_hours:g} (allowed: an estimate of at most max_hours; raise "
            "max_hours up to 8760 or shrink the sweep)"
        )
