"""Scale calculator: attention work and KV-cache bytes for real model shapes."""

import pandas as pd
import streamlit as st

from dashboard import charts, ui
from runner.cost import scale

st.title("Scale calculator")
st.caption(
    "Attention work counts t² per layer per step (the explainer's convention); KV bytes are "
    "2 × layers × kv heads × head_dim × bytes per token."
)
left, middle, right = st.columns(3)
prompt_tokens = left.number_input("Prompt tokens P", 0, 10_000_000, 400, key="scale_prompt")
new_tokens = middle.number_input("New tokens G", 0, 10_000_000, 100, key="scale_new")
users = right.number_input("Concurrent users N", 1, 100_000_000, 1, key="scale_users")
left, right = st.columns(2)
tokens_per_user = left.number_input("Tokens per user", 1, 10_000_000, 8000, key="scale_tokens")
budget_gib = right.number_input("Memory budget (GiB)", 0.001, 1e9, 80.0, key="scale_budget")

rows = []
for shape in scale.NAMED_SHAPES:
    rows.append(
        {
            "shape": shape.name,
            "attention": shape.attention,
            "layers": shape.layers,
            "kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "work_no_cache": scale.attention_work_without_cache(int(prompt_tokens), int(new_tokens), shape.layers),
            "work_cache": scale.attention_work_with_cache(int(prompt_tokens), int(new_tokens), shape.layers),
            "kv_bytes_per_token": scale.kv_bytes_per_token(shape),
            "kv_gb_per_user": scale.kv_bytes_per_request(shape, int(tokens_per_user)) / scale.GB,
            "kv_gb_all_users": scale.kv_bytes_for_users(shape, int(tokens_per_user), int(users)) / scale.GB,
            "max_users_in_budget": scale.max_users_for_budget(shape, int(tokens_per_user), int(budget_gib * scale.GIB)),
        }
    )
frame = pd.DataFrame(rows)
ui.chart(charts.bars(frame, "shape", "kv_gb_per_user", f"KV cache GB per user at {int(tokens_per_user):,} tokens"))
# What the users and the budget above decide first, then each shape's sizes and work.
st.caption(
    f"KV sizes in GB (10⁹ bytes); the budget of {budget_gib:g} GiB is {budget_gib * scale.GIB / scale.GB:,.1f} GB. "
    f"kv gb all users: {int(users):,} user{'s' if int(users) != 1 else ''} at {int(tokens_per_user):,} tokens "
    "each; max users in budget: how many such users the budget holds."
)
ui.table(
    frame,
    "scale",
    [
        "shape",
        "kv_gb_per_user",
        "kv_gb_all_users",
        "max_users_in_budget",
        "kv_bytes_per_token",
        "work_no_cache",
        "work_cache",
        "attention",
        "layers",
        "kv_heads",
        "head_dim",
    ],
)

st.subheader("The write-ups' memory claims")
four = [c.shape.name for c in scale.check_claim(8192, 4.0 * scale.GIB) if c.holds]
per_user = [c.shape.name for c in scale.check_claim(8000, 1.2 * scale.GB) if c.holds]
st.write(
    f"“4.0 GB at n = 8192 (fp16)” holds within 10% for: {', '.join(four) or 'none'} (4.0 GiB: full-head "
    "attention, 32 layers × 4096)."
)
st.write(
    f"“About 1.2 GB per user at 8,000 tokens” holds within 10% for: {', '.join(per_user) or 'none'}; "
    "grouped-query models with 32 layers and 8 kv heads need about 1.05 GB."
)
