"""``decodelab recommend --run N``: the speculative setup the a-priori prediction picks per impl
(and temperature), what it predicted and measured, and why, read from the run's choice cases."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.cost.roofline_model import REGIMES
from runner.decoding.speculative import SCHEDULES
from runner.experiments.speculative_choice import Candidate, candidate_of, describe
from store.records import RecordedMeasurement

# A verification of k + 1 positions costing under this share of k + 1 plain steps: the target pass
# is bound by per-call overhead (more positions are nearly free); above it, by arithmetic.
OVERHEAD_BOUND_SHARE = 0.5


def regime(verify_cost_ratio: float, positions: float) -> str:
    """In words, what bounds a verification of ``positions`` positions costing ``verify_cost_ratio`` steps."""
    kind = "overhead-bound" if verify_cost_ratio < OVERHEAD_BOUND_SHARE * positions else "arithmetic-bound"
    return f"{kind}: verifying {positions:.1f} positions costs {verify_cost_ratio:.2f} plain steps"


def recommendations(rows: Sequence[RecordedMeasurement]) -> list[str]:
    """One paragraph per (impl, temperature) choice case of the run, in the order they ran."""
    speculative: dict[tuple[str, float, Candidate], dict[str, float]] = {}
    choices: dict[tuple[str, float], tuple[dict[str, Any], dict[str, float]]] = {}
    for row in rows:
        params = row.params
        if params.get("part") == "speculative":
            key = (params["impl"], params["temperature"], candidate_of(params))
            speculative.setdefault(key, {})[row.metric] = row.value
        elif params.get("part") == "choice":
            choice_key = (params["impl"], params["temperature"])
            choices.setdefault(choice_key, (params, {}))[1][row.metric] = row.value
    lines = []
    for (impl, temperature), (params, values) in choices.items():
        if "a_priori_choice_schedule_index" not in values:
            lines.append(f"{impl}, temperature {temperature:g}: recorded before schedules were a choice; run again")
            continue
        picked: Candidate = (
            params["drafts"][int(values["a_priori_choice_draft_index"])],
            SCHEDULES[int(values["a_priori_choice_schedule_index"])],
            int(values["a_priori_choice_k"]),
            float(values["a_priori_choice_p_min"]),
        )
        case = speculative.get((impl, temperature, picked), {})
        regret = values["a_priori_regret_measured"]
        band = values["a_priori_regret_noise_band"]
        verdict = (
            f"regret 0 (measured {regret:.3f}, within the pairs' noise band {band:.3f})"
            if values["a_priori_regret_within_noise"]
            else f"regret {regret:.3f} (beyond the pairs' noise band {band:.3f})"
        )
        why = []
        if "acceptance_rate" in case:
            why.append(f"acceptance {case['acceptance_rate']:.2f}")
        if "mean_accepted_length" in case:
            why.append(f"{case['mean_accepted_length']:.2f} tokens per pass")
        if "draft_cost_ratio" in case:
            why.append(f"a draft token costs {case['draft_cost_ratio']:.3f} plain steps")
        if "verify_cost_ratio" in case:
            why.append(regime(case["verify_cost_ratio"], case.get("mean_draft_length", picked[2]) + 1))
        if "roofline_verify_regime" in case:
            # The machine's measured roof (runner.measure.roofline_placement) names the bound from counts, not timings.
            why.append(f"the roofline places the verification {REGIMES[int(case['roofline_verify_regime'])]}")
            break_even = case.get("roofline_break_even_acceptance")
            if break_even is not None:
                why.append(f"drafts break even above acceptance {break_even:.2f}")
        lines.append(
            f"{impl}, temperature {temperature:g}: {describe(picked)}; predicted "
            f"{values['a_priori_choice_predicted_speedup']:.2f}x, measured {values['a_priori_choice_speedup']:.2f}x "
            f"(best measured {values['measured_best_speedup']:.2f}x); {verdict}. Why: {'; '.join(why) or 'no details'}."
        )
    return lines
