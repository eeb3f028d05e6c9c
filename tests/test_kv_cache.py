"""KV cache: exact equivalence, counter = closed form, a lossy cache is caught, and the
experiment's cases recorded through the store."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.cost import counts
from runner.decoding.decode import generate
from runner.errors import Unmeasured
from runner.experiments.base import ExperimentContext
from runner.experiments.kv_cache import EQUIVALENCE_TOLERANCE
from runner.experiments.parts.kv_exactness import comparable_difference
from runner.experiments.parts.kv_timing import PREFILL_EXTRA_ROUNDS, prefill
from runner.measure.fitting import fit_power_law
from runner.model.gpt import CharGPT, ModelConfig
from store import frames


@pytest.fixture(scope="module")
def tiny_model() -> CharGPT:
    torch.manual_seed(0)
    # Larger-than-default init so the logits are far from uniform, as in a trained model.
    model = CharGPT(ModelConfig(vocab_size=13, d_model=32, n_layer=2, n_head=4, context_length=64))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(4.0)
    return model.eval()


def test_cached_and_uncached_generation_are_equivalent(tiny_model: CharGPT) -> None:
    sampled = [
        generate(tiny_model, [1, 2], 48, use_cache=c, temperature=1.0, seed=3, keep_logits=True) for c in (False, True)
    ]
    assert sampled[0].tokens == sampled[1].tokens
    difference, divergence = comparable_difference(*sampled)
    assert divergence == 48
    assert difference <= EQUIVALENCE_TOLERANCE
    greedy = [generate(tiny_model, [1, 2], 48, use_cache=c, temperature=0.0) for c in (False, True)]
    assert greedy[0].tokens == greedy[1].tokens


def test_a_full_context_generation_uses_every_position(tiny_model: CharGPT) -> None:
    assert len(generate(tiny_model, [1], 64, temperature=0.0).tokens) == 64
    with pytest.raises(ValueError, match="more than the model context"):
        generate(tiny_model, [1], 65)


@pytest.mark.parametrize("layers", [1, 2])
def test_without_the_mask_the_cache_is_no_longer_exact_from_the_second_block_on(layers: int) -> None:
    torch.manual_seed(0)
    model = CharGPT(ModelConfig(vocab_size=13, d_model=32, n_layer=layers, n_head=4, context_length=64)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(4.0)
    unmasked = generate(model, [1, 2], 30, use_cache=False, temperature=0.0, keep_logits=True, causal_mask=False)
    cached = generate(model, [1, 2], 30, temperature=0.0, keep_logits=True)
    difference, _ = comparable_difference(unmasked, cached)
    if layers == 1:
        # One block: the last position sees every position either way, and the earlier K/V come
        # from the embeddings alone; nothing the mask changes reaches the next token.
        assert difference <= EQUIVALENCE_TOLERANCE
    else:
        assert difference > 100 * EQUIVALENCE_TOLERANCE
    with pytest.raises(ValueError, match="mask can be removed only"):
        generate(model, [1], 3, causal_mask=False)


@pytest.mark.parametrize("rounding", ["int8", "bfloat16"])
def test_a_rounded_cache_exceeds_the_equivalence_tolerance(tiny_model: CharGPT, rounding: str) -> None:
    exact = generate(tiny_model, [1, 2], 48, use_cache=False, temperature=1.0, seed=3, keep_logits=True)
    rounded = generate(
        tiny_model, [1, 2], 48, use_cache=True, temperature=1.0, seed=3, keep_logits=True, cache_rounding=rounding
    )
    difference, _ = comparable_difference(exact, rounded)
    assert difference > EQUIVALENCE_TOLERANCE


@settings(max_examples=25, deadline=None)
@given(
    d_heads=st.sampled_from([(4, 1), (4, 2), (6, 3), (8, 2), (8, 4)]),
    layers=st.integers(1, 2),
    n=st.integers(1, 7),
    seed=st.integers(0, 1000),
)
def test_the_counter_equals_the_closed_form(d_heads: tuple[int, int], layers: int, n: int, seed: int) -> None:
    d, heads = d_heads
    blocks = [counts.BlockWeights.random(d, heads, seed + layer) for layer in range(layers)]
    generator = random.Random(seed)
    inputs = [[generator.gauss(0, 1) for _ in range(d)] for _ in range(n)]
    without, causal, with_cache = counts.Counter(), counts.Counter(), counts.Counter()
    caches: list[tuple[counts.Matrix, counts.Matrix]] = [([], []) for _ in blocks]
    for t in range(1, n + 1):
        before, before_causal = without.mults, causal.mults
        hidden, hidden_causal = inputs[:t], inputs[:t]
        for block in blocks:
            hidden = counts.block_step_no_cache(hidden, block, without)
            hidden_causal = counts.block_step_no_cache(hidden_causal, block, causal, causal=True)
        assert without.mults - before == layers * counts.block_step_mults(t, d, cache=False)
        assert causal.mults - before_causal == layers * counts.block_step_mults(t, d, cache=False, causal=True)
        # Skipping the masked pairs changes the count, not the result.
        assert max(abs(a - b) for a, b in zip(hidden[-1], hidden_causal[-1], strict=True)) < 1e-9
        before = with_cache.mults
        new = inputs[t - 1]
        for block, cache in zip(blocks, caches, strict=True):
            new = counts.block_step_cache(new, cache, block, with_cache)
        assert with_cache.mults - before == layers * counts.block_step_mults(t, d, cache=True)
        assert max(abs(a - b) for a, b in zip(hidden[-1], new, strict=True)) < 1e-9
    assert without.mults == counts.generation_mults(n, d, layers, cache=False)
    assert causal.mults == counts.generation_mults(n, d, layers, cache=False, causal=True)
    assert with_cache.mults == counts.generation_mults(n, d, layers, cache=True)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 12), n=st.integers(1, 9), seed=st.integers(0, 1000))
def test_one_head_per_token_counts(d: int, n: int, seed: int) -> None:
    weights = counts.HeadWeights.random(d, seed)
    generator = random.Random(seed)
    inputs = [[generator.gauss(0, 1) for _ in range(d)] for _ in range(n)]
    full = counts.Counter()
    expected = counts.head_token_no_cache(inputs, weights, full)
    assert full.mults == counts.head_mults(n, d, cache=False) == 3 * n * d * d + 2 * n * d
    cache: tuple[counts.Matrix, counts.Matrix] = ([], [])
    for x in inputs[:-1]:
        counts.head_token_cache(x, cache, weights, counts.Counter())
    last = counts.Counter()
    got = counts.head_token_cache(inputs[-1], cache, weights, last)
    assert last.mults == counts.head_mults(n, d, cache=True) == 3 * d * d + 2 * n * d
    assert max(abs(a - b) for a, b in zip(expected, got, strict=True)) < 1e-9


@pytest.mark.parametrize(("cache", "causal"), [(True, False), (False, False), (False, True)])
def test_a_generations_closed_form_is_the_sum_of_its_steps(cache: bool, causal: bool) -> None:
    for n, d, layers, vocab in [(1, 8, 1, 0), (9, 16, 2, 10), (64, 128, 3, 103)]:
        positions = [1 if cache else t for t in range(1, n + 1)]  # pushed through at step t
        steps = sum(
            layers * counts.block_step_mults(t, d, cache, causal) + vocab * d * pushed
            for t, pushed in zip(range(1, n + 1), positions, strict=True)
        )
        assert counts.generation_mults(n, d, layers, cache, vocab, causal) == steps
        if cache:
            assert counts.mean_cached_step_mults(n, d, layers, vocab) == pytest.approx(steps / n)


def test_the_model_shaped_arithmetic_ratio() -> None:
    assert counts.arithmetic_ratio(256, 128, 3) == pytest.approx(134.59, abs=0.005)
    # Counting only the visible score pairs: blocks 3·(12·d²·T(n) + d·n(n+1)(n+2)/3) over the cache's.
    d, n = 128, 256
    causal = 3 * (12 * d * d * n * (n + 1) // 2 + d * n * (n + 1) * (n + 2) // 3)
    assert counts.generation_mults(n, d, 3, cache=False, causal=True) == causal
    assert counts.arithmetic_ratio(n, d, 3, causal=True) == pytest.approx(122.41, abs=0.005)
    lengths = (64, 128, 256, 512, 1024)
    assert [round(counts.arithmetic_ratio(n, 128, 3), 1) for n in lengths] == [32.9, 66.1, 134.6, 277.8, 580.7]
    # The write-ups' table also counts an lm head of about 100 characters.
    with_head = [round(counts.arithmetic_ratio(n, 128, 3, vocab_size=100), 1) for n in lengths]
    assert with_head == [32.9, 66.1, 134.5, 277.5, 579.9]


def test_power_law_fit_recovers_an_exact_power() -> None:
    slope, scale, error = fit_power_law([64, 128, 256, 512], [3e-6 * n**1.8 for n in (64, 128, 256, 512)])
    assert slope == pytest.approx(1.8) and scale == pytest.approx(3e-6) and error < 1e-9


def test_the_experiment_records_through_the_store(filled_store_url: str) -> None:
    from store.store import Store

    store = Store(filled_store_url)
    run_id = int(frames.runs(store)["run_id"].min())
    rows = frames.measurements(store, run_id, "kv_cache")
    rows["part"] = rows["params"].map(lambda params: params["part"])
    metrics = set(rows["metric"])
    for required in (
        "strings_identical",
        "max_logit_diff",
        "mults_no_cache",
        "mults_no_cache_causal",
        "mults_cache",
        "arithmetic_ratio",
        "arithmetic_ratio_causal",
        "seconds_no_cache",
        "seconds_cache",
        "seconds_eager_no_cache",
        "measured_speedup",
        "speedup_vs_eager_no_cache",
        "received_fraction",
        "received_fraction_causal",
        "slope_no_cache",
        "slope_cache",
        "cache_bytes",
        "weight_bytes",
    ):
        assert required in metrics, required
    assert all({"n", "d_model", "n_layer"} <= set(params) for params in rows.loc[rows["part"] != "fit", "params"])

    def value(part: str, metric: str) -> float:
        return float(rows.loc[(rows["part"] == part) & (rows["metric"] == metric), "value"].iloc[0])

    equivalence = rows[rows["part"] == "equivalence"]
    # Every impl's cache against the no-cache reference, sampled and greedy.
    assert {params["impl"] for params in equivalence["params"]} == {"static", "fast"}
    for metric in ("strings_identical", "greedy_identical", "within_tolerance"):
        assert (equivalence.loc[equivalence["metric"] == metric, "value"] == 1.0).all()
    assert len(equivalence[equivalence["metric"] == "max_logit_diff"]) == 2
    timed = rows[rows["part"] == "timing"]
    assert (timed.loc[timed["metric"] == "tokens_identical_no_cache_vs_cache", "value"] == 1.0).all()
    # The same-impl baseline is named in the params; static's cross-impl ratio is its own.
    assert all(params["no_cache_impl"] == params["impl"] for params in timed["params"])
    static = timed[timed["params"].map(lambda params: params["impl"] == "static")]
    assert static.loc[static["metric"] == "measured_speedup", "value"].tolist() == (
        static.loc[static["metric"] == "speedup_vs_eager_no_cache", "value"].tolist()
    )
    assert value("counter_check", "counted_mults_no_cache_causal") == value(
        "counter_check", "closed_form_mults_no_cache_causal"
    )
    assert value("counts", "mults_no_cache_causal") < value("counts", "mults_no_cache")
    assert value("counter_check", "counter_matches_closed_form") == 1.0
    assert value("rounded_cache", "exceeds_tolerance") == 1.0
    memory = rows[rows["part"] == "memory"]
    by_dtype = {
        (params["n"], params["dtype"], metric): value
        for params, metric, value in zip(memory["params"], memory["metric"], memory["value"], strict=True)
    }
    assert by_dtype[(16, "float32", "cache_elements")] == 2 * 1 * 16 * 32  # 2 · layers · n · d
    assert by_dtype[(16, "float32", "cache_bytes")] == 2 * 1 * 16 * 32 * 4
    assert by_dtype[(16, "int8", "cache_bytes")] == 2 * 1 * 16 * 32  # the dtype is only the last factor
    assert by_dtype[(16, "int8", "cache_bytes_allocated")] == by_dtype[(16, "int8", "cache_bytes")]
    # The counting lab's five tokens: K/V computed 1 + 2 + 3 + 4 + 5 times per layer, or 5.
    assert value("recomputation", "kv_computations_no_cache_per_layer") == 15
    assert value("recomputation", "kv_computations_cache_per_layer") == 5
    assert value("recomputation", "counter_matches_closed_form") == 1.0
    # The write-ups' own model, counted from its shape.
    assert value("writeup_model", "parameter_count") == 637_156
    assert value("writeup_model", "weight_bytes") == 637_156 * 4
    assert "arithmetic_ratio_writeup_model" in metrics
    prefill = rows[rows["part"] == "prefill"]
    assert {(params["impl"], params["cache"]) for params in prefill["params"]} == {
        (impl, cache) for impl in ("static", "fast") for cache in (True, False)
    }
    assert (prefill.loc[prefill["metric"] == "prefill_seconds", "value"] > 0).all()
    assert {"no_mask", "equivalence"} <= set(rows["part"])
    assert value("memory", "cache_bytes_allocated") == value("memory", "cache_bytes")
    timing = rows[(rows["part"] == "timing") & (rows["metric"] == "received_fraction")]
    assert len(timing) == 4 and (timing["value"] > 0).all(), "two lengths, two impls"
    assert {params["impl"] for params in rows.loc[rows["part"] == "timing", "params"]} == {"static", "fast"}
    speedup_id = int(
        rows.loc[(rows["part"] == "timing") & (rows["metric"] == "measured_speedup"), "measurement_id"].iloc[0]
    )
    assert len(frames.samples(store, [speedup_id])) == 6, "three pairs, both sides"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_impl_produces_the_same_tokens(tiny_model: CharGPT, temperature: float) -> None:
    from runner.decoding.choices import IMPLS

    outputs = {
        (impl, use_cache): generate(
            tiny_model, [1, 2, 3], 60, use_cache=use_cache, temperature=temperature, seed=9, impl=impl
        ).tokens
        for impl in IMPLS
        for use_cache in (True, False)
    }
    # Every impl, with its cache and without (its own no-cache path), draws the same tokens.
    assert len(set(map(tuple, outputs.values()))) == 1, outputs
    assert len(outputs[("fast", False)]) == 60


def test_the_compiled_entry_points_refuse_bad_tensors(tiny_model: CharGPT) -> None:
    from runner.decoding.fast import FastDecoder

    decoder = FastDecoder(tiny_model)
    cache = tiny_model.new_cache()
    doubled = tiny_model.new_cache()
    doubled.keys, doubled.values = doubled.keys.double(), doubled.values.double()
    with pytest.raises(RuntimeError, match="float32"):
        decoder.forward([1], doubled)
    with pytest.raises(RuntimeError, match="batch 1"):
        decoder.forward([1], tiny_model.new_cache(batch_size=2))
    narrow = tiny_model.new_cache()
    narrow.keys, narrow.values = narrow.keys[..., :-1].contiguous(), narrow.values[..., :-1].contiguous()
    with pytest.raises(RuntimeError, match="does not match"):
        decoder.forward([1], narrow)
    with pytest.raises(RuntimeError, match="uniforms"):
        decoder.sample([1], 3, 1.0, torch.zeros(3, dtype=torch.float32), cache)
    with pytest.raises(RuntimeError, match="vocabulary"):
        decoder.forward([99], cache)
    with pytest.raises(RuntimeError, match="past the cache"):
        decoder.forward([1] * 3, tiny_model.new_cache(capacity=2))
    vocab = tiny_model.config.vocab_size
    q, randoms = (
        torch.full((2, vocab), 1.0 / vocab),
        torch.rand(5, dtype=torch.float64, generator=torch.Generator().manual_seed(3)),
    )
    with pytest.raises(RuntimeError, match=f"q must be a 2 × {vocab}"):
        decoder.verify([1, 2, 3], cache, q[:1], 1.0, randoms)
    with pytest.raises(RuntimeError, match="5 float64 CPU uniforms"):
        decoder.verify([1, 2, 3], cache, q, 1.0, randoms.float())
    assert cache.length == 0, "a refused call leaves the cache as it was"
    # A float64 q and strided uniforms are converted, not refused, and decide as their float32 copies do.
    verdict = decoder.verify([1, 2, 3], cache, q, 1.0, randoms)
    cache.length = 0
    strided = torch.stack([randoms, randoms], dim=1)[:, 0]
    assert not strided.is_contiguous()
    assert decoder.verify([1, 2, 3], cache, q.double(), 1.0, strided) == verdict


def test_the_fast_step_matches_the_eager_logits(tiny_model: CharGPT) -> None:
    from runner.decoding.fast import FastDecoder

    decoder = FastDecoder(tiny_model)
    fast_cache, eager_cache = tiny_model.new_cache(), tiny_model.new_cache()
    with torch.inference_mode():
        for token in [4, 1, 7, 7, 0, 12, 3]:
            fast = decoder.step(token, fast_cache)
            eager = tiny_model.forward_cached(torch.tensor([[token]]), eager_cache)[0, -1]
            assert (fast - eager).abs().max().item() < 1e-4
    assert fast_cache.length == eager_cache.length == 7
    assert torch.allclose(fast_cache.keys[:, :, :, :7], eager_cache.keys[:, :, :, :7], atol=1e-5)


class ScriptedRounds:
    """A harness whose interleaved rounds return scripted seconds (1-token side, n-token side)."""

    def __init__(self, rounds: list[tuple[tuple[float, ...], tuple[float, ...]]]) -> None:
        self.rounds: Iterator[tuple[tuple[float, ...], tuple[float, ...]]] = iter(rounds)
        self.calls = 0

    def interleaved(
        self,
        functions: Sequence[Callable[[], object]],
        rounds: int,
        between: Callable[[], object] | None = None,
        *,
        steady: bool = False,
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        self.calls += 1
        return next(self.rounds)


def prefill_with(harness: ScriptedRounds) -> dict[str, float]:
    context = cast(ExperimentContext, SimpleNamespace(model=None, harness=harness, prompt=lambda chars: [0] * chars))
    records = prefill({"impl": "static", "cache": True, "n": 4, "prompt_tokens": 2, "pairs": 3}, context)
    return {record.metric: record.value for record in records}


def test_prefill_times_more_rounds_when_a_loaded_machine_leaves_no_decode_time() -> None:
    """Two of three rounds' 4-token generations took no longer than their 1-token ones (the median
    decode time 0: a CI run divided by it). Three more rounds give a median of 0.1 s a token."""
    harness = ScriptedRounds([((1.0, 1.0, 1.0), (1.0, 1.0, 1.6)), ((1.0, 1.0, 1.0), (1.3, 1.3, 1.3))])
    values = prefill_with(harness)
    assert harness.calls == 2
    assert values["decode_seconds_per_token"] == pytest.approx(0.1)
    assert values["prefill_seconds"] == 1.0
    assert values["prefill_to_decode_ratio"] == pytest.approx(10.0)


def test_prefill_that_never_finds_a_decode_time_says_why() -> None:
    harness = ScriptedRounds([((1.0, 1.0, 1.0), (0.9, 1.0, 1.0))] * (1 + PREFILL_EXTRA_ROUNDS))
    with pytest.raises(Unmeasured, match=r"15 rounds the 4-token generations took no longer.*too busy"):
        prefill_with(harness)
