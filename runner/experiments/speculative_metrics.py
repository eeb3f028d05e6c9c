"""The speculative experiment's entries of the metric catalogue (runner.metrics): its counts,
acceptance, costs, speedups, predictions and distribution check, each with its unit, kind and
meaning. Its declaration (runner.experiments.speculative) adds them to the catalogue."""

from __future__ import annotations

from runner.metric_entry import Metric, exact, timed

METRICS: tuple[Metric, ...] = (
    *exact("tokens", "accepted", "proposed", "mean_draft_length"),
    Metric("mean_draft_calls", "calls", "exact", help="draft calls per pass: proposals, plus a confidence stop's"),
    Metric(
        "chars_per_target_pass_timed",
        "chars",
        "exact",
        help="characters per pass over the timed generations (one seed each), as the measured speedup saw them",
    ),
    Metric("system_efficiency", "ratio", "exact", help="emitted tokens over (k + 1) per pass, counted"),
    Metric(
        "acceptance_rate_at_position_{position}",
        "ratio",
        "exact",
        help="of the passes that drafted at least i proposals, the share that kept the i-th",
    ),
    Metric("greedy_matches_target", "bool", "exact", help="greedy speculative text is the target's greedy text"),
    # The a-priori prediction's acceptance side: seeded calibration text and a seeded simulation of
    # the schedule over it (no timing), so as reproducible as the sampled figures.
    Metric("predicted_chars_per_pass", "chars", "sampled"),
    Metric("predicted_mean_draft_length", "tokens", "sampled"),
    Metric("predicted_mean_draft_calls", "calls", "sampled"),
    Metric("predicted_acceptance_rate_at_position_{position}", "ratio", "sampled"),
    Metric(
        "a_priori_chars_per_pass_error",
        "ratio",
        "sampled",
        help="predicted over the timed generations' chars per pass, − 1",
    ),
    Metric("accepted_length_{length}", "passes", "exact", help="passes that accepted this many drafted tokens"),
    Metric("acceptance_per_decided", "ratio", "exact"),
    Metric("one_minus_mean_tv", "ratio", "exact"),
    Metric("expected_chars_per_pass", "chars", "numerical"),
    Metric("alpha_a_priori", "probability", "numerical"),
    *(
        Metric(name, "probability", "sampled")
        for name in (
            "tvd",
            "tvd_direct",
            "tvd_noise_bound",
            "draft_target_tvd",
            "chi2_pvalue",
            "chi2_pvalue_{variant}",
            "effect_tv_{variant}",
        )
    ),
    Metric(
        "detectable_tv",
        "probability",
        "sampled",
        help="TV at the first position, moved between the test's bins, detected with 80% power; "
        "recorded only where the simulation backs it",
    ),
    Metric(
        "detectable_tv_at_position_{position}",
        "probability",
        "sampled",
        help="the same at emitted position i (its own pass count, the joint test); only where simulated power backs it",
    ),
    Metric(
        "simulated_power_at_position_{position}",
        "probability",
        "sampled",
        help="share of simulated checks that caught the least favourable deviation of that TV at position i",
    ),
    Metric(
        "pooled_share_at_position_{position}",
        "probability",
        "sampled",
        help="probability pooled into the rare bin at position i: a deviation among those characters is invisible",
    ),
    Metric("samples_at_position_{position}", "count", "sampled", help="passes that emitted a token at position i"),
    Metric("chi2_degrees_of_freedom", "count", "sampled", help="pooled bins − 1 of the chi-square test"),
    Metric("check_detects_{variant}", "bool", "sampled", help="the chi-square test caught this accept-rule bug"),
    Metric(
        "check_due_{variant}",
        "bool",
        "sampled",
        help="its effect exceeds detectable_tv and the simulation backs the power statement at its position",
    ),
    Metric(
        "check_keeps_its_power_{variant}",
        "bool",
        "sampled",
        help="recorded only where the variant was due: the check caught it",
    ),
    *timed(
        "seconds",
        "baseline_seconds",
        "speculative_seconds",
        "target_step_seconds",
        "verify_seconds",
        "draft_seconds_per_char",
        "a_priori_step_seconds",
    ),
    *timed("microseconds", "draft_call_us", "target_pass_us"),
    Metric(
        "draft_turn_us",
        "microseconds",
        "timed",
        "lower",
        help="one draft turn of 4 proposals (runner.cost.speculative.TURN_PROPOSALS), one call, timed alone; beside "
        "draft_call_us it splits a turn's fixed part from its part per proposal",
    ),
    Metric("draft_cost_ratio", "ratio", "timed"),
    Metric("draft_cost_ratio_writeup", "ratio", "timed"),
    Metric("verify_cost_ratio", "ratio", "timed"),
    Metric("a_priori_draft_cost_ratio", "ratio", "timed"),
    Metric("a_priori_verify_cost_ratio", "ratio", "timed"),
    Metric(
        "writeup_formula_speedup",
        "ratio",
        "predicted",
        old_names=("predicted_speedup",),
        help="write-ups' formula: cpp / (1 + k·c), after the run",
    ),
    Metric("writeup_formula_relative_error", "ratio", "predicted", old_names=("predicted_relative_error",)),
    Metric(
        "component_model_speedup",
        "ratio",
        "predicted",
        old_names=("predicted_speedup_refined",),
        help="component model: cpp / (v + k·c), after the run",
    ),
    Metric("component_model_relative_error", "ratio", "predicted", old_names=("predicted_refined_relative_error",)),
    Metric("predicted_speedup_a_priori", "ratio", "predicted", help="a priori: E / (v + k·c), before the run"),
    Metric("a_priori_relative_error", "ratio", "predicted"),
    Metric(
        "a_priori_regret_measured",
        "ratio",
        "predicted",
        help="the measured best's median speedup minus the a-priori pick's, never rounded",
    ),
    Metric("a_priori_regret_noise_band", "ratio", "predicted", help="the two cases' pair bands, added"),
    Metric("a_priori_regret_within_noise", "choice", "predicted", help="1 when the measured regret ≤ its noise band"),
    Metric("a_priori_chose_best", "choice", "predicted"),
    *(
        Metric(prefix + name, unit, "predicted")
        for prefix in ("a_priori_choice", "measured_best")
        for name, unit in (
            ("_draft_index", "choice"),
            ("_schedule_index", "choice"),
            ("_k", "choice"),
            ("_p_min", "choice"),
            ("_speedup", "ratio"),
            ("_predicted_speedup", "ratio"),
        )
    ),
    Metric("a_priori_error_median", "ratio", "predicted", help="median |a-priori error| over an impl's cases"),
    Metric("a_priori_within_10pct", "ratio", "predicted", help="share of an impl's cases within 10%"),
    Metric("a_priori_cases", "count", "exact"),
)
