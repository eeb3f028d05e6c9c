"""``decodelab recommend --run N``: the speculative setup the a-priori prediction picks per impl
(and temperature), what it predicted and measured, and why, read from the run's choice cases;
plain decoding ranked among the choices (every speedup is against it, so it stands at 1x), named
the winner when every setup measured slower, and recommended when the prediction puts every setup
below it. A regret is printed as measured, beside its
noise band: it reads 0 only where the pick was the measured best."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runner.cost.roofline_model import REGIMES
from runner.decoding.choices import SCHEDULES
from runner.experiments.parts.speculative_choice import Candidate, candidate_of, describe
from store.records import RecordedMeasurement

# A verification of k + 1 positions costing under this share of k + 1 plain steps: the target pass
# is bound by per-call overhead (more positions are nearly free); above it, by arithmetic.
OVERHEAD_BOUND_SHARE = 0.5
PLAIN = "plain decoding"
PLAIN_SPEEDUP = 1.0  # every speedup is a ratio to plain decoding through the same impl
RANKED_SHOWN = 3  # the ranking's head printed; plain decoding's place is printed wherever it falls


def figure(value: float) -> str:
    """Three significant figures, so a small nonzero regret never prints as 0."""
    return f"{value:.3g}"


def regret_words(regret: float, band: float, within: bool) -> str:
    """The measured regret with its noise band and which side of it the regret lies."""
    if regret == 0:
        return "regret 0 (the pick is the measured best)"
    side = "within" if within else "beyond"
    return f"regret {figure(regret)} as measured, {side} the pairs' noise band {figure(band)}"


def ranking(setups: dict[Candidate, dict[str, float]]) -> tuple[list[tuple[str, float]], int]:
    """Every setup with a measured median and plain decoding, fastest first, and plain decoding's
    place (1-based) among them."""
    ranked = sorted(
        [(describe(candidate), values["speedup_median"]) for candidate, values in setups.items()]
        + [(PLAIN, PLAIN_SPEEDUP)],
        key=lambda entry: -entry[1],
    )
    return ranked, 1 + [name for name, _ in ranked].index(PLAIN)


def ranking_words(ranked: list[tuple[str, float]], plain_place: int, picked: str | None = None) -> str:
    """The ranking's head, and plain decoding's and the pick's places wherever they fall, with "…"
    between places left out and a count of those after (a pick in fifth place of five used to go
    unshown, unmarked)."""
    names = [name for name, _ in ranked]
    picked_place = 1 + names.index(picked) if picked in names else None
    places = sorted(
        {*range(1, min(RANKED_SHOWN, len(ranked)) + 1), plain_place, *([picked_place] if picked_place else [])}
    )
    shown: list[str] = []
    for index, place in enumerate(places):
        name, speedup = ranked[place - 1]
        gap = "… " if place > (places[index - 1] if index else 0) + 1 else ""
        mark = " (the pick)" if place == picked_place else ""
        shown.append(f"{gap}{place}. {name} {speedup:.2f}x{mark}")
    more = f"; and {len(ranked) - places[-1]} more" if places[-1] < len(ranked) else ""
    return f"ranked by measured speedup ({len(ranked)} choices): {'; '.join(shown)}{more}"


def plain_wins_words(best: Candidate | None, best_values: dict[str, float], best_speedup: float) -> str:
    """Why plain decoding wins: the fastest setup's median below 1x, and whether its pairs agree."""
    named = f"the fastest setup, {describe(best)}," if best is not None else "the fastest setup"
    words = f"{PLAIN} wins: every speculative setup measured slower ({named} {best_speedup:.2f}x"
    if "speedup_max" in best_values and "speedup_min" in best_values:
        low, high = best_values["speedup_min"], best_values["speedup_max"]
        agree = "every pair slower" if high < PLAIN_SPEEDUP else "some pairs faster: within its noise"
        words += f", its pairs {low:.2f}–{high:.2f}x, {agree}"
    return words + ")"


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
        verdict = regret_words(
            values["a_priori_regret_measured"],
            values["a_priori_regret_noise_band"],
            bool(values["a_priori_regret_within_noise"]),
        )
        setups = {
            candidate: metrics
            for (setup_impl, setup_temperature, candidate), metrics in speculative.items()
            if setup_impl == impl and setup_temperature == temperature and "speedup_median" in metrics
        }
        best_speedup = values["measured_best_speedup"]
        picked_speedup = values["a_priori_choice_speedup"]
        best = max(setups, key=lambda candidate: setups[candidate]["speedup_median"]) if setups else None
        lead = ""
        # The prediction's own best is a loss: it recommends plain decoding (it used to name its
        # best setup, predicted at 0.59x, as the pick), and the regret is plain decoding's.
        recommends_plain = values["a_priori_choice_predicted_speedup"] < PLAIN_SPEEDUP
        if best_speedup < PLAIN_SPEEDUP:
            # Plain decoding is the fastest choice: the pick's regret is against it; the stored
            # regret (against the fastest setup) stays beside it with its band.
            lead = plain_wins_words(best, setups.get(best, {}) if best else {}, best_speedup) + ". "
            loss = figure(PLAIN_SPEEDUP - picked_speedup)
            verdict = f"regret {loss} against {PLAIN}, the fastest choice; against the fastest setup {verdict}"
        elif picked_speedup < PLAIN_SPEEDUP and not recommends_plain:
            verdict += f"; the pick measured slower than {PLAIN} (by {figure(PLAIN_SPEEDUP - picked_speedup)})"
        if recommends_plain:
            below = f"puts every speculative setup below {PLAIN}, so it recommends {PLAIN}; its best setup: "
            lead += (
                f"The a-priori prediction agrees: it {below}" if lead else f"{PLAIN}: the a-priori prediction {below}"
            )
            verdict = (
                f"{PLAIN}'s regret 0 (the measured best)"
                if best_speedup <= PLAIN_SPEEDUP
                else f"{PLAIN}'s regret {figure(best_speedup - PLAIN_SPEEDUP)} as measured, against the fastest setup"
            )
        elif lead:
            lead += "The a-priori pick: "
        recommended = PLAIN if recommends_plain else describe(picked)
        ranked = "; " + ranking_words(*ranking(setups), recommended) if setups else ""
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
            # The machine's measured roof (runner.experiments.parts.roofline_placement) names the bound from counts,
            # not timings.
            why.append(f"the roofline places the verification {REGIMES[int(case['roofline_verify_regime'])]}")
            break_even = case.get("roofline_break_even_acceptance")
            if break_even is not None:
                why.append(f"drafts break even above acceptance {break_even:.2f}")
        lines.append(
            f"{impl}, temperature {temperature:g}: {lead}{describe(picked)}; predicted "
            f"{values['a_priori_choice_predicted_speedup']:.2f}x, measured {picked_speedup:.2f}x "
            f"(the fastest setup {best_speedup:.2f}x); {verdict}{ranked}. Why: {'; '.join(why) or 'no details'}."
        )
    return lines
