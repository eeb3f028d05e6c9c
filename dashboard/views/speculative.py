"""Speculative decoding: acceptance (per draft position too), characters per pass, speedup bands
per schedule and temperature, a prediction made before each run beside what it measured, and a
distribution check that says what it rules out."""

import streamlit as st

from dashboard import charts, data, speculative_figures, ui
from store.user_text import markdown_text

st.title("Speculative decoding")
st.caption("Counts are deterministic for a seed; times carry their min–max band from paired runs.")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "speculative", "speculative decoding") if opened else None
if opened and run_id is not None:
    unit = ui.text_unit(opened[0], run_id)  # tokens for an hf checkpoint's run
    cases = data.load_cases(opened[0], run_id, "speculative")
    for old, new in data.load_renamed(opened[0], run_id, "speculative").items():
        st.caption(
            f"Run {run_id} recorded {markdown_text(new)} under its old name {markdown_text(old)}; the figure is "
            f"shown as {markdown_text(new)}."
        )
    speculative = speculative_figures.with_schedule(data.part(cases, "speculative"))
    if not speculative.empty:
        best = data.best_speedup_by_impl(speculative)
        st.subheader("Best measured speedup per target impl")
        st.caption(
            "Each speedup is against plain decoding through the same impl. Speculative decoding pays where a "
            "target pass is bound by per-call overhead (verifying k + 1 positions costs little more than one "
            "step) and loses where it is bound by arithmetic (k + 1 positions cost nearly k + 1 steps): "
            "verify_cost_ratio, in steps, says which each impl is on this machine. Compare the baselines too: "
            "a speedup over a slow baseline is not a fast decoder."
        )
        ui.table(best, "speculative_best")
        choices = speculative_figures.choices(data.part(cases, "choice"))
        if not choices.empty:
            st.caption(
                "Following the a-priori model: the (draft, schedule, k or p_min) it would pick per impl and "
                "temperature, what that measured, the measured best, and the speedup lost by following the model "
                "as measured (a_priori_regret_measured), beside the noise band of the two cases' pairs and whether "
                "it lies within it. plain_decoding_wins: every setup measured slower than plain decoding (1x), "
                "so the choice is not to draft at all (decodelab recommend ranks it among the setups)."
            )
            ui.table(choices, "speculative_a_priori_choice")
        accuracy = data.part(cases, "accuracy")
        if not accuracy.empty:
            said = speculative_figures.accuracy_lines(accuracy)
            st.caption(
                "How close the a-priori prediction came, over every case of the impl (targets: a median |error| "
                "of at most 5%, at least 90% of cases within 10%)" + (": " + "; ".join(said) if said else "") + "."
            )
            ui.table(accuracy, "speculative_accuracy", ["impl", "a_priori_error_median", "a_priori_within_10pct"])
        impls = sorted(speculative["impl"].unique())
        if len(impls) > 1:
            chosen = st.radio("target impl", impls, horizontal=True, key="speculative_impl")
            speculative = speculative[speculative["impl"] == chosen].reset_index(drop=True)
        temperatures = sorted(speculative["temperature"].unique(), reverse=True)
        if len(temperatures) > 1:
            picked = st.radio("temperature (0: greedy)", temperatures, horizontal=True, key="speculative_temperature")
            speculative = speculative[speculative["temperature"] == picked].reset_index(drop=True)
        if "greedy_matches_target" in speculative.columns and speculative["greedy_matches_target"].notna().any():
            matches = speculative["greedy_matches_target"].dropna()
            st.caption(
                f"Greedy: {int(matches.sum())} of {len(matches)} cases reproduce the target's greedy text exactly."
            )
        curves = speculative_figures.position_curves(speculative)
        if not curves.empty:
            st.subheader("Acceptance per draft position")
            st.caption(
                "Of the passes that drafted at least i proposals, the share that kept the i-th (as vLLM reports "
                "it), beside α^i, what independent acceptances at the case's own rate α would give, and the "
                "a-priori prediction from calibration text. Rejections that cluster bend the measured curve "
                "away from α^i."
            )
            setting = st.selectbox("schedule", sorted(curves["setting"].unique()), key="speculative_setting")
            ui.chart(speculative_figures.position_chart(curves[curves["setting"] == setting]))
        if "mean_draft_length" in speculative.columns:
            ui.table(
                speculative,
                "speculative_schedules",
                [
                    "draft",
                    "setting",
                    "mean_draft_length",
                    "mean_accepted_length",
                    "system_efficiency",
                    "acceptance_rate",
                    "predicted_chars_per_pass",
                    "chars_per_target_pass",
                    "speedup_median",
                    "predicted_speedup_a_priori",
                ],
            )
        # The charts over k show the fixed schedule (the others set k differently).
        speculative = speculative[speculative["schedule"] == "fixed"].reset_index(drop=True)
        left, right = st.columns(2)
        if speculative["k"].nunique() > 1:
            with left:
                ui.chart(charts.lines_by(speculative, "k", "acceptance_rate", "draft", "acceptance rate"))
            with right:
                ui.chart(charts.lines_by(speculative, "k", "chars_per_target_pass", "draft", f"{unit} per target pass"))
            ui.chart(charts.speedup_bands(speculative, shown=speculative_figures.shown_cases(speculative, "fixed k")))
        elif not speculative.empty:
            # One k (the quick preset's 4): a line over k is a column of dots; each draft its own bar.
            at_k = f"at k = {int(speculative['k'].iloc[0])}"
            with left:
                ui.chart(charts.bars(speculative, "draft", "acceptance_rate", f"acceptance rate {at_k}", "draft"))
            with right:
                per_pass = f"{unit} per target pass {at_k}"
                ui.chart(charts.bars(speculative, "draft", "chars_per_target_pass", per_pass, "draft"))
            ui.chart(
                charts.speedup_bands(speculative, x="draft", shown=speculative_figures.shown_cases(speculative, at_k))
            )
        noise = data.part(cases, "aa")
        for row in noise.to_dict("records"):
            st.caption(
                f"Noise floor, {row['impl']} (baseline against itself): {row['speedup_median']:.3f}× "
                f"[{row['speedup_min']:.3f}–{row['speedup_max']:.3f}]"
            )
        if "predicted_speedup_a_priori" in speculative.columns:
            st.subheader("Predicted before the run, measured after")
            st.caption(
                "The a-priori prediction uses nothing the loop measures: the acceptance chance Σ min(p, q) at every "
                "position of calibration text (the target's own generation from held-out prompts) and the schedule "
                "run over it give the characters per pass (predicted_chars_per_pass) and the mean draft length L; "
                "the verify (v) and draft (c) costs come from a calibration session along held-out text before the "
                "loop, in plain steps: predicted = characters per pass / (v + L·c). expected_chars_per_pass is the "
                "i.i.d. formula (1 − α^(k+1)) / (1 − α), shown for comparison."
            )
            ui.chart(
                charts.predicted_vs_measured(
                    speculative, ["predicted_speedup_a_priori"], "the a-priori prediction against the measured speedup"
                )
            )
            ui.table(
                speculative,
                "speculative_a_priori",
                [
                    "draft",
                    "k",
                    "alpha_a_priori",
                    "acceptance_rate",
                    "expected_chars_per_pass",
                    "chars_per_target_pass",
                    "a_priori_verify_cost_ratio",
                    "a_priori_draft_cost_ratio",
                    "predicted_speedup_a_priori",
                    "speedup_median",
                    "a_priori_relative_error",
                ],
            )
        if "target_pass_us" in speculative.columns:
            st.subheader("What a call costs, as the write-ups timed it")
            st.caption(
                "One target pass over one token and one draft call for one character, each timed on its own; the "
                "write-ups' c = draft call ÷ target pass. The project's c (draft_cost_ratio) is a draft character "
                "in plain decode steps as the loop runs it, alternating with verifications: a single call on its "
                "own leaves out a cheap draft's share of the loop's bookkeeping. draft_turn_us is one call "
                "proposing four characters: a table draft's turn costs little more than one proposal, so its "
                "fixed part is paid once a pass (runs before 2026-12-06 did not time it)."
            )
            columns = [
                "target_pass_us",
                "draft_call_us",
                "draft_turn_us",
                "draft_cost_ratio_writeup",
                "draft_cost_ratio",
            ]
            ui.table(
                speculative.groupby("draft", as_index=False)[
                    [column for column in columns if column in speculative.columns]
                ].median(),
                "speculative_costs",
            )
        if "speedup_vs_hf_assisted" in speculative.columns:
            st.subheader("Against Hugging Face assisted generation")
            st.caption(
                "Each case with an hf: draft, paired against generate(assistant_model=...) with the same target, "
                "draft, prompt and token count on its default schedule: speedup_vs_hf_assisted = its time ÷ this "
                "loop's (above 1: decodelab's loop is faster); hf_assisted_greedy_identical: its greedy text is "
                "this loop's."
            )
            assisted = speculative.dropna(subset=["speedup_vs_hf_assisted"])
            ui.table(
                assisted.assign(
                    hf_assisted_greedy_identical=assisted["hf_assisted_greedy_identical"].map({1.0: "yes", 0.0: "no"})
                ),
                "speculative_hf_assisted",
                [
                    "impl",
                    "draft",
                    "k",
                    "speculative_seconds",
                    "hf_assisted_seconds",
                    "speedup_vs_hf_assisted",
                    "speedup_vs_hf_assisted_low",
                    "speedup_vs_hf_assisted_high",
                    "hf_assisted_greedy_identical",
                ],
            )
        st.subheader("After the run: two cost decompositions")
        st.caption(
            "Not forecasts: both take this run's own characters per pass (cpp) and costs timed after each pair. "
            "The write-ups' formula counts a verification as one step; the component model uses the measured "
            "verification, so it only checks that the loop's time is its passes' costs."
        )
        ui.chart(
            charts.predicted_vs_measured(
                speculative,
                ["writeup_formula_speedup", "component_model_speedup"],
                "the write-ups' formula and the component model against the measured speedup",
            )
        )
        ui.table(
            speculative,
            "speculative",
            [
                "impl",
                "draft",
                "k",
                "acceptance_rate",
                "chars_per_target_pass",
                "target_passes",
                "draft_cost_ratio",
                "verify_cost_ratio",
                "speedup_median",
                "speedup_min",
                "speedup_max",
                "writeup_formula_speedup",
                "component_model_speedup",
                "component_model_relative_error",
                "acceptance_per_decided",
                "one_minus_mean_tv",
            ],
        )
    distribution = data.part(cases, "distribution")
    if distribution.empty:
        ui.absent("distribution check")
    elif "distribution_check_passes" in distribution.columns:
        st.subheader("Does the output keep the target's distribution?")
        st.caption(
            f"{int(distribution['samples'].iloc[0]):,} passes per draft from one context through its own proposal "
            f"path and the impl's production verification (C++ for fast), the {unit} emitted at every position "
            "tested by one chi-square test (p < 0.001 fails). detectable_tv: the smallest total variation at the "
            "first position, moved between the test's bins, that it catches with 80% power at this sample count "
            "(stated only where a simulation of the same test backs it), so a pass rules it out. reach: the same "
            "per emitted position (later positions are reached by fewer passes), and the share of each position's "
            "probability pooled into one bin of rare characters, among which a deviation is invisible. Controls: "
            "the accept rule's bug variants through the same path; each is due to be caught where its effect "
            "exceeds detectable_tv under a backed statement."
        )
        ui.table(
            speculative_figures.check_verdicts(distribution),
            "speculative_check",
            [
                "impl",
                "temperature",
                "draft",
                "verdict",
                "chi2_pvalue",
                "detectable_tv",
                "reach",
                "draft_target_tvd",
                "bugs_caught",
            ],
        )
    else:
        st.subheader("Does the output keep the target's distribution?")
        ui.chart(charts.tvd(distribution))
        verdicts = data.distribution_verdicts(distribution)
        st.caption(
            f"{int(distribution['samples'].iloc[0]):,} first {unit} per draft through its own proposal path "
            "and the accept rule. A control decides the same proposals with a broken rule that accepts every "
            "proposal: where that passes too, the draft is within sampling noise of the target already and the "
            "check has no power for it."
        )
        ui.table(
            verdicts,
            "speculative_distribution",
            [
                "draft",
                "verdict",
                "tvd",
                "tvd_direct",
                "tvd_noise_bound",
                "chi2_pvalue",
                "tvd_broken_rule",
                "draft_target_tvd",
            ],
        )
