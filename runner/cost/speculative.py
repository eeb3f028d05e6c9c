"""The speculative speedup formulas, in one place: what a pass yields and what it costs, in
units of a plain decode step (standard library only).

- ``expected_chars_per_pass``: the write-ups' E = (1 − α^(k+1)) / (1 − α), every proposal kept
  with the same α independently;
- ``writeup_formula_speedup``: E over (1 + L·c), a verification taken as one plain step;
- ``component_model_speedup``: E over (v + L·c), the verification's measured cost v; also the
  a-priori prediction's formula, with its simulated characters per pass and draft length;
- ``speculative_speedup`` and ``break_even_acceptance``: the roofline's version in seconds
  (runner.experiments.parts.roofline_placement prices the step, a draft call and a verification on the machine's roof);
- ``loop_speedup``, ``loop_overhead_seconds`` and ``loop_break_even_acceptance``: the same with
  the loop's own costs, a draft call priced as a fixed part plus its pass and a per-pass overhead
  (sampling, the accept rule, cache rewinds, Python) fitted on the run's other cases
  (``fitted_loop_overhead``);
- ``turn_fixed_seconds``: a draft turn's fixed part from two timed turns;
- ``pass_in_steps``: a priced pass split into those costs, in plain steps, and which one decides.

runner.experiments.parts.speculative_costs measures the costs these formulas take;
runner.experiments.parts.speculative_timing records what they give beside the measured speedup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def expected_chars_per_pass(alpha: float, k: int) -> float:
    """E = 1 + α + … + α^k: characters a pass emits when each proposal is kept with
    probability α independently (the bonus or correction character included)."""
    return float(k + 1) if alpha >= 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)


def writeup_formula_speedup(chars_per_pass: float, mean_draft_length: float, draft_cost_ratio: float) -> float:
    """The write-ups' formula: a verification costs one plain step, a drafted character ``c``."""
    return chars_per_pass / (1 + mean_draft_length * draft_cost_ratio)


def component_model_speedup(
    chars_per_pass: float, mean_draft_length: float, verify_cost_ratio: float, draft_cost_ratio: float
) -> float:
    """Characters per pass over the pass's cost in plain steps: a verification ``v`` and
    ``mean_draft_length`` drafted characters of ``c`` each."""
    return chars_per_pass / (verify_cost_ratio + mean_draft_length * draft_cost_ratio)


def relative_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def speculative_speedup(
    acceptance: float, k: int, step_seconds: float, draft_step_seconds: float, verify_seconds: float
) -> float:
    """Plain decoding's time per token over speculative decoding's: a round drafts k tokens and
    verifies k + 1 positions, and yields expected_chars_per_pass tokens."""
    return expected_chars_per_pass(acceptance, k) * step_seconds / (k * draft_step_seconds + verify_seconds)


def break_even_acceptance(
    k: int, step_seconds: float, draft_step_seconds: float, verify_seconds: float
) -> float | None:
    """The smallest acceptance at which speculative decoding stops losing, by bisection; None if
    even α = 1 loses."""
    if speculative_speedup(1.0, k, step_seconds, draft_step_seconds, verify_seconds) < 1.0:
        return None
    low, high = 0.0, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        if speculative_speedup(middle, k, step_seconds, draft_step_seconds, verify_seconds) < 1.0:
            low = middle
        else:
            high = middle
    return high


def loop_speedup(
    chars_per_pass: float,
    draft_calls_per_pass: float,
    step_seconds: float,
    verify_seconds: float,
    draft_call_seconds: float,
    loop_overhead_seconds: float,
) -> float:
    """Plain decoding's time per token over the loop's: a pass costs a verification, its draft
    calls and the loop's own overhead, and yields ``chars_per_pass`` tokens."""
    return (
        chars_per_pass
        * step_seconds
        / (verify_seconds + draft_calls_per_pass * draft_call_seconds + loop_overhead_seconds)
    )


def loop_overhead_seconds(
    measured_step_seconds: float,
    measured_chars_per_pass: float,
    measured_speedup: float,
    verify_seconds: float,
    draft_calls_per_pass: float,
    draft_call_seconds: float,
) -> float:
    """What one pass of a measured loop took beyond its priced verification and draft calls: the
    pass's time (its plain step × characters per pass ÷ the measured speedup) minus those parts.
    Negative where the parts are priced above what the loop spent."""
    pass_seconds = measured_pass_seconds(measured_step_seconds, measured_chars_per_pass, measured_speedup)
    return pass_seconds - verify_seconds - draft_calls_per_pass * draft_call_seconds


def measured_pass_seconds(
    measured_step_seconds: float, measured_chars_per_pass: float, measured_speedup: float
) -> float:
    """A measured loop's pass: its plain step × characters per pass ÷ its speedup."""
    return measured_step_seconds * measured_chars_per_pass / measured_speedup


@dataclass(frozen=True)
class LoopResidual:
    """What one case's loop took per pass beyond its priced parts (``loop_overhead_seconds``),
    with its schedule and its measured pass (``measured_pass_seconds``), which weighs it."""

    overhead_seconds: float
    pass_seconds: float
    schedule: str


def fitted_loop_overhead(residuals: Sequence[LoopResidual], schedule: str | None) -> float | None:
    """The loop's per-pass overhead for a case of ``schedule``, from other cases' residuals: those
    of the same schedule, else all (``schedule`` None: all); their lower weighted median, each
    weighted by 1 / its pass² (a residual without a finite overhead and pass is left out). A loop
    in Python pays its schedule's own Python each pass (a confidence stop asks for the draft's top
    probability at every proposal, and computes one distribution more where it stops), where a
    loop in one C++ call decides it in C++: its caller passes None. A residual is a difference of
    whole passes, so its error grows with its pass: an eager draft's 1.6 ms pass left ±100 us where
    a table draft's 60 us pass leaves a few, and the plain median of two such cases is their mean.
    A schedule whose only other case is such a draft still takes its residual (a run's table
    drafts come before its eager one). None where there is none."""
    usable = [
        residual
        for residual in residuals
        if math.isfinite(residual.overhead_seconds) and 0 < residual.pass_seconds < math.inf
    ]
    chosen = [residual for residual in usable if residual.schedule == schedule] or usable
    weighted = sorted((residual.overhead_seconds, residual.pass_seconds**-2) for residual in chosen)
    half, running = sum(weight for _, weight in weighted) / 2, 0.0
    for overhead, weight in weighted:
        running += weight
        if running >= half:
            return overhead
    return None


def loop_break_even_acceptance(
    k: int, step_seconds: float, draft_call_seconds: float, verify_seconds: float, loop_overhead_seconds: float
) -> float | None:
    """The acceptance (each of k proposals kept with it independently) at which the loop stops
    losing, k draft calls a pass; None if even full acceptance loses."""
    return break_even_acceptance(k, step_seconds, draft_call_seconds, verify_seconds + loop_overhead_seconds)


# Proposals in the draft turn a speculative case times beside its one-proposal call
# (runner.experiments.parts.speculative_costs.single_call_costs): a turn is one call of the draft,
# whose fixed part is paid once a pass, not once a proposal; the two timings tell the parts apart.
TURN_PROPOSALS = 4


def turn_fixed_seconds(one_proposal_seconds: float, turn_seconds: float, proposal_floor_seconds: float = 0.0) -> float:
    """A draft turn's fixed part, paid once a pass, from a timed turn of one proposal and one of
    TURN_PROPOSALS: their difference is TURN_PROPOSALS − 1 proposals, and what the one-proposal turn
    took beyond its proposal is the fixed part. A proposal is priced at least
    ``proposal_floor_seconds`` (the roof's price of the draft's pass), so that a one-proposal turn
    is never priced above what it was timed at; never negative."""
    per_proposal = max(0.0, (turn_seconds - one_proposal_seconds) / (TURN_PROPOSALS - 1))
    return max(0.0, one_proposal_seconds - max(per_proposal, proposal_floor_seconds))


# The costs of a speculative pass, in the order pass_in_steps lists them.
PASS_COSTS = ("verification", "draft", "loop_overhead", "cache_refill")


def pass_in_steps(
    *,
    step_seconds: float,
    verify_seconds: float,
    draft_calls_per_pass: float,
    draft_call_seconds: float,
    draft_turn_fixed_seconds: float,
    cache_refill_seconds: float | None,
    loop_overhead_seconds: float,
) -> dict[str, float]:
    """A pass's costs in plain steps, by PASS_COSTS name: its verification, its draft turn (the
    turn's fixed part and its proposals), the loop's own overhead and the cache refill (left out
    where None: a run placed before it was priced). The largest decides whether speculation can
    win: what the Roofline page and ``benchmarks/speculative_roofline_check.py`` both say."""
    seconds = {
        "verification": verify_seconds,
        "draft": draft_turn_fixed_seconds + draft_calls_per_pass * draft_call_seconds,
        "loop_overhead": loop_overhead_seconds,
        "cache_refill": cache_refill_seconds,
    }
    return {name: value / step_seconds for name in PASS_COSTS if (value := seconds[name]) is not None}


def largest_cost(costs: dict[str, float]) -> str:
    """The name of the largest of a pass's costs (pass_in_steps): the one that decides."""
    return max(costs, key=lambda name: costs[name])
