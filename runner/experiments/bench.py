"""bench: the benchmark scripts' figures, recorded by ``decodelab bench`` (cli.bench), not
planned by a spec: a declaration without a module to plan or measure it."""

from __future__ import annotations

from runner.declarations import Declaration

DECLARATION = Declaration(
    name="bench",
    order=70,
    headlines=("fast_us_per_token", "speedup_vs_transformers"),
    opening=("fast_us_per_token", "seconds_per_token", "benchmark_seconds"),
)
