"""KV cache: equivalence, counted arithmetic, measured speedup against it, slopes, widths."""

import pandas as pd
import streamlit as st

from dashboard import charts, data, ui

st.title("KV cache")
st.caption("Is the cache exact, what does the arithmetic promise, and how much of it does the clock deliver?")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "kv_cache", "KV cache") if opened else None
if opened and run_id is not None:
    cases = data.load_cases(opened[0], run_id, "kv_cache")
    equivalence = data.with_impl(data.part(cases, "equivalence"))
    if not equivalence.empty:
        st.subheader("Is the cache exact?")
        tolerance = equivalence["tolerance"].max()
        st.caption(
            "Each impl's cached generation against the no-cache reference (the eager full forward), same seed: "
            f"sampled and greedy text, and the largest |logit difference| (tolerance {tolerance:.0e}: "
            "float sums in another order, nothing more)."
        )
        shown = equivalence.assign(
            sampled_identical=equivalence["strings_identical"].map({1.0: "yes", 0.0: "no"}),
            greedy_text_identical=equivalence["greedy_identical"].map({1.0: "yes", 0.0: "no"}),
        )
        ui.table(
            shown, "kv_cache_equivalence", ["impl", "sampled_identical", "greedy_text_identical", "max_logit_diff"]
        )
    timing = data.with_no_cache_path(data.part(cases, "timing"))
    if not timing.empty:
        st.subheader("Measured speedup against the arithmetic ratio")
        st.caption(
            "measured_speedup: generation without the cache over generation with it, both through the same impl "
            "(paired median, min–max band). speedup_vs_eager_no_cache: the eager no-cache path over the impl's "
            "cache, timed in the same rounds — it adds the impl's own gain (a compiler's, say) to the cache's."
        )
        if (timing["baseline"] != "no cache, same impl").any():
            st.warning(
                "Some rows were recorded before per-impl baselines: their measured_speedup divides the eager "
                "no-cache time by that impl's cached time (see the baseline column)."
            )
        ui.chart(charts.kv_speedup(timing))
        st.subheader("Received fraction of the arithmetic promise")
        st.caption(
            "received_fraction = measured_speedup ÷ arithmetic_ratio, the write-ups' promise: their dense count, "
            "in which the no-cache path forms the full t×t score matrix. PyTorch's causal attention kernel skips "
            "the pairs above the diagonal; received_fraction_causal takes the promise against that smaller count "
            "(arithmetic_ratio_causal)."
        )
        ui.chart(charts.received_fraction(timing))
        ui.table(
            timing,
            "kv_cache_timing",
            [
                "impl",
                "n",
                "baseline",
                "seconds_no_cache",
                "seconds_cache",
                "measured_speedup",
                "measured_speedup_low",
                "measured_speedup_high",
                "speedup_vs_eager_no_cache",
                "arithmetic_ratio",
                "received_fraction",
                "arithmetic_ratio_causal",
                "received_fraction_causal",
                "tokens_identical_no_cache_vs_cache",
            ],
        )
    if not timing.empty:
        overhead_runs = data.load_experiment_runs(opened[0], "overhead")
        same_machine = overhead_runs[overhead_runs["machine"] == timing["machine"].iloc[0]]
        chosen = (
            run_id
            if run_id in set(overhead_runs["run_id"])
            else (int(same_machine["run_id"].iloc[0]) if not same_machine.empty else None)
        )
        st.subheader("Measured against the overhead calibration")
        if chosen is None:
            st.info(
                "Run the overhead experiment on this machine (it is in the quick preset) to predict these "
                "times from seconds per token = a + b·multiplications."
            )
        else:
            fits = data.part(data.load_cases(opened[0], chosen, "overhead"), "fit")
            predicted = data.calibrated_prediction(pd.concat([timing, data.part(cases, "width")]), fits)
            if predicted.empty:
                st.info("This run's timing cases predate the calibration's inputs; run the sweep again.")
            else:
                st.caption(
                    f"Calibration from run {chosen}: a per-token overhead plus a price per multiplication, "
                    "per impl. The arithmetic ratio assumes a = 0; the measured speedup is what a ≠ 0 leaves."
                )
                ui.chart(charts.predicted_against_measured(predicted, "measured_speedup", "predicted_speedup"))
                ui.table(predicted, "kv_cache_calibrated")
    fit = data.part(cases, "fit")
    if not fit.empty:
        st.subheader("Time against n (log–log): time ∝ n^slope")
        ui.chart(charts.seconds_against_n(timing))
        ui.table(
            fit,
            "kv_cache_fit",
            ["impl", "slope_no_cache", "max_fit_error_no_cache", "slope_cache", "max_fit_error_cache"],
        )
    width = data.part(cases, "width")
    if not width.empty:
        st.subheader("Width sweep (untrained weights: timing needs no training)")
        ui.chart(charts.received_fraction(width, x="d_model"))
        ui.table(
            width,
            "kv_cache_width",
            [
                "d_model",
                "n",
                "seconds_no_cache",
                "seconds_cache",
                "measured_speedup",
                "arithmetic_ratio",
                "received_fraction",
            ],
        )
    counts = data.part(cases, "counts")
    check = data.part(cases, "counter_check")
    if not counts.empty:
        st.subheader("Multiplications, counted")
        if not check.empty:
            matches = check.iloc[0]["counter_matches_closed_form"] == 1
            st.write(
                ("✅" if matches else "❌") + " the pure-Python counting path equals the closed forms "
                f"({int(check.iloc[0]['counted_mults_no_cache']):,} and {int(check.iloc[0]['counted_mults_cache']):,}"
                " multiplications at d=8, 2 blocks, n=10)."
            )
        ui.table(
            counts,
            "kv_cache_counts",
            [
                "n",
                "d_model",
                "n_layer",
                "mults_no_cache",
                "mults_no_cache_causal",
                "mults_cache",
                "arithmetic_ratio",
                "arithmetic_ratio_causal",
                "arithmetic_ratio_with_lm_head",
            ],
        )
    rounded = data.part(cases, "rounded_cache")
    if not rounded.empty:
        st.subheader("A rounded cache is an approximation")
        ui.table(
            rounded,
            "kv_cache_rounded",
            [
                "rounding",
                "max_logit_diff",
                "tolerance",
                "exceeds_tolerance",
                "strings_identical",
                "greedy_identical",
                "divergence_position_sampled",
            ],
        )
