"""The speculative loop case's a-priori prediction (runner.experiments.parts.speculative_timing runs
it first): the characters per pass and draft lengths simulated over calibration text, and the
costs of each draft length measured in cost sessions before the loop, each round beside a plain
generation timed for its step."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from runner.cost.speculative import component_model_speedup, expected_chars_per_pass
from runner.cost.speculative_prediction import Prediction, simulate, simulated_passes
from runner.decoding.speculative import Draft, Schedule
from runner.experiments.base import ExperimentContext
from runner.experiments.parts.speculative_costs import CostSession, PassCosts, centred_passes
from runner.experiments.parts.speculative_drafts import calibration_for, calibration_text, held_out_alpha
from runner.measure.timing import Harness
from store.records import MeasurementRecord

# Rounds of a plain generation and a cost session per draft length before the loop (their median).
A_PRIORI_COST_SESSIONS = 5


def a_priori_prediction(
    case: dict[str, Any], context: ExperimentContext, draft: Draft, schedule: Schedule, plain: Callable[[], object]
) -> list[MeasurementRecord]:
    """The prediction, made before the loop runs and from nothing the loop measures: the
    acceptance per position of calibration text and the schedule run over it give the
    characters per pass and the draft lengths (runner.cost.speculative_prediction); the costs
    come from cost sessions along that text, each round of them beside ``plain``, a plain
    generation timed for its step (cost_rounds)."""
    target, n, temperature = context.model, case["new_tokens"], case["temperature"]
    rollout_length = schedule.longest if schedule.kind == "confidence" else 0
    calibration = calibration_for(case, context, draft, rollout_length)
    prediction = simulate(calibration, schedule, context.seed)
    alpha = held_out_alpha(case, context, draft)
    # The sessions follow the first calibration window, keeping what its a_t say a pass keeps
    # there (a dry run along held-out text kept only proposals equal to it, fewer than the loop
    # keeps, and so fed the draft less per turn), over the passes around the middle of a
    # generation (centred_passes: a pass's cost grows with its position).
    text = calibration_text(context, temperature, n)[0]
    chances = calibration.kept_chances[0]

    sessions = {
        k: CostSession(
            target,
            case["impl"],
            draft,
            k,
            temperature,
            text,
            centred_passes(simulated_passes(chances, len(context.prompt()), k, context.seed, count=len(chances))),
            context.seed,
            context.harness,
        )
        for k in priced_lengths(prediction, schedule.longest)
    }
    costs, step = cost_rounds(plain, n, sessions, context.harness)
    draft_turn, verify_seconds = priced_pass(prediction, schedule.longest, costs.__getitem__)
    draft_cost = draft_turn / prediction.mean_draft_calls / step
    return [
        MeasurementRecord("alpha_a_priori", alpha, "probability"),
        # The write-ups' i.i.d. E, at the schedule's mean draft length rounded.
        MeasurementRecord(
            "expected_chars_per_pass",
            expected_chars_per_pass(alpha, min(schedule.longest, max(1, round(prediction.mean_draft_length)))),
            "chars",
        ),
        MeasurementRecord("predicted_chars_per_pass", prediction.chars_per_pass, "chars"),
        MeasurementRecord("predicted_mean_draft_length", prediction.mean_draft_length, "tokens"),
        MeasurementRecord("predicted_mean_draft_calls", prediction.mean_draft_calls, "calls"),
        *(
            MeasurementRecord(f"predicted_acceptance_rate_at_position_{position}", rate, "ratio")
            for position, rate in enumerate(prediction.acceptance_at_position, start=1)
            if rate == rate  # nan: no simulated pass drafted that far
        ),
        MeasurementRecord("a_priori_step_seconds", step, "seconds"),
        MeasurementRecord("a_priori_verify_cost_ratio", verify_seconds / step, "ratio"),
        MeasurementRecord("a_priori_draft_cost_ratio", draft_cost, "ratio"),
        MeasurementRecord(
            "predicted_speedup_a_priori",
            component_model_speedup(
                prediction.chars_per_pass, prediction.mean_draft_calls, verify_seconds / step, draft_cost
            ),
            "ratio",
        ),
    ]


def _drafted_shares(prediction: Prediction) -> dict[int, float]:
    """Each draft length the simulated passes drafted, and its share of them."""
    return {length: share for length, share in enumerate(prediction.draft_length_share, start=1) if share > 0}


def _stop_lengths(prediction: Prediction, longest: int) -> tuple[int, int] | None:
    """The two lengths whose draft turns price a confidence stop's dropped call (their
    difference per call), or None when the schedule never stops early."""
    if prediction.mean_draft_calls - prediction.mean_draft_length <= 0:
        return None
    lengths = list(_drafted_shares(prediction))
    low = min(lengths)
    high = max(lengths) if len(lengths) > 1 else (low + 1 if low < longest else low - 1)
    return low, high


def priced_lengths(prediction: Prediction, longest: int) -> list[int]:
    """The draft lengths ``priced_pass`` asks a session for."""
    return sorted(set(_drafted_shares(prediction)) | set(_stop_lengths(prediction, longest) or ()))


def priced_pass(prediction: Prediction, longest: int, session: Callable[[int], PassCosts]) -> tuple[float, float]:
    """A pass's draft turn and verification, in the units of ``session(k)``, the costs of passes
    of k proposals (a draft turn following the commit and calling k times, a verification of
    k + 1 positions). Each length the schedule drafts is priced on its own and weighted by its
    share of the simulated passes, since a verification's cost is not linear in its positions
    (the fast path's blocks of rows); a confidence stop's dropped call costs a call's share of
    the turns (the difference between two lengths' turns)."""
    shares = _drafted_shares(prediction)
    draft_turn = sum(share * session(length).draft_turn_seconds for length, share in shares.items())
    verify = sum(share * session(length).verify_seconds for length, share in shares.items())
    stop = _stop_lengths(prediction, longest)
    if stop is not None:
        low, high = stop
        call = (session(high).draft_turn_seconds - session(low).draft_turn_seconds) / (high - low)
        draft_turn += (prediction.mean_draft_calls - prediction.mean_draft_length) * call
    return draft_turn, verify


def cost_rounds(
    plain: Callable[[], object], new_tokens: int, sessions: Mapping[int, Callable[[], PassCosts]], harness: Harness
) -> tuple[dict[int, PassCosts], float]:
    """Each length's pass costs and the plain step, from A_PRIORI_COST_SESSIONS rounds of a plain
    generation timed and then one session per length. A cost is the median over rounds of its
    ratio to its own round's step, in seconds at the median step. A step timed apart from the
    sessions put a case's costs 25% low when the machine's speed drifted between them (static
    bigram, confidence: an a-priori verification of 0.88 steps, the loop's 1.18); within a
    round, as within the loop's pairs, a ratio sees one state of the machine."""
    plain()  # a warm-up (a timed call after it, discarded, cost the quick sweep 1.5 s)
    steps: list[float] = []
    rounds: list[dict[int, PassCosts]] = []
    for _ in range(A_PRIORI_COST_SESSIONS):
        steps.append(harness.time_once(plain) / new_tokens)
        rounds.append({k: session() for k, session in sessions.items()})
    step = statistics.median(steps)

    def at_median_step(seconds: Callable[[PassCosts], float], k: int) -> float:
        return step * statistics.median(seconds(costs[k]) / each for costs, each in zip(rounds, steps, strict=True))

    return {
        k: PassCosts(
            at_median_step(lambda cost: cost.draft_turn_seconds, k),
            at_median_step(lambda cost: cost.verify_seconds, k),
        )
        for k in sessions
    }, step
