"""What the cache promises in arithmetic: the KV-cache experiment's counted parts
(docs/experiments.md, KV cache). A pure-Python path counts every multiplication and every K/V
computation; the closed forms of runner.cost.counts must equal the counter, then give the counts
at the model's real shape."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from runner.cost import counts as exact_counts
from runner.experiments.base import ExperimentContext
from runner.experiments.kv_cache import RECOMPUTATION_WIDTH
from runner.experiments.parts.kv_exactness import measure
from store.records import MeasurementRecord


@dataclass(frozen=True)
class CountedGeneration:
    without: exact_counts.Counter  # no cache, the dense score matrix
    causal: exact_counts.Counter  # no cache, the visible pairs only
    with_cache: exact_counts.Counter
    largest_output_difference: float  # among the three paths' outputs: they compute the same


def counted_generation(d: int, heads: int, layers: int, n: int, seed: int) -> CountedGeneration:
    """n generation steps through the counting path, three ways."""
    blocks = [exact_counts.BlockWeights.random(d, heads, seed=seed + layer) for layer in range(layers)]
    generator = random.Random(seed)
    inputs = [[generator.gauss(0.0, 1.0) for _ in range(d)] for _ in range(n)]
    without, causal, with_cache = exact_counts.Counter(), exact_counts.Counter(), exact_counts.Counter()
    caches = [([], []) for _ in blocks]  # type: list[tuple[exact_counts.Matrix, exact_counts.Matrix]]
    largest = 0.0
    for t in range(1, n + 1):
        hidden, hidden_causal = inputs[:t], inputs[:t]
        for block in blocks:
            hidden = exact_counts.block_step_no_cache(hidden, block, without)
            hidden_causal = exact_counts.block_step_no_cache(hidden_causal, block, causal, causal=True)
        new = inputs[t - 1]
        for block, cache in zip(blocks, caches, strict=True):
            new = exact_counts.block_step_cache(new, cache, block, with_cache)
        for output in (new, hidden_causal[-1]):
            largest = max(largest, max(abs(a - b) for a, b in zip(hidden[-1], output, strict=True)))
    return CountedGeneration(without, causal, with_cache, largest)


def counter_check(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    d, heads, layers, n = case["d_model"], case["n_head"], case["n_layer"], case["n"]
    counted = counted_generation(d, heads, layers, n, context.seed)
    without, causal, with_cache = counted.without, counted.causal, counted.with_cache
    closed_without = exact_counts.generation_mults(n, d, layers, cache=False)
    closed_causal = exact_counts.generation_mults(n, d, layers, cache=False, causal=True)
    closed_with = exact_counts.generation_mults(n, d, layers, cache=True)
    head = exact_counts.HeadWeights.random(d, seed=context.seed)
    generator = random.Random(context.seed)
    head_counter = exact_counts.Counter()
    inputs = [[generator.gauss(0.0, 1.0) for _ in range(d)] for _ in range(n)]
    exact_counts.head_token_no_cache(inputs, head, head_counter)
    return [
        measure("counted_mults_no_cache", without.mults, "multiplications"),
        measure("counted_mults_cache", with_cache.mults, "multiplications"),
        measure("closed_form_mults_no_cache", closed_without, "multiplications"),
        measure("closed_form_mults_cache", closed_with, "multiplications"),
        measure("counted_mults_no_cache_causal", causal.mults, "multiplications"),
        measure("closed_form_mults_no_cache_causal", closed_causal, "multiplications"),
        measure(
            "counter_matches_closed_form",
            without.mults == closed_without and with_cache.mults == closed_with and causal.mults == closed_causal,
            "bool",
        ),
        measure("head_counted_mults_no_cache", head_counter.mults, "multiplications"),
        measure("head_closed_form_mults_no_cache", exact_counts.head_mults(n, d, cache=False), "multiplications"),
        measure("reference_max_output_diff", counted.largest_output_difference, "value"),
    ]


def recomputation(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """How many times K and V are computed over n generated tokens, counted by the counting
    path at the model's depth, per layer and in total, against the closed form."""
    layers, n = case["n_layer"], case["n"]
    counted = counted_generation(RECOMPUTATION_WIDTH, 2, layers, n, context.seed)
    without, with_cache = counted.without, counted.with_cache
    matches = without.kv_computations == exact_counts.kv_computations(n, layers, cache=False) and (
        with_cache.kv_computations == exact_counts.kv_computations(n, layers, cache=True)
    )
    return [
        measure("kv_computations_no_cache", without.kv_computations, "computations"),
        measure("kv_computations_cache", with_cache.kv_computations, "computations"),
        measure("kv_computations_no_cache_per_layer", without.kv_computations // layers, "computations"),
        measure("kv_computations_cache_per_layer", with_cache.kv_computations // layers, "computations"),
        measure("counter_matches_closed_form", matches, "bool"),
    ]


def counts(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    n, d, layers = case["n"], case["d_model"], case["n_layer"]
    measurements = [
        measure("mults_no_cache", exact_counts.generation_mults(n, d, layers, cache=False), "multiplications"),
        measure("mults_cache", exact_counts.generation_mults(n, d, layers, cache=True), "multiplications"),
        measure("arithmetic_ratio", exact_counts.arithmetic_ratio(n, d, layers), "ratio"),
        measure(
            "mults_no_cache_causal",
            exact_counts.generation_mults(n, d, layers, cache=False, causal=True),
            "multiplications",
        ),
        measure("arithmetic_ratio_causal", exact_counts.arithmetic_ratio(n, d, layers, causal=True), "ratio"),
        measure(
            "arithmetic_ratio_with_lm_head",
            exact_counts.arithmetic_ratio(n, d, layers, vocab_size=context.model.config.vocab_size),
            "ratio",
        ),
        measure("head_mults_per_token_no_cache", exact_counts.head_mults(n, d, cache=False), "multiplications"),
        measure("head_mults_per_token_cache", exact_counts.head_mults(n, d, cache=True), "multiplications"),
    ]
    if case.get("writeup_vocab_size"):
        # The write-ups' timing table counts the blocks and their model's 100-character lm head.
        measurements.append(
            measure(
                "arithmetic_ratio_writeup_model",
                exact_counts.arithmetic_ratio(n, d, layers, vocab_size=case["writeup_vocab_size"]),
                "ratio",
            )
        )
    return measurements
