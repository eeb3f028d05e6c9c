"""Quantization: bytes, loss, where generation diverges, and time per token."""

import pandas as pd
import streamlit as st

from dashboard import charts, data, ui
from runner.labels import variant_label

st.title("Quantization")
st.caption("Quantization saves memory; whether it saves time depends on the kernel that runs.")
opened = ui.open_store()
run_id = ui.pick_run(opened[0], "quantization", "quantization") if opened else None
if opened and run_id is not None:
    unit = ui.singular(ui.text_unit(opened[0], run_id))  # token for an hf checkpoint's run
    cases = data.load_cases(opened[0], run_id, "quantization")
    # The A/A cases (float32 against itself) calibrate the Review's verdicts; not variants.
    if "part" in cases.columns:
        cases = cases[cases["part"] != "aa"]
    cases["variant"] = [variant_label(p, k) for p, k in zip(cases["precision"], cases["kernel"], strict=True)]
    cases["weight_mib"] = cases["weight_bytes"] / 2**20
    left, right = st.columns(2)
    with left:
        ui.chart(charts.bars(cases, "variant", "weight_mib", "weight MiB", "precision"))
        ui.chart(charts.bars(cases, "variant", "loss_increase", "held-out loss increase (nats)", "precision"))
    with right:
        # The speedup, not the seconds: the fast kernels' few µs beside the eager float32's hundreds
        # read as 30x where each is 2-3x over float32 on its own path.
        ui.chart(charts.bars(cases, "variant", "speedup_vs_fp32", "speedup over float32 on the same path", "precision"))
        ui.chart(charts.divergence(cases, "variant", "divergence_position_greedy", "divergence_tokens"))
    st.caption(
        "Each speedup is paired against float32 through the same path: the fast kernels against the fast float32 "
        "step, the eager ones against eager float32 (`seconds_per_token` in the table is each variant's own time)."
    )
    generated = cases["divergence_tokens"].dropna() if "divergence_tokens" in cases.columns else pd.Series()
    never = (
        f" A position of {int(generated.iloc[0])}, as many as were generated, means none differed (the chart's "
        '"never diverged").'
        if generated.nunique() == 1
        else ""
    )
    st.caption(
        f"Divergence positions are 0-based indexes of the first generated {unit} that differs from float32's "
        '(same seed): the write-ups\' "22nd character" (1-based) is index 21 here.' + never
    )
    ui.table(
        cases,
        "quantization",
        [
            "precision",
            "kernel",
            "group_size",
            "embeddings_quantized",
            "weight_bytes",
            "bytes_ratio_vs_fp32",
            "val_loss",
            "loss_increase",
            "divergence_position_greedy",
            "divergence_position_sampled",
            "seconds_per_token",
            "speedup_vs_fp32",
            "speedup_vs_fp32_low",
            "speedup_vs_fp32_high",
        ],
    )
