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
  (sampling, the accept rule, cache rewinds, Python) fitted on the run's other cases;
- ``pass_in_steps``: a priced pass split into those costs, in plain steps, and which one decides.

runner.experiments.parts.speculative_costs measures the costs these formulas take;
runner.experiments.parts.speculative_timing records what they give beside the measured speedup.
"""

from __future__ import annotations


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
    pass_seconds = measured_step_seconds * measured_chars_per_pass / measured_speedup
    return pass_seconds - verify_seconds - draft_calls_per_pass * draft_call_seconds


def loop_break_even_acceptance(
    k: int, step_seconds: float, draft_call_seconds: float, verify_seconds: float, loop_overhead_seconds: float
) -> float | None:
    """The acceptance (each of k proposals kept with it independently) at which the loop stops
    losing, k draft calls a pass; None if even full acceptance loses."""
    return break_even_acceptance(k, step_seconds, draft_call_seconds, verify_seconds + loop_overhead_seconds)


# The costs of a speculative pass, in the order pass_in_steps lists them.
PASS_COSTS = ("verification", "draft", "cache_refill", "loop_overhead")


def pass_in_steps(
    step_seconds: float,
    verify_seconds: float,
    draft_calls_per_pass: float,
    draft_call_seconds: float,
    draft_turn_fixed_seconds: float,
    cache_refill_seconds: float | None,
    loop_overhead_seconds: float,
) -> dict[str, float]:
    """A pass's costs in plain steps, by PASS_COSTS name: its verification, its draft turn (the
    turn's fixed part and its calls), the cache refill (left out where None: a run placed before it
    was priced) and the loop's own overhead. The largest decides whether speculation can win: what
    the Roofline page and ``benchmarks/speculative_roofline_check.py`` both say."""
    costs = {
        "verification": verify_seconds / step_seconds,
        "draft": (draft_turn_fixed_seconds + draft_calls_per_pass * draft_call_seconds) / step_seconds,
        "cache_refill": (cache_refill_seconds or 0.0) / step_seconds,
        "loop_overhead": loop_overhead_seconds / step_seconds,
    }
    if cache_refill_seconds is None:
        del costs["cache_refill"]
    return costs


def deciding_cost(costs: dict[str, float]) -> str:
    """The name of the largest of a pass's costs (pass_in_steps)."""
    return max(costs, key=lambda name: costs[name])
