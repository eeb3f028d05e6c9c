"""Speculative decoding (EXPERIMENTS §3, seed speculative-decoding): does the output keep the
target's distribution, how often are drafts accepted, what do drafts and verification cost,
what is the measured speedup, and how well does each prediction formula call it.

Parts (param ``part``):
- distribution: fixed context, first-character samples via the accept rule against direct
  samples, with a sample-size-aware bound on the total variation distance.
- aa: the baseline paired against itself, the noise floor of the paired method, per impl.
- speculative: per (impl, draft, k) deterministic counts (seeded), costs, paired speedup against
  plain decoding through the same impl, predictions.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from runner.decode import generate
from runner.drafts import MAX_NGRAM_ORDER, BigramDraft, ModelDraft, NGramDraft
from runner.errors import InputError
from runner.experiments import ExperimentContext
from runner.fields import Field
from runner.model import ModelConfig
from runner.quantize import quantize_model
from runner.speculative import (
    SPECULATIVE_IMPLS,
    Draft,
    SpeculativeResult,
    accept_rule,
    probabilities,
    speculative_decode,
    target_pass,
    verify,
)
from runner.train import TrainConfig
from store.records import MeasurementRecord

DRAFTS = ("bigram", "ngram", "int8", "int4", "small")
COST_CALLS = 16  # draft turns and verifications per cost session (one session after each timed pair)
NOISE_CONFIDENCE = 0.999

FIELDS = {
    "drafts": Field("str_list", list(DRAFTS), choices=DRAFTS),
    "ks": Field("int_list", [1, 2, 4, 8], 1, 16),
    "impls": Field(
        "str_list",
        ["static"],
        choices=SPECULATIVE_IMPLS,
        help="how the target runs, in the baseline and in verification alike (runner.speculative)",
    ),
    "new_tokens": Field("int", 200, 1, "context_length"),
    "temperature": Field("float", 1.0, 0.0, 5.0, help="0 is greedy"),
    "pairs": Field("int", 5, 5, 50),
    "distribution_samples": Field("int", 20_000, 100, 1_000_000),
    "context_chars": Field("int", 32, 1, "context_length"),
    "ngram_order": Field("int", 3, 3, MAX_NGRAM_ORDER, help="characters of context + 1 for the n-gram draft"),
    "small_draft_d_model": Field("int", 64, 8, 512, help="width of the small trained draft (1 block)"),
    "small_draft_steps": Field("int", 600, 1, 100_000, help="training steps of the small draft"),
    "small_draft_distilled": Field("bool", True, help="train the small draft on the target's distributions"),
}


# Drafts built for a target, reused by every case that asks for the same one (an n-gram table
# takes half a second to count; a draft's state is reset by start() at each use).
_DRAFTS: dict[tuple[Any, ...], Draft] = {}
DRAFT_FIELDS = ("draft", "ngram_order", "small_draft_d_model", "small_draft_steps", "small_draft_distilled")


def make_draft(case: dict[str, Any], context: ExperimentContext) -> Draft:
    target = (id(context.model), context.model_record.weights_hash)
    key = (*target, *(case.get(field) for field in DRAFT_FIELDS))
    if key not in _DRAFTS:
        if any(cached[:2] != target for cached in _DRAFTS):
            _DRAFTS.clear()  # one target at a time: do not keep drafts of earlier runs alive
        _DRAFTS[key] = build_draft(case, context)
    return _DRAFTS[key]


def build_draft(case: dict[str, Any], context: ExperimentContext) -> Draft:
    name = case["draft"]
    config = context.model.config
    if name in ("bigram", "ngram"):
        train_tokens, _ = context.corpus.split()
        if name == "bigram":
            return BigramDraft(train_tokens, config.vocab_size)
        return NGramDraft(train_tokens, config.vocab_size, order=case["ngram_order"])
    if name in ("int8", "int4"):
        return ModelDraft(quantize_model(context.model, name, group_size=32, kernel="fake"), name)
    if name == "small":
        if context.train_model is None:
            raise RuntimeError("the small draft needs a way to train a model (run it through decodelab run)")
        heads = 4 if case["small_draft_d_model"] % 4 == 0 else 1
        small = context.train_model(
            ModelConfig(
                vocab_size=config.vocab_size,
                d_model=case["small_draft_d_model"],
                n_layer=1,
                n_head=heads,
                context_length=config.context_length,
            ),
            TrainConfig(steps=case["small_draft_steps"], sequence_length=min(128, config.context_length // 2)),
            context.model if case["small_draft_distilled"] else None,
        )
        return ModelDraft(small, "small", fast=small.device.type == "cpu")
    raise ValueError(f"unknown draft {name!r} (known: {', '.join(DRAFTS)})")


def total_variation(first: torch.Tensor, second: torch.Tensor) -> float:
    return 0.5 * float((first - second).abs().sum())


def empirical(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab_size).double() / len(tokens)


def tv_noise_bounds(p: torch.Tensor, samples: int, confidence: float = NOISE_CONFIDENCE) -> tuple[float, float]:
    """For an empirical distribution of ``samples`` draws from p: an upper bound on the expected
    TV (Jensen: ½ Σ √(p(1−p)/n)), and that plus a McDiarmid deviation, exceeded with probability
    at most 1 − confidence (one draw moves the TV by at most 1/n)."""
    expected = 0.5 * float(torch.sqrt(p.double() * (1 - p.double()) / samples).sum())
    return expected, expected + math.sqrt(math.log(1 / (1 - confidence)) / (2 * samples))


def speculative_first_tokens(
    p: torch.Tensor, q: torch.Tensor, samples: int, generator: torch.Generator
) -> torch.Tensor:
    """``samples`` independent first characters from one context through the loop's accept rule."""
    proposals = torch.multinomial(q, samples, replacement=True, generator=generator).tolist()
    randoms = torch.rand(2 * samples, generator=generator, dtype=torch.float64).tolist()
    p_row, q_row = p.tolist(), q.tolist()
    return torch.tensor(
        [
            accept_rule(p_row, q_row, proposal, randoms[2 * index], randoms[2 * index + 1])[1]
            for index, proposal in enumerate(proposals)
        ]
    )


@dataclass(frozen=True)
class PassCosts:
    draft_turn_seconds: float
    verify_seconds: float


class SpeculativeExperiment:
    name = "speculative"
    title = "Speculative decoding"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        needed = 1 + params["new_tokens"] + max(params["ks"])
        if needed > model["context_length"]:
            raise InputError(
                f"experiments.speculative.new_tokens: {params['new_tokens']} plus the prompt and k = "
                f"{max(params['ks'])} need {needed} positions (allowed: at most the model context "
                f"{model['context_length']})"
            )
        shape = {"d_model": model["d_model"], "n_layer": model["n_layer"]}
        timing = {"new_tokens": params["new_tokens"], "temperature": params["temperature"], "pairs": params["pairs"]}
        draft_params = {
            "ngram_order": params["ngram_order"],
            "small_draft_d_model": params["small_draft_d_model"],
            "small_draft_steps": params["small_draft_steps"],
            "small_draft_distilled": params["small_draft_distilled"],
        }
        cases: list[dict[str, Any]] = [
            {
                **draft_params,
                "part": "distribution",
                "draft": draft,
                "samples": params["distribution_samples"],
                "context_chars": params["context_chars"],
                **shape,
            }
            for draft in params["drafts"]
        ]
        for impl in params["impls"]:
            cases.append({"part": "aa", "draft": "none", "k": 0, "impl": impl, **timing, **shape})
            cases += [
                {**draft_params, "part": "speculative", "draft": draft, "k": k, "impl": impl, **timing, **shape}
                for draft in params["drafts"]
                for k in params["ks"]
            ]
        return cases

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        handler = getattr(self, f"_{case['part']}")
        return tuple(handler(case, context))

    def _prompt(self, context: ExperimentContext, chars: int = 1) -> list[int]:
        return context.corpus.encode(context.corpus.text[:chars])

    @torch.inference_mode()
    def _distribution(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        prompt = self._prompt(context, case["context_chars"])
        draft = make_draft(case, context)
        draft.start(prompt)
        _, q = draft.propose(1, 1.0, torch.Generator().manual_seed(context.seed))
        p = probabilities(context.model(torch.tensor([prompt], device=context.model.device))[0, -1].float(), 1.0)
        p, q = p.double().cpu(), q[0].double().cpu()
        generator = torch.Generator().manual_seed(context.seed)
        samples = case["samples"]
        speculative = speculative_first_tokens(p, q, samples, generator)
        direct = torch.multinomial(p, samples, replacement=True, generator=generator)
        tvd = total_variation(empirical(speculative, len(p)), p)
        tvd_direct = total_variation(empirical(direct, len(p)), p)
        expected, high = tv_noise_bounds(p, samples)
        return [
            MeasurementRecord("tvd", tvd, "probability"),
            MeasurementRecord("tvd_direct", tvd_direct, "probability"),
            MeasurementRecord("tvd_expected_bound", expected, "probability"),
            MeasurementRecord("tvd_noise_bound", high, "probability"),
            MeasurementRecord("within_sampling_noise", tvd <= high, "bool"),
            MeasurementRecord("direct_within_sampling_noise", tvd_direct <= high, "bool"),
            MeasurementRecord("draft_target_tvd", total_variation(q, p), "probability"),
        ]

    def _aa(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        prompt, target = self._prompt(context), context.model

        def baseline() -> object:
            return generate(
                target,
                prompt,
                case["new_tokens"],
                temperature=case["temperature"],
                seed=context.seed,
                impl=case["impl"],
            )

        paired = context.harness.paired(baseline, baseline, pairs=case["pairs"])
        return self._speedup_measurements(paired)

    @staticmethod
    def _speedup_measurements(paired: Any) -> list[MeasurementRecord]:
        median, low, high = paired.measurements("speedup")
        return [
            MeasurementRecord("speedup_median", median.value, "ratio", median.samples),
            MeasurementRecord("speedup_min", low.value, "ratio"),
            MeasurementRecord("speedup_max", high.value, "ratio"),
        ]

    @torch.inference_mode()
    def _cost_session(
        self, context: ExperimentContext, draft: Draft, case: dict[str, Any], prompt: list[int], run: SpeculativeResult
    ) -> Callable[[], PassCosts]:
        """A function timing one draft turn and one verification, called in turn as the loop calls
        them, so each pays for what the other evicts from the caches.

        The draft turns replay the loop's own passes from the middle of its text: propose k, then
        commit what that pass accepted and emitted. So a draft follows the same contexts (an
        n-gram's rows are as warm as in the loop) and feeds as many tokens per turn (after a pass
        that accepted everything, two) as it did in the loop. The verification is the (k+1)-position
        target pass and the accept rule at the middle of the text."""
        target, k, temperature = context.model, case["k"], case["temperature"]
        text = prompt + run.tokens
        boundaries = list(
            itertools.accumulate((accepted + 1 for accepted in run.accepted_per_pass), initial=len(prompt))
        )
        # Replay from the pass nearest the middle, leaving room for as many turns as we can.
        first = min(len(run.accepted_per_pass) // 2, max(0, len(run.accepted_per_pass) - COST_CALLS - 1))
        replayed = list(zip(run.accepted_per_pass, boundaries, boundaries[1:], strict=False))[first:]
        rounds = max(1, min(COST_CALLS, len(replayed) - 1))
        start = min(boundaries[first], target.config.context_length - k - 1)
        run_target = target_pass(target, case["impl"])
        cache = target.new_cache(capacity=start + k)
        if start > 1:
            run_target(text[: start - 1], cache)
        generator = torch.Generator(device=target.device).manual_seed(context.seed)
        draft.start(text[:start])
        proposals, q = draft.propose(k, temperature, generator)
        passes: Iterator[tuple[int, int, int]] = iter([])

        def draft_turn() -> None:
            draft.propose(k, temperature, generator)
            accepted, begin, end = next(passes, replayed[-1])  # past the run's end: its last pass again
            draft.commit(accepted, text[begin:end])

        def verification() -> None:
            cache.length = start - 1
            verify(run_target, cache, text[start - 1], proposals, q, temperature, generator)

        def follow_prompt() -> None:
            nonlocal passes
            passes = iter(replayed)
            draft.start(text[:start])
            draft_turn()  # a model draft feeds the whole prompt on its first turn

        @torch.inference_mode()
        def session() -> PassCosts:
            draft_turns, verifications = context.harness.alternating(
                (draft_turn, verification), rounds=rounds, repeats=1, setup=follow_prompt
            )
            return PassCosts(draft_turns.minimum, verifications.minimum)

        return session

    def _speculative(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        target, prompt, k, impl = context.model, self._prompt(context), case["k"], case["impl"]
        n, temperature, seed = case["new_tokens"], case["temperature"], context.seed
        draft = make_draft(case, context)
        counts = speculative_decode(target, draft, k, prompt, n, temperature=temperature, seed=seed, impl=impl)
        # After each pair, the pass costs, so each pair's prediction sees the machine as its
        # measured ratio did (on a shared 2-core VM the speed drifts by tens of percent).
        cost_session, sessions = self._cost_session(context, draft, case, prompt, counts), []
        paired = context.harness.paired(
            lambda: generate(target, prompt, n, temperature=temperature, seed=seed, impl=impl),
            lambda: speculative_decode(target, draft, k, prompt, n, temperature=temperature, seed=seed, impl=impl),
            pairs=case["pairs"],
            between=lambda: sessions.append(cost_session()),
        )
        per_pass = counts.chars_per_target_pass
        # Costs in units of that pair's plain decode step (target pass and sampling): a
        # verification is a (k+1)-position pass and the accept rule; a draft turn is proposing k
        # and following the commit, calls included. The write-ups' formula takes a verification
        # as one step; the refined one uses the measured verification.
        steps = [seconds / n for seconds in paired.baseline_seconds]
        draft_costs = [costs.draft_turn_seconds / k / step for costs, step in zip(sessions, steps, strict=True)]
        verify_costs = [costs.verify_seconds / step for costs, step in zip(sessions, steps, strict=True)]
        predicted = statistics.median(per_pass / (1 + k * draft) for draft in draft_costs)
        refined = statistics.median(
            per_pass / (verify + k * draft) for verify, draft in zip(verify_costs, draft_costs, strict=True)
        )
        measured = paired.median
        step_seconds = statistics.median(steps)
        verify_seconds = statistics.median(costs.verify_seconds for costs in sessions)
        draft_seconds = statistics.median(costs.draft_turn_seconds for costs in sessions) / k
        draft_cost, verify_cost = statistics.median(draft_costs), statistics.median(verify_costs)
        decided = len(counts.total_variations)
        return [
            MeasurementRecord("acceptance_rate", counts.acceptance_rate, "ratio"),
            MeasurementRecord("chars_per_target_pass", per_pass, "chars"),
            MeasurementRecord("target_passes", counts.target_passes, "passes"),
            MeasurementRecord("accepted", counts.accepted, "tokens"),
            MeasurementRecord("proposed", counts.proposed, "tokens"),
            MeasurementRecord("acceptance_per_decided", counts.accepted / decided if decided else 0.0, "ratio"),
            MeasurementRecord("one_minus_mean_tv", 1 - sum(counts.total_variations) / max(decided, 1), "ratio"),
            *(
                MeasurementRecord(f"accepted_length_{length}", passes, "passes")
                for length, passes in enumerate(counts.accepted_histogram)
            ),
            MeasurementRecord("target_step_seconds", step_seconds, "seconds"),
            MeasurementRecord("verify_seconds", verify_seconds, "seconds"),
            MeasurementRecord("draft_seconds_per_char", draft_seconds, "seconds"),
            MeasurementRecord("draft_cost_ratio", draft_cost, "ratio"),
            MeasurementRecord("verify_cost_ratio", verify_cost, "ratio"),
            *self._speedup_measurements(paired),
            MeasurementRecord("baseline_seconds", min(paired.baseline_seconds), "seconds"),
            MeasurementRecord("speculative_seconds", min(paired.candidate_seconds), "seconds"),
            MeasurementRecord("predicted_speedup", predicted, "ratio"),
            MeasurementRecord("predicted_speedup_refined", refined, "ratio"),
            MeasurementRecord("predicted_relative_error", (predicted - measured) / measured, "ratio"),
            MeasurementRecord("predicted_refined_relative_error", (refined - measured) / measured, "ratio"),
        ]


EXPERIMENT = SpeculativeExperiment()
