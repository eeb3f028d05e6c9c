"""context_cost: counted multiplications and pairs of a growing context, no timing."""

from __future__ import annotations

from runner.declarations import Declaration

DECLARATION = Declaration(
    name="context_cost",
    order=60,
    module="runner.experiments.context_cost",
    headlines=("quad_ratio", "linear_ratio", "crossover_n"),
    opening=("total_mults", "quad_mults"),
)
