"""The context-cost experiment: records the counting contract's figures (runner.cost.context_cost)
for a run, so they sit in the store beside the measured ones."""

from __future__ import annotations

from typing import Any

from runner.cost.context_cost import (
    D_FF,
    D_MODEL,
    N_HEADS,
    MulCount,
    append_pairs,
    causal_pairs,
    cost_table,
    crossover_n,
    generate_pairs,
    max_context_for_bytes,
    per_position_mults,
    score_bytes,
    wasted_pairs,
)
from runner.declarations import Declaration
from runner.experiments.base import Part, PartsExperiment
from runner.fields import Field
from store.records import MeasurementRecord

DECLARATION = Declaration(
    name="context_cost",
    order=60,
    module=__name__,
    headlines=("quad_ratio", "linear_ratio", "crossover_n"),
    opening=("total_mults", "quad_mults"),
    pages=(("context_cost", "Context cost"),),
)

FIELDS = {
    "lengths": Field("int_list", [128, 256, 512, 1024, 2048, 4096], 1, 1_000_000, help="table lengths"),
    "d_model": Field("int", D_MODEL, 1, 2048),
    "d_ff": Field("int", D_FF, 1, 8192),
    "n_heads": Field("int", N_HEADS, 1, 128),
    "itemsize": Field("int", 2, 1, 8),
    "reference_length": Field("int", 2048, 1, 1_000_000),
    "budget_bytes": Field("int", 1 << 30, 1, 1 << 50),
    "generated_tokens": Field("int", 256, 1, 1_000_000),
    "count_with_counter": Field("bool", True, help="also run per_position_mults through the counter"),
}


def table(case: dict[str, Any], context: Any = None) -> tuple[MeasurementRecord, ...]:
    ((_, quad, linear, total),) = cost_table([case["n"]], case["d_model"], case["d_ff"])
    return (
        MeasurementRecord("quad_mults", quad, "multiplications"),
        MeasurementRecord("linear_mults", linear, "multiplications"),
        MeasurementRecord("total_mults", total, "multiplications"),
    )


def summary(case: dict[str, Any], context: Any = None) -> tuple[MeasurementRecord, ...]:
    n, d_model, d_ff = case["n"], case["d_model"], case["d_ff"]
    measurements = [
        MeasurementRecord("crossover_n", crossover_n(d_model, d_ff), "tokens"),
        MeasurementRecord("causal_pairs", causal_pairs(n), "pairs"),
        MeasurementRecord("wasted_pairs", wasted_pairs(n), "pairs"),
        MeasurementRecord("score_bytes", score_bytes(n, case["n_heads"], case["itemsize"]), "bytes"),
        MeasurementRecord(
            "max_context_for_bytes",
            max_context_for_bytes(case["budget_bytes"], case["n_heads"], case["itemsize"]),
            "tokens",
        ),
        MeasurementRecord("append_pairs", append_pairs(n), "pairs"),
        MeasurementRecord("generate_pairs", generate_pairs(n, case["generated_tokens"]), "pairs"),
    ]
    if len(case.get("ratio_lengths", [])) == 2:
        (_, quad_before, linear_before, _), (_, quad_last, linear_last, _) = cost_table(
            case["ratio_lengths"], d_model, d_ff
        )
        measurements += [
            MeasurementRecord("quad_ratio", quad_last / quad_before, "ratio"),
            MeasurementRecord("linear_ratio", linear_last / linear_before, "ratio"),
        ]
    if case["count_with_counter"]:
        counter = MulCount()
        measurements.append(
            MeasurementRecord(
                "per_position_mults_counted", per_position_mults(d_model, d_ff, counter), "multiplications"
            )
        )
    return tuple(measurements)


PARTS: dict[str, Part] = {"table": table, "summary": summary}


class ContextCost(PartsExperiment):
    name = "context_cost"
    parts = PARTS
    title = "Context cost"
    fields = FIELDS

    def plan(self, params: dict[str, Any], model: dict[str, Any]) -> list[dict[str, Any]]:
        shape = {key: params[key] for key in ("d_model", "d_ff", "n_heads", "itemsize")}
        cases = [{"part": "table", "n": n, **shape} for n in params["lengths"]]
        cases.append(
            {
                "part": "summary",
                # quad_ratio and linear_ratio compare the last two table lengths, as the lab's report does.
                "ratio_lengths": params["lengths"][-2:],
                "n": params["reference_length"],
                "budget_bytes": params["budget_bytes"],
                "generated_tokens": params["generated_tokens"],
                "count_with_counter": params["count_with_counter"],
                **shape,
            }
        )
        return cases


EXPERIMENT = ContextCost()
