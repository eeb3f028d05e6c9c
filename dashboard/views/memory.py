"""Memory vs weights: what the cache costs per dtype, what fewer kv heads save, and the
write-ups' own model counted from its shape."""

import streamlit as st

from dashboard import charts, data, ui

st.title("Memory vs weights")
st.caption(
    "cache elements = 2 (K, V) × layers × kv heads × tokens × head_dim; bytes = elements × bytes per element: "
    "the dtype is only the last factor."
)
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "kv_cache", "KV cache") if opened else None
if opened and run_id is not None:
    cases = data.load_cases(opened[0], run_id, "kv_cache")
    memory = data.part(cases, "memory")
    if memory.empty:
        st.info(f"This run recorded no memory cases. Run `{ui.FILL_COMMAND}` to record them.")
    else:
        if "dtype" not in memory.columns:
            memory = memory.assign(dtype="float32")
        dtypes = list(dict.fromkeys(memory["dtype"]))
        dtype = st.radio("cache dtype", dtypes, horizontal=True, key="memory_dtype") if len(dtypes) > 1 else dtypes[0]
        shown = memory[memory["dtype"] == dtype].reset_index(drop=True)
        weight_bytes = float(shown["weight_bytes"].iloc[0])
        ui.chart(charts.cache_bytes(shown, weight_bytes))
        largest = shown.sort_values("n").iloc[-1]
        st.metric(
            f"Cache ({dtype}) at n = {int(largest['n']):,} vs the float32 weights",
            f"{largest['cache_to_weight_ratio']:.2f}×",
        )
        ui.table(
            memory,
            "memory",
            ["n", "dtype", "weight_bytes"]
            + [column for column in memory.columns if column.startswith(("cache_elements", "cache_bytes", "cache_to"))],
        )
    writeup = data.part(cases, "writeup_model")
    if not writeup.empty:
        st.subheader("The write-ups' own model, counted from its shape")
        first = writeup.iloc[0]
        st.caption(
            f"d_model {int(first['d_model'])}, {int(first['n_layer'])} blocks, {int(first['context_length'])} "
            f"positions, {int(first['vocab_size'])} characters and an lm head of its own with a bias: "
            f"{int(first['parameter_count']):,} parameters, {int(first['weight_bytes']):,} bytes of float32 "
            f"({first['weight_bytes'] / 2**20:.2f} MiB). The derivation is in runner/experiments/parts/kv_memory.py."
        )
        ui.table(
            writeup.assign(cache_mib=writeup["cache_bytes"] / 2**20),
            "memory_writeup_model",
            ["n", "dtype", "cache_elements", "cache_bytes", "cache_mib", "cache_to_weight_ratio"],
        )
