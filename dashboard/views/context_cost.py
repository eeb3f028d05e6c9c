"""Context cost: what grows with n², what grows with n, and where they cross."""

import streamlit as st

from dashboard import charts, data, ui

# The bars in words: the summary's column names are what the CSV keeps.
PAIR_NAMES = {"causal_pairs": "kept by the causal mask", "wasted_pairs": "computed, then masked (n² − kept)"}

st.title("Context cost")
st.caption("Counted multiplications, not times: the same integers on every machine.")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "context_cost", "context cost") if opened else None
if opened and run_id is not None:
    cases = data.load_cases(opened[0], run_id, "context_cost")
    table = data.part(cases, "table")
    summary = data.part(cases, "summary")
    crossover = float(summary["crossover_n"].iloc[0]) if not summary.empty else None
    if not table.empty:
        # The spec's own shape (the write-ups' d_model 512), not the run's trained model: say which.
        shape = table.iloc[0]
        st.caption(
            f"For a model of d_model = {int(shape['d_model']):,} and d_ff = {int(shape['d_ff']):,} (the spec's "
            "`context_cost` shape, not the run's trained model)."
        )
    if table.empty:
        ui.absent("cost table")
    else:
        ui.chart(charts.quad_vs_linear(table, crossover))
        ui.table(table, "context_cost", ["n", "d_model", "d_ff", "quad_mults", "linear_mults", "total_mults"])
    if not summary.empty:
        row = summary.iloc[0]
        left, middle, right = st.columns(3)
        left.metric("Crossover n", f"{int(row['crossover_n']):,}")
        middle.metric(f"Causal pairs at n = {int(row['n']):,}", f"{int(row['causal_pairs']):,}")
        right.metric("Wasted pairs (masked)", f"{int(row['wasted_pairs']):,}")
        if "quad_ratio" in summary.columns:
            before, last = (int(n) for n in row["ratio_lengths"])
            left, right = st.columns(2)
            left.metric(f"Quadratic part, n = {last:,} over n = {before:,}", f"{row['quad_ratio']:.2f}×")
            right.metric(f"Linear part, n = {last:,} over n = {before:,}", f"{row['linear_ratio']:.2f}×")
            st.caption("Doubling the context quadruples the attention work and doubles the per-position work.")
        pairs = summary.melt(value_vars=["causal_pairs", "wasted_pairs"], var_name="pairs", value_name="count")
        pairs["pairs"] = pairs["pairs"].map(PAIR_NAMES)
        at_n = f"score pairs at n = {int(row['n']):,}"
        ui.chart(charts.bars(pairs, "pairs", "count", "score pairs", chart_title=at_n))
        ui.table(summary, "context_cost_summary")
