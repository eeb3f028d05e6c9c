"""Speculative decoding: acceptance, characters per pass, speedup bands, predictions, TVD."""

import streamlit as st

from dashboard import charts, data, ui

st.title("Speculative decoding")
st.caption("Counts are deterministic for a seed; times carry their min–max band from paired runs.")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "speculative", "speculative decoding") if opened else None
if opened and run_id is not None:
    cases = data.load_cases(opened[0], run_id, "speculative")
    speculative = data.with_impl(data.part(cases, "speculative"))
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
        impls = sorted(speculative["impl"].unique())
        if len(impls) > 1:
            chosen = st.radio("target impl", impls, horizontal=True, key="speculative_impl")
            speculative = speculative[speculative["impl"] == chosen].reset_index(drop=True)
        left, right = st.columns(2)
        with left:
            ui.chart(charts.lines_by(speculative, "k", "acceptance_rate", "draft", "acceptance rate"))
        with right:
            ui.chart(charts.lines_by(speculative, "k", "chars_per_target_pass", "draft", "characters per target pass"))
        ui.chart(charts.speedup_bands(speculative))
        noise = data.with_impl(data.part(cases, "aa"))
        for row in noise.to_dict("records"):
            st.caption(
                f"Noise floor, {row['impl']} (baseline against itself): {row['speedup_median']:.3f}× "
                f"[{row['speedup_min']:.3f}–{row['speedup_max']:.3f}]"
            )
        ui.chart(charts.predicted_vs_measured(speculative))
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
                "predicted_speedup",
                "predicted_speedup_refined",
                "acceptance_per_decided",
                "one_minus_mean_tv",
            ],
        )
    distribution = data.part(cases, "distribution")
    if not distribution.empty:
        st.subheader("Does the output keep the target's distribution?")
        ui.chart(charts.tvd(distribution))
        within = bool((distribution["within_sampling_noise"] == 1).all())
        st.write(
            (
                "✅ every draft's TV distance is within sampling noise"
                if within
                else "❌ a draft's TV distance exceeds the sampling-noise bound"
            )
            + f" for {int(distribution['samples'].iloc[0]):,} samples."
        )
        ui.table(
            distribution,
            "speculative_distribution",
            ["draft", "tvd", "tvd_direct", "tvd_noise_bound", "within_sampling_noise", "draft_target_tvd"],
        )
