"""Memory vs weights: what the cache costs, and what fewer kv heads save."""

import streamlit as st

from dashboard import charts, data, ui

st.title("Memory vs weights")
st.caption("cache bytes = 2 (K, V) × layers × kv heads × tokens × head_dim × bytes per element")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "kv_cache", "KV cache") if opened else None
if opened and run_id is not None:
    memory = data.part(data.load_cases(opened[0], run_id, "kv_cache"), "memory")
    if memory.empty:
        st.info("This run recorded no memory cases (experiments.kv_cache.memory_lengths).")
    else:
        weight_bytes = float(memory["weight_bytes"].iloc[0])
        ui.chart(charts.cache_bytes(memory, weight_bytes))
        largest = memory.sort_values("n").iloc[-1]
        st.metric(f"Cache at n = {int(largest['n'])} vs weights", f"{largest['cache_to_weight_ratio']:.2f}×")
        ui.table(memory, "memory", [column for column in memory.columns if column.startswith(("n", "cache", "weight"))])
