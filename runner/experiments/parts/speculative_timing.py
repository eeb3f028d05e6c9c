"""The speculative experiment's timed parts: the loop against plain decoding through the same
impl (part ``speculative``), with its a-priori prediction made first and the after-the-fact
models beside it, and the A/A case (part ``aa``). The formulas come from runner.cost.speculative;
the costs they take are measured by runner.experiments.parts.speculative_costs, the prediction made
before the loop by runner.experiments.parts.speculative_a_priori."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from runner.cost.speculative import component_model_speedup, relative_error, writeup_formula_speedup
from runner.decoding.decode import generate
from runner.decoding.drafts import ModelDraft
from runner.decoding.speculative import (
    Draft,
    Schedule,
    SpeculativeResult,
    acceptance_at_positions,
    speculative_decode,
)
from runner.experiments.base import ExperimentContext, placements_between_pairs
from runner.experiments.parts import roofline_placement as roofline
from runner.experiments.parts.speculative_a_priori import a_priori_prediction
from runner.experiments.parts.speculative_costs import (
    CostSession,
    PassCosts,
    SingleCalls,
    centred_passes,
    passes_of_run,
    single_call_costs,
)
from runner.experiments.parts.speculative_drafts import make_draft
from runner.measure.timing import Paired
from runner.model.data_folder import DRAFT_PREFIX
from store.records import MeasurementRecord


def schedule_of(case: dict[str, Any]) -> Schedule:
    """The case's schedule: fixed k, heuristic from k up to k_max, or confidence up to k."""
    kind = case["schedule"]
    if kind == "fixed":
        return Schedule("fixed", case["k"], case["k"])
    if kind == "heuristic":
        return Schedule("heuristic", case["k"], max(case["k"], case["k_max"]))
    return Schedule("confidence", case["k"], case["k"], case["p_min"])


def plain_decode(case: dict[str, Any], context: ExperimentContext) -> Any:
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


def aa(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    plain = plain_decode(case, context)
    with placements_between_pairs(case["impl"], context.model) as between:
        return speedup_measurements(context.harness.paired(plain, plain, pairs=case["pairs"], between=between))


def speedup_measurements(paired: Paired) -> list[MeasurementRecord]:
    median, low, high = paired.measurements("speedup")
    return [
        MeasurementRecord("speedup_median", median.value, "ratio", median.samples),
        MeasurementRecord("speedup_min", low.value, "ratio"),
        MeasurementRecord("speedup_max", high.value, "ratio"),
    ]


@dataclass(frozen=True)
class TimedLoop:
    """The loop timed in pairs against plain decoding: ``counted`` is its first generation
    (seeded as ever: the counted figures), ``timed`` the pairs' texts (one generation each),
    ``sessions`` the pass costs replayed after each pair, drafting ``k`` a turn."""

    counted: SpeculativeResult
    timed: list[SpeculativeResult]
    paired: Paired
    sessions: list[PassCosts]
    k: int
    new_tokens: int

    @property
    def steps(self) -> list[float]:
        """Each pair's plain decode step (target pass and sampling), in seconds."""
        return [seconds / self.new_tokens for seconds in self.paired.baseline_seconds]


def time_loop(
    case: dict[str, Any], context: ExperimentContext, draft: Draft, schedule: Schedule, warm_plain: bool = False
) -> TimedLoop:
    """One generation to count, then the loop timed in pairs against plain decoding, each pair
    followed by a cost session replaying the loop's own passes. ``warm_plain``: plain decoding
    of the case has just run (the a-priori prediction's rounds), so it needs no warm-up call."""
    target, prompt, impl = context.model, context.prompt(), case["impl"]
    n, temperature, seed = case["new_tokens"], case["temperature"], context.seed
    texts: dict[int, SpeculativeResult] = {}  # by seed: each text's generation, once
    # Pair i generates its own text, seed + 1 + warm-up + i (the seeds the pairs drew when each
    # call took the next one), in every run: a timed speedup over one seeded text is that text's
    # (200 characters hold ~80 passes, whose characters per pass vary by ~5%), not the loop's, and
    # two runs' pair i time the same text, which the review matches (runner.metrics: seeded_pairs).
    # The counts are the first generation's, seeded as ever.
    first_pair_seed = seed + 1 + context.harness.warmup
    pair = 0

    def generation(text_seed: int) -> SpeculativeResult:
        result = speculative_decode(
            target, draft, schedule.k, prompt, n, temperature=temperature, seed=text_seed, impl=impl, schedule=schedule
        )
        texts.setdefault(text_seed, result)
        return result

    def loop() -> SpeculativeResult:
        return generation(first_pair_seed + pair)

    counted = generation(seed)
    # The cost sessions draft a fixed length: the loop's mean, rounded.
    k = min(schedule.longest, max(1, round(counted.mean_draft_length)))
    # After each pair, the pass costs replaying the loop's own passes, so each pair's
    # component model sees the machine as its measured ratio did.
    passes = centred_passes(passes_of_run(counted, len(prompt)))
    text = prompt + counted.tokens
    cost_session = CostSession(target, impl, draft, k, temperature, text, passes, seed, context.harness)
    sessions: list[PassCosts] = []

    # On the fast impl a generation lasts a few milliseconds, and one pair hit by the host moved a
    # case's ratio 15-27% alone (the Xeon, issue 42): there a pair's sample loops its text until it
    # lasts MIN_SAMPLE_SECONDS, the two sides' calls interleaved. The other impls' generations
    # last longer than that already, and settling them cost the quick sweep 20 s. No warm-up call:
    # both sides have just run (the counted generation, and plain decoding in the a-priori rounds
    # or the line below), and the static impl's cost the quick sweep 2.4 s.
    plain = plain_decode(case, context)
    if not warm_plain:
        plain()
    # On the fast impl each pair (with its cost session) times its own packing of the target and
    # of a model draft's weights: where a fast_int8 draft's landed moved all of a run's fast_int8
    # cases together, by as much as 3% (runner.decoding.fast_packing).
    with placements_between_pairs(impl, target, *([draft.model] if isinstance(draft, ModelDraft) else [])) as repack:

        def next_pair() -> None:
            nonlocal pair
            sessions.append(cost_session())
            pair += 1
            if repack is not None:
                repack()

        paired = context.harness.paired(
            plain, loop, pairs=case["pairs"], between=next_pair, steady=impl == "fast", warm=False
        )
    # The pairs' texts, each once however often a sample looped it: what the counted figures pool
    # is the same in every run, whatever the timing chose.
    timed = [texts[first_pair_seed + index] for index in range(case["pairs"])]
    return TimedLoop(counted, timed, paired, sessions, k, n)


def pooled_per_pass(timed: list[SpeculativeResult]) -> tuple[float, float, float]:
    """What the timed generations did per target pass, pooled (what the measured speedup saw):
    characters, drafted tokens and draft calls."""
    timed_passes = sum(generation.target_passes for generation in timed)
    per_pass = sum(len(generation.tokens) for generation in timed) / timed_passes
    drafted = sum(generation.proposed for generation in timed) / timed_passes
    draft_calls = sum(generation.draft_calls for generation in timed) / timed_passes
    return per_pass, drafted, draft_calls


def step_relative_costs(timed: TimedLoop) -> tuple[list[float], list[float]]:
    """Each pair's draft turn per proposal and verification, in units of that pair's plain decode
    step: a verification is a (k+1)-position pass and the accept rule; a draft turn is proposing
    k and following the commit, calls included."""
    draft_costs = [
        costs.draft_turn_seconds / timed.k / step for costs, step in zip(timed.sessions, timed.steps, strict=True)
    ]
    verify_costs = [costs.verify_seconds / step for costs, step in zip(timed.sessions, timed.steps, strict=True)]
    return draft_costs, verify_costs


def greedy_check(
    case: dict[str, Any], context: ExperimentContext, counted: SpeculativeResult
) -> list[MeasurementRecord]:
    """At temperature 0, whether the loop's text is plain greedy decoding's; nothing otherwise."""
    if case["temperature"] != 0.0:
        return []
    prompt, n = context.prompt(), case["new_tokens"]
    plain = generate(context.model, prompt, n, temperature=0.0, seed=context.seed, impl=case["impl"]).tokens
    return [MeasurementRecord("greedy_matches_target", counted.tokens == plain, "bool")]


def counted_figures(counted: SpeculativeResult, longest: int, per_pass: float) -> list[MeasurementRecord]:
    """The counted generation's acceptance and lengths (and the timed ones' characters per pass)."""
    decided = len(counted.total_variations)
    positions = acceptance_at_positions(counted.accepted_per_pass, counted.drafted_per_pass, longest)
    return [
        MeasurementRecord("acceptance_rate", counted.acceptance_rate, "ratio"),
        MeasurementRecord("chars_per_target_pass", counted.chars_per_target_pass, "chars"),
        MeasurementRecord("chars_per_target_pass_timed", per_pass, "chars"),
        MeasurementRecord("mean_accepted_length", counted.mean_accepted_length, "tokens"),
        MeasurementRecord("system_efficiency", counted.system_efficiency, "ratio"),
        MeasurementRecord("mean_draft_length", counted.mean_draft_length, "tokens"),
        MeasurementRecord("mean_draft_calls", counted.mean_draft_calls, "calls"),
        *(
            MeasurementRecord(f"acceptance_rate_at_position_{position}", rate, "ratio")
            for position, rate in enumerate(positions, start=1)
            if rate == rate  # nan: no pass drafted that far
        ),
        MeasurementRecord("target_passes", counted.target_passes, "passes"),
        MeasurementRecord("accepted", counted.accepted, "tokens"),
        MeasurementRecord("proposed", counted.proposed, "tokens"),
        MeasurementRecord("acceptance_per_decided", counted.accepted / decided if decided else 0.0, "ratio"),
        MeasurementRecord("one_minus_mean_tv", 1 - sum(counted.total_variations) / max(decided, 1), "ratio"),
        *(
            MeasurementRecord(f"accepted_length_{length}", passes, "passes")
            for length, passes in enumerate(counted.accepted_histogram)
        ),
    ]


def cost_figures(
    timed: TimedLoop, draft_costs: list[float], verify_costs: list[float], single_calls: SingleCalls
) -> list[MeasurementRecord]:
    """The pairs' step, verification and draft costs, and the write-ups' cost table: single calls
    timed on their own (a target pass's and a draft call's) and their c, and a draft turn of
    TURN_PROPOSALS proposals timed the same way."""
    target_pass_seconds, draft_call_seconds = single_calls.target_pass_seconds, single_calls.draft_call_seconds
    return [
        MeasurementRecord("target_step_seconds", statistics.median(timed.steps), "seconds"),
        MeasurementRecord(
            "verify_seconds", statistics.median(costs.verify_seconds for costs in timed.sessions), "seconds"
        ),
        MeasurementRecord(
            "draft_seconds_per_char",
            statistics.median(costs.draft_turn_seconds for costs in timed.sessions) / timed.k,
            "seconds",
        ),
        MeasurementRecord("draft_cost_ratio", statistics.median(draft_costs), "ratio"),
        MeasurementRecord("target_pass_us", target_pass_seconds * 1e6, "microseconds"),
        MeasurementRecord("draft_call_us", draft_call_seconds * 1e6, "microseconds"),
        MeasurementRecord("draft_cost_ratio_writeup", draft_call_seconds / target_pass_seconds, "ratio"),
        MeasurementRecord("verify_cost_ratio", statistics.median(verify_costs), "ratio"),
        *(
            [MeasurementRecord("draft_turn_us", single_calls.draft_turn_seconds * 1e6, "microseconds")]
            if not math.isnan(single_calls.draft_turn_seconds)
            else []
        ),
    ]


def speedup_figures(
    timed: TimedLoop, pooled: tuple[float, float, float], draft_costs: list[float], verify_costs: list[float]
) -> list[MeasurementRecord]:
    """The measured speedup and the two after-the-fact models beside it: the write-ups' formula
    (a verification as one step) and the component model (the measured verification)."""
    per_pass, drafted, draft_calls = pooled
    writeup_formula = statistics.median(writeup_formula_speedup(per_pass, drafted, draft) for draft in draft_costs)
    component_model = statistics.median(
        component_model_speedup(per_pass, draft_calls, verify, draft)
        for verify, draft in zip(verify_costs, draft_costs, strict=True)
    )
    paired, measured = timed.paired, timed.paired.median
    return [
        *speedup_measurements(paired),
        MeasurementRecord("baseline_seconds", min(paired.baseline_seconds), "seconds"),
        MeasurementRecord("speculative_seconds", min(paired.candidate_seconds), "seconds"),
        MeasurementRecord("writeup_formula_speedup", writeup_formula, "ratio"),
        MeasurementRecord("writeup_formula_relative_error", relative_error(writeup_formula, measured), "ratio"),
        MeasurementRecord("component_model_speedup", component_model, "ratio"),
        MeasurementRecord("component_model_relative_error", relative_error(component_model, measured), "ratio"),
    ]


def a_priori_errors(a_priori: list[MeasurementRecord], measured: float, per_pass: float) -> list[MeasurementRecord]:
    """How far the a-priori prediction, made before the loop ran, fell from what it measured."""
    predicted = {record.metric: record.value for record in a_priori}
    return [
        MeasurementRecord(
            "a_priori_relative_error", relative_error(predicted["predicted_speedup_a_priori"], measured), "ratio"
        ),
        MeasurementRecord(
            "a_priori_chars_per_pass_error", relative_error(predicted["predicted_chars_per_pass"], per_pass), "ratio"
        ),
    ]


def speculative(case: dict[str, Any], context: ExperimentContext) -> list[MeasurementRecord]:
    """The loop against plain decoding through the same impl: its a-priori prediction first, then
    the timed pairs, the single calls' costs, Hugging Face's peer (an hf: draft), and the figures
    counted, timed and modelled, placed on the machine's roof."""
    schedule = schedule_of(case)
    draft = make_draft(case, context)
    a_priori = a_priori_prediction(case, context, draft, schedule, plain_decode(case, context))
    timed = time_loop(case, context, draft, schedule, warm_plain=True)
    prompt, n = context.prompt(), case["new_tokens"]
    single_calls = single_call_costs(
        context.model,
        case["impl"],
        draft,
        prompt + timed.counted.tokens,
        len(prompt) + n // 2,
        case["temperature"],
        context.seed,
        context.harness,
    )
    pooled = pooled_per_pass(timed.timed)
    assisted = hf_assisted(case, context, draft, schedule)
    draft_costs, verify_costs = step_relative_costs(timed)
    records = [
        *a_priori,
        *greedy_check(case, context, timed.counted),
        *a_priori_errors(a_priori, timed.paired.median, pooled[0]),
        *counted_figures(timed.counted, schedule.longest, pooled[0]),
        *cost_figures(timed, draft_costs, verify_costs, single_calls),
        *speedup_figures(timed, pooled, draft_costs, verify_costs),
        *assisted,
    ]
    # The roofline prices a verification of the length the cost sessions drafted.
    figures = {record.metric: record.value for record in records}
    return [*records, *roofline.speculative(context, {**case, "k": timed.k}, draft, figures)]


def hf_assisted(
    case: dict[str, Any], context: ExperimentContext, draft: Draft, schedule: Schedule
) -> list[MeasurementRecord]:
    """With an hf: draft, Hugging Face's assisted generation with the same two models, timed
    in pairs against this loop (runner.experiments.parts.hf_peer); nothing for the other drafts."""
    if not case["draft"].startswith(DRAFT_PREFIX) or not isinstance(draft, ModelDraft):
        return []
    from runner.experiments.parts.hf_peer import assisted_measurements

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
