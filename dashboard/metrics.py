"""What kind of number a metric is: a lookup in the metric catalogue (runner/metrics.py), kept
under this name for the pages that ask here."""

from __future__ import annotations

from runner import declarations
from runner.metrics import is_deterministic, kind_of, lookup

__all__ = ["is_deterministic", "kind_of", "lookup"]


def opening_metric(experiment: str, metrics: list[str]) -> str:
    """The metric a picker of ``experiment``'s ``metrics`` starts on: the first of its
    declaration's ``opening`` present (one that varies and that a reader asks about first, not a
    closed-form constant such as arithmetic_ratio), else the first."""
    declaration = declarations.find(experiment)
    opening = declaration.opening if declaration is not None else ()
    return next((name for name in opening if name in metrics), metrics[0])
