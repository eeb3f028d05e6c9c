"""Speculative decoding (docs/experiments.md): does the output keep the target's distribution,
how often are drafts accepted (per draft position too), what do drafts and verification cost,
what is the measured speedup, and how well an a-priori prediction calls it, per draft, schedule
(runner.speculative.Schedule), temperature and impl.

Parts (param ``part``):
- distribution (speculative_check): fixed context, passes through the draft's real proposal
  path and the impl's production verification at the case's temperature, a chi-square test over
  every emitted position against the target, the TV it detects with 80% power, and the accept
  rule's bug variants as controls (runner.distribution_check).
- aa: the baseline paired against itself, the noise floor of the paired method, per impl.
- speculative: per (impl, temperature, draft, schedule, k or p_min): an a-priori prediction made
  before the loop runs (runner.speculative_prediction), then deterministic counts (seeded), paired
  speedup against plain decoding through the same impl, and two after-the-fact models beside it
  (runner.speculative_costs says what each is). Greedy cases check the target's greedy text.
- choice (speculative_choice), per (impl, temperature): which case the a-priori model picks, the
  measured best, and the regret with its noise band; accuracy, per impl: the prediction's errors.
"""

from __future__ import annotations

import statistics
from typing import Any

from runner import roofline
from runner.decode import generate
from runner.drafts import MAX_NGRAM_ORDER, ModelDraft
from runner.errors import InputError
from runner.experiments import speculative_check, speculative_choice
from runner.experiments.base import ExperimentContext
from runner.experiments.speculative_drafts import (
    DRAFTS,
    calibration_for,
    held_out_alpha,
    make_draft,
)
from runner.fields import Field
from runner.hf_model import DRAFT_PREFIX
from runner.speculative import (
    MAX_DRAFT_LENGTH,
    SCHEDULES,
    SPECULATIVE_IMPLS,
    Draft,
    Schedule,
    acceptance_at_positions,
    longest_draft,
    speculative_decode,
)
from runner.speculative_costs import (
    COST_CALLS,
    CostSession,
    dry_run_passes,
    expected_chars_per_pass,
    middle_passes,
    passes_of_run,
    single_call_costs,
)
from runner.speculative_prediction import simulate
from runner.timing import Paired
from store.records import MeasurementRecord

CALIBRATION_REPEATS = 3  # plain generations timed before the loop, for the a-priori step

FIELDS = {
    "drafts": Field(
        "str_list",
        list(DRAFTS[:5]),
        choices=DRAFTS,
        choice_prefix=DRAFT_PREFIX,
        help="hf:DIR is a local Hugging Face checkpoint sharing an hf target's tokenizer (runner.hf_model)",
    ),
    "ks": Field("int_list", [1, 2, 4, 8], 1, MAX_DRAFT_LENGTH, help="the fixed schedule's k"),
    "heuristic_starts": Field("int_list", [4], 1, MAX_DRAFT_LENGTH, help="the heuristic schedule's first k"),
    "schedules": Field("str_list", list(SCHEDULES), choices=SCHEDULES, help="how many proposals a pass drafts"),
    "k_max": Field("int", 8, 1, MAX_DRAFT_LENGTH, help="the most proposals a heuristic or confidence pass drafts"),
    "p_mins": Field("float_list", [0.4, 0.75], 0.0, 1.0, help="confidence: draft while the top probability ≥ p_min"),
    "impls": Field(
        "str_list",
        ["static"],
        choices=SPECULATIVE_IMPLS,
        help="how the target runs, in the baseline and in verification alike (runner.speculative)",
    ),
    "new_tokens": Field("int", 200, 1, "context_length"),
    "temperatures": Field("float_list", [1.0, 0.7, 0.0], 0.0, 5.0, help="0 is greedy"),
    "lower_temperature_drafts": Field(
        "str_list",
        list(DRAFTS),
        choices=DRAFTS,
        choice_prefix=DRAFT_PREFIX,
        help="the drafts timed at temperatures after the first",
    ),
    "pairs": Field("int", 5, 5, 50),
    "distribution_samples": Field("int", 20_000, 100, 1_000_000),
    "distribution_k": Field("int", 2, 1, 8, help="proposals per pass of the distribution check"),
    "distribution_drafts": Field(
        "str_list", list(DRAFTS), choices=DRAFTS, choice_prefix=DRAFT_PREFIX, help="drafts the check runs for"
    ),
    "distribution_temperatures": Field(
        "float_list", [1.0, 0.7], 0.01, 5.0, help="temperatures the check runs at (it samples: greedy is refused)"
    ),
    "context_chars": Field("int", 32, 1, "context_length"),
    "ngram_order": Field("int", 3, 3, MAX_NGRAM_ORDER, help="characters of context + 1 for the n-gram draft"),
    "small_draft_d_model": Field("int", 64, 8, 512, help="width of the small trained draft (1 block)"),
    "small_draft_steps": Field("int", 600, 1, 100_000, help="training steps of the small draft"),
    "small_draft_distilled": Field("bool", True, help="train the small draft on the target's distributions"),
}


def schedule_of(case: dict[str, Any]) -> Schedule:
    """Cases recorded before schedules were a dimension ran the fixed schedule."""
    kind = case.get("schedule", "fixed")
    if kind == "fixed":
        return Schedule("fixed", case["k"], case["k"])
    if kind == "heuristic":
        return Schedule("heuristic", case["k"], max(case["k"], case["k_max"]))
    return Schedule("confidence", case["k"], case["k"], case["p_min"])


def schedule_params(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The schedule part of each timed case: k for fixed, the first k and k_max for heuristic,
    p_min and the most (k_max, as k) for confidence."""
    points: list[dict[str, Any]] = []
    for schedule in params["schedules"]:
        if schedule == "fixed":
            points += [{"schedule": "fixed", "k": k} for k in params["ks"]]
        elif schedule == "heuristic":
            starts = sorted({min(k, params["k_max"]) for k in params["heuristic_starts"]})
            points += [{"schedule": "heuristic", "k": k, "k_max": params["k_max"]} for k in starts]
        else:
            points += [{"schedule": "confidence", "k": params["k_max"], "p_min": p_min} for p_min in params["p_mins"]]
    return points


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


class SpeculativeExperiment:
    name = "speculative"
    title = "Speculative decoding"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        longest = longest_draft(params)
        needed = 1 + params["new_tokens"] + longest
        if needed > model["context_length"]:
            raise InputError(
                f"experiments.speculative.new_tokens: {params['new_tokens']} plus the prompt and k = "
                f"{longest} need {needed} positions (allowed: at most the model context "
                f"{model['context_length']})"
            )
        shape = {"d_model": model["d_model"], "n_layer": model["n_layer"]}
        timing = {"new_tokens": params["new_tokens"], "pairs": params["pairs"]}
        draft_params = {
            "ngram_order": params["ngram_order"],
            "small_draft_d_model": params["small_draft_d_model"],
            "small_draft_steps": params["small_draft_steps"],
            "small_draft_distilled": params["small_draft_distilled"],
        }
        temperatures = params["temperatures"]
        cases: list[dict[str, Any]] = []
        for impl in params["impls"]:
            cases += [
                {
                    **draft_params,
                    "part": "distribution",
                    "draft": draft,
                    "impl": impl,
                    "k": params["distribution_k"],
                    "samples": params["distribution_samples"],
                    "context_chars": params["context_chars"],
                    "temperature": temperature,
                    **shape,
                }
                for temperature in params["distribution_temperatures"]
                for draft in params["drafts"]
                if draft in params["distribution_drafts"]
            ]
        for impl in params["impls"]:
            cases.append({"part": "aa", "draft": "none", "k": 0, "impl": impl, "temperature": 1.0, **timing, **shape})
            for index, temperature in enumerate(temperatures):
                drafts = [
                    draft for draft in params["drafts"] if index == 0 or draft in params["lower_temperature_drafts"]
                ]
                cases += [
                    {
                        **draft_params,
                        "part": "speculative",
                        "draft": draft,
                        **point,
                        "impl": impl,
                        "temperature": temperature,
                        **timing,
                        **shape,
                    }
                    for draft in drafts
                    for point in schedule_params(params)
                ]
                if drafts:
                    cases.append(
                        {
                            "part": "choice",
                            "impl": impl,
                            "temperature": temperature,
                            "drafts": params["drafts"],
                            **shape,
                        }
                    )
            cases.append({"part": "accuracy", "impl": impl, **shape})
        return cases

    def run_case(self, case: dict[str, Any], context: ExperimentContext) -> tuple[MeasurementRecord, ...]:
        handler = getattr(self, f"_{case['part']}")
        return tuple(handler(case, context))

    def _distribution(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        return speculative_check.distribution(case, context)

    def _choice(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        return speculative_choice.choice(case, context, self.name)

    def _accuracy(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        return speculative_choice.accuracy(case, context, self.name)

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
        """The prediction, made before the loop runs and from nothing the loop measures: the
        acceptance per position of calibration text and the schedule run over it give the
        characters per pass and the draft lengths (runner.speculative_prediction); the costs
        come from held-out text, the plain step from generations timed now."""
        target, n, temperature = context.model, case["new_tokens"], case["temperature"]
        schedule = schedule_of(case)
        prediction = simulate(calibration_for(case, context, draft), schedule, context.seed)
        # The cost session drafts a fixed length: the schedule's mean, rounded.
        k = min(schedule.longest, max(1, round(prediction.mean_draft_length)))
        alpha = held_out_alpha(case, context, draft)
        _, held_out = context.corpus.split()
        # A verification's cost grows with its position: calibrate half way through a generation.
        start = min(len(context.prompt()) + n // 2, target.config.context_length - k - 1)
        text = held_out[: start + n].tolist()
        passes = dry_run_passes(draft, text, start, k, temperature, context.seed, count=COST_CALLS + 1)
        costs = CostSession(target, case["impl"], draft, k, temperature, text, passes, context.seed, context.harness)()
        # A typical step (the median), as the session costs are means over their rounds.
        step = context.harness.min_of(self._baseline(case, context), repeats=CALIBRATION_REPEATS).median / n
        draft_cost = costs.draft_turn_seconds / k / step
        cost_in_steps = costs.verify_seconds / step + prediction.mean_draft_length * draft_cost
        return [
            MeasurementRecord("alpha_a_priori", alpha, "probability"),
            MeasurementRecord("expected_chars_per_pass", expected_chars_per_pass(alpha, k), "chars"),
            MeasurementRecord("predicted_chars_per_pass", prediction.chars_per_pass, "chars"),
            MeasurementRecord("predicted_mean_draft_length", prediction.mean_draft_length, "tokens"),
            *(
                MeasurementRecord(f"predicted_acceptance_rate_at_position_{position}", rate, "ratio")
                for position, rate in enumerate(prediction.acceptance_at_position, start=1)
                if rate == rate  # nan: no simulated pass drafted that far
            ),
            MeasurementRecord("a_priori_step_seconds", step, "seconds"),
            MeasurementRecord("a_priori_verify_cost_ratio", costs.verify_seconds / step, "ratio"),
            MeasurementRecord("a_priori_draft_cost_ratio", draft_cost, "ratio"),
            MeasurementRecord("predicted_speedup_a_priori", prediction.chars_per_pass / cost_in_steps, "ratio"),
        ]

    def _speculative(self, case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
        target, prompt, impl = context.model, context.prompt(), case["impl"]
        n, temperature, seed = case["new_tokens"], case["temperature"], context.seed
        schedule = schedule_of(case)
        draft = make_draft(case, context)
        a_priori = self._a_priori(case, context, draft)

        def loop() -> Any:
            return speculative_decode(
                target, draft, schedule.k, prompt, n, temperature=temperature, seed=seed, impl=impl, schedule=schedule
            )

        counts = loop()
        # The cost sessions draft a fixed length: the loop's mean, rounded.
        k = min(schedule.longest, max(1, round(counts.mean_draft_length)))
        # After each pair, the pass costs replaying the loop's own passes, so each pair's
        # component model sees the machine as its measured ratio did.
        passes = middle_passes(passes_of_run(counts, len(prompt)))
        text = prompt + counts.tokens
        cost_session = CostSession(target, impl, draft, k, temperature, text, passes, seed, context.harness)
        sessions = []
        paired = context.harness.paired(
            self._baseline(case, context), loop, pairs=case["pairs"], between=lambda: sessions.append(cost_session())
        )
        target_pass_seconds, draft_call_seconds = single_call_costs(
            target, impl, draft, text, len(prompt) + n // 2, temperature, seed, context.harness
        )
        per_pass = counts.chars_per_target_pass
        drafted = counts.mean_draft_length
        assisted = self._hf_assisted(case, context, draft, schedule)
        # Costs in units of that pair's plain decode step (target pass and sampling): a
        # verification is a (k+1)-position pass and the accept rule; a draft turn is proposing k
        # and following the commit, calls included. The write-ups' formula takes a verification
        # as one step; the component model uses the measured verification.
        steps = [seconds / n for seconds in paired.baseline_seconds]
        draft_costs = [costs.draft_turn_seconds / k / step for costs, step in zip(sessions, steps, strict=True)]
        verify_costs = [costs.verify_seconds / step for costs, step in zip(sessions, steps, strict=True)]
        writeup_formula = statistics.median(per_pass / (1 + drafted * draft) for draft in draft_costs)
        component_model = statistics.median(
            per_pass / (verify + drafted * draft) for verify, draft in zip(verify_costs, draft_costs, strict=True)
        )
        measured = paired.median
        predicted = {record.metric: record.value for record in a_priori}
        decided = len(counts.total_variations)
        positions = acceptance_at_positions(counts.accepted_per_pass, counts.drafted_per_pass, schedule.longest)
        greedy: list[MeasurementRecord] = []
        if temperature == 0.0:
            plain = generate(target, prompt, n, temperature=0.0, seed=seed, impl=impl).tokens
            greedy = [MeasurementRecord("greedy_matches_target", counts.tokens == plain, "bool")]
        return [
            *a_priori,
            *greedy,
            MeasurementRecord(
                "a_priori_relative_error", relative_error(predicted["predicted_speedup_a_priori"], measured), "ratio"
            ),
            MeasurementRecord(
                "a_priori_chars_per_pass_error",
                relative_error(predicted["predicted_chars_per_pass"], per_pass),
                "ratio",
            ),
            MeasurementRecord("acceptance_rate", counts.acceptance_rate, "ratio"),
            MeasurementRecord("chars_per_target_pass", per_pass, "chars"),
            MeasurementRecord("mean_accepted_length", counts.mean_accepted_length, "tokens"),
            MeasurementRecord("system_efficiency", counts.system_efficiency, "ratio"),
            MeasurementRecord("mean_draft_length", drafted, "tokens"),
            *(
                MeasurementRecord(f"acceptance_rate_at_position_{position}", rate, "ratio")
                for position, rate in enumerate(positions, start=1)
                if rate == rate  # nan: no pass drafted that far
            ),
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
            # The roofline prices a verification of the length the cost sessions drafted.
            *roofline.speculative(
                context, {**case, "k": k}, draft, a_priori, statistics.median(verify_costs), measured
            ),
        ]

    @staticmethod
    def _hf_assisted(
        case: dict[str, Any], context: ExperimentContext, draft: Draft, schedule: Schedule
    ) -> list[MeasurementRecord]:
        """With an hf: draft, Hugging Face's assisted generation with the same two models, timed
        in pairs against this loop (runner.hf_peer); nothing for the other drafts."""
        if not case["draft"].startswith(DRAFT_PREFIX) or not isinstance(draft, ModelDraft):
            return []
        from runner.hf_peer import assisted_measurements

        target, prompt, impl = context.model, context.prompt(), case["impl"]
        n, temperature, seed = case["new_tokens"], case["temperature"], context.seed

        def loop(temperature: float) -> Any:
            return speculative_decode(
                target, draft, schedule.k, prompt, n, temperature=temperature, seed=seed, impl=impl, schedule=schedule
            )

        return assisted_measurements(
            target,
            draft.model,
            prompt,
            n,
            temperature,
            seed,
            loop(0.0).tokens,
            lambda: loop(temperature),
            context,
            case["pairs"],
        )


EXPERIMENT = SpeculativeExperiment()
