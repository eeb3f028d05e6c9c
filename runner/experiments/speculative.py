"""Speculative decoding (docs/experiments.md): does the output keep the target's distribution,
how often are drafts accepted, what do drafts and verification cost, what is the measured
speedup, and how well an a-priori prediction calls it.

Parts (param ``part``):
- distribution: fixed context, first characters through the draft's real proposal path and the
  accept rule at the case's temperature, against the target's distribution (TV within a
  sampling-noise bound, chi-square), with a deliberately broken rule that says whether the
  check has power for this draft (runner.distribution_check).
- aa: the baseline paired against itself, the noise floor of the paired method, per impl.
- speculative: per (impl, draft, k): an a-priori prediction made before the loop runs, then
  deterministic counts (seeded), paired speedup against plain decoding through the same impl,
  and two after-the-fact models beside it: the write-ups' formula and the component model
  (runner.speculative_costs says what each is).
- choice: per impl, which (draft, k) the a-priori model picks, the measured best, and the
  speedup lost by following the model.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from runner import roofline
from runner.decode import generate
from runner.distribution_check import check_first_tokens
from runner.drafts import MAX_NGRAM_ORDER, BigramDraft, ModelDraft, NGramDraft
from runner.errors import InputError
from runner.experiments.base import ExperimentContext
from runner.fields import Field
from runner.hf_model import DRAFT_PREFIX, load_model, read_checkpoint
from runner.model import ModelConfig
from runner.quantize import quantize_model
from runner.speculative import SPECULATIVE_IMPLS, Draft, probabilities, speculative_decode
from runner.speculative_costs import (
    COST_CALLS,
    CostSession,
    alpha_a_priori,
    dry_run_passes,
    expected_chars_per_pass,
    held_out_windows,
    middle_passes,
    passes_of_run,
    single_call_costs,
)
from runner.timing import Paired
from runner.train import TrainConfig
from store.records import MeasurementRecord

# int8 and int4 are the write-ups' fake-quantized targets (eager, no cheaper than the target);
# fast_int8 is the int8 target through the fast path's int8 kernel, proposing in C++.
DRAFTS = ("bigram", "ngram", "int8", "int4", "small", "fast_int8")
CALIBRATION_REPEATS = 3  # plain generations timed before the loop, for the a-priori step

FIELDS = {
    "drafts": Field(
        "str_list",
        list(DRAFTS[:5]),
        choices=DRAFTS,
        choice_prefix=DRAFT_PREFIX,
        help="hf:DIR is a local Hugging Face checkpoint sharing an hf target's tokenizer (runner.hf_model)",
    ),
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
# takes half a second to count; a draft's state is reset by start() at each use), and the
# a-priori α of each (draft, temperature), which no k or impl changes.
_DRAFTS: dict[tuple[Any, ...], Draft] = {}
_ALPHAS: dict[tuple[Any, ...], float] = {}
DRAFT_FIELDS = ("draft", "ngram_order", "small_draft_d_model", "small_draft_steps", "small_draft_distilled")


def draft_key(case: dict[str, Any], context: ExperimentContext) -> tuple[Any, ...]:
    return (id(context.model), context.model_record.weights_hash, *(case.get(field) for field in DRAFT_FIELDS))


def make_draft(case: dict[str, Any], context: ExperimentContext) -> Draft:
    key = draft_key(case, context)
    if key not in _DRAFTS:
        if any(cached[:2] != key[:2] for cached in _DRAFTS):
            _DRAFTS.clear()  # one target at a time: do not keep drafts of earlier runs alive
            _ALPHAS.clear()
        _DRAFTS[key] = build_draft(case, context)
    return _DRAFTS[key]


def alpha_for(case: dict[str, Any], context: ExperimentContext, draft: Draft) -> float:
    key = (*draft_key(case, context), case["temperature"])
    if key not in _ALPHAS:
        _, held_out = context.corpus.split()
        windows = held_out_windows(held_out, context.model.config.context_length)
        _ALPHAS[key] = alpha_a_priori(context.model, draft, windows, case["temperature"])
    return _ALPHAS[key]


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
    if name == "fast_int8":
        return ModelDraft(quantize_model(context.model, "int8", kernel="fast_int8"), name, fast=True)
    if name.startswith(DRAFT_PREFIX):
        drafted = load_model(read_checkpoint(name[len(DRAFT_PREFIX) :], "experiments.speculative.drafts"))
        drafted = drafted.to(context.device).eval()
        return ModelDraft(drafted, name, fast=drafted.device.type == "cpu")
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
            name="the small draft (speculative decoding)",
        )
        return ModelDraft(small, "small", fast=small.device.type == "cpu")
    raise ValueError(f"unknown draft {name!r} (known: {', '.join(DRAFTS)})")


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


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
                "temperature": params["temperature"],
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
            cases.append({"part": "choice", "impl": impl, "drafts": params["drafts"], "ks": params["ks"], **shape})
        return cases

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        handler = getattr(self, f"_{case['part']}")
        return tuple(handler(case, context))

    @torch.inference_mode()
    def _distribution(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        prompt = context.prompt(case["context_chars"])
        # Cases recorded before the check ran at the case's temperature ran at 1.
        temperature = case.get("temperature", 1.0)
        logits = context.model(torch.tensor([prompt], device=context.model.device))[0, -1].float()
        p = probabilities(logits, temperature).double().cpu()
        check = check_first_tokens(
            make_draft(case, context), prompt, p, case["samples"], temperature, seed=context.seed
        )
        return [
            MeasurementRecord("tvd", check.tvd, "probability"),
            MeasurementRecord("tvd_direct", check.tvd_direct, "probability"),
            MeasurementRecord("tvd_broken_rule", check.tvd_broken_rule, "probability"),
            MeasurementRecord("tvd_expected_bound", check.tvd_expected_bound, "probability"),
            MeasurementRecord("tvd_noise_bound", check.tvd_noise_bound, "probability"),
            MeasurementRecord("within_sampling_noise", check.within_sampling_noise, "bool"),
            MeasurementRecord("direct_within_sampling_noise", check.tvd_direct <= check.tvd_noise_bound, "bool"),
            MeasurementRecord("check_detects_broken_rule", check.detects_broken_rule, "bool"),
            MeasurementRecord("chi2_pvalue", check.chi2_pvalue, "probability"),
            MeasurementRecord("chi2_pvalue_direct", check.chi2_pvalue_direct, "probability"),
            MeasurementRecord("chi2_pvalue_broken_rule", check.chi2_pvalue_broken_rule, "probability"),
            MeasurementRecord("draft_target_tvd", check.draft_target_tvd, "probability"),
        ]

    def _baseline(self, case: dict[str, Any], context: ExperimentContext) -> Any:
        prompt, target = context.prompt(), context.model

        def baseline() -> object:
            return generate(
                target,
                prompt,
                case["new_tokens"],
                temperature=case["temperature"],
                seed=context.seed,
                impl=case["impl"],
            )

        return baseline

    def _aa(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        baseline = self._baseline(case, context)
        return self._speedup_measurements(context.harness.paired(baseline, baseline, pairs=case["pairs"]))

    @staticmethod
    def _speedup_measurements(paired: Paired) -> list[MeasurementRecord]:
        median, low, high = paired.measurements("speedup")
        return [
            MeasurementRecord("speedup_median", median.value, "ratio", median.samples),
            MeasurementRecord("speedup_min", low.value, "ratio"),
            MeasurementRecord("speedup_max", high.value, "ratio"),
        ]

    def _a_priori(self, case: dict[str, Any], context: ExperimentContext, draft: Draft) -> list[MeasurementRecord]:
        """The prediction, made before the loop runs and from nothing the loop measures: α and
        the costs come from held-out text, the plain step from generations timed now."""
        target, k, n, temperature = context.model, case["k"], case["new_tokens"], case["temperature"]
        alpha = alpha_for(case, context, draft)
        expected = expected_chars_per_pass(alpha, k)
        _, held_out = context.corpus.split()
        # A verification's cost grows with its position: calibrate half way through a generation.
        start = min(len(context.prompt()) + n // 2, target.config.context_length - k - 1)
        text = held_out[: start + n].tolist()
        passes = dry_run_passes(draft, text, start, k, temperature, context.seed, count=COST_CALLS + 1)
        costs = CostSession(target, case["impl"], draft, k, temperature, text, passes, context.seed, context.harness)()
        # A typical step (the median), as the session costs are means over their rounds.
        step = context.harness.min_of(self._baseline(case, context), repeats=CALIBRATION_REPEATS).median / n
        cost_in_steps = (costs.verify_seconds + costs.draft_turn_seconds) / step
        return [
            MeasurementRecord("alpha_a_priori", alpha, "probability"),
            MeasurementRecord("expected_chars_per_pass", expected, "chars"),
            MeasurementRecord("a_priori_step_seconds", step, "seconds"),
            MeasurementRecord("a_priori_verify_cost_ratio", costs.verify_seconds / step, "ratio"),
            MeasurementRecord("a_priori_draft_cost_ratio", costs.draft_turn_seconds / k / step, "ratio"),
            MeasurementRecord("predicted_speedup_a_priori", expected / cost_in_steps, "ratio"),
        ]

    def _speculative(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        target, prompt, k, impl = context.model, context.prompt(), case["k"], case["impl"]
        n, temperature, seed = case["new_tokens"], case["temperature"], context.seed
        draft = make_draft(case, context)
        a_priori = self._a_priori(case, context, draft)
        counts = speculative_decode(target, draft, k, prompt, n, temperature=temperature, seed=seed, impl=impl)
        # After each pair, the pass costs replaying the loop's own passes, so each pair's
        # component model sees the machine as its measured ratio did.
        passes = middle_passes(passes_of_run(counts, len(prompt)))
        text = prompt + counts.tokens
        cost_session = CostSession(target, impl, draft, k, temperature, text, passes, seed, context.harness)
        sessions = []
        paired = context.harness.paired(
            self._baseline(case, context),
            lambda: speculative_decode(target, draft, k, prompt, n, temperature=temperature, seed=seed, impl=impl),
            pairs=case["pairs"],
            between=lambda: sessions.append(cost_session()),
        )
        target_pass_seconds, draft_call_seconds = single_call_costs(
            target, impl, draft, text, len(prompt) + n // 2, temperature, seed, context.harness
        )
        per_pass = counts.chars_per_target_pass
        assisted = self._hf_assisted(case, context, draft)
        # Costs in units of that pair's plain decode step (target pass and sampling): a
        # verification is a (k+1)-position pass and the accept rule; a draft turn is proposing k
        # and following the commit, calls included. The write-ups' formula takes a verification
        # as one step; the component model uses the measured verification.
        steps = [seconds / n for seconds in paired.baseline_seconds]
        draft_costs = [costs.draft_turn_seconds / k / step for costs, step in zip(sessions, steps, strict=True)]
        verify_costs = [costs.verify_seconds / step for costs, step in zip(sessions, steps, strict=True)]
        writeup_formula = statistics.median(per_pass / (1 + k * draft) for draft in draft_costs)
        component_model = statistics.median(
            per_pass / (verify + k * draft) for verify, draft in zip(verify_costs, draft_costs, strict=True)
        )
        measured = paired.median
        predicted = next(record.value for record in a_priori if record.metric == "predicted_speedup_a_priori")
        decided = len(counts.total_variations)
        return [
            *a_priori,
            MeasurementRecord("a_priori_relative_error", relative_error(predicted, measured), "ratio"),
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
            MeasurementRecord("target_step_seconds", statistics.median(steps), "seconds"),
            MeasurementRecord(
                "verify_seconds", statistics.median(costs.verify_seconds for costs in sessions), "seconds"
            ),
            MeasurementRecord(
                "draft_seconds_per_char",
                statistics.median(costs.draft_turn_seconds for costs in sessions) / k,
                "seconds",
            ),
            MeasurementRecord("draft_cost_ratio", statistics.median(draft_costs), "ratio"),
            # The write-ups' cost table: single calls timed on their own, and their c.
            MeasurementRecord("target_pass_us", target_pass_seconds * 1e6, "microseconds"),
            MeasurementRecord("draft_call_us", draft_call_seconds * 1e6, "microseconds"),
            MeasurementRecord("draft_cost_ratio_writeup", draft_call_seconds / target_pass_seconds, "ratio"),
            MeasurementRecord("verify_cost_ratio", statistics.median(verify_costs), "ratio"),
            *self._speedup_measurements(paired),
            MeasurementRecord("baseline_seconds", min(paired.baseline_seconds), "seconds"),
            MeasurementRecord("speculative_seconds", min(paired.candidate_seconds), "seconds"),
            MeasurementRecord("writeup_formula_speedup", writeup_formula, "ratio"),
            MeasurementRecord("writeup_formula_relative_error", relative_error(writeup_formula, measured), "ratio"),
            MeasurementRecord("component_model_speedup", component_model, "ratio"),
            MeasurementRecord("component_model_relative_error", relative_error(component_model, measured), "ratio"),
            *assisted,
            *roofline.speculative(context, case, draft, a_priori, statistics.median(verify_costs), measured),
        ]

    @staticmethod
    def _hf_assisted(case: dict[str, Any], context: ExperimentContext, draft: Draft) -> list[MeasurementRecord]:
        """With an hf: draft, Hugging Face's assisted generation with the same two models, timed
        in pairs against this loop (runner.hf_peer); nothing for the other drafts."""
        if not case["draft"].startswith(DRAFT_PREFIX) or not isinstance(draft, ModelDraft):
            return []
        from runner.hf_peer import assisted_measurements

        target, prompt, k, impl = context.model, context.prompt(), case["k"], case["impl"]
        n, temperature, seed = case["new_tokens"], case["temperature"], context.seed
        greedy = speculative_decode(target, draft, k, prompt, n, temperature=0.0, seed=seed, impl=impl).tokens
        return assisted_measurements(
            target,
            draft.model,
            prompt,
            n,
            temperature,
            seed,
            greedy,
            lambda: speculative_decode(target, draft, k, prompt, n, temperature=temperature, seed=seed, impl=impl),
            context,
            case["pairs"],
        )

    def _choice(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        """What following the a-priori model would have cost on this machine, for this impl. The
        picks are decisions taken from timings (unit ``choice``): they may differ between runs."""
        values: dict[tuple[str, int], dict[str, float]] = {}
        for row in context.earlier(self.name):
            if row.params.get("part") == "speculative" and row.params.get("impl") == case["impl"]:
                values.setdefault((row.params["draft"], row.params["k"]), {})[row.metric] = row.value
        wanted = {"predicted_speedup_a_priori", "speedup_median"}
        candidates = {key: value for key, value in values.items() if wanted <= set(value)}
        if not candidates:
            raise RuntimeError(f"no speculative case of impl {case['impl']} recorded a prediction and a speedup")
        chosen = max(candidates, key=lambda key: candidates[key]["predicted_speedup_a_priori"])
        best = max(candidates, key=lambda key: candidates[key]["speedup_median"])
        drafts = list(case["drafts"])
        return [
            MeasurementRecord("a_priori_choice_draft_index", drafts.index(chosen[0]), "choice"),
            MeasurementRecord("a_priori_choice_k", chosen[1], "choice"),
            MeasurementRecord("a_priori_choice_speedup", candidates[chosen]["speedup_median"], "ratio"),
            MeasurementRecord("measured_best_draft_index", drafts.index(best[0]), "choice"),
            MeasurementRecord("measured_best_k", best[1], "choice"),
            MeasurementRecord("measured_best_speedup", candidates[best]["speedup_median"], "ratio"),
            MeasurementRecord(
                "a_priori_regret",
                candidates[best]["speedup_median"] - candidates[chosen]["speedup_median"],
                "ratio",
            ),
            MeasurementRecord("a_priori_chose_best", chosen == best, "choice"),
        ]


EXPERIMENT = SpeculativeExperiment()
