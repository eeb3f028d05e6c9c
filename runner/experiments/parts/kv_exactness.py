"""Is the cache exact? The KV-cache experiment's parts that compare texts and logits
(docs/experiments.md, KV cache): every impl's cache against the no-cache reference, the same
without the causal mask (what makes the cache valid), and a deliberately rounded cache."""

from __future__ import annotations

from typing import Any

from runner.decoding.decode import Generation, first_difference, generate
from runner.experiments.base import ExperimentContext
from store.records import MeasurementRecord


def measure(metric: str, value: float, unit: str) -> MeasurementRecord:
    return MeasurementRecord(metric, float(value), unit)


def comparable_difference(first: Generation, second: Generation) -> tuple[float, int]:
    """Largest |logit difference| over the steps both runs took on the same text, and the
    first position where the texts differ (their length if they never do). The logits at the
    diverging step are still comparable: they were computed from identical prefixes."""
    assert first.logits is not None and second.logits is not None
    divergence = first_difference(first.tokens, second.tokens)
    compared = min(divergence + 1, len(first.tokens))
    return (first.logits[:compared] - second.logits[:compared]).abs().max().item(), divergence


def last_compared_difference(first: Generation, second: Generation) -> float:
    """|logit difference| at the last step both took on the same text (the write-ups compared
    the last step's logits)."""
    assert first.logits is not None and second.logits is not None
    step = min(first_difference(first.tokens, second.tokens), len(first.tokens) - 1)
    return (first.logits[step] - second.logits[step]).abs().max().item()


def closest_top2_margin(generation: Generation) -> tuple[float, int]:
    """The smallest gap between the top two logits over the steps of a greedy generation, and
    its step: how near a float rounding came to flipping the choice."""
    assert generation.logits is not None
    top2 = generation.logits.topk(2, dim=-1).values
    margins = top2[:, 0] - top2[:, 1]
    step = int(margins.argmin())
    return float(margins[step]), step


def equivalence(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    model, prompt, n, impl = context.model, context.prompt(), case["n"], case["impl"]
    reference_sampled = generate(
        model, prompt, n, use_cache=False, temperature=1.0, seed=context.seed, keep_logits=True
    )
    cached_sampled = generate(model, prompt, n, temperature=1.0, seed=context.seed, keep_logits=True, impl=impl)
    # Keeping logits steps the fast impl from Python; the loop that is timed (sampling in C++)
    # must choose the same tokens too, so its own sampled text is compared as well.
    timed_sampled = generate(model, prompt, n, temperature=1.0, seed=context.seed, impl=impl)
    reference_greedy = generate(model, prompt, n, use_cache=False, temperature=0.0, keep_logits=True)
    cached_greedy = generate(model, prompt, n, temperature=0.0, impl=impl)
    difference, _ = comparable_difference(reference_sampled, cached_sampled)
    margin, margin_step = closest_top2_margin(reference_greedy)
    return [
        measure(
            "strings_identical",
            reference_sampled.tokens == cached_sampled.tokens == timed_sampled.tokens,
            "bool",
        ),
        measure("greedy_identical", reference_greedy.tokens == cached_greedy.tokens, "bool"),
        measure("max_logit_diff", difference, "logit"),
        measure("last_logit_diff", last_compared_difference(reference_sampled, cached_sampled), "logit"),
        measure("top2_margin", margin, "logit"),
        measure("top2_margin_step", margin_step, "tokens"),
        measure("within_tolerance", difference <= case["tolerance"], "bool"),
    ]


def no_mask(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The no-cache path without its causal mask against the cache: earlier positions now see
    later ones, so reusing their K and V is no longer exact and the outputs part."""
    model, prompt, n = context.model, context.prompt(), case["n"]
    unmasked = generate(
        model, prompt, n, use_cache=False, temperature=1.0, seed=context.seed, keep_logits=True, causal_mask=False
    )
    cached = generate(model, prompt, n, temperature=1.0, seed=context.seed, keep_logits=True)
    unmasked_greedy = generate(model, prompt, n, use_cache=False, temperature=0.0, causal_mask=False)
    cached_greedy = generate(model, prompt, n, temperature=0.0)
    difference, divergence = comparable_difference(unmasked, cached)
    return [
        measure("strings_identical", unmasked.tokens == cached.tokens, "bool"),
        measure("greedy_identical", unmasked_greedy.tokens == cached_greedy.tokens, "bool"),
        measure("max_logit_diff", difference, "logit"),
        measure("exceeds_tolerance", difference > case["tolerance"], "bool"),
        measure("divergence_position_sampled", divergence, "tokens"),
    ]


def rounded_cache(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    model, prompt, n, rounding = context.model, context.prompt(), case["n"], case["rounding"]
    exact = generate(model, prompt, n, use_cache=False, temperature=1.0, seed=context.seed, keep_logits=True)
    rounded = generate(model, prompt, n, temperature=1.0, seed=context.seed, keep_logits=True, cache_rounding=rounding)
    exact_greedy = generate(model, prompt, n, use_cache=False, temperature=0.0)
    rounded_greedy = generate(model, prompt, n, temperature=0.0, cache_rounding=rounding)
    difference, divergence = comparable_difference(exact, rounded)
    return [
        measure("max_logit_diff", difference, "logit"),
        measure("exceeds_tolerance", difference > case["tolerance"], "bool"),
        measure("strings_identical", exact.tokens == rounded.tokens, "bool"),
        measure("greedy_identical", exact_greedy.tokens == rounded_greedy.tokens, "bool"),
        measure("divergence_position_sampled", divergence, "tokens"),
    ]
