"""KV cache: is it exact, what the arithmetic promises (counted), how much of it the clock
delivers, how well the roofline predicts each timed point (the overhead calibration judged on
the same points beside it), how time grows with n, and what the first token costs against the
ones after it."""

import pandas as pd
import streamlit as st

from analysis import roofline, roofline_conclusions
from dashboard import charts, data, ui

YES_NO = {1.0: "yes", 0.0: "no"}


def exactness(cases: pd.DataFrame) -> None:
    equivalence = data.part(cases, "equivalence")
    if equivalence.empty:
        ui.absent("equivalence cases (cached against uncached)")
        return
    st.subheader("Is the cache exact?")
    tolerance = equivalence["tolerance"].max()
    st.caption(
        "Each impl's cached generation against the no-cache reference (the eager full forward), same seed: sampled "
        f"and greedy text, the largest |logit difference| over the steps (tolerance {tolerance:.0e}: float sums in "
        "another order, nothing more), the last step's (what the write-ups compared), and the smallest gap "
        "between the top two logits of the greedy reference: how near a rounding came to flipping a choice."
    )
    shown = equivalence.assign(
        sampled_identical=equivalence["strings_identical"].map(YES_NO),
        greedy_text_identical=equivalence["greedy_identical"].map(YES_NO),
    )
    ui.table(
        shown,
        "kv_cache_equivalence",
        [
            "impl",
            "sampled_identical",
            "greedy_text_identical",
            "max_logit_diff",
            "last_logit_diff",
            "top2_margin",
            "top2_margin_step",
        ],
    )
    unmasked = data.part(cases, "no_mask")
    if not unmasked.empty:
        row = unmasked.iloc[0]
        st.caption(
            "The causal mask is what makes the cache exact. With it removed from the no-cache path, earlier "
            "positions see later ones: sampled text identical "
            f"{YES_NO[float(row['strings_identical'])]}, largest |logit difference| {row['max_logit_diff']:.2e}, "
            f"first divergence at index {int(row['divergence_position_sampled'])} (0-based). With one block "
            "nothing the mask changes reaches the next token; from the second block on it does."
        )
    recomputation = data.part(cases, "recomputation")
    if not recomputation.empty:
        row = recomputation.iloc[0]
        st.caption(
            f"K and V computed over {int(row['n'])} generated tokens, counted per layer: "
            f"{int(row['kv_computations_no_cache_per_layer']):,} without the cache (1 + 2 + … + n), "
            f"{int(row['kv_computations_cache_per_layer']):,} with it; "
            f"{int(row['kv_computations_no_cache']):,} against {int(row['kv_computations_cache']):,} "
            f"over {int(row['n_layer'])} layers."
        )


def timing_section(url: str, run_id: int, cases: pd.DataFrame) -> pd.DataFrame:
    timing = data.with_no_cache_path(data.part(cases, "timing"))
    if timing.empty:
        ui.absent("timing cases")
        return timing
    st.subheader("Measured speedup against the arithmetic ratio")
    st.caption(
        "measured_speedup: generation without the cache over generation with it, both through the same impl "
        "(the median of paired ratios, min–max band). min_ratio_speedup is the write-ups' method: the ratio of the "
        "two sides' minima over at least three runs. speedup_vs_eager_no_cache: the eager no-cache path over the "
        "impl's cache, timed in the same rounds — it adds the impl's own gain (a compiler's, say) to the cache's."
    )
    if (timing["baseline"] != "no cache, same impl").any():
        st.warning(
            "Some rows were recorded before per-impl baselines: their measured_speedup divides the eager "
            "no-cache time by that impl's cached time (see the baseline column)."
        )
    ui.chart(charts.kv_speedup(timing))
    st.subheader("Received fraction of the arithmetic promise")
    st.caption(
        "received_fraction = measured_speedup ÷ arithmetic_ratio, the write-ups' promise: their dense count, in "
        "which the no-cache path forms the full t×t score matrix. PyTorch's causal attention kernel skips the pairs "
        "above the diagonal; received_fraction_causal takes the promise against that smaller count "
        "(arithmetic_ratio_causal). arithmetic_ratio_with_lm_head also counts the lm head, as the write-ups' "
        "timing table did."
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
            "min_ratio_speedup",
            "speedup_vs_eager_no_cache",
            "arithmetic_ratio",
            "arithmetic_ratio_with_lm_head",
            "received_fraction",
            "arithmetic_ratio_causal",
            "received_fraction_causal",
            "tokens_identical_no_cache_vs_cache",
        ],
    )
    if "speedup_vs_transformers_cache" in timing.columns:
        transformers_peer(timing)
    calibration(url, run_id, cases, timing)
    return timing


def transformers_peer(timing: pd.DataFrame) -> None:
    """An hf checkpoint's run: transformers' own cached generate beside each impl's cache."""
    st.subheader("Against transformers' own cache")
    st.caption(
        "transformers' cached greedy generate on the same weights, timed in the same rounds: "
        "speedup_vs_transformers_cache = its time ÷ the impl's cached time (above 1: the impl is faster); "
        "transformers_tokens_identical: its greedy tokens are the impl's."
    )
    ui.table(
        timing.assign(transformers_tokens_identical=timing["transformers_tokens_identical"].map(YES_NO)),
        "kv_cache_transformers",
        [
            "impl",
            "n",
            "seconds_cache",
            "seconds_transformers_cache",
            "speedup_vs_transformers_cache",
            "speedup_vs_transformers_cache_low",
            "speedup_vs_transformers_cache_high",
            "transformers_tokens_identical",
        ],
    )


def calibration(url: str, run_id: int, cases: pd.DataFrame, timing: pd.DataFrame) -> None:
    """The roofline's prediction of every timed point against the measured time (the overhead
    calibration judged on the same points beside it, where this machine has one)."""
    st.subheader("Measured against the roofline's prediction")
    placed = roofline.points(pd.concat([timing, data.part(cases, "width")]), "kv_cache")
    if placed.empty:
        st.info("This run's timing cases predate the roofline (no placed figures); run the sweep again.")
        return
    overhead_runs = data.load_experiment_runs(url, "overhead")
    same_machine = overhead_runs[overhead_runs["machine"] == timing["machine"].iloc[0]]
    chosen = run_id if run_id in set(overhead_runs["run_id"]) else None
    if chosen is None and not same_machine.empty:
        chosen = int(same_machine["run_id"].iloc[0])
    fits = data.part(data.load_cases(url, chosen, "overhead"), "fit") if chosen is not None else pd.DataFrame()
    calibrated = data.calibrated_prediction(pd.concat([timing, data.part(cases, "width")]), fits)
    summary = roofline_conclusions.fit_summary(placed, calibrated)
    st.caption(
        "Each point's time from the counts and this machine's measured roof alone, made before timing: per pass "
        "max(bytes ÷ bandwidth at its working set, flops ÷ peak) plus the impl's fitted per-pass overhead. "
        f"A model fits where its median |error| is at most {roofline_conclusions.FIT_LIMIT:.0%}."
    )
    figure = charts.predicted_against_measured(placed, "measured_us_per_token", "predicted_us_per_token", "side")
    warning = roofline_conclusions.misfit_warning(summary, str(figure.title))
    if warning is not None:
        st.warning(warning)  # once for the page, however many groups miss
    ui.chart(figure)
    ui.table(summary, "kv_cache_prediction_fit")
    ui.table(
        placed,
        "kv_cache_roofline",
        [
            "case",
            "side",
            "regime",
            "level",
            "roof_fraction",
            "measured_us_per_token",
            "predicted_us_per_token",
            "prediction_error",
        ],
    )


def growth(cases: pd.DataFrame, timing: pd.DataFrame) -> None:
    fit = data.part(cases, "fit")
    if not fit.empty and not timing.empty:
        st.subheader("Time against n (log–log): time ∝ n^slope")
        ui.chart(charts.seconds_against_n(timing, fit))
        ui.table(
            fit,
            "kv_cache_fit",
            ["impl", "slope_no_cache", "max_fit_error_no_cache", "slope_cache", "max_fit_error_cache"],
        )
    prefill = data.part(cases, "prefill")
    if not prefill.empty:
        st.subheader("The first token against the ones after it")
        st.caption(
            "prefill_seconds: a generation of one token, the prompt's full forward with nothing to reuse yet. "
            "decode_seconds_per_token: each token after it (generations of 1 and of n tokens in paired rounds). "
            "The cache pays from the second token on."
        )
        ui.table(
            prefill,
            "kv_cache_prefill",
            [
                "impl",
                "cache",
                "prompt_tokens",
                "n",
                "prefill_seconds",
                "decode_seconds_per_token",
                "prefill_to_decode_ratio",
            ],
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


def arithmetic(cases: pd.DataFrame) -> None:
    counts = data.part(cases, "counts")
    if counts.empty:
        ui.absent("multiplication counts")
        return
    st.subheader("Multiplications, counted")
    check = data.part(cases, "counter_check")
    if not check.empty:
        row = check.iloc[0]
        matches = row["counter_matches_closed_form"] == 1
        st.write(
            ("✅" if matches else "❌") + " the pure-Python counting path equals the closed forms "
            f"({int(row['counted_mults_no_cache']):,} dense and {int(row['counted_mults_no_cache_causal']):,} "
            f"causal without the cache, {int(row['counted_mults_cache']):,} with it, at d=8, 2 blocks, n=10)."
        )
    st.caption(
        "Per token, one layer and one head: 3·n·d² + 2·n·d without the cache, 3·d² + 2·n·d with it — the cache "
        "removes the recomputation of q/k/v, not the attention, which still grows with n."
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
            "arithmetic_ratio_writeup_model",
            "head_mults_per_token_no_cache",
            "head_mults_per_token_cache",
        ],
    )


def rounding(cases: pd.DataFrame) -> None:
    rounded = data.part(cases, "rounded_cache")
    if rounded.empty:
        ui.absent("rounded-cache cases")
        return
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


st.title("KV cache")
st.caption("Is the cache exact, what does the arithmetic promise, and how much of it does the clock deliver?")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "kv_cache", "KV cache") if opened else None
if opened and run_id is not None:
    cases = data.load_cases(opened[0], run_id, "kv_cache")
    exactness(cases)
    timing = timing_section(opened[0], run_id, cases)
    growth(cases, timing)
    arithmetic(cases)
    rounding(cases)
