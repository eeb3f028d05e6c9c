"""Quantization: bytes, loss, where generation diverges, and time per token."""

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
    left, right = st.columns(2)
    with left:
        ui.chart(charts.bars(cases, "variant", "weight_bytes", "weight bytes", "precision"))
        ui.chart(charts.bars(cases, "variant", "loss_increase", "held-out loss increase (nats)", "precision"))
    with right:
        ui.chart(charts.bars(cases, "variant", "seconds_per_token", "seconds per token", "precision"))
        ui.chart(charts.divergence(cases, "variant", "divergence_position_greedy", "divergence_tokens"))
    st.caption(
        f"Divergence positions are 0-based indexes of the first generated {unit} that differs from float32's "
        '(same seed): the write-ups\' "22nd character" (1-based) is index 21 here.'
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
