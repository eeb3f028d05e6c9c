"""Reports computed by decodelab's modules and written as files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.cost import context_cost as cost
from runner.cost import scale
from store.files import write_text_whole

ITEMSIZE = 2
BUDGET_BYTES = 1 << 30
TABLE_LENGTHS = [128, 256, 512, 1024, 2048, 4096]
REFERENCE_LENGTH = 2048
GENERATED_TOKENS = 256


def context_cost_report() -> dict[str, Any]:
    """The context-cost lab's report: every number comes from calling the counting module."""
    table = cost.cost_table(TABLE_LENGTHS, cost.D_MODEL, cost.D_FF)
    counter = cost.MulCount()
    per_position = cost.per_position_mults(cost.D_MODEL, cost.D_FF, counter)
    (_, quad_before, linear_before, _), (_, quad_last, linear_last, _) = table[-2], table[-1]
    n = REFERENCE_LENGTH
    return {
        "D_MODEL": cost.D_MODEL,
        "D_FF": cost.D_FF,
        "N_HEADS": cost.N_HEADS,
        "ITEMSIZE": ITEMSIZE,
        "budget_bytes": BUDGET_BYTES,
        "table_lengths": TABLE_LENGTHS,
        "reference_length": n,
        "generated_tokens": GENERATED_TOKENS,
        "per_position_mults": per_position,
        "per_position_counter_calls": counter.calls,
        "cost_table": [
            {"n": row_n, "quad": quad, "linear": linear, "total": total} for row_n, quad, linear, total in table
        ],
        "crossover_n": cost.crossover_n(cost.D_MODEL, cost.D_FF),
        "causal_pairs": cost.causal_pairs(n),
        "wasted_pairs": cost.wasted_pairs(n),
        "score_bytes": cost.score_bytes(n, cost.N_HEADS, ITEMSIZE),
        "max_context_for_bytes": cost.max_context_for_bytes(BUDGET_BYTES, cost.N_HEADS, ITEMSIZE),
        "append_pairs": cost.append_pairs(n),
        "generate_pairs": cost.generate_pairs(n, GENERATED_TOKENS),
        "quad_ratio": quad_last / quad_before,
        "linear_ratio": linear_last / linear_before,
    }


def context_cost_markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Context-length cost, counted",
        "",
        f"Shape: D_MODEL={report['D_MODEL']}, D_FF={report['D_FF']}, N_HEADS={report['N_HEADS']}, "
        f"ITEMSIZE={report['ITEMSIZE']} bytes. Per position the six linear maps cost "
        f"{report['per_position_mults']:,} multiplications (counted over "
        f"{report['per_position_counter_calls']:,} counter calls).",
        "",
        "| n | quadratic (scores + mixing) | linear (projections + feed-forward) | total |",
        "|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {row['n']} | {row['quad']:,} | {row['linear']:,} | {row['total']:,} |" for row in report["cost_table"]
    ]
    n = report["reference_length"]
    lines += [
        "",
        f"- Crossover: the quadratic part reaches the linear part at n = {report['crossover_n']:,}.",
        f"- From n={report['table_lengths'][-2]} to {report['table_lengths'][-1]}: quadratic x"
        f"{report['quad_ratio']:.2f}, linear x{report['linear_ratio']:.2f}.",
        f"- At n = {n}: the causal mask keeps {report['causal_pairs']:,} score pairs and wastes "
        f"{report['wasted_pairs']:,}; the full score matrices take {report['score_bytes']:,} bytes.",
        f"- A budget of {report['budget_bytes']:,} bytes holds score matrices up to n = "
        f"{report['max_context_for_bytes']:,}.",
        f"- Appending one token at n = {n} adds {report['append_pairs']:,} scores; generating "
        f"{report['generated_tokens']} tokens adds {report['generate_pairs']:,}.",
        "",
    ]
    return "\n".join(lines)


def write_context_cost_report(directory: Path) -> list[Path]:
    report = context_cost_report()
    json_path, markdown_path = directory / "cost_report.json", directory / "cost_report.md"
    json_text, markdown_text = json.dumps(report, indent=2) + "\n", context_cost_markdown(report)
    write_text_whole(json_path, json_text)
    write_text_whole(markdown_path, markdown_text)
    return [json_path, markdown_path]


def scale_table(prompt_tokens: int, new_tokens: int, tokens_per_user: int, budget_gib: float) -> str:
    """A plain-text table of the scale calculator over the named shapes."""
    budget = int(budget_gib * scale.GIB)
    lines = [
        f"prompt {prompt_tokens} + {new_tokens} new tokens; {tokens_per_user} tokens per user; "
        f"budget {budget_gib:g} GiB of cache; attention work in score pairs (query-key products) over every layer",
        f"{'shape':32} {'attention':32} {'pairs no cache':>16} {'pairs cache':>14} {'KV B/token':>11} "
        f"{'GiB/user':>8} {'users':>7}",
    ]
    for shape in scale.NAMED_SHAPES:
        lines.append(
            f"{shape.name:32} {shape.attention:32} "
            f"{scale.attention_work_without_cache(prompt_tokens, new_tokens, shape.layers):>16,} "
            f"{scale.attention_work_with_cache(prompt_tokens, new_tokens, shape.layers):>14,} "
            f"{scale.kv_bytes_per_token(shape):>11,} "
            f"{scale.kv_bytes_per_request(shape, tokens_per_user) / scale.GIB:>8.2f} "  # the budget's unit
            f"{scale.max_users_for_budget(shape, tokens_per_user, budget):>7,}"
        )
    return "\n".join(lines)
