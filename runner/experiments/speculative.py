"""Speculative decoding (docs/experiments.md): does the output keep the target's distribution,
how often are drafts accepted (per draft position too), what do drafts and verification cost,
what is the measured speedup, and how well an a-priori prediction calls it, per draft, schedule
(runner.decoding.speculative.Schedule), temperature and impl.

Parts (param ``part``), each measured in its own module of runner/experiments/parts/ (PARTS),
imported when a case of that part first runs:
- distribution (speculative_check): fixed context, passes through the draft's real proposal
  path and the impl's production verification at the case's temperature, a chi-square test over
  every emitted position against the target, the TV it detects with 80% power, and the accept
  rule's bug variants as controls (runner.experiments.parts.distribution_check).
- aa (speculative_timing): the baseline paired against itself, the noise floor of the paired
  method, per impl.
- speculative (speculative_timing): per (impl, temperature, draft, schedule, k or p_min): an
  a-priori prediction made before the loop runs (runner.cost.speculative_prediction), then
  deterministic counts (seeded), paired speedup against plain decoding through the same impl,
  and two after-the-fact models beside it (runner.cost.speculative holds their formulas).
  Greedy cases check the target's greedy text.
- choice (speculative_choice), per (impl, temperature): which case the a-priori model picks, the
  measured best, and the regret with its noise band; accuracy, per impl: the prediction's errors.
"""

from __future__ import annotations

from typing import Any

from runner.declarations import Declaration, StepSeconds
from runner.decoding.choices import MAX_DRAFT_LENGTH, MAX_NGRAM_ORDER, SCHEDULES, SPECULATIVE_IMPLS, longest_draft
from runner.errors import InputError
from runner.experiments.base import AA_PART, Part, PartsExperiment, parts_in
from runner.experiments.speculative_metrics import METRICS
from runner.fields import Field
from runner.model.data_folder import DRAFT_PREFIX

NAME = "speculative"


def case_seconds(case: dict[str, Any], model: dict[str, Any], step: StepSeconds) -> float | None:
    """A timed case and its A/A pair: 3 · (pairs + 1) · new_tokens decode steps of k + 1
    positions; the other parts at the flat price."""
    if case.get("part") not in ("speculative", "aa"):
        return None
    return 3 * (case["pairs"] + 1) * case["new_tokens"] * step(model["d_model"], model["n_layer"]) * (1 + case["k"])


DECLARATION = Declaration(
    name=NAME,
    order=50,
    module=__name__,
    headlines=(
        "speedup_median",
        "acceptance_rate",
        "chars_per_target_pass",
        "target_passes",
        "mean_accepted_length",
        "distribution_check_passes",
        "check_detects_accept_all",
    ),
    opening=("speedup_median", "acceptance_rate"),
    placed_on_roof=True,
    # The compiled fast path, and the draft that proposes through it.
    cpu_only={"impls": ("fast",), "drafts": ("fast_int8",)},
    launch_fields=("ks", "pairs"),
    case_seconds=case_seconds,
    pages=(("speculative", "Speculative decoding"),),
    metrics=METRICS,
)

# int8 and int4 are the write-ups' fake-quantized targets (eager, no cheaper than the target);
# fast_int8 is the int8 target through the fast path's int8 kernel, proposing in C++.
DRAFTS = ("bigram", "ngram", "distilled_ngram", "int8", "int4", "small", "fast_int8")
# Drafts that are tables of next-token distributions per context: the training text's counts, or (distilled)
# the target's own distributions averaged over that text.
TABLE_DRAFTS = ("bigram", "ngram", "distilled_ngram")

FIELDS = {
    "drafts": Field(
        "str_list",
        ["bigram", "ngram", "int8", "int4", "small"],  # the write-ups' drafts
        choices=DRAFTS,
        choice_prefix=DRAFT_PREFIX,
        help="hf:DIR is a local Hugging Face checkpoint sharing an hf target's tokenizer (runner.model.hf_checkpoint)",
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
        help="how the target runs, in the baseline and in verification alike (runner.decoding.speculative)",
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
    "ngram_order": Field("int", 3, 3, MAX_NGRAM_ORDER, help="characters of context + 1 for the n-gram drafts"),
    "small_draft_d_model": Field("int", 64, 8, 512, help="width of the small trained draft (1 block)"),
    "small_draft_steps": Field("int", 600, 1, 100_000, help="training steps of the small draft"),
    "small_draft_distilled": Field("bool", True, help="train the small draft on the target's distributions"),
}


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


PARTS: dict[str, Part] = {
    **parts_in("runner.experiments.parts.speculative_check", "distribution"),
    **parts_in("runner.experiments.parts.speculative_timing", AA_PART, "speculative"),
    **parts_in("runner.experiments.parts.speculative_choice", "choice", "accuracy"),
}


class SpeculativeExperiment(PartsExperiment):
    name = NAME
    parts = PARTS
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
            cases.append(
                {"part": AA_PART, "draft": "none", "k": 0, "impl": impl, "temperature": 1.0, **timing, **shape}
            )
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


EXPERIMENT = SpeculativeExperiment()
