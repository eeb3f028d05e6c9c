"""KV cache (docs/experiments.md): is it exact, what does the arithmetic promise, what does the
clock deliver, how does time grow with n, what does it cost in memory, and what happens when
the cache is written lossily.

Parts, each a kind of case (param ``part``):
- equivalence: per impl, same seed, sampled and greedy text with the impl's cache against the
  no-cache reference (the eager full forward); max logit diff.
- counter_check: the pure-Python counting path against the closed forms (dense and causal
  attention counts) at a small shape.
- counts: closed-form multiplications for the model's real shape per length, dense and causal.
- timing: per impl, no cache through that impl vs its cache, paired (their minima are the
  min-of-N figures); for impls other than ``static`` the eager no-cache path is timed in the
  same rounds, for the cross-impl figure ``speedup_vs_eager_no_cache``.
- width: the same at one length over widths, on untrained weights (timing needs no training).
- fit: log–log fit of time against n from this run's timing cases.
- memory: cache bytes against the weights, for every kv-head count that divides the heads.
- rounded_cache: K/V rounded before caching, against the equivalence tolerance.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from runner import counting
from runner.decode import IMPLS, Generation, generate
from runner.experiments import ExperimentContext
from runner.fields import Field
from runner.fitting import fit_power_law
from runner.model import CACHE_ROUNDINGS, CharGPT, ModelConfig
from runner.timing import Paired
from store.records import MeasurementRecord

# The largest |logit difference| the cached path may show against the uncached one: float32
# sums in a different order, nothing more.
EQUIVALENCE_TOLERANCE = 1e-4
COUNTER_CHECK_SHAPE = {"d_model": 8, "n_head": 2, "n_layer": 2, "n": 10}

FIELDS = {
    "lengths": Field("int_list", [64, 128, 256, 512, 1024], 2, "context_length"),
    "widths": Field("int_list", [128, 256, 512, 1024], 8, 2048),
    "width_length": Field("int", 256, 2, "context_length"),
    "pairs": Field("int", 3, 3, 50, help="paired no-cache/cache timings per point (minimum 3)"),
    "impls": Field("str_list", ["static"], choices=IMPLS, help="how a cached decode step runs (runner.decode)"),
    "equivalence_tokens": Field("int", 128, 1, "context_length"),
    "memory_lengths": Field("int_list", [128, 512, 1024], 1, 1_000_000),
    "roundings": Field("str_list", ["bfloat16", "int8"], choices=CACHE_ROUNDINGS),
}


def _measure(metric: str, value: float, unit: str) -> MeasurementRecord:
    return MeasurementRecord(metric, float(value), unit)


def _divisors(n: int) -> list[int]:
    return [k for k in range(n, 0, -1) if n % k == 0]


def comparable_difference(first: Generation, second: Generation) -> tuple[float, int]:
    """Largest |logit difference| over the steps both runs took on the same text, and the
    first position where the texts differ (their length if they never do). The logits at the
    diverging step are still comparable: they were computed from identical prefixes."""
    assert first.logits is not None and second.logits is not None
    steps = len(first.tokens)
    divergence = next(
        (index for index, (a, b) in enumerate(zip(first.tokens, second.tokens, strict=True)) if a != b), steps
    )
    compared = min(divergence + 1, steps)
    return (first.logits[:compared] - second.logits[:compared]).abs().max().item(), divergence


class KVCacheExperiment:
    name = "kv_cache"
    title = "KV cache"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        # Every case names the model shape it runs on (the width sweep overrides d_model).
        shape = {"d_model": model["d_model"], "n_layer": model["n_layer"]}
        pairs = params["pairs"]
        cases: list[dict[str, Any]] = [
            {
                "part": "equivalence",
                "impl": impl,
                "reference": "static_no_cache",
                "n": params["equivalence_tokens"],
                "tolerance": EQUIVALENCE_TOLERANCE,
                **shape,
            }
            for impl in params["impls"]
        ]
        cases.append({"part": "counter_check", **COUNTER_CHECK_SHAPE})
        cases += [{"part": "counts", "n": n, **shape} for n in params["lengths"]]
        # ``no_cache_impl`` names the baseline's path: timing cases recorded before it existed
        # divided an eager no-cache time by every impl's cached time.
        cases += [
            {"part": "timing", "n": n, "impl": impl, "no_cache_impl": impl, "pairs": pairs, **shape}
            for impl in params["impls"]
            for n in params["lengths"]
        ]
        cases += [
            {
                **shape,
                "part": "width",
                "n": params["width_length"],
                "d_model": d,
                "weights": "untrained",
                "impl": "static",
                "no_cache_impl": "static",
                "pairs": pairs,
            }
            for d in params["widths"]
        ]
        if len(params["lengths"]) >= 2:
            cases += [
                {"part": "fit", "impl": impl, "no_cache_impl": impl, "lengths": sorted(params["lengths"]), **shape}
                for impl in params["impls"]
            ]
        cases += [{"part": "memory", "n": n, "dtype": "float32", **shape} for n in params["memory_lengths"]]
        cases += [
            {
                "part": "rounded_cache",
                "n": params["equivalence_tokens"],
                "rounding": rounding,
                "tolerance": EQUIVALENCE_TOLERANCE,
                **shape,
            }
            for rounding in params["roundings"]
        ]
        return cases

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        handler = getattr(self, f"_{case['part']}")
        return tuple(handler(case, context))

    # ---- parts ---------------------------------------------------------------------------

    def _prompt(self, context: ExperimentContext) -> list[int]:
        return context.corpus.encode(context.corpus.text[:1])

    def _equivalence(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        model, prompt, n, impl = context.model, self._prompt(context), case["n"], case.get("impl", "static")
        reference_sampled = generate(
            model, prompt, n, use_cache=False, temperature=1.0, seed=context.seed, keep_logits=True
        )
        cached_sampled = generate(model, prompt, n, temperature=1.0, seed=context.seed, keep_logits=True, impl=impl)
        reference_greedy = generate(model, prompt, n, use_cache=False, temperature=0.0)
        cached_greedy = generate(model, prompt, n, temperature=0.0, impl=impl)
        difference, _ = comparable_difference(reference_sampled, cached_sampled)
        return [
            _measure("strings_identical", reference_sampled.tokens == cached_sampled.tokens, "bool"),
            _measure("greedy_identical", reference_greedy.tokens == cached_greedy.tokens, "bool"),
            _measure("max_logit_diff", difference, "logit"),
            _measure("within_tolerance", difference <= case["tolerance"], "bool"),
        ]

    def _counter_check(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        d, heads, layers, n = case["d_model"], case["n_head"], case["n_layer"], case["n"]
        blocks = [counting.BlockWeights.random(d, heads, seed=context.seed + layer) for layer in range(layers)]
        generator = random.Random(context.seed)
        inputs = [[generator.gauss(0.0, 1.0) for _ in range(d)] for _ in range(n)]
        without, causal, with_cache = counting.Counter(), counting.Counter(), counting.Counter()
        caches = [([], []) for _ in blocks]  # type: list[tuple[counting.Matrix, counting.Matrix]]
        largest_difference = 0.0
        for t in range(1, n + 1):
            hidden, hidden_causal = inputs[:t], inputs[:t]
            for block in blocks:
                hidden = counting.block_step_no_cache(hidden, block, without)
                hidden_causal = counting.block_step_no_cache(hidden_causal, block, causal, causal=True)
            new = inputs[t - 1]
            for block, cache in zip(blocks, caches, strict=True):
                new = counting.block_step_cache(new, cache, block, with_cache)
            for output in (new, hidden_causal[-1]):
                difference = max(abs(a - b) for a, b in zip(hidden[-1], output, strict=True))
                largest_difference = max(largest_difference, difference)
        closed_without = counting.generation_mults(n, d, layers, cache=False)
        closed_causal = counting.generation_mults(n, d, layers, cache=False, causal=True)
        closed_with = counting.generation_mults(n, d, layers, cache=True)
        head = counting.HeadWeights.random(d, seed=context.seed)
        head_counter = counting.Counter()
        counting.head_token_no_cache(inputs, head, head_counter)
        return [
            _measure("counted_mults_no_cache", without.mults, "multiplications"),
            _measure("counted_mults_cache", with_cache.mults, "multiplications"),
            _measure("closed_form_mults_no_cache", closed_without, "multiplications"),
            _measure("closed_form_mults_cache", closed_with, "multiplications"),
            _measure("counted_mults_no_cache_causal", causal.mults, "multiplications"),
            _measure("closed_form_mults_no_cache_causal", closed_causal, "multiplications"),
            _measure(
                "counter_matches_closed_form",
                without.mults == closed_without and with_cache.mults == closed_with and causal.mults == closed_causal,
                "bool",
            ),
            _measure("head_counted_mults_no_cache", head_counter.mults, "multiplications"),
            _measure("head_closed_form_mults_no_cache", counting.head_mults(n, d, cache=False), "multiplications"),
            _measure("reference_max_output_diff", largest_difference, "value"),
        ]

    def _counts(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        n, d, layers = case["n"], case["d_model"], case["n_layer"]
        return [
            _measure("mults_no_cache", counting.generation_mults(n, d, layers, cache=False), "multiplications"),
            _measure("mults_cache", counting.generation_mults(n, d, layers, cache=True), "multiplications"),
            _measure("arithmetic_ratio", counting.arithmetic_ratio(n, d, layers), "ratio"),
            _measure(
                "mults_no_cache_causal",
                counting.generation_mults(n, d, layers, cache=False, causal=True),
                "multiplications",
            ),
            _measure("arithmetic_ratio_causal", counting.arithmetic_ratio(n, d, layers, causal=True), "ratio"),
            _measure(
                "arithmetic_ratio_with_lm_head",
                counting.arithmetic_ratio(n, d, layers, vocab_size=context.model.config.vocab_size),
                "ratio",
            ),
            _measure("head_mults_per_token_no_cache", counting.head_mults(n, d, cache=False), "multiplications"),
            _measure("head_mults_per_token_cache", counting.head_mults(n, d, cache=True), "multiplications"),
        ]

    def _time(self, model: CharGPT, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        """Generation without the cache against generation with it, both through the case's impl,
        in paired rounds; for an impl other than ``static`` the eager no-cache path runs in the
        same rounds, so the compiler's gain and the cache's are reported apart."""
        n, prompt, impl = case["n"], self._prompt(context), case["impl"]
        sides: dict[str, Callable[[], object]] = {
            "no_cache": lambda: generate(model, prompt, n, use_cache=False, temperature=0.0, impl=impl),
            "cache": lambda: generate(model, prompt, n, use_cache=True, temperature=0.0, impl=impl),
        }
        if impl != "static":
            sides["eager_no_cache"] = lambda: generate(model, prompt, n, use_cache=False, temperature=0.0)
        same_tokens = generate(model, prompt, n, use_cache=False, temperature=0.0, impl=impl).tokens == (
            generate(model, prompt, n, use_cache=True, temperature=0.0, impl=impl).tokens
        )
        rounds = dict(zip(sides, context.harness.interleaved(list(sides.values()), case["pairs"]), strict=True))
        same_impl = Paired(rounds["no_cache"], rounds["cache"])
        cross_impl = Paired(rounds.get("eager_no_cache", rounds["no_cache"]), rounds["cache"])
        config = model.config
        arithmetic = counting.arithmetic_ratio(n, config.d_model, config.n_layer)
        arithmetic_causal = counting.arithmetic_ratio(n, config.d_model, config.n_layer, causal=True)
        return [
            _measure("seconds_no_cache", min(same_impl.baseline_seconds), "seconds"),
            _measure("seconds_cache", min(same_impl.candidate_seconds), "seconds"),
            _measure("seconds_eager_no_cache", min(cross_impl.baseline_seconds), "seconds"),
            _measure("seconds_per_token_cache", min(same_impl.candidate_seconds) / n, "seconds"),
            _measure("tokens_identical_no_cache_vs_cache", same_tokens, "bool"),
            *same_impl.measurements("measured_speedup"),
            _measure("min_ratio_speedup", min(same_impl.baseline_seconds) / min(same_impl.candidate_seconds), "ratio"),
            *cross_impl.measurements("speedup_vs_eager_no_cache"),
            _measure("arithmetic_ratio", arithmetic, "ratio"),
            _measure("arithmetic_ratio_causal", arithmetic_causal, "ratio"),
            _measure("received_fraction", same_impl.median / arithmetic, "ratio"),
            _measure("received_fraction_causal", same_impl.median / arithmetic_causal, "ratio"),
            # What the overhead experiment's a + b·mults calibration needs to predict this point.
            _measure(
                "mults_no_cache_with_lm_head",
                counting.generation_mults(n, config.d_model, config.n_layer, False, config.vocab_size),
                "multiplications",
            ),
            _measure(
                "mults_cache_with_lm_head",
                counting.generation_mults(n, config.d_model, config.n_layer, True, config.vocab_size),
                "multiplications",
            ),
        ]

    def _timing(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        return self._time(context.model, case, context)

    def _width(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        base = context.model.config
        config = ModelConfig(
            vocab_size=base.vocab_size,
            d_model=case["d_model"],
            n_layer=base.n_layer,
            n_head=base.n_head,
            context_length=base.context_length,
        )
        torch.manual_seed(context.seed)
        model = CharGPT(config).to(context.device).eval()
        return self._time(model, case, context)

    def _fit(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        timings: dict[tuple[str, int], float] = {}
        for row in context.earlier(self.name):
            params = row.params
            if (
                params.get("part") == "timing"
                and params.get("impl") == case["impl"]
                and row.metric in ("seconds_no_cache", "seconds_cache")
            ):
                timings[(row.metric, row.params["n"])] = row.value
        measurements = []
        for mode in ("no_cache", "cache"):
            lengths = [n for n in case["lengths"] if (f"seconds_{mode}", n) in timings]
            if len(lengths) < 2:
                raise RuntimeError(f"the fit needs at least two timed lengths, this run has {lengths}")
            slope, scale, error = fit_power_law(lengths, [timings[(f"seconds_{mode}", n)] for n in lengths])
            measurements += [
                _measure(f"slope_{mode}", slope, "exponent"),
                _measure(f"fit_scale_{mode}", scale, "seconds"),
                _measure(f"max_fit_error_{mode}", error, "ratio"),
            ]
        return measurements

    def _memory(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        config, n = context.model.config, case["n"]
        weight_bytes = context.model.weight_bytes()
        bytes_per_element = torch.finfo(torch.float32).bits // 8
        measurements = [_measure("weight_bytes", weight_bytes, "bytes")]
        if n <= config.context_length:
            cache = context.model.new_cache(capacity=n)
            cache.length = n
            measurements.append(_measure("cache_bytes_allocated", cache.cache_bytes(), "bytes"))
        for kv_heads in _divisors(config.n_head):
            cache_bytes = counting.cache_bytes(config.n_layer, kv_heads, n, config.head_dim, bytes_per_element)
            suffix = "" if kv_heads == config.n_head else f"_kv_heads_{kv_heads}"
            measurements += [
                _measure(f"cache_bytes{suffix}", cache_bytes, "bytes"),
                _measure(f"cache_to_weight_ratio{suffix}", cache_bytes / weight_bytes, "ratio"),
            ]
        return measurements

    def _rounded_cache(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        model, prompt, n = context.model, self._prompt(context), case["n"]
        exact = generate(model, prompt, n, use_cache=False, temperature=1.0, seed=context.seed, keep_logits=True)
        rounded = generate(
            model,
            prompt,
            n,
            use_cache=True,
            temperature=1.0,
            seed=context.seed,
            keep_logits=True,
            cache_rounding=case["rounding"],
        )
        exact_greedy = generate(model, prompt, n, use_cache=False, temperature=0.0)
        rounded_greedy = generate(model, prompt, n, use_cache=True, temperature=0.0, cache_rounding=case["rounding"])
        difference, divergence = comparable_difference(exact, rounded)
        return [
            _measure("max_logit_diff", difference, "logit"),
            _measure("exceeds_tolerance", difference > case["tolerance"], "bool"),
            _measure("strings_identical", exact.tokens == rounded.tokens, "bool"),
            _measure("greedy_identical", exact_greedy.tokens == rounded_greedy.tokens, "bool"),
            _measure("divergence_position_sampled", divergence, "tokens"),
        ]


EXPERIMENT = KVCacheExperiment()
