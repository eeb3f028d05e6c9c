"""What the clock delivers: the KV-cache experiment's timed parts (docs/experiments.md, KV
cache). Each speedup is paired within one impl; the eager no-cache path is timed in the same
rounds for the cross-impl figure; the first token (the prompt's forward) is timed apart from
the tokens after it."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from runner.cost import counts
from runner.cost.roofline_model import Shape
from runner.decoding.decode import generate
from runner.errors import Unmeasured
from runner.experiments.base import ExperimentContext, aa_measurements, placements_between_pairs
from runner.experiments.parts import roofline_placement as roofline
from runner.experiments.parts.kv_exactness import measure
from runner.measure.fitting import fit_power_law
from runner.measure.timing import Paired
from runner.model.gpt import CharGPT, ModelConfig
from store.records import MeasurementRecord

EAGER_IMPLS = ("naive", "static")  # their no-cache path is the eager full forward


def time_cache(
    model: CharGPT, case: dict[str, Any], context: ExperimentContext, with_transformers: bool = False
) -> list[MeasurementRecord]:
    """Generation without the cache against generation with it, both through the case's impl,
    in paired rounds; for the fast impl the eager no-cache path runs in the same rounds, so the
    compiler's gain and the cache's are reported apart (the eager impls' own no-cache path is it). An hf model's
    ``with_transformers`` adds transformers' own cached generation to the same rounds."""
    n, prompt, impl = case["n"], context.prompt(), case["impl"]
    # Each side's text from its last timed call (greedy: every call's is the same): checking them
    # with generations of their own cost the quick sweep one more 0.8 s no-cache generation a case.
    texts: dict[bool, list[int]] = {}

    def through_impl(use_cache: bool) -> Callable[[], object]:
        def side() -> None:
            texts[use_cache] = generate(model, prompt, n, use_cache=use_cache, temperature=0.0, impl=impl).tokens

        return side

    sides: dict[str, Callable[[], object]] = {"no_cache": through_impl(False), "cache": through_impl(True)}
    # The eager impls' own no-cache path is the eager one: naive's timed static's again (0.7 s a
    # generation at n = 256), 5.6 s of the quick sweep for a figure its own path gives.
    if impl not in EAGER_IMPLS:
        sides["eager_no_cache"] = lambda: generate(model, prompt, n, use_cache=False, temperature=0.0)
    transformers_records: list[MeasurementRecord] = []
    if with_transformers:
        from runner.experiments.parts.hf_peer import cache_column

        cached_tokens = generate(model, prompt, n, use_cache=True, temperature=0.0, impl=impl).tokens
        sides["transformers_cache"], transformers_measurements = cache_column(model, prompt, n, cached_tokens)
    # On the fast impl each round times its own packing of the weights and its own scratch cache.
    with placements_between_pairs(impl, model) as between:
        timed = context.harness.interleaved(list(sides.values()), case["pairs"], between, steady=True)
    rounds = dict(zip(sides, timed, strict=True))
    same_tokens = texts[False] == texts[True]
    if with_transformers:
        transformers_records = transformers_measurements(list(rounds["transformers_cache"]), list(rounds["cache"]))
    same_impl = Paired(rounds["no_cache"], rounds["cache"])
    cross_impl = Paired(rounds.get("eager_no_cache", rounds["no_cache"]), rounds["cache"])
    config = model.config
    d, layers, vocab = config.d_model, config.n_layer, config.vocab_size
    arithmetic = counts.arithmetic_ratio(n, d, layers)
    arithmetic_causal = counts.arithmetic_ratio(n, d, layers, causal=True)
    return [
        measure("seconds_no_cache", min(same_impl.baseline_seconds), "seconds"),
        measure("seconds_cache", min(same_impl.candidate_seconds), "seconds"),
        measure("seconds_eager_no_cache", min(cross_impl.baseline_seconds), "seconds"),
        measure("seconds_per_token_cache", min(same_impl.candidate_seconds) / n, "seconds"),
        measure("tokens_identical_no_cache_vs_cache", same_tokens, "bool"),
        *same_impl.measurements("measured_speedup"),
        # The write-ups' method: the ratio of the minima of at least three runs of each side.
        measure("min_ratio_speedup", min(same_impl.baseline_seconds) / min(same_impl.candidate_seconds), "ratio"),
        *cross_impl.measurements("speedup_vs_eager_no_cache"),
        measure("arithmetic_ratio", arithmetic, "ratio"),
        measure("arithmetic_ratio_causal", arithmetic_causal, "ratio"),
        measure("arithmetic_ratio_with_lm_head", counts.arithmetic_ratio(n, d, layers, vocab_size=vocab), "ratio"),
        measure("received_fraction", same_impl.median / arithmetic, "ratio"),
        measure("received_fraction_causal", same_impl.median / arithmetic_causal, "ratio"),
        # What the overhead experiment's a + b·mults calibration needs to predict this point.
        measure("mults_no_cache_with_lm_head", counts.generation_mults(n, d, layers, False, vocab), "multiplications"),
        measure("mults_cache_with_lm_head", counts.generation_mults(n, d, layers, True, vocab), "multiplications"),
        *transformers_records,
        *roofline.timed_generation(
            context,
            Shape.of(config),
            impl,
            "fp32",
            len(prompt),
            n,
            {
                "": (True, min(same_impl.candidate_seconds) / n),
                "_no_cache": (False, min(same_impl.baseline_seconds) / n),
            },
        ),
    ]


def untrained_model(context: ExperimentContext, d_model: int) -> CharGPT:
    """The run model's shape at another width, untrained: timing needs no training."""
    base = context.model.config
    config = ModelConfig(
        vocab_size=base.vocab_size,
        d_model=d_model,
        n_layer=base.n_layer,
        n_head=base.n_head,
        context_length=base.context_length,
    )
    torch.manual_seed(context.seed)
    return CharGPT(config).to(context.device).eval()


def timing(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    from runner.experiments.parts.hf_peer import is_hf_run

    return time_cache(context.model, case, context, with_transformers=is_hf_run(context))


def width(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    return time_cache(untrained_model(context, case["d_model"]), case, context)


def fit(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """time ∝ n^slope per mode, least squares on log–log axes over this run's timing cases."""
    timings: dict[tuple[str, int], float] = {}
    for row in context.earlier("kv_cache"):
        params = row.params
        if (
            params.get("part") == "timing"
            and params.get("impl") == case["impl"]
            and row.metric in ("seconds_no_cache", "seconds_cache")
        ):
            timings[(row.metric, params["n"])] = row.value
    measurements = []
    for mode in ("no_cache", "cache"):
        lengths = [n for n in case["lengths"] if (f"seconds_{mode}", n) in timings]
        if len(lengths) < 2:
            raise Unmeasured(f"the fit needs at least two timed lengths, this run measured {lengths}")
        slope, scale, error = fit_power_law(lengths, [timings[(f"seconds_{mode}", n)] for n in lengths])
        measurements += [
            measure(f"slope_{mode}", slope, "exponent"),
            measure(f"fit_scale_{mode}", scale, "seconds"),
            measure(f"max_fit_error_{mode}", error, "ratio"),
        ]
    return measurements


PREFILL_EXTRA_ROUNDS = 4  # at most this many more sets of rounds when the decode time is not positive


def prefill(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The first token (the prompt's full forward, nothing to reuse yet) against each token
    after it, with or without the cache, through the case's impl: generations of 1 and of n
    tokens in interleaved rounds, the decode time per token being their difference over n − 1."""
    model, impl, use_cache, n = context.model, case["impl"], case["cache"], case["n"]
    prompt = context.prompt(case["prompt_tokens"])

    def run(tokens: int) -> Callable[[], object]:
        return lambda: generate(model, prompt, tokens, use_cache=use_cache, temperature=0.0, impl=impl)

    first: list[float] = []
    decode: list[float] = []
    # A few decode steps of a tiny model take about what a disturbance does: on a loaded machine a
    # round's n-token generation can come out no slower than its 1-token one (a CI run divided by
    # that zero). More rounds then, until the median difference is a time.
    for _ in range(1 + PREFILL_EXTRA_ROUNDS):
        singles, wholes = context.harness.interleaved([run(1), run(n)], case["pairs"], steady=True)
        first += singles
        decode += [(whole - single) / (n - 1) for single, whole in zip(singles, wholes, strict=True)]
        if statistics.median(decode) > 0:
            break
    else:
        raise Unmeasured(
            f"kv_cache prefill: in {len(decode)} rounds the {n}-token generations took no longer than the "
            f"1-token ones (median); the machine is too busy to time {n - 1} decode steps "
            "(raise prefill_new_tokens or pairs)"
        )
    per_token = statistics.median(decode)
    return [
        measure("prefill_seconds", statistics.median(first), "seconds"),
        measure("decode_seconds_per_token", per_token, "seconds"),
        # Of the medians: a disturbed round's difference can be zero or negative, its ratio undefined.
        measure("prefill_to_decode_ratio", statistics.median(first) / per_token, "ratio"),
    ]


def aa(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The case's cached decode paired against itself: the noise floor of this experiment's
    timings through the impl."""
    model, prompt, n, impl = context.model, context.prompt(), case["n"], case["impl"]
    return aa_measurements(
        context.harness,
        lambda: generate(model, prompt, n, use_cache=True, temperature=0.0, impl=impl),
        case["pairs"],
        impl,
        model,
        steady=True,
    )
