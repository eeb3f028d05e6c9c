"""What the cache costs in memory: the KV-cache experiment's byte counts (docs/experiments.md,
KV cache: memory). cache elements = 2 (K, V) × layers × kv heads × tokens × head_dim; the
dtype is only the last factor of the bytes."""

from __future__ import annotations

from typing import Any

import torch

from runner.cost import counts
from runner.experiments.base import ExperimentContext
from runner.experiments.kv_cache import CACHE_DTYPES, WRITEUP_SHAPE
from runner.experiments.parts.kv_exactness import measure
from runner.model.gpt import CharGPT, KVCache, ModelConfig
from store.records import MeasurementRecord

TORCH_DTYPES = {name: getattr(torch, name) for name in CACHE_DTYPES}  # "float32" → torch.float32

# The write-ups' own model, worked out from what they state: d_model 128, 3 blocks and 637,156
# parameters (2.43 MB of float32). GPT-2's blocks at that shape hold 3 × (12·d² + 13·d) plus
# 2·d for the final norm = 595,072, leaving 42,084 for the embeddings and the lm head. With
# GPT-2's tied head and no bias that is 128·(V + ctx): no integer solution. An untied head with
# a bias makes it 128·ctx + 257·V, whose one solution is a 128-position table and 100
# characters (a tied head with a bias fits only with 228 positions). The timing table's lm head
# of about 100 characters agrees. Four heads, as in the write-ups.
WRITEUP_MODEL = ModelConfig(**WRITEUP_SHAPE, tie_lm_head=False, lm_head_bias=True)


def _divisors(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def _cache_measurements(config: ModelConfig, n: int, dtype: str, weight_bytes: int) -> list[MeasurementRecord]:
    """Elements and bytes of a cache of n tokens, for every kv-head count that divides the heads
    (fewer kv heads, as GQA and MQA keep, divide it)."""
    bytes_per_element = torch.empty((), dtype=TORCH_DTYPES[dtype]).element_size()
    measurements = []
    for kv_heads in _divisors(config.n_head):
        suffix = "" if kv_heads == config.n_head else f"_kv_heads_{kv_heads}"
        elements = counts.cache_elements(config.n_layer, kv_heads, n, config.head_dim)
        measurements += [
            measure(f"cache_elements{suffix}", elements, "elements"),
            measure(f"cache_bytes{suffix}", elements * bytes_per_element, "bytes"),
            measure(f"cache_to_weight_ratio{suffix}", elements * bytes_per_element / weight_bytes, "ratio"),
        ]
    return measurements


def memory(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The run model's cache at n tokens in the case's dtype, against its float32 weights; where
    n fits the context, also the bytes a real cache of that dtype allocates."""
    model, n, dtype = context.model, case["n"], case.get("dtype", "float32")
    weight_bytes = model.weight_bytes()
    measurements = [measure("weight_bytes", weight_bytes, "bytes")]
    if n <= model.config.context_length:
        cache = KVCache(model.config, capacity=n, dtype=TORCH_DTYPES[dtype])
        cache.length = n
        measurements.append(measure("cache_bytes_allocated", cache.cache_bytes(), "bytes"))
    return measurements + _cache_measurements(model.config, n, dtype, weight_bytes)


def writeup_model(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The write-ups' model (WRITEUP_MODEL), built untrained: counting parameters and bytes
    needs no training."""
    model = CharGPT(WRITEUP_MODEL)
    weight_bytes = model.weight_bytes()
    return [
        measure("parameter_count", model.parameter_count(), "parameters"),
        measure("weight_bytes", weight_bytes, "bytes"),
        *_cache_measurements(WRITEUP_MODEL, case["n"], case["dtype"], weight_bytes),
    ]
